"""An approval request the approval topic refuses (its policy denies, SNS failing past botocore's
retries) leaves the approval waiting and answerable; the refusal is logged and counted for its alarm."""

from __future__ import annotations

import logging

from botocore.exceptions import ClientError, EndpointConnectionError

from gpufill.adapters import approvals
from gpufill.constants import METRIC_APPROVALS_NOT_PUBLISHED
from gpufill.handlers import observability


def test_a_refused_publish_answers_why_instead_of_raising(monkeypatch):
    monkeypatch.setattr(approvals, "publish", lambda subject, body: "msg-1")
    assert approvals.ask("s", "b") == ("msg-1", None)

    def denied(subject, body):
        raise ClientError({"Error": {"Code": "AuthorizationError", "Message": "not allowed"}}, "Publish")

    monkeypatch.setattr(approvals, "publish", denied)
    message_id, why = approvals.ask("s", "b")
    assert message_id is None and why.startswith("AuthorizationError: ") and "not allowed" in why

    def unreachable(subject, body):
        raise EndpointConnectionError(endpoint_url="https://sns.us-east-1.amazonaws.com")

    monkeypatch.setattr(approvals, "publish", unreachable)
    message_id, why = approvals.ask("s", "b")
    assert message_id is None and why.startswith("EndpointConnectionError: ")

    def odd(subject, body):
        raise ClientError({"Error": {}}, "Publish")

    monkeypatch.setattr(approvals, "publish", odd)
    assert approvals.ask("s", "b")[1].startswith("ClientError: ")


def test_a_refusal_is_logged_and_counted_once(monkeypatch, caplog):
    counted = []
    monkeypatch.setattr(observability.metrics, "add_metric", lambda name, unit, value: counted.append((name, unit, value)))
    caplog.set_level(logging.ERROR)
    observability.approval_not_published("end-it", "AuthorizationError: no")
    assert counted == [(METRIC_APPROVALS_NOT_PUBLISHED, "Count", 1)]
    [logged] = [r for r in caplog.records if r.message.startswith("approval request not published")]
    assert logged.levelno == logging.ERROR and logged.execution == "end-it" and logged.error == "AuthorizationError: no"


def test_the_item_says_whether_the_approvers_were_told_until_a_decision_ends_it(table):
    from datetime import UTC, datetime, timedelta

    from dynamodb_table import item

    at = datetime(2026, 12, 4, 12, tzinfo=UTC)
    teardown = {"target": {"request_id": "serve-1"}, "regions": [{"region": "us-east-1", "requests": {"serve-1": ["i-1"]}}],
                "instances": []}
    # No item (never asked, or long expired): nothing is written.
    assert approvals.record_notification("end-it", sent=False, at=at, error="x", by="approval request") is False
    assert item(table, "approval#end-it") is None
    approvals.record_pending(execution_name="end-it", execution_arn="arn", task_token="t", teardown=teardown,
                             requested_at=at, deadline=at + timedelta(days=1))
    why = "AuthorizationError: " + "no " * 300
    assert approvals.record_notification("end-it", sent=False, at=at, error=why, by="approval request") is True
    said = item(table, "approval#end-it")
    assert (said["notification"], said["notification_at"], said["notification_by"]) == ("failed", at.isoformat(), "approval request")
    assert said["notification_error"] == why[:500] and said["status"] == "PENDING"
    assert approvals.record_notification("end-it", sent=False, at=at, by="approval request") is True
    assert item(table, "approval#end-it")["notification_error"] == "unknown"
    later = at + timedelta(hours=1)
    assert approvals.record_notification("end-it", sent=True, at=later, error="ignored", by="reminder") is True
    said = item(table, "approval#end-it")
    assert (said["notification"], said["notification_at"], said["notification_by"], said["notification_error"]) == (
        "sent", later.isoformat(), "reminder", None)
    approvals.record_decision("end-it", decision="rejected", answer_raw="no", approver="ana", reason=None, decided_at=later)
    assert approvals.record_notification("end-it", sent=False, at=later, error="x", by="reminder") is False
    assert item(table, "approval#end-it")["notification"] == "sent"


def test_status_says_the_approvers_were_not_told_and_how_to_answer():
    from gpufill.cli import status

    assert status.notification_of({"execution_name": "end-it"}) == {}
    failed = status.notification_of({"notification": "failed", "notification_at": "2026-12-04T12:00:00+00:00",
                                     "notification_by": "approval request", "notification_error": "AuthorizationError: no"})
    pending = {**failed, "approve": "gpufill approve teardown:end-it"}
    assert status.notification_lines(pending) == [
        "    approvers were not notified (the approval topic refused the approval request at 2026-12-04T12:00:00+00:00: "
        "AuthorizationError: no): answer with gpufill approve teardown:end-it"]
    told = status.notification_of({"notification": "sent", "notification_at": "2026-12-04T13:00:00+00:00", "notification_by": "reminder"})
    assert told == {"notification": {"status": "sent", "at": "2026-12-04T13:00:00+00:00", "by": "reminder", "error": None}}
    assert status.notification_lines(told) == [
        "    approvers were told by a reminder at 2026-12-04T13:00:00+00:00 (the approval request itself was not delivered)"]
    assert status.notification_lines({}) == []
    lines = status.render_pending([{**pending, "approval_id": "teardown:end-it", "instance_count": 1, "target": {"request_id": "r"},
                                    "requested_by": "ana", "requested_at": "t", "deadline": "d", "who_answers": "w",
                                    "reject": "gpufill reject teardown:end-it"}])
    assert lines[3].startswith("    approvers were not notified") and lines[4] == "    who answers: w"
