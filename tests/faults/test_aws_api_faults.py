"""Faults at the AWS API: a call refused, throttled, or taking effect with its reply lost."""

import pytest

from tests.support.audit import EAST, REQUEST, WEST, assert_exactly_once


# A lost reply and a 5xx take the same settle-by-token path (both pinned for RunInstances in
# tests/unit/test_ec2_calls.py); the 5xx runs in `make test-all`.
@pytest.mark.parametrize("error", ["ReadTimeout", pytest.param("InternalError", marks=pytest.mark.slow)])
def test_a_launch_whose_reply_was_lost_is_found_by_its_token_not_launched_again(account, error):
    with account() as engine:
        # The first RunInstances launches; every one of its six botocore attempts loses its reply.
        engine.faults.aws("ec2", "RunInstances", error=error, after=True, times=6)
        execution = engine.run(REQUEST, name=f"lost-reply-{error.lower()}")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4


def test_throttled_launches_are_retried_never_read_as_capacity(account):
    with account() as engine:
        engine.faults.aws("ec2", "RunInstances", error="RequestLimitExceeded", times=12)
        execution = engine.run(REQUEST, name="throttled")
        assert_exactly_once(engine, execution, launched=4)
    outcomes = [a["outcome"] for a in execution.output["attempts"]]
    assert "capacity" not in outcomes[:1] and execution.output["status"] == "FULFILLED"


def test_throttling_that_never_ends_fails_the_run_by_name_with_nothing_lost(account):
    with account() as engine:
        engine.faults.aws("ec2", "RunInstances", error="RequestLimitExceeded", times=None)
        execution = engine.run(REQUEST, name="throttled-forever")
        assert_exactly_once(engine, execution, launched=0)
    assert execution.error == "PROVISIONING_FAILED"
    assert "TransientAwsError" in execution.cause["failed_with"]["error"]


def test_a_region_whose_endpoint_is_down_is_skipped_and_the_run_fills_elsewhere(account):
    with account() as engine:
        engine.faults.aws("ec2", "RunInstances", error="EndpointConnectionError", region=WEST, times=None)
        execution = engine.run(REQUEST, name="endpoint-down")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert {i["region"] for i in execution.output["instances"]} == {EAST}
    assert execution.output["attempts"][0]["reason"] == "EndpointConnectionError"
    assert len(seen.in_ec2) == 4


@pytest.mark.parametrize("service,operation", [("ec2", "DescribeInstances"), ("dynamodb", "UpdateItem")])
def test_throttling_after_everything_launched_does_not_end_the_run(account, service, operation):
    with account() as engine:
        engine.faults.aws(service, operation, error="ThrottlingException" if service == "dynamodb" else "RequestLimitExceeded",
                          times=8)
        execution = engine.run(REQUEST, name=f"late-throttle-{service}")
        assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED"


def test_a_throttled_regions_config_read_is_retried(account):
    with account() as engine:
        engine.faults.aws("ssm", "GetParameter", error="ThrottlingException", times=6)
        execution = engine.run({"count": 1}, name="ssm-throttled")
        assert_exactly_once(engine, execution, launched=1)


def test_idempotent_parameter_mismatch_is_settled_by_the_token(account):
    with account() as engine:
        engine.faults.aws("ec2", "RunInstances", error="IdempotentParameterMismatch", after=True)
        execution = engine.run(REQUEST, name="mismatch")
        assert_exactly_once(engine, execution, launched=4)


def test_two_runs_racing_to_create_the_security_group_both_launch(account):
    with account() as engine:
        # The other run created the group between this run's look and its create.
        engine.faults.aws("ec2", "CreateSecurityGroup", error="InvalidGroup.Duplicate", after=True)
        execution = engine.run(REQUEST, name="group-race")
        assert_exactly_once(engine, execution, launched=4)
    assert execution.output["attempts"][0]["availability_zone"] == "us-west-2a"  # the best pool was not skipped
