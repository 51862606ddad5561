"""The spend guard's pure rules: when a request expires, and the names its schedules and teardown take."""

from __future__ import annotations

import re
from datetime import UTC, datetime

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
