"""EventBridge Scheduler on the modelled clock (local/scheduler.py): a schedule runs when modelled
time reaches it, as its role, once or every rate until its end date; a deleted one never runs;
AWS's own refusals of a bad name, expression or group."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from botocore.exceptions import ClientError

from gpufill import constants
from gpufill.adapters import clock
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from gpufill.policy import lifetime
from tests.workflow.planting import MARKET

GROUP = constants.schedule_group_name("local")
# SNS's Publish as a universal target: the engine runs any universal target Scheduler can.
PUBLISH_TARGET = "arn:aws:scheduler:::aws-sdk:sns:publish"


@pytest.fixture(scope="module")
def account():
    from tests.support.grants import with_grant

    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        # gpufill's scheduler role publishes nothing itself (the reminders go through a function);
        # these tests run a universal SNS target, so the role gets that one call here.
        role = engine.deployments["local"].app.scheduler_role
        engine.roles[role.arn] = with_grant(
            role, {"Effect": "Allow", "Action": "sns:Publish", "Resource": engine.approval_topic_arn}
        )
        yield engine


def _publish(account, name: str, expression: str, *, end=None, start=None, once=False, role=None, group=GROUP, retry=None):
    parameters = {
        "GroupName": group,
        "Name": name,
        "ScheduleExpression": expression,
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {
            "Arn": PUBLISH_TARGET,
            "RoleArn": role or account.deployments["local"].app.scheduler_role.arn,
            "Input": json.dumps({"TopicArn": account.approval_topic_arn, "Subject": f"subject {name}", "Message": f"message {name}"}),
        },
    }
    if once:
        parameters["ActionAfterCompletion"] = "DELETE"
    if retry is not None:
        parameters["Target"]["RetryPolicy"] = retry
    if start is not None:
        parameters["StartDate"] = start
    if end is not None:
        parameters["EndDate"] = end
    account.client("scheduler").create_schedule(**parameters)


def _sent(account, name: str) -> int:
    return sum(1 for m in account.approval_messages() if m["subject"] == f"subject {name}")


def test_a_one_time_schedule_runs_at_its_moment_as_its_role_and_deletes_itself(account):
    due = clock.now() + timedelta(minutes=30)
    _publish(account, "once", lifetime.at_expression(due.isoformat()), once=True)
    account.advance(29 * 60)
    assert _sent(account, "once") == 0
    account.advance(2 * 60)
    assert _sent(account, "once") == 1
    names = [s["Name"] for s in account.client("scheduler").list_schedules(GroupName=GROUP)["Schedules"]]
    assert "once" not in names
    [run] = [r for r in account.schedule_runs if r["schedule"] == "once"]
    assert run["message_id"] and any(j.action == "sns:Publish" and j.principal.startswith("gpufill-local-SpendGuard")
                                     for j in account.iam.seen)


def test_a_rate_schedule_runs_from_its_start_until_its_end(account):
    start = clock.now() + timedelta(hours=1)
    _publish(account, "hourly", "rate(1 hour)", start=start, end=start + timedelta(hours=2, minutes=30))
    account.advance(10 * 3600)
    assert _sent(account, "hourly") == 3  # at 1 h, 2 h and 3 h; the end date came before 4 h


def test_scheduler_fills_its_context_attributes_into_the_input_before_each_delivery(account):
    due = clock.now() + timedelta(minutes=5)
    text = "<aws.scheduler.attempt-number> <aws.scheduler.scheduled-time> <aws.scheduler.schedule-arn> <aws.scheduler.execution-id>"
    account.client("scheduler").create_schedule(
        GroupName=GROUP, Name="context", ScheduleExpression=lifetime.at_expression(due.isoformat()),
        FlexibleTimeWindow={"Mode": "OFF"}, ActionAfterCompletion="DELETE",
        Target={"Arn": PUBLISH_TARGET, "RoleArn": account.deployments["local"].app.scheduler_role.arn,
                "Input": json.dumps({"TopicArn": account.approval_topic_arn, "Subject": "subject context", "Message": text})},
    )
    account.advance(6 * 60)
    sent = [m["message"] for m in account.approval_messages() if m["subject"] == "subject context"]
    assert len(sent) == 1, [r for r in account.schedule_runs if r["schedule"] == "context"]
    message = sent[0]
    attempt, at, arn, execution = message.split(" ")
    assert attempt == "1" and at == due.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert arn.endswith(f":schedule/{GROUP}/context") and len(execution) == 36


def test_a_schedule_deleted_before_its_moment_never_runs(account):
    _publish(account, "gone", lifetime.at_expression((clock.now() + timedelta(hours=1)).isoformat()), once=True)
    account.client("scheduler").delete_schedule(GroupName=GROUP, Name="gone")
    account.advance(2 * 3600)
    assert _sent(account, "gone") == 0


def test_a_failed_delivery_is_tried_again_within_the_retry_policy_then_the_schedule_ends(account):
    due = (clock.now() + timedelta(minutes=5)).isoformat()
    account.faults.aws("sns", "Publish", error="ThrottlingException", times=None)
    try:
        _publish(account, "throttled", lifetime.at_expression(due), once=True,
                 retry={"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 3600})
        account.advance(10 * 60)
    finally:
        account.faults.clear()
    runs = [r for r in account.schedule_runs if r["schedule"] == "throttled"]
    assert [r.get("retry", 0) for r in runs] == [0, 1, 2] and all("Throttling" in r["error"] for r in runs)
    names = [s["Name"] for s in account.client("scheduler").list_schedules(GroupName=GROUP)["Schedules"]]
    assert "throttled" not in names and _sent(account, "throttled") == 0


def test_a_delivery_throttled_for_a_while_arrives_and_a_duplicate_is_delivered_when_asked(account):
    due = (clock.now() + timedelta(minutes=5)).isoformat()
    account.faults.aws("sns", "Publish", error="ThrottlingException", times=6)  # two tries' worth of client retries
    account.faults.schedule_twice("late")
    _publish(account, "late", lifetime.at_expression(due), once=True)  # Scheduler's default policy
    account.advance(10 * 60)
    runs = [r for r in account.schedule_runs if r["schedule"] == "late"]
    assert [bool(r.get("error")) for r in runs] == [True, True, False, False] and runs[-1]["duplicate"]
    assert _sent(account, "late") == 2  # at least once: a target that must not act twice dedupes by name


@pytest.mark.parametrize(
    ("name", "expression", "group", "code"),
    [
        ("has space", "rate(1 hour)", GROUP, "ValidationException"),
        ("x" * 65, "rate(1 hour)", GROUP, "ValidationException"),
        ("bad-expression", "every hour", GROUP, "ValidationException"),
        ("no-group", "rate(1 hour)", "gpufill-nowhere", "ResourceNotFoundException"),
    ],
)
def test_what_scheduler_refuses_is_refused(account, name, expression, group, code):
    with pytest.raises(ClientError) as refused:
        _publish(account, name, expression, group=group)
    assert refused.value.response["Error"]["Code"] == code


def test_a_repeated_name_is_a_conflict(account):
    _publish(account, "twice", "rate(1 day)")
    with pytest.raises(ClientError) as refused:
        _publish(account, "twice", "rate(1 day)")
    assert refused.value.response["Error"]["Code"] == "ConflictException"


def test_the_lifetime_teardown_input_is_start_executions_own_parameters():
    body = json.loads(lifetime.expiry_target_input("arn:aws:states:us-east-1:1:stateMachine:m", "my-run"))
    assert body["Name"] == "my-run-expired" and body["StateMachineArn"].endswith(":m")
    assert json.loads(body["Input"]) == {
        "action": "teardown", "request_id": "my-run", "requested_by": "gpufill spend guard (max_lifetime)",
        "trigger": "max_lifetime",
    }
