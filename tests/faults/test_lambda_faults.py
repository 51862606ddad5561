"""Faults at the Lambda invoke: the service fails a task before its handler ran, or after it did its work."""

import pytest

from tests.support.audit import REQUEST, assert_exactly_once


# The three errors share one retrier on every Lambda task (tests/infra/test_infra_workflow.py checks
# it): make test runs the timeout, the others run in make test-all.
@pytest.mark.parametrize("error", ["Sandbox.Timedout", pytest.param("Lambda.Unknown", marks=pytest.mark.slow),
                                   pytest.param("Lambda.ServiceException", marks=pytest.mark.slow)])
@pytest.mark.parametrize("after_handler", [False, True], ids=["before-handler", "after-handler"])
def test_a_failed_launch_step_is_retried_and_launches_nothing_twice(account, error, after_handler):
    with account() as engine:
        engine.faults.lambda_invoke("LaunchBatch", error=error, after_handler=after_handler)
        execution = engine.run(REQUEST, name="invoke-fault")
        seen = assert_exactly_once(engine, execution, launched=4)
        assert engine.faults.total == 1
    assert execution.output["status"] == "FULFILLED"
    assert len(seen.in_ec2) == 4


def test_a_launch_step_killed_between_the_launch_and_its_record_records_them_on_the_retry(account):
    with account() as engine:
        engine.faults.kill_at("dynamodb", "UpdateItem", task="LaunchBatch")
        execution = engine.run(REQUEST, name="killed-before-record")
        assert_exactly_once(engine, execution, launched=4)
        assert engine.faults.total == 1
        # The retry sent the very calls of the killed step: EC2 answered with the same instances.
        assert engine.market.left("us-west-2", "us-west-2a", "g6.xlarge", "spot") == 0


def test_every_step_failing_for_good_ends_provisioning_failed_naming_what_runs(account):
    with account() as engine:
        engine.faults.lambda_invoke("WaitUntilRunning", error="Lambda.ServiceException", times=None)
        engine.faults.lambda_invoke("ReportResult", error="Sandbox.Timedout", times=None)
        execution = engine.run(REQUEST, name="report-fails")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.error == "PROVISIONING_FAILED"
    assert len(execution.cause["instances"]) == 4 and execution.cause["teardown"]["request_id"] == "report-fails"
    assert seen.reported == seen.in_ec2
