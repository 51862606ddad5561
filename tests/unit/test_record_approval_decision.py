"""RecordApprovalDecision: a schedule that cannot be deleted never stops the decision."""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError

from gpufill.adapters import approvals, clock, schedules
from gpufill.handlers import record_approval_decision
from gpufill.handlers.observability import metrics
from gpufill.models.teardown import Teardown, TeardownTarget
from gpufill.policy import approval

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)


class Context:
    function_name = "RecordApprovalDecision"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:RecordApprovalDecision"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/RecordApprovalDecision"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def refused(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, operation)


@pytest.fixture
def aws(monkeypatch):
    done: list[tuple] = []
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(approvals, "record_decision", lambda name, **kw: done.append(("decision", name, kw["decision"])) or {})
    monkeypatch.setattr(approvals, "publish", lambda subject, body: done.append(("publish", subject)) or "m-1")
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, value)))
    return done


def answer(decision) -> dict:
    teardown = Teardown(request_id="td-1", status="AWAITING_APPROVAL", target=TeardownTarget(request_id="req-1"))
    return {"execution_name": "td-1", "answer": {"decision": decision}, "teardown": teardown.model_dump(mode="json")}


def test_an_approval_goes_on_to_terminate_when_its_schedules_cannot_be_deleted(aws, monkeypatch, caplog):
    caplog.set_level(logging.WARNING)

    def cannot(name):
        aws.append(("delete", name))
        raise refused("DeleteSchedule")

    monkeypatch.setattr(schedules, "cancel_reminders", cannot)
    monkeypatch.setattr(schedules, "cancel_expiry", cannot)
    out = record_approval_decision.handler(answer("approved"), Context())
    assert out["decision"] == "approved"
    assert aws[:3] == [("decision", "td-1", "approved"), ("delete", "td-1"), ("metric", "SchedulesNotDeleted", 1)]
    assert ("delete", "req-1") in aws and aws.count(("metric", "SchedulesNotDeleted", 1)) == 2
    assert [r.message for r in caplog.records].count("schedule not deleted") == 2


def test_the_schedules_deleted_are_the_reminders_and_with_a_yes_the_lifetime(aws, monkeypatch):
    monkeypatch.setattr(schedules, "cancel_reminders", lambda name: aws.append(("reminders", name)) or True)
    monkeypatch.setattr(schedules, "cancel_expiry", lambda name: aws.append(("lifetime", name)) or True)
    record_approval_decision.handler(answer("approved"), Context())
    record_approval_decision.handler(answer("no"), Context())
    deleted = [d for d in aws if d[0] in ("reminders", "lifetime")]
    assert deleted == [("reminders", "td-1"), ("lifetime", "req-1"), ("reminders", "td-1")]


MACHINE = "arn:aws:states:us-east-1:1:stateMachine:gpufill-dev"
OLD = "i-0123456789abcdef0"
RECLAIMED = {"instance_id": OLD, "request_id": "req-1", "region": "us-east-1", "availability_zone": "us-east-1a",
             "instance_type": "g6.xlarge", "market": "spot", "state": "interrupted", "refill_run": f"req-1-refill-{OLD}"}


@pytest.fixture
def refills(aws, monkeypatch):
    from gpufill.adapters import executions, instances_table, run_store

    held = {"marked": {"req-1"}, "others": frozenset(), "fail": None}
    monkeypatch.setattr(schedules, "cancel_reminders", lambda name: True)
    monkeypatch.setattr(schedules, "cancel_expiry", lambda name: True)

    def give_back(request_id, by):
        aws.append(("give back", request_id, by))
        if held["fail"]:
            raise held["fail"]
        if request_id not in held["marked"]:
            return None
        held["marked"].discard(request_id)
        return held["others"]

    monkeypatch.setattr(run_store, "give_back_maintenance", give_back)
    monkeypatch.setattr(run_store, "load_request", lambda request_id: {"count": 1, "maintain": True})
    monkeypatch.setattr(instances_table, "request_holdings",
                        lambda request_id: instances_table.Holdings(records={OLD: RECLAIMED}))
    monkeypatch.setattr(executions, "start", lambda name, body, machine: aws.append(("start", name, machine, body["refill"]["replaces"])) or "arn")
    # The refill it takes over from has ended; the first restart claims the record, a retried one finds it claimed.
    claimed: set[str] = set()
    monkeypatch.setattr(executions, "describe", lambda machine, name: {"status": "SUCCEEDED"})
    monkeypatch.setattr(instances_table, "mark_refill_restarted",
                        lambda instance_id, refill_run, was, by: refill_run not in claimed and not claimed.add(refill_run))
    return held


def with_arn(event: dict) -> dict:
    return {**event, "execution_arn": "arn:aws:states:us-east-1:1:execution:gpufill-dev:td-1"}


@pytest.mark.parametrize("decision", [{"answer": {"decision": "no"}}, {"answer": None, "expired": True}], ids=["rejected", "expired"])
def test_a_rejection_or_an_expiry_gives_the_request_its_maintenance_back_and_starts_its_stopped_refill_once(aws, refills, decision):
    out = record_approval_decision.handler(with_arn({**answer("no"), **decision}), Context())
    record_approval_decision.handler(with_arn({**answer("no"), **decision}), Context())  # a retried decision
    name = f"req-1-refill-{OLD}-after-r{hashlib.sha256(f'req-1-refill-{OLD}'.encode()).hexdigest()[:8]}"
    starts = [d for d in aws if d[0] == "start"]
    assert starts == [("start", name, MACHINE, [OLD])]
    assert ("give back", "req-1", "td-1") in aws
    assert ("metric", "RefillsRestarted", 1) in aws
    assert out["note"] == f"request req-1 is maintained again; refill(s) started again: {name}"


def test_a_teardown_given_back_while_another_still_stops_the_request_starts_no_refill(aws, refills):
    refills["others"] = frozenset({"td-2"})
    out = record_approval_decision.handler(with_arn({**answer("no"), "expired": True}), Context())
    assert ("give back", "req-1", "td-1") in aws and not [d for d in aws if d[0] == "start"]
    assert out["decision"] == "expired" and out["note"] == "request req-1 stays without refills while teardown(s) td-2 stop it"


def test_an_approval_starts_no_refill_and_its_decision_has_no_note(aws, refills):
    out = record_approval_decision.handler(with_arn(answer("approved")), Context())
    record_approval_decision.handler(answer("no"), Context())  # no execution ARN: nothing to start on
    assert not [d for d in aws if d[0] in ("give back", "start")] and "note" not in out


def test_a_refill_that_cannot_be_started_again_never_fails_the_decision(aws, refills, caplog):
    refills["fail"] = refused("UpdateItem")
    caplog.set_level(logging.WARNING)
    out = record_approval_decision.handler(with_arn(answer("no")), Context())
    assert out["decision"] == "rejected" and ("metric", "RefillsNotRestarted", 1) in aws
    assert "refill not started again" in [r.message for r in caplog.records]


# --- everything a decision writes, logs and counts, exactly -------------------------------

KEYS = ("kind", "for", "error", "request", "runs", "late_round", "decision", "approver")


def said(caplog) -> list[tuple]:
    return [(r.levelname, r.message, {k: getattr(r, k) for k in KEYS if hasattr(r, k)})
            for r in caplog.records if r.name.startswith("gpufill")]


@pytest.fixture
def recorded(monkeypatch):
    """Every call with every argument: the decision item, the schedules, the topic, the metrics
    with their units, and the refills started (the request keeps one stopped refill)."""
    from gpufill.adapters import executions, instances_table, run_store

    done: list[tuple] = []
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(approvals, "record_decision",
                        lambda name, **kw: done.append(("decision", name, kw)) or {"deadline": "2026-12-05T12:00:00+00:00"})
    monkeypatch.setattr(approvals, "publish", lambda subject, body: done.append(("publish", subject, body)) or "m-1")
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, unit, value)))
    monkeypatch.setattr(schedules, "cancel_reminders", lambda name: done.append(("reminders", name)) or True)
    monkeypatch.setattr(schedules, "cancel_expiry", lambda name: done.append(("lifetime", name)) or True)
    monkeypatch.setattr(run_store, "give_back_maintenance", lambda request_id, by: done.append(("give back", request_id, by)) or frozenset())
    monkeypatch.setattr(run_store, "load_request", lambda request_id: {"count": 1, "maintain": True, "instance_types": ["g6.xlarge"]})
    monkeypatch.setattr(instances_table, "request_holdings",
                        lambda request_id: instances_table.Holdings(records={OLD: RECLAIMED}))
    monkeypatch.setattr(executions, "start", lambda name, body, machine: done.append(("start", name, body, machine)) or "arn")
    monkeypatch.setattr(executions, "describe", lambda machine, name: done.append(("describe", machine, name)) or None)
    monkeypatch.setattr(instances_table, "mark_refill_restarted",
                        lambda instance_id, **kw: done.append(("claim", instance_id, kw)) or True)
    return done


def test_a_rejection_records_its_answer_restarts_the_refill_and_says_so_exactly(recorded, caplog):
    from gpufill.policy import refill

    caplog.set_level(logging.INFO)
    event = with_arn({**answer("no"), "answer": {"decision": "no", "approver": "ana", "reason": "still needed"}})
    out = record_approval_decision.handler(event, Context())
    name = refill.execution_name("req-1", OLD, after=RECLAIMED["refill_run"])
    body = refill.refill_input({"count": 1, "maintain": True, "instance_types": ["g6.xlarge"]}, request_id="req-1",
                               instance_id=OLD, pool=refill.reclaimed_pool(RECLAIMED))
    assert recorded == [
        ("decision", "td-1", {"decision": "rejected", "answer_raw": "no", "approver": "ana", "reason": "still needed",
                              "decided_at": NOW}),
        ("reminders", "td-1"),
        ("give back", "req-1", "td-1"),
        ("describe", MACHINE, RECLAIMED["refill_run"]),
        ("claim", OLD, {"refill_run": name, "was": RECLAIMED["refill_run"], "by": "td-1"}),
        ("start", name, body, MACHINE),
        ("metric", "RefillsRestarted", "Count", 1),
        ("metric", "TeardownRejected", "Count", 1),
    ]
    assert out == {"decision": "rejected", "answer_raw": "no", "approver": "ana", "reason": "still needed",
                   "decided_at": NOW.isoformat(), "note": f"request req-1 is maintained again; refill(s) started again: {name}"}
    assert said(caplog)[0] == ("INFO", "refills started again", {"runs": [name]})
    assert said(caplog)[1][:2] == ("INFO", "teardown decision") and said(caplog)[1][2]["decision"] == "rejected"


def test_an_approval_ends_the_lifetime_and_an_expiry_tells_the_topic_exactly(recorded, caplog):
    caplog.set_level(logging.INFO)
    out = record_approval_decision.handler({**answer("approved"), "answer": {"decision": "approved", "approver": "ana"}}, Context())
    assert recorded == [
        ("decision", "td-1", {"decision": "approved", "answer_raw": "approved", "approver": "ana", "reason": None,
                              "decided_at": NOW}),
        ("reminders", "td-1"), ("lifetime", "req-1"), ("metric", "TeardownApproved", "Count", 1),
    ]
    assert out == {"decision": "approved", "answer_raw": "approved", "approver": "ana", "reason": None, "decided_at": NOW.isoformat()}
    assert ("INFO", "lifetime schedule removed", {"request": "req-1"}) in said(caplog)
    recorded.clear()
    teardown = Teardown(request_id="td-1", status="AWAITING_APPROVAL", target=TeardownTarget(request_id="req-1"))
    out = record_approval_decision.handler({"execution_name": "td-1", "expired": True, "teardown": teardown.model_dump(mode="json")}, Context())
    subject, body = approval.expired_notice(teardown, execution_name="td-1", deadline="2026-12-05T12:00:00+00:00")
    assert recorded == [
        ("decision", "td-1", {"decision": "expired", "answer_raw": None, "approver": record_approval_decision.NOBODY,
                              "reason": None, "decided_at": NOW}),
        ("reminders", "td-1"), ("publish", subject, body), ("metric", "TeardownExpired", "Count", 1),
    ]
    assert out["decision"] == "expired" and "note" not in out  # no execution ARN: no refill to start on
    # A purchase's decision (no teardown) asks nothing of the topic and ends no lifetime.
    recorded.clear()
    record_approval_decision.handler({"execution_name": "buy-1", "expired": True}, Context())
    assert [d[0] for d in recorded] == ["decision", "reminders", "metric"]


def test_a_late_round_moved_sooner_is_logged_with_its_number(monkeypatch, caplog):
    from gpufill.adapters import late_rounds

    moved = []
    monkeypatch.setattr(clock, "iso_now", lambda: "2026-12-04T12:00:00+00:00")
    monkeypatch.setattr(late_rounds, "mark_answered", lambda request_id, number: False)
    monkeypatch.setattr(late_rounds, "read", lambda request_id: moved.append(("read", request_id)) or {"round": 2, "phase": "open"})
    monkeypatch.setattr(schedules, "move_expiry", lambda *a: moved.append(("move", *a)) or True)
    caplog.set_level(logging.INFO)
    teardown = Teardown(request_id="req-1-r1-expired", status="AWAITING_APPROVAL", target=TeardownTarget(request_id="req-1"))
    record_approval_decision.next_late_round_sooner(teardown, execution_name="req-1-r1-expired", state_machine=MACHINE)
    assert moved == [("read", "req-1"), ("move", "req-1", "2026-12-04T12:00:00+00:00", MACHINE, "2")]
    assert said(caplog) == [("INFO", "next late round moved sooner", {"late_round": 2})]

    monkeypatch.setattr(schedules, "move_expiry", lambda *a: (_ for _ in ()).throw(refused("UpdateSchedule")))
    caplog.clear()
    record_approval_decision.next_late_round_sooner(teardown, execution_name="req-1-r1-expired", state_machine=MACHINE)
    [(level, message, extra)] = said(caplog)
    assert (level, message) == ("WARNING", "next late round not moved") and "AccessDeniedException" in extra["error"]


def test_each_request_a_teardown_stopped_is_given_back_on_its_own(recorded, monkeypatch, caplog):
    """Three requests: one this teardown never marked, one another teardown still stops (two of
    them), one whose refill cannot be started: each is answered for, none stops the others."""
    from gpufill.adapters import executions, run_store
    from gpufill.models.teardown import RegionBatch

    left = {"a-unmarked": None, "b-held": frozenset({"td-9", "td-8"}), "c-failing": frozenset()}
    monkeypatch.setattr(run_store, "give_back_maintenance", lambda request_id, by: left[request_id])

    def cannot(name, body, machine):
        raise ClientError({"Error": {"Code": "ExecutionLimitExceeded", "Message": "full"}}, "StartExecution")

    monkeypatch.setattr(executions, "start", cannot)
    caplog.set_level(logging.INFO)
    teardown = Teardown(request_id="td-1", status="AWAITING_APPROVAL", target=TeardownTarget(all=True),
                        regions=[RegionBatch(region="us-east-1", requests={r: ["i-1"] for r in left})])
    outcome = record_approval_decision.restart_refills(teardown, by="td-1", state_machine=MACHINE)
    assert outcome == {"b-held": "td-8, td-9", "c-failing": []}
    assert [d for d in recorded if d[0] not in ("describe", "claim")] == [("metric", "RefillsNotRestarted", "Count", 1)]
    [(level, message, extra)] = said(caplog)
    assert (level, message, extra["request"]) == ("WARNING", "refill not started again", "c-failing")
    assert "ExecutionLimitExceeded" in extra["error"]


def test_a_schedule_not_deleted_is_logged_with_what_and_for_whom(recorded, monkeypatch, caplog):
    caplog.set_level(logging.WARNING)

    def cannot(name):
        raise refused("DeleteSchedule")

    assert record_approval_decision.end_schedule(cannot, "req-1", kind="lifetime") is False
    [(level, message, extra)] = said(caplog)
    assert (level, message, extra["kind"], extra["for"]) == ("WARNING", "schedule not deleted", "lifetime", "req-1")
    assert "AccessDeniedException" in extra["error"]
    assert recorded == [("metric", "SchedulesNotDeleted", "Count", 1)]
    assert record_approval_decision.end_schedule(lambda name: True, "req-1", kind="lifetime") is True


def test_a_late_rounds_decision_brings_the_next_forward_on_its_own_state_machine_and_only_with_its_trigger(recorded, monkeypatch):
    from gpufill.adapters import late_rounds

    monkeypatch.setattr(late_rounds, "mark_answered", lambda request_id, number: recorded.append(("answered", request_id, number)) or False)
    monkeypatch.setattr(late_rounds, "read", lambda request_id: {"round": 2, "phase": "open"})
    monkeypatch.setattr(clock, "iso_now", lambda: "2026-12-04T12:00:00+00:00")
    monkeypatch.setattr(schedules, "move_expiry", lambda *a: recorded.append(("move", *a)) or True)
    late = Teardown(request_id="req-1-r1-expired", status="AWAITING_APPROVAL", target=TeardownTarget(request_id="req-1"),
                    trigger="max_lifetime")
    event = {"execution_name": "req-1-r1-expired", "execution_arn": "arn:aws:states:us-east-1:1:execution:gpufill-dev:req-1-r1-expired",
             "answer": {"decision": "approved"}, "teardown": late.model_dump(mode="json")}
    record_approval_decision.handler(event, Context())
    assert ("answered", "req-1", 1) in recorded
    assert ("move", "req-1", "2026-12-04T12:00:00+00:00", MACHINE, "2") in recorded
    recorded.clear()  # the same name asked by a person (no trigger): not a late round of the spend guard
    record_approval_decision.handler({**event, "teardown": {**late.model_dump(mode="json"), "trigger": None}}, Context())
    assert not [d for d in recorded if d[0] in ("answered", "move")]


def test_a_schedule_a_decision_cannot_delete_is_named_by_its_kind(recorded, monkeypatch, caplog):
    def cannot(name):
        raise refused("DeleteSchedule")

    monkeypatch.setattr(schedules, "cancel_reminders", cannot)
    monkeypatch.setattr(schedules, "cancel_expiry", cannot)
    caplog.set_level(logging.WARNING)
    record_approval_decision.handler(answer("approved"), Context())
    assert [(e["kind"], e["for"]) for level, message, e in said(caplog) if message == "schedule not deleted"] == [
        ("reminders", "td-1"), ("lifetime", "req-1")]


def test_a_request_no_longer_kept_gets_no_refill_started(recorded, monkeypatch):
    from gpufill.adapters import run_store

    monkeypatch.setattr(run_store, "load_request", lambda request_id: None)
    out = record_approval_decision.handler(with_arn(answer("no")), Context())
    assert not [d for d in recorded if d[0] == "start"] and out["note"] == "request req-1 is maintained again"
