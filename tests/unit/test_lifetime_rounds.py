"""The spend guard's late rounds: a launch recorded at or after the expiry is asked about in a
teardown of its own, named after the launch, so a retry or a second delivery starts nothing new."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpufill.models.request import REQUEST_ID_PATTERN
from gpufill.policy import lifetime

SCHEDULE_NAME = re.compile(r"^[0-9a-zA-Z_.-]{1,64}$")
EXECUTION_NAME = re.compile(r"^[0-9A-Za-z_-]{1,80}$")
EXPIRES = "2026-03-01T20:00:00+00:00"
AT = datetime(2026, 3, 1, 20, tzinfo=UTC)
request_ids = st.text(min_size=1, max_size=80).filter(lambda s: REQUEST_ID_PATTERN.match(s) is not None)


def test_a_launch_well_before_the_expiry_is_the_request_s_own_round():
    before = AT - timedelta(seconds=lifetime.LATE_LAUNCH_SECONDS + 1)
    assert lifetime.late_round(EXPIRES, before, "tok-1") is None


def test_a_launch_near_or_after_the_expiry_gets_a_round_named_after_its_token():
    for now in (AT - timedelta(seconds=lifetime.LATE_LAUNCH_SECONDS), AT, AT + timedelta(days=2)):
        late = lifetime.late_round(EXPIRES, now, "tok-1")
        assert late is not None and late == lifetime.late_round(EXPIRES, now + timedelta(seconds=5), "tok-1")
    assert lifetime.late_round(EXPIRES, AT, "tok-1") != lifetime.late_round(EXPIRES, AT, "tok-2")


def test_a_late_round_has_its_own_schedule_and_teardown_names_and_tears_down_the_request():
    late = lifetime.late_round(EXPIRES, AT, "tok-1")
    assert lifetime.lifetime_schedule_name("my-run", late) == f"life-my-run.{late}"
    assert lifetime.expiry_execution_name("my-run", late) == f"my-run-r{late}-expired"
    body = json.loads(lifetime.expiry_target_input("arn:sm", "my-run", late))
    assert body["Name"] == f"my-run-r{late}-expired"
    assert json.loads(body["Input"]) == lifetime.teardown_request("my-run")


@given(request_ids, st.text(min_size=1, max_size=40))
def test_late_round_names_are_valid_and_never_the_request_s_own(request_id, token):
    late = lifetime.late_round(EXPIRES, AT, token)
    assert SCHEDULE_NAME.match(lifetime.lifetime_schedule_name(request_id, late))
    assert EXECUTION_NAME.match(lifetime.expiry_execution_name(request_id, late))
    assert lifetime.expiry_execution_name(request_id, late).endswith(lifetime.EXPIRY_SUFFIX)
    assert lifetime.lifetime_schedule_name(request_id, late) != lifetime.lifetime_schedule_name(request_id)
    assert lifetime.expiry_execution_name(request_id, late) != lifetime.expiry_execution_name(request_id)
