"""The spend guard's pure rules: when a request expires, and the names its schedules and teardown take."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpufill.models.request import REQUEST_ID_PATTERN
from gpufill.policy import lifetime

SCHEDULE_NAME = re.compile(r"^[0-9a-zA-Z_.-]{1,64}$")
EXECUTION_NAME = re.compile(r"^[0-9A-Za-z_-]{1,80}$")
request_ids = st.text(min_size=1, max_size=80).filter(lambda s: REQUEST_ID_PATTERN.match(s) is not None)


def test_a_request_expires_its_lifetime_after_it_was_accepted_in_whole_seconds():
    accepted = datetime(2026, 3, 1, 12, 0, 0, 750_000, tzinfo=UTC)
    assert lifetime.expires_at(accepted, 8 * 3600) == "2026-03-01T20:00:00+00:00"
    assert lifetime.at_expression("2026-03-01T20:00:00+00:00") == "at(2026-03-01T20:00:00)"


def test_a_plain_request_id_reads_in_its_names():
    assert lifetime.lifetime_schedule_name("my-run") == "life-my-run"
    assert lifetime.expiry_execution_name("my-run") == "my-run-expired"
    assert lifetime.reminder_schedule_name("my-run-expired") == "remind-my-run-expired"


@given(request_ids, request_ids)
def test_every_request_id_gets_valid_names_and_two_ids_never_share_one(first, second):
    for request_id in (first, second):
        assert SCHEDULE_NAME.match(lifetime.lifetime_schedule_name(request_id))
        assert SCHEDULE_NAME.match(lifetime.reminder_schedule_name(request_id))
        assert EXECUTION_NAME.match(lifetime.expiry_execution_name(request_id))
    if first != second:
        assert lifetime.lifetime_schedule_name(first) != lifetime.lifetime_schedule_name(second)
        assert lifetime.expiry_execution_name(first) != lifetime.expiry_execution_name(second)


def test_no_reminder_when_the_deadline_comes_first():
    asked = datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert lifetime.reminder_window(asked, datetime(2026, 3, 1, 12, 30, tzinfo=UTC)) is None
    first, until = lifetime.reminder_window(asked, datetime(2026, 3, 2, 12, tzinfo=UTC))
    assert (first, until) == (datetime(2026, 3, 1, 13, tzinfo=UTC), datetime(2026, 3, 2, 12, tzinfo=UTC))
    assert lifetime.reminder_expression() == "rate(1 hour)"


def test_an_approved_teardown_ends_the_lifetime_of_the_requests_it_ends_whole():
    from gpufill.models.teardown import RegionBatch, Teardown, TeardownTarget

    def teardown(target, regions=()):
        return Teardown(request_id="t", status="AWAITING_APPROVAL", target=target, regions=list(regions))

    assert lifetime.requests_ended(teardown(TeardownTarget(request_id="r"))) == ["r"]
    assert lifetime.requests_ended(teardown(TeardownTarget(instance_ids=["i-0123456789abcdef0"]))) == []
    batches = [RegionBatch(region="us-west-2", requests={"b": ["i-1"], "a": ["i-2"]}), RegionBatch(region="us-east-1", requests={"a": ["i-3"]})]
    assert lifetime.requests_ended(teardown(TeardownTarget(all=True), batches)) == ["a", "b"]


def test_a_request_that_expired_before_its_first_launch_is_asked_about_a_minute_later():
    now = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
    assert lifetime.due_moment("2026-03-01T20:00:00+00:00", now) == "2026-03-01T20:00:00+00:00"
    assert lifetime.due_moment("2026-03-01T11:00:00+00:00", now) == "2026-03-01T12:01:30+00:00"


def test_an_id_that_had_to_change_or_be_cut_keeps_a_readable_start_and_a_digest_of_the_exact_id():
    import hashlib

    digest = hashlib.sha256(b"my run").hexdigest()[:8]
    assert lifetime.lifetime_schedule_name("my run") == f"life-my-run-{digest}"
    assert lifetime.expiry_execution_name("my run") == f"my-run-{digest}-expired"
    long_id = "r" * 80
    long_digest = hashlib.sha256(long_id.encode()).hexdigest()[:8]
    assert lifetime.lifetime_schedule_name(long_id) == f"life-{'r' * 50}-{long_digest}"  # 64 characters
    assert lifetime.reminder_schedule_name(long_id) == f"remind-{'r' * 48}-{long_digest}"
    assert lifetime.expiry_execution_name(long_id) == f"{'r' * 63}-{long_digest}-expired"  # 80 characters
    # At the limits exactly, an id is used as it is.
    assert lifetime.lifetime_schedule_name("r" * 59) == "life-" + "r" * 59
    assert lifetime.expiry_execution_name("r" * 72) == "r" * 72 + "-expired"
    assert lifetime.lifetime_schedule_name("a.b_c") == "life-a.b_c"
    assert lifetime.expiry_execution_name("a.b") != "a.b-expired"  # no dot in an execution name


def test_the_expiry_schedule_starts_the_teardown_of_the_request_by_a_name_it_can_start_once():
    import json

    raw = lifetime.expiry_target_input("arn:aws:states:us-east-1:1:stateMachine:gpufill", "my-run")
    assert raw.startswith('{"StateMachineArn":"arn:aws:states:us-east-1:1:stateMachine:gpufill","Name":"my-run-expired","Input":')
    sent = json.loads(raw)
    assert sent == {
        "StateMachineArn": "arn:aws:states:us-east-1:1:stateMachine:gpufill",
        "Name": "my-run-expired",
        "Input": '{"action":"teardown","request_id":"my-run","requested_by":"gpufill spend guard (max_lifetime)",'
                 '"trigger":"max_lifetime"}',
    }
    assert lifetime.teardown_request("my-run")["trigger"] == "max_lifetime"
    assert lifetime.START_EXECUTION_TARGET == "arn:aws:scheduler:::aws-sdk:sfn:startExecution"
    assert lifetime.reminder_input("run-expired", "S", "M") == '{"execution_name":"run-expired","subject":"S","message":"M"}'


def test_times_are_utc_whole_seconds_whatever_zone_they_come_in():
    from datetime import timedelta, timezone

    paris = timezone(timedelta(hours=1))
    assert lifetime.expires_at(datetime(2026, 3, 1, 13, 0, 0, 999_999, tzinfo=paris), 60) == "2026-03-01T12:01:00+00:00"
    assert lifetime.at_expression("2026-03-01T21:00:00+01:00") == "at(2026-03-01T20:00:00)"
    now = datetime(2026, 3, 1, 13, 0, 30, 500_000, tzinfo=paris)
    assert lifetime.due_moment("2026-03-01T11:00:00+00:00", now) == "2026-03-01T12:01:30+00:00"
    # A minute from now exactly: the later of the two, either way the same moment.
    assert lifetime.due_moment("2026-03-01T12:01:30+00:00", now) == "2026-03-01T12:01:30+00:00"


def test_reminders_come_every_approval_reminder_interval(monkeypatch):
    monkeypatch.setattr(lifetime, "APPROVAL_REMINDER_SECONDS", 7200)
    assert lifetime.reminder_expression() == "rate(2 hours)"
    monkeypatch.setattr(lifetime, "APPROVAL_REMINDER_SECONDS", 1800)
    assert lifetime.reminder_expression() == "rate(30 minutes)"
    asked = datetime(2026, 3, 1, 12, tzinfo=UTC)
    # A deadline exactly at the first reminder: none.
    assert lifetime.reminder_window(asked, datetime(2026, 3, 1, 12, 30, tzinfo=UTC)) is None


def test_a_teardown_of_everything_deletes_at_most_a_hundred_lifetime_schedules():
    from gpufill.models.teardown import RegionBatch, Teardown, TeardownTarget

    batch = RegionBatch(region="us-west-2", requests={f"r{n:03}": ["i-1"] for n in range(150)})
    ended = lifetime.requests_ended(Teardown(request_id="t", status="AWAITING_APPROVAL", target=TeardownTarget(all=True),
                                             regions=[batch]))
    assert len(ended) == 100 and ended[0] == "r000" and ended[-1] == "r099"


def test_a_request_expires_in_utc_whatever_the_machines_time_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert lifetime.expires_at(datetime(2026, 3, 1, 12, tzinfo=UTC), 3600) == "2026-03-01T13:00:00+00:00"
        assert lifetime.at_expression("2026-03-01T13:00:00+00:00") == "at(2026-03-01T13:00:00)"
        now = datetime(2026, 3, 1, 12, tzinfo=UTC)
        assert lifetime.due_moment("2026-03-01T11:00:00+00:00", now) == "2026-03-01T12:01:00+00:00"
        assert lifetime.late_step(None, "a", now)["due"] == "2026-03-01T12:01:00+00:00"
    finally:
        monkeypatch.undo()
        time.tzset()


ASKED = {"status": "PENDING", "deadline": "2026-03-02T12:00:00+00:00"}
DUE = datetime(2026, 3, 1, 13, tzinfo=UTC)


def test_a_reminder_is_sent_only_while_its_approval_waits_and_its_run_runs():
    assert lifetime.reminder_ends(ASKED, "RUNNING", DUE) is None
    assert lifetime.reminder_ends({"deadline": ASKED["deadline"]}, "RUNNING", DUE) is None  # no status yet: pending
    assert lifetime.reminder_ends(None, "RUNNING", DUE) == "approval gone"
    assert lifetime.reminder_ends({**ASKED, "decided_at": "2026-03-01T12:30:00+00:00"}, "RUNNING", DUE) == "approval answered"
    assert lifetime.reminder_ends({**ASKED, "answered_at": "2026-03-01T12:30:00+00:00"}, "RUNNING", DUE) == "approval answered"
    assert lifetime.reminder_ends({**ASKED, "status": "APPROVED"}, "RUNNING", DUE) == "approval answered"
    assert lifetime.reminder_ends(ASKED, "RUNNING", datetime(2026, 3, 2, 12, tzinfo=UTC)) == "approval expired"
    assert lifetime.reminder_ends(ASKED, "RUNNING", datetime(2026, 3, 2, 11, 59, 59, tzinfo=UTC)) is None
    assert lifetime.reminder_ends({"status": "PENDING"}, "RUNNING", DUE) is None  # no deadline read: the run decides
    for ended in ("ABORTED", "FAILED", "TIMED_OUT", "SUCCEEDED", None):
        assert lifetime.reminder_ends(ASKED, ended, DUE) == "teardown run no longer running"


@given(
    st.sampled_from(["PENDING", "APPROVED", "REJECTED", "EXPIRED"]),
    st.booleans(),
    st.sampled_from(["RUNNING", "ABORTED", "FAILED", "SUCCEEDED", None]),
    st.integers(min_value=-48, max_value=48),
)
def test_a_reminder_goes_out_only_for_an_approval_a_person_can_still_answer(status, decided, run, hours):
    item = {"status": status, "deadline": ASKED["deadline"], **({"decided_at": "x"} if decided else {})}
    now = datetime(2026, 3, 2, 12, tzinfo=UTC) + timedelta(hours=hours)
    answerable = status == "PENDING" and not decided and run == "RUNNING" and hours < 0
    assert (lifetime.reminder_ends(item, run, now) is None) == answerable
