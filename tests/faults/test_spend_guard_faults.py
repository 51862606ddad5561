"""The spend guard under faults: a retried launch step makes the lifetime's schedule once, and a
step that dies before making it makes it on the retry; no instance of the request runs unguarded."""

import pytest

from gpufill import constants
from tests.support.audit import REQUEST, assert_exactly_once, audit, live_instances

GUARDED = {**REQUEST, "max_lifetime": "PT4H", "ready_timeout": "PT0S"}
GROUP = constants.schedule_group_name("local")


def lifetime_schedules(engine) -> list[str]:
    return [s["Name"] for s in engine.client("scheduler").list_schedules(GroupName=GROUP)["Schedules"]]


def late_rounds(request_id: str) -> dict:
    import boto3

    table = boto3.resource("dynamodb", region_name="us-east-1").Table(constants.instances_table_name("local"))
    return table.get_item(Key={"instance_id": f"{constants.LATE_ROUNDS_KEY_PREFIX}{request_id}"})["Item"]


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


def test_a_lifetime_that_passes_while_a_launch_step_awaits_its_retry_asks_again_for_what_it_launches(account):
    """The step records its first launch (the lifetime's schedule is made) and dies before its
    second; the lifetime passes meanwhile, and its teardown, approved, ends what it listed. The
    retried step launches the rest: a late round of the spend guard asks about it, once even when
    Scheduler delivers the round twice; nothing of the request outlives its approved teardowns."""
    with account() as engine:
        asked: dict = {}

        def lifetime_passes():
            engine.advance(4 * 3600 + 60)
            engine.wait_for_approval("guard-raced-expired")
            engine.answer_approval("guard-raced-expired", "approved")
            asked["guard-raced-expired"] = engine.follow("guard-raced-expired")

        engine.faults.kill_at("ec2", "RunInstances", task="LaunchBatch", skip=1, meanwhile=lifetime_passes)
        execution = engine.run(GUARDED, name="guard-raced")
        assert engine.faults.total == 1
        launched = live_instances("guard-raced")
        assert launched, "the retried step launched nothing"
        late_schedules = set(lifetime_schedules(engine)) - {"life-guard-raced"}
        rounds = late_rounds("guard-raced")
        # Every launch call after the expiry joined one late round, not one round each.
        assert late_schedules == {"life-guard-raced.1"} and len(rounds["launches"]) >= 2, rounds
        for name in late_schedules:
            engine.faults.schedule_twice(name)
        engine.advance(120)  # the late rounds come due
        runs = [r for r in engine.schedule_runs if r["schedule"].startswith("life-guard-raced")]
        assert not [r for r in runs if r.get("error")], runs
        late = sorted({r["execution"] for r in runs if r["schedule"] != "life-guard-raced"})
        assert late and all(name.endswith("-expired") and name != "guard-raced-expired" for name in late)
        assert sum(1 for r in runs if r.get("duplicate")) == len(late_schedules)
        for name in late:
            engine.wait_for_approval(name)
            engine.answer_approval(name, "approved")
            asked[name] = engine.follow(name)
        started = [e for e in engine.executions() if e.startswith("guard-raced-")]
        seen = audit(engine, execution)
    assert asked["guard-raced-expired"].output["status"] == "TERMINATED"
    listed = {i["instance_id"] for run in asked.values() for i in run.output["instances"]}
    assert launched <= listed  # every instance the retried step launched was asked about
    assert all(run.output["trigger"] == "max_lifetime" for run in asked.values())
    assert sorted(started) == sorted(asked)  # the second deliveries started nothing new
    assert len(asked) == 2  # the request's own round and one late round: two approvals, not one per launch
    assert not seen.in_ec2 and not seen.recorded and not seen.untracked_after_status


def test_an_approved_teardown_terminates_although_its_schedules_cannot_be_deleted(account):
    """The decision's DeleteSchedule of the reminders fails: the teardown still terminates, and the
    next reminder delivery finds the approval answered, sends nothing and deletes its schedule."""
    with account() as engine:
        execution = engine.run(GUARDED, name="guard-stuck")
        launched = live_instances("guard-stuck")
        engine.faults.aws("scheduler", "DeleteSchedule", error="InternalServerException", times=None)
        teardown = engine.run({"action": "teardown", "request_id": "guard-stuck"}, name="end-stuck", decision="approved")
        engine.faults.clear()
        left = lifetime_schedules(engine)
        published = len(engine.approval_messages())
        engine.advance(3600 + 60)  # the first reminder comes due
        reminders = [r for r in engine.schedule_runs if r["schedule"] == "remind-end-stuck"]
        after = lifetime_schedules(engine)
        sent_since = engine.approval_messages()[published:]
        seen = audit(engine, execution)
        assert engine.faults.injected
    assert (teardown.status, teardown.output["status"]) == ("SUCCEEDED", "TERMINATED"), teardown.cause
    assert {i["instance_id"] for i in teardown.output["instances"]} == launched
    assert not seen.in_ec2 and not seen.recorded and not seen.untracked_after_status
    assert "remind-end-stuck" in left  # the decision could not delete it
    assert [r["answer"] for r in reminders] == [{"sent": False, "why": "approval answered", "schedule_deleted": True}]
    assert "remind-end-stuck" not in after and not sent_since
