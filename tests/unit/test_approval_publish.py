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
