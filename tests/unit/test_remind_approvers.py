"""RemindApprovers: a reminder goes out only while a person can still answer; otherwise the
function deletes its own schedule, and a failed delete is logged, never raised. AWS is replaced
by recorders."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError

from gpufill.adapters import approvals, clock, executions, schedules
from gpufill.constants import ENV_STATE_MACHINE_ARN
from gpufill.handlers import remind_approvers
from gpufill.handlers.observability import metrics

NOW = datetime(2026, 12, 4, 13, tzinfo=UTC)
PENDING = {"status": "PENDING", "deadline": "2026-12-05T12:00:00+00:00"}
EVENT = {"execution_name": "td-1", "subject": "gpufill reminder: S", "message": "M"}


class Context:
    function_name = "RemindApprovers"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:RemindApprovers"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/RemindApprovers"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


@pytest.fixture
def aws(monkeypatch):
    done: list[tuple] = []
    held = {"item": dict(PENDING), "run": {"status": "RUNNING"}}
    monkeypatch.setenv(ENV_STATE_MACHINE_ARN, "arn:aws:states:us-east-1:1:stateMachine:gpufill-dev")
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(approvals, "get", lambda name: done.append(("get", name)) or held["item"])
    monkeypatch.setattr(executions, "describe", lambda arn, name: done.append(("describe", arn, name)) or held["run"])
    monkeypatch.setattr(approvals, "publish", lambda subject, body: done.append(("publish", subject, body)) or "m-1")
    monkeypatch.setattr(schedules, "cancel_reminders", lambda name: done.append(("delete", name)) or True)
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, value)))
    return done, held


def test_a_waiting_approval_is_reminded_and_its_schedule_kept(aws):
    done, _ = aws
    assert remind_approvers.handler(EVENT, Context()) == {"sent": True, "message_id": "m-1"}
    assert done == [("get", "td-1"), ("describe", "arn:aws:states:us-east-1:1:stateMachine:gpufill-dev", "td-1"),
                    ("publish", "gpufill reminder: S", "M"), ("metric", "RemindersSent", 1)]


@pytest.mark.parametrize(("item", "run", "why"), [
    ({**PENDING, "decided_at": "2026-12-04T12:30:00+00:00"}, {"status": "RUNNING"}, "approval answered"),
    (PENDING, {"status": "ABORTED"}, "teardown run no longer running"),
    (PENDING, None, "teardown run no longer running"),
    (None, None, "approval gone"),
])
def test_an_approval_nobody_can_answer_gets_no_reminder_and_its_schedule_is_deleted(aws, item, run, why):
    done, held = aws
    held.update(item=item, run=run)
    assert remind_approvers.handler(EVENT, Context()) == {"sent": False, "why": why, "schedule_deleted": True}
    assert done[2:] == [("delete", "td-1"), ("metric", "RemindersStopped", 1)]


def test_a_schedule_that_cannot_be_deleted_is_logged_and_tried_at_the_next_delivery(aws, monkeypatch, caplog):
    done, held = aws
    held["run"] = {"status": "SUCCEEDED"}
    caplog.set_level(logging.WARNING)

    def cannot(name):
        done.append(("delete", name))
        raise ClientError({"Error": {"Code": "InternalServerException", "Message": "no"}}, "DeleteSchedule")

    monkeypatch.setattr(schedules, "cancel_reminders", cannot)
    out = remind_approvers.handler(EVENT, Context())
    assert out == {"sent": False, "why": "teardown run no longer running", "schedule_deleted": False}
    assert done[2:] == [("delete", "td-1"), ("metric", "SchedulesNotDeleted", 1), ("metric", "RemindersStopped", 1)]
    assert "reminder schedule not deleted" in [r.message for r in caplog.records]
    assert not [d for d in done if d[0] == "publish"]


def _said(caplog) -> list[tuple]:
    keys = ("why", "schedule_deleted", "message_id", "error")
    return [(r.levelname, r.message, {k: getattr(r, k) for k in keys if hasattr(r, k)})
            for r in caplog.records if r.name.startswith("gpufill")]


def test_each_outcome_is_logged_with_what_happened_and_counted_once(aws, monkeypatch, caplog):
    done, held = aws
    counted = []
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: counted.append((name, unit, value)))
    caplog.set_level(logging.INFO)
    remind_approvers.handler(EVENT, Context())
    held["run"] = None
    remind_approvers.handler(EVENT, Context())

    def refused(name):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "DeleteSchedule")

    monkeypatch.setattr(schedules, "cancel_reminders", refused)
    remind_approvers.handler(EVENT, Context())
    said = _said(caplog)
    assert said[0] == ("INFO", "reminder sent", {"message_id": "m-1"})
    assert said[1] == ("INFO", "reminder not sent", {"why": "teardown run no longer running", "schedule_deleted": True})
    assert said[2][:2] == ("WARNING", "reminder schedule not deleted") and "AccessDeniedException" in said[2][2]["error"]
    assert said[3] == ("INFO", "reminder not sent", {"why": "teardown run no longer running", "schedule_deleted": False})
    assert counted == [("RemindersSent", "Count", 1), ("RemindersStopped", "Count", 1),
                       ("SchedulesNotDeleted", "Count", 1), ("RemindersStopped", "Count", 1)]


def test_a_reminder_that_gets_through_after_a_refused_request_says_so_on_the_item(aws, monkeypatch):
    done, held = aws
    monkeypatch.setattr(approvals, "record_notification", lambda name, **kw: done.append(("noted", name, kw)) or True)
    remind_approvers.handler(EVENT, Context())  # told already (or never said): nothing to note
    assert not [d for d in done if d[0] == "noted"]
    held["item"] = {**PENDING, "notification": "failed"}
    assert remind_approvers.handler(EVENT, Context()) == {"sent": True, "message_id": "m-1"}
    assert [d for d in done if d[0] == "noted"] == [("noted", "td-1", {"sent": True, "at": NOW, "by": "reminder"})]
