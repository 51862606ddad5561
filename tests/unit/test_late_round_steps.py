"""The handlers' side of the spend guard's late rounds: LaunchBatch joins or opens a round from the
item as it is (deciding again when a write lost a race), and an answered round brings the round
opened behind it forward. AWS is replaced by recorders."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufill.adapters import clock, late_rounds, schedules
from gpufill.adapters.aws import TransientAwsError
from gpufill.handlers import launch_batch, record_approval_decision
from gpufill.models.teardown import Teardown, TeardownTarget

NOW = datetime(2026, 3, 1, 20, 5, tzinfo=UTC)
OPEN = {"round": 1, "phase": "open", "due": "2026-03-01T20:06:00+00:00", "opened_by": "a", "launches": ["a"]}
ASKED = {**OPEN, "phase": "asked", "until": "2026-03-02T20:06:00+00:00"}


@pytest.fixture
def calls(monkeypatch):
    done: list[tuple] = []
    held = {"items": [], "writes": []}
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(late_rounds, "read", lambda request_id: held["items"].pop(0) if held["items"] else None)

    def write(kind):
        def record(request_id, **kw):
            done.append((kind, request_id, kw))
            return held["writes"].pop(0) if held["writes"] else True
        return record

    monkeypatch.setattr(late_rounds, "join", write("join"))
    monkeypatch.setattr(late_rounds, "open_round", write("open"))
    monkeypatch.setattr(late_rounds, "mark_answered", write("answered"))
    monkeypatch.setattr(schedules, "schedule_expiry", lambda *a, **kw: done.append(("schedule", a, kw)) or True)
    monkeypatch.setattr(schedules, "move_expiry", lambda *a: done.append(("move", a)) or True)
    return done, held


def test_a_late_launch_joins_the_open_round_and_makes_no_schedule(calls):
    done, held = calls
    held["items"] = [OPEN]
    launch_batch.join_late_round("req", "2026-03-01T20:00:00+00:00", "arn:sm", "b")
    assert done == [("join", "req", {"number": 1, "launch": "b"})]


def test_a_launch_that_lost_a_race_decides_again_and_opens_one_round_with_its_schedule(calls):
    done, held = calls
    held["items"], held["writes"] = [OPEN, ASKED], [False, True]
    launch_batch.join_late_round("req", "2026-03-01T20:00:00+00:00", "arn:sm", "b")
    assert [d[0] for d in done] == ["join", "open", "schedule"]
    assert done[1][2] == {"number": 2, "due": "2026-03-02T20:07:00+00:00", "launch": "b", "expect": {"round": 1, "phase": "asked"}}
    assert done[2] == ("schedule", ("req", "2026-03-01T20:00:00+00:00", "arn:sm", "2"), {"at": "2026-03-02T20:07:00+00:00"})


def test_a_retried_launch_makes_its_rounds_schedule_again_or_nothing(calls):
    done, held = calls
    held["items"] = [OPEN, {**ASKED, "launches": ["a"]}]
    launch_batch.join_late_round("req", "e", "arn:sm", "a")  # it opened the round: the schedule again
    launch_batch.join_late_round("req", "e", "arn:sm", "a")  # listed since: nothing
    assert done == [("schedule", ("req", "e", "arn:sm", "1"), {"at": OPEN["due"]})]


def test_a_launch_that_keeps_losing_is_retried_by_the_step(calls):
    done, held = calls
    held["items"], held["writes"] = [OPEN] * 5, [False] * 5
    with pytest.raises(TransientAwsError):
        launch_batch.join_late_round("req", "e", "arn:sm", "b")
    assert len(done) == launch_batch.LATE_ROUND_TRIES


def test_each_late_round_read_and_write_names_the_request_a_lost_open_is_decided_again_and_each_outcome_is_logged(
        calls, monkeypatch, caplog):
    import logging

    done, held = calls
    caplog.set_level(logging.INFO)
    asked = []
    monkeypatch.setattr(late_rounds, "read", lambda request_id: asked.append(request_id) or (held["items"].pop(0) if held["items"] else None))
    held["items"], held["writes"] = [ASKED, ASKED, OPEN], [False, True, True]
    launch_batch.join_late_round("req", "e", "arn:sm", "b")  # its open lost the race: decided again, and opened
    assert asked == ["req", "req"] and [(d[0], d[1]) for d in done] == [("open", "req"), ("open", "req"), ("schedule", ("req", "e", "arn:sm", "2"))]
    [scheduled] = [r for r in caplog.records if r.getMessage() == "late round scheduled"]
    assert (scheduled.late_round, scheduled.due) == (2, "2026-03-02T20:07:00+00:00")
    launch_batch.join_late_round("req", "e", "arn:sm", "c")  # joins the open round
    [joins] = [r for r in caplog.records if r.getMessage() == "late launch joins the open late round"]
    assert joins.late_round == 1
    held["items"], held["writes"] = [OPEN] * 5, [False] * 5
    with pytest.raises(TransientAwsError, match="^the late rounds of req changed 5 times while this launch joined them$"):
        launch_batch.join_late_round("req", "e", "arn:sm", "b")


def teardown(request_id="req") -> Teardown:
    return Teardown(request_id="req-r1-expired", status="AWAITING_APPROVAL", target=TeardownTarget(request_id=request_id),
                    trigger="max_lifetime")


def test_an_answered_late_round_brings_the_next_forward_and_only_then(calls):
    done, held = calls
    record_approval_decision.next_late_round_sooner(teardown(), execution_name="req-r1-expired", state_machine="arn:sm")
    assert done == [("answered", "req", {"number": 1})]  # it was current: nothing behind it
    done.clear()
    held["writes"], held["items"] = [False], [{**OPEN, "round": 2}]
    record_approval_decision.next_late_round_sooner(teardown(), execution_name="req-r1-expired", state_machine="arn:sm")
    assert done[1][0] == "move" and done[1][1][0] == "req" and done[1][1][2:] == ("arn:sm", "2")
    done.clear()
    for behind in ({**ASKED, "round": 2}, {**OPEN, "round": 1}, None):
        held["writes"], held["items"] = [False], [behind]
        record_approval_decision.next_late_round_sooner(teardown(), execution_name="req-r1-expired", state_machine="arn:sm")
    assert [d[0] for d in done] == ["answered"] * 3
    record_approval_decision.next_late_round_sooner(teardown(), execution_name="req-expired", state_machine="arn:sm")
    record_approval_decision.next_late_round_sooner(teardown(None), execution_name="req-r1-expired", state_machine="arn:sm")
    assert len(done) == 3  # the request's own round, or no request: no late round


def test_a_late_round_that_cannot_be_moved_never_fails_the_decision(calls, monkeypatch, caplog):
    import logging

    from botocore.exceptions import ClientError

    done, held = calls
    caplog.set_level(logging.WARNING)
    held["writes"], held["items"] = [False], [{**OPEN, "round": 2}]

    def refused(*args):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "UpdateSchedule")

    monkeypatch.setattr(schedules, "move_expiry", refused)
    record_approval_decision.next_late_round_sooner(teardown(), execution_name="req-r1-expired", state_machine="arn:sm")
    assert "next late round not moved" in [r.message for r in caplog.records]
