"""The spend guard under faults: a retried launch step makes the lifetime's schedule once, and a
step that dies before making it makes it on the retry; no instance of the request runs unguarded."""

import pytest

from gpufill import constants
from tests.support.audit import REQUEST, assert_exactly_once

GUARDED = {**REQUEST, "max_lifetime": "PT4H", "ready_timeout": "PT0S"}
GROUP = constants.schedule_group_name("local")


def lifetime_schedules(engine) -> list[str]:
    return [s["Name"] for s in engine.client("scheduler").list_schedules(GroupName=GROUP)["Schedules"]]


def create_calls(engine) -> int:
    return sum(1 for j in engine.iam.seen if j.action == "scheduler:CreateSchedule" and "/life-" in j.resource)


# One retrier for both on every Lambda task (tests/infra/test_infra_workflow.py): the second runs in make test-all.
@pytest.mark.parametrize("error", ["Sandbox.Timedout", pytest.param("Lambda.ServiceException", marks=pytest.mark.slow)])
def test_a_launch_step_retried_after_its_work_makes_one_schedule(account, error):
    with account() as engine:
        engine.faults.lambda_invoke("LaunchBatch", error=error, after_handler=True)
        execution = engine.run(GUARDED, name="guard-retried")
        assert_exactly_once(engine, execution, launched=4)
        assert engine.faults.total == 1
        assert create_calls(engine) >= 2  # the retry asked again; Scheduler answered ConflictException
        assert lifetime_schedules(engine) == ["life-guard-retried"]
    assert execution.output["status"] == "FULFILLED"
    assert execution.output["expires_at"]


def test_a_launch_step_killed_before_its_schedule_makes_it_on_the_retry(account):
    with account() as engine:
        engine.faults.kill_at("scheduler", "CreateSchedule", task="LaunchBatch")
        execution = engine.run(GUARDED, name="guard-killed")
        assert_exactly_once(engine, execution, launched=4)
        assert engine.faults.total == 1
        assert lifetime_schedules(engine) == ["life-guard-killed"]
    assert execution.output["status"] == "FULFILLED"


def test_scheduler_throttling_is_retried_and_the_schedule_made_once(account):
    with account() as engine:
        engine.faults.aws("scheduler", "CreateSchedule", error="ThrottlingException", times=8)
        execution = engine.run(GUARDED, name="guard-throttled")
        assert_exactly_once(engine, execution, launched=4)
        assert lifetime_schedules(engine) == ["life-guard-throttled"]
    assert execution.output["status"] == "FULFILLED"
