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


# --- one late round asking at a time (late_step) ------------------------------------------

T0 = datetime(2026, 3, 1, 20, 5, tzinfo=UTC)


def test_the_first_late_launch_opens_round_one_due_in_a_minute_and_the_next_joins_it():
    first = lifetime.late_step(None, "a", T0)
    assert first == {"do": "open", "round": 1, "due": "2026-03-01T20:06:00+00:00", "expect": None}
    item = {"round": 1, "phase": "open", "due": first["due"], "opened_by": "a", "launches": ["a"]}
    assert lifetime.late_step(item, "b", T0 + timedelta(seconds=30)) == {"do": "join", "round": 1}
    # A retried step: the one that opened it makes its schedule again; one that joined does nothing.
    assert lifetime.late_step(item, "a", T0) == {"do": "ensure", "round": 1, "due": first["due"]}
    assert lifetime.late_step({**item, "launches": ["a", "b"]}, "b", T0) == {"do": "nothing"}
    assert lifetime.late_step({**item, "phase": "asked", "until": "2026-03-02T20:06:00+00:00"}, "a", T0) == {"do": "nothing"}


def test_a_launch_after_the_round_listed_opens_the_next_due_when_the_listed_one_cannot_wait_any_more():
    asked = {"round": 2, "phase": "asked", "due": "x", "until": "2026-03-02T20:00:00+00:00", "launches": ["a"]}
    assert lifetime.late_step(asked, "b", T0) == {
        "do": "open", "round": 3, "due": "2026-03-02T20:01:00+00:00", "expect": {"round": 2, "phase": "asked"}}
    # Its deadline passed already: a minute from now.
    late = T0 + timedelta(days=2)
    assert lifetime.late_step(asked, "b", late)["due"] == (late + timedelta(minutes=1)).isoformat()
    answered = {**asked, "phase": "answered"}
    assert lifetime.late_step(answered, "b", T0) == {
        "do": "open", "round": 3, "due": "2026-03-01T20:06:00+00:00", "expect": {"round": 2, "phase": "answered"}}
    assert lifetime.late_step({**asked, "until": None}, "b", T0)["due"] == "2026-03-01T20:06:00+00:00"


def test_an_open_round_that_never_listed_is_given_up_after_a_quarter_hour():
    item = {"round": 1, "phase": "open", "due": "2026-03-01T20:06:00+00:00", "opened_by": "a", "launches": ["a"]}
    edge = datetime(2026, 3, 1, 20, 21, tzinfo=UTC)
    assert lifetime.late_step(item, "b", edge) == {"do": "join", "round": 1}
    assert lifetime.late_step(item, "b", edge + timedelta(seconds=1)) == {
        "do": "open", "round": 2, "due": "2026-03-01T20:22:01+00:00", "expect": {"round": 1, "phase": "open"}}


def test_a_long_request_id_is_cut_so_its_late_round_s_name_is_80_characters_exactly():
    assert lifetime.expiry_execution_name("r" * 80, "1") == "r" * 69 + "-r1-expired"
    assert lifetime.expiry_execution_name("r" * 80, "12") == "r" * 68 + "-r12-expired"
    assert lifetime.late_round_of("r" * 80, "r" * 68 + "-r12-expired") == 12


def test_a_teardown_is_a_late_round_only_by_its_exact_name():
    assert lifetime.late_round_of("my-run", "my-run-r3-expired") == 3
    assert lifetime.late_round_of("my-run", "my-run-expired") is None
    assert lifetime.late_round_of("my-run", "other-r3-expired") is None
    assert lifetime.late_round_of("my-run", "my-run-r3-expired-x") is None
    assert lifetime.late_round_of("my-run", lifetime.expiry_execution_name("my-run", "12")) == 12


TIMEOUT = timedelta(hours=24)
steps = st.lists(st.tuples(st.sampled_from(["launch", "fire", "answer"]), st.integers(min_value=0, max_value=3 * 3600)),
                 max_size=30)


@given(steps)
def test_a_request_never_has_two_late_rounds_asking_and_every_late_launch_is_asked_about(events):
    """A model of the launches, the rounds' schedules coming due (each teardown lists every instance
    recorded by then and asks until answered or its deadline), and answers, driven through
    late_step and the item's conditional writes."""
    state = {"item": None}
    due, asking, listed_at, launched = {}, {}, {}, {}

    def come_due(until: datetime) -> None:
        for n in sorted((k for k in due if k not in listed_at and due[k] <= until), key=lambda k: due[k]):
            moment = due[n]
            assert all(end <= moment for end in asking.values()), (n, moment, asking)
            listed_at[n], asking[n] = moment, moment + TIMEOUT
            item = state["item"]
            if item["round"] == n and item["phase"] == "open":
                state["item"] = {**item, "phase": "asked", "until": asking[n].isoformat()}

    now = T0
    for number, (kind, wait) in enumerate(events):
        now += timedelta(seconds=wait)
        come_due(now)
        item = state["item"]
        if kind == "launch":
            token = f"t{number}"
            launched[token] = now
            step = lifetime.late_step(item, token, now)
            if step["do"] == "join":
                state["item"] = {**item, "launches": [*item["launches"], token]}
            elif step["do"] == "open":
                assert step["expect"] == (None if item is None else {"round": item["round"], "phase": item["phase"]})
                state["item"] = {"round": step["round"], "phase": "open", "due": step["due"], "opened_by": token,
                                 "launches": [*(item or {}).get("launches", []), token]}
                due[step["round"]] = datetime.fromisoformat(step["due"])
        elif kind == "answer":
            for n in [k for k, end in asking.items() if end > now]:
                asking[n] = now
                if item["round"] == n and item["phase"] in ("open", "asked"):
                    state["item"] = {**item, "phase": "answered"}
                elif item["round"] > n and item["phase"] == "open":  # the decision brings the next forward
                    due[item["round"]] = min(due[item["round"]], now + timedelta(minutes=1))
    come_due(now + 400 * TIMEOUT)  # time runs on: every round comes due and asks
    assert set(listed_at) == set(due)
    for token, at in launched.items():
        assert any(moment >= at for moment in listed_at.values()), (token, at, listed_at)
