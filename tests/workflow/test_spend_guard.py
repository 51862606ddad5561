"""The spend guard: a request's max_lifetime starts its teardown on its own, behind the approval.

Run on the real state machine (local engine): EventBridge Scheduler's schedules run on the
engine's modelled clock, as the scheduler's own role.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from gpufill import constants
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.workflow.planting import MARKET, WEST, record, states

GROUP = constants.schedule_group_name("local")
HOUR = 3600


@pytest.fixture(scope="module")
def engine():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        yield account


def provision(engine, name: str, lifetime: str = "PT2H"):
    execution = engine.run(
        {"regions": [WEST], "count": 2, "ready_timeout": "PT0S", "max_lifetime": lifetime}, name=name
    )
    assert execution.output["status"] == "FULFILLED", execution.cause
    return execution, [i["instance_id"] for i in execution.output["instances"]]


def schedules(engine) -> dict[str, dict]:
    sched = engine.client("scheduler")
    names = [s["Name"] for s in sched.list_schedules(GroupName=GROUP)["Schedules"]]
    return {name: sched.get_schedule(GroupName=GROUP, Name=name) for name in names}


def messages_for(engine, execution_name: str) -> list[dict]:
    return [m for m in engine.approval_messages() if execution_name in m["subject"]]


def wait_for_messages(engine, execution_name: str, count: int, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while len(messages_for(engine, execution_name)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return messages_for(engine, execution_name)


def wait_for_schedule(engine, name: str, timeout: float = 30.0) -> dict:
    """The approval step makes its reminders just after it publishes: wait for them before time moves."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = schedules(engine).get(name)
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError(f"no schedule {name}")


def until_expiry(engine, execution) -> float:
    """Modelled seconds from now until the request's expires_at."""
    from gpufill.adapters import clock

    return (datetime.fromisoformat(execution.output["expires_at"]) - clock.now()).total_seconds()


def test_the_result_records_and_schedule_say_when_the_request_expires(engine):
    from gpufill.adapters import clock

    before = clock.now()
    execution, ids = provision(engine, "guard-shown", lifetime="PT8H")

    expires = datetime.fromisoformat(execution.output["expires_at"])
    assert timedelta(hours=8) - timedelta(seconds=5) <= expires - before <= timedelta(hours=8, seconds=5)
    for instance_id in ids:
        assert record(engine, instance_id)[constants.LIFETIME_ATTRIBUTE] == execution.output["expires_at"]
        # The table's TTL attribute stays unset on a live instance: DynamoDB would delete its record.
        assert constants.INSTANCES_TTL_ATTRIBUTE not in record(engine, instance_id)
    schedule = schedules(engine)["life-guard-shown"]
    assert schedule["ScheduleExpression"] == f"at({expires.strftime('%Y-%m-%dT%H:%M:%S')})"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["Target"]["Arn"] == "arn:aws:scheduler:::aws-sdk:sfn:startExecution"
    assert '\\"trigger\\":\\"max_lifetime\\"' in schedule["Target"]["Input"]

    status = engine.run({"action": "status", "request_id": "guard-shown"}, name="guard-shown-status")
    assert {i["instance_id"]: i["expires_at"] for i in status.output["instances"]} == dict.fromkeys(ids, execution.output["expires_at"])


def test_when_the_lifetime_passes_a_teardown_waits_for_approval_and_terminates_only_after_yes(engine):
    execution, ids = provision(engine, "guard-yes")
    engine.advance(until_expiry(engine, execution) - 60)
    assert "guard-yes-expired" not in engine.executions()

    engine.advance(120)
    assert "guard-yes-expired" in engine.executions()
    engine.wait_for_approval("guard-yes-expired")
    [asked] = wait_for_messages(engine, "guard-yes-expired", 1)
    assert "The max_lifetime of request guard-yes passed at " + execution.output["expires_at"] in asked["message"]
    assert "Asked by: gpufill spend guard (max_lifetime)" in asked["message"]
    assert "gpufill approve arn:aws:states:" in asked["message"]
    assert set(states(engine, WEST, ids).values()) == {"running"}
    assert "life-guard-yes" not in schedules(engine)  # a one-time schedule deletes itself once run

    engine.answer_approval("guard-yes-expired", "approved", approver="ana")
    teardown = engine.follow("guard-yes-expired")

    assert teardown.output["status"] == "TERMINATED", teardown.cause
    assert teardown.output["trigger"] == "max_lifetime"
    assert set(states(engine, WEST, ids).values()) == {"terminated"}
    assert "remind-guard-yes-expired" not in schedules(engine)


def test_an_unanswered_lifetime_approval_is_sent_again_every_hour_and_terminates_nothing(engine):
    execution, ids = provision(engine, "guard-quiet")
    engine.advance(until_expiry(engine, execution) + 60)
    engine.wait_for_approval("guard-quiet-expired")
    reminder = wait_for_schedule(engine, "remind-guard-quiet-expired")
    assert reminder["ScheduleExpression"] == "rate(1 hour)" and reminder["EndDate"]

    engine.advance(3 * HOUR + 60)

    sent = wait_for_messages(engine, "guard-quiet-expired", 4)
    reminders = [m for m in sent if m["subject"].startswith("gpufill reminder:")]
    assert len(reminders) == 3
    assert all("still waits for an answer" in m["message"] and "gpufill approve arn:" in m["message"] for m in reminders)
    assert set(states(engine, WEST, ids).values()) == {"running"}
    runs = [r for r in engine.schedule_runs if r["schedule"] == "remind-guard-quiet-expired"]
    assert [r["target"].rsplit(":", 1)[-1] for r in runs] == [constants.function_name("local", constants.REMINDER_TASK)] * 3
    assert all(r["answer"]["sent"] for r in runs)

    engine.expire_approval("guard-quiet-expired")
    expired = engine.follow("guard-quiet-expired")

    assert expired.output["status"] == "EXPIRED"
    notice = wait_for_messages(engine, "guard-quiet-expired", 5)[-1]
    assert notice["subject"] == "gpufill: approval expired, instances still running (guard-quiet-expired)"
    assert "Nothing was terminated: 2 instance(s) keep running" in notice["message"]
    assert "gpufill teardown guard-quiet" in notice["message"]
    assert set(states(engine, WEST, ids).values()) == {"running"}
    assert "remind-guard-quiet-expired" not in schedules(engine)  # no reminder after the decision


def test_a_teardown_before_the_lifetime_removes_its_schedule(engine):
    execution, ids = provision(engine, "guard-early")
    assert "life-guard-early" in schedules(engine)

    teardown = engine.run({"action": "teardown", "request_id": "guard-early"}, name="guard-early-down", decision="approved")

    assert teardown.output["status"] == "TERMINATED"
    assert "life-guard-early" not in schedules(engine)
    engine.advance(until_expiry(engine, execution) + HOUR)
    assert "guard-early-expired" not in engine.executions()


def test_a_rejected_early_teardown_keeps_the_lifetime(engine):
    execution, _ = provision(engine, "guard-kept")
    engine.run({"action": "teardown", "request_id": "guard-kept"}, name="guard-kept-down", decision="rejected")
    assert "life-guard-kept" in schedules(engine)


def test_reminders_of_a_stopped_teardown_stop_and_their_schedule_goes(engine):
    """Nobody answered and the teardown run was stopped: its task token can take no answer, so the
    next reminder delivery sends nothing and deletes the schedule."""
    _, ids = provision(engine, "guard-stopped")
    sfn = engine.client("stepfunctions")
    started = sfn.start_execution(
        stateMachineArn=engine.state_machine_arn, name="guard-stopped-down",
        input='{"action": "teardown", "request_id": "guard-stopped"}',
    )
    engine.wait_for_approval("guard-stopped-down")
    wait_for_schedule(engine, "remind-guard-stopped-down")
    assert len(wait_for_messages(engine, "guard-stopped-down", 1)) == 1  # the request itself
    sfn.stop_execution(executionArn=started["executionArn"], error="Stopped", cause="stopped by hand")

    engine.advance(2 * HOUR + 60)

    runs = [r for r in engine.schedule_runs if r["schedule"] == "remind-guard-stopped-down"]
    assert [r["answer"] for r in runs] == [{"sent": False, "why": "teardown run no longer running", "schedule_deleted": True}]
    assert "remind-guard-stopped-down" not in schedules(engine)
    assert len(messages_for(engine, "guard-stopped-down")) == 1  # no reminder
    assert set(states(engine, WEST, ids).values()) == {"running"}
