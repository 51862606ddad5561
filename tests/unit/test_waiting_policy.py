"""policy/waiting.py: the backoff between tries, the deadline, the hand-over to a new execution,
and what a waiting or expired request tells the user."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufill.constants import WAIT_FACTS_TTL_SECONDS
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import Attempt, Instance, Run, Waiting
from gpufill.policy import waiting

START = 1_780_000_000.0  # 2026-05-28T20:26:40Z


def wait(**fields) -> Waiting:
    return waiting.begin(3600, START).model_copy(update=fields)


def provision(**fields) -> ResolvedRequest:
    return ResolvedRequest(
        request_id="run-w", action="provision", instance_types=["g6.xlarge"], count=4, batch_max=4,
        launch_mode="partial", market="spot", on_demand_strategy="cost", origin_region="us-east-1",
        regions=["us-west-2"], tags={}, wait_for_capacity_seconds=3600, **fields,
    )


def machine(n: int, zone: str = "us-west-2a") -> Instance:
    return Instance(instance_id=f"i-{n:017x}", region=zone[:-1], availability_zone=zone, instance_type="g6.xlarge", market="spot")


def attempt(n: int, zone: str, outcome: str = "capacity", launched: int = 0) -> Attempt:
    return Attempt(number=n, region=zone[:-1], availability_zone=zone, instance_type="g6.xlarge", market="spot",
                   batch=4, launched=launched, outcome=outcome, reason="InsufficientInstanceCapacity" if outcome == "capacity" else None)


# --- the deadline --------------------------------------------------------------------------


def test_begin_fixes_an_absolute_deadline_and_counts_the_first_fill_as_try_one():
    begun = waiting.begin(21600, START)
    assert begun.deadline_epoch == START + 21600
    assert begun.deadline == "2026-05-29T02:26:40Z"
    assert (begun.tries, begun.tries_here, begun.generation, begun.delay_seconds, begun.next_try_at) == (1, 1, 0, 0, None)


def test_iso_is_utc_to_the_second():
    assert waiting.iso(0) == "1970-01-01T00:00:00Z"
    assert waiting.iso(START + 0.9) == "2026-05-28T20:26:40Z"


def test_the_deadline_is_reached_at_its_second_not_before():
    w = wait()
    assert not waiting.deadline_reached(w, START + 3599.999)
    assert waiting.deadline_reached(w, START + 3600)
    assert waiting.deadline_reached(w, START + 3601)


# --- the backoff ---------------------------------------------------------------------------


@pytest.mark.parametrize(("tries", "nominal"), [(0, 60), (1, 60), (2, 120), (3, 150), (40, 150), (10**6, 150)])
def test_nominal_delays_double_from_a_minute_to_at_most_150_s_by_default(tries, nominal):
    assert waiting.nominal_delay(tries) == nominal


@pytest.mark.parametrize(("first", "cap", "expected"), [
    (60, 900, [60, 120, 240, 480, 900, 900]), (60, 120, [60, 120, 120, 120, 120, 120]),
    (10, 10, [10] * 6), (30, 6 * 3600, [30, 60, 120, 240, 480, 960]),
])
def test_a_request_or_deployment_backoff_doubles_from_its_first_delay_up_to_its_cap(first, cap, expected):
    assert [waiting.nominal_delay(n, first, cap) for n in range(1, 7)] == expected


@pytest.mark.parametrize(("tries", "spread", "seconds"), [
    (1, 0.0, 60), (1, 0.5, 53), (1, 0.999999, 46), (2, 0.0, 120), (2, 0.5, 105), (5, 0.0, 150), (5, 0.999999, 113),
])
def test_jitter_takes_off_at_most_a_quarter(tries, spread, seconds):
    assert waiting.delay(tries, spread) == seconds


@pytest.mark.parametrize(("first", "cap", "deployment", "chosen"), [
    (None, None, (60, 300), (60, 300)),
    (None, None, (30, 900), (30, 900)),
    (20, None, (60, 300), (20, 300)),
    (600, None, (60, 300), (600, 600)),  # a first delay past the deployment's cap is also the cap
    (None, 120, (60, 300), (60, 120)),
    (None, 30, (60, 300), (30, 30)),  # a cap below the deployment's first delay is also the first
    (15, 45, (60, 300), (15, 45)),
])
def test_the_request_backoff_wins_and_the_pair_stays_ordered(first, cap, deployment, chosen):
    assert waiting.backoff(first, cap, deployment) == chosen


def test_the_deployment_backoff_is_read_from_the_environment_and_checked():
    assert waiting.deployment_backoff({}) == (60, 150)
    assert waiting.deployment_backoff({"WAIT_FIRST_DELAY_SECONDS": "30", "WAIT_MAX_DELAY_SECONDS": " 900 "}) == (30, 900)
    assert waiting.deployment_backoff({"WAIT_MAX_DELAY_SECONDS": ""}) == (60, 150)
    assert waiting.deployment_backoff({"WAIT_FIRST_DELAY_SECONDS": "10", "WAIT_MAX_DELAY_SECONDS": "21600"}) == (10, 21600)
    for bad in ("5", "0", "-60", "1.5", "PT5M", str(6 * 3600 + 1)):
        with pytest.raises(waiting.BadBackoffSetting, match=f"WAIT_MAX_DELAY_SECONDS is '{re.escape(bad)}': give whole seconds from 10 to 21600"):
            waiting.deployment_backoff({"WAIT_MAX_DELAY_SECONDS": bad})


def test_the_backoff_fixed_at_the_start_is_the_one_every_try_waits():
    begun = waiting.begin(24 * 3600, START, first_delay=30, max_delay=90)
    delays = []
    for tries in range(1, 6):
        _, after = waiting.next_try(begun.model_copy(update={"tries": tries}), now=START, spread=0.0, tries_per_execution=40,
                                    regions=3, attempts_total=6)
        delays.append(after.delay_seconds)
    assert delays == [30, 60, 90, 90, 90]
    assert (begun.first_delay_seconds, begun.max_delay_seconds) == (30, 90)


def test_jitter_is_fixed_by_the_request_and_the_try():
    assert waiting.jitter("run-w", 3) == waiting.jitter("run-w", 3)
    assert waiting.jitter("run-w", 3) != waiting.jitter("run-w", 4)
    assert waiting.jitter("run-w", 3) != waiting.jitter("run-x", 3)
    assert 0 <= waiting.jitter("run-w", 3) < 1


DELAYS = st.integers(min_value=10, max_value=6 * 3600)


@given(tries=st.integers(min_value=1, max_value=10_000), spread=st.floats(min_value=0, max_value=1, exclude_max=True),
       first=DELAYS, cap=DELAYS)
def test_every_delay_lies_within_three_quarters_and_all_of_its_capped_nominal(tries, spread, first, cap):
    first, cap = waiting.backoff(first, cap, (60, 300))
    nominal = waiting.nominal_delay(tries, first, cap)
    assert first * 3 // 4 <= nominal * 3 // 4 <= waiting.delay(tries, spread, first, cap) <= nominal <= cap


@given(tries=st.integers(min_value=1, max_value=50), first=DELAYS, cap=DELAYS)
def test_delays_never_shrink_from_one_try_to_the_next_before_jitter(tries, first, cap):
    first, cap = waiting.backoff(first, cap, (60, 300))
    assert waiting.nominal_delay(tries, first, cap) <= waiting.nominal_delay(tries + 1, first, cap)


# --- the next try --------------------------------------------------------------------------


def test_a_try_that_ends_short_before_the_deadline_waits_its_backoff():
    move, after = waiting.next_try(wait(tries=2, tries_here=2), now=START + 200, spread=0.0, tries_per_execution=40, regions=3, attempts_total=6)
    assert move == "retry"
    assert (after.delay_seconds, after.next_try_at) == (120, waiting.iso(START + 320))
    assert (after.tries, after.tries_here) == (2, 2)  # counted when the try starts


def test_the_last_wait_ends_on_the_deadline_never_after_it():
    move, after = waiting.next_try(wait(tries=6), now=START + 3500.5, spread=0.0, tries_per_execution=40, regions=3, attempts_total=6)
    assert move == "retry"
    assert (after.delay_seconds, after.next_try_at) == (99, waiting.iso(START + 3599.5))


def test_past_the_deadline_the_wait_expires_unchanged():
    before = wait(tries=7, delay_seconds=900, next_try_at="x")
    assert waiting.next_try(before, now=START + 3600, spread=0.0, tries_per_execution=40, regions=3, attempts_total=6) == ("expired", before)


def test_an_execution_hands_over_once_it_has_made_its_share_of_tries():
    assert waiting.next_try(wait(tries=9, tries_here=2), now=START, spread=0, tries_per_execution=3, regions=3, attempts_total=6)[0] == "retry"
    assert waiting.next_try(wait(tries=9, tries_here=3), now=START, spread=0, tries_per_execution=3, regions=3, attempts_total=6)[0] == "handover"
    assert waiting.next_try(wait(tries=9, tries_here=4), now=START, spread=0, tries_per_execution=3, regions=3, attempts_total=6)[0] == "handover"


@given(
    seconds=st.integers(min_value=1, max_value=7 * 24 * 3600),
    elapsed=st.floats(min_value=0, max_value=8 * 24 * 3600),
    tries=st.integers(min_value=1, max_value=1000),
    spread=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_a_scheduled_try_never_lies_past_the_deadline(seconds, elapsed, tries, spread):
    begun = waiting.begin(seconds, START).model_copy(update={"tries": tries})
    now = START + elapsed
    move, after = waiting.next_try(begun, now=now, spread=spread, tries_per_execution=40, regions=3, attempts_total=6)
    if now >= begun.deadline_epoch:
        assert move == "expired"
    else:
        assert move == "retry"
        assert 0 <= after.delay_seconds <= begun.max_delay_seconds
        assert now + after.delay_seconds <= begun.deadline_epoch


def test_the_facts_read_for_the_first_try_are_dated_at_acceptance():
    assert waiting.begin(3600, START).facts_read_at == START


@given(age=st.floats(min_value=0, max_value=10 * WAIT_FACTS_TTL_SECONDS), handover=st.booleans(),
       known=st.booleans())
def test_a_try_ranks_by_the_facts_it_holds_only_while_they_are_fresh_and_dates_every_read(age, handover, known):
    now = START + 10 * WAIT_FACTS_TTL_SECONDS
    held = wait(facts_read_at=now - age if known else None)
    route, after = waiting.next_try_route(held, now=now, handover=handover)
    fresh = known and age < WAIT_FACTS_TTL_SECONDS
    assert route == ("handover" if handover else "rank" if fresh else "prepare")
    # A try that reads the facts (here, or the successor on its start) records when; one that reuses them keeps their date.
    assert after.facts_read_at == (held.facts_read_at if route == "rank" else now)
    assert after.model_copy(update={"facts_read_at": None}) == held.model_copy(update={"facts_read_at": None})


def test_a_shorter_ttl_asked_for_reads_the_facts_sooner():
    held = wait(facts_read_at=START)
    assert waiting.next_try_route(held, now=START + 100, handover=False, ttl=60)[0] == "prepare"
    assert waiting.next_try_route(held, now=START + 100, handover=False)[0] == "rank"


def test_facts_are_due_at_their_ttl_or_when_their_age_is_unknown():
    assert waiting.facts_due(None) and waiting.facts_due(WAIT_FACTS_TTL_SECONDS)
    assert not waiting.facts_due(WAIT_FACTS_TTL_SECONDS - 1)
    assert waiting.facts_due(60, ttl=60) and not waiting.facts_due(59, ttl=60)


def test_starting_a_try_counts_it_here_and_across_the_chain():
    w = wait(tries=4, tries_here=2, generation=1, next_try_at="2026-05-28T20:30:00Z", attempts_before=10, events_here=500)
    started = waiting.begin_try(w, handover=False, attempts_total=16)
    assert (started.tries, started.tries_here, started.generation, started.next_try_at) == (5, 3, 1, None)
    assert (started.attempts_before, started.events_here) == (16, 500)
    handed = waiting.begin_try(w, handover=True, attempts_total=16)
    assert (handed.tries, handed.tries_here, handed.generation, handed.next_try_at) == (5, 1, 2, None)
    assert (handed.attempts_before, handed.events_here) == (16, waiting.EVENTS_AT_START)


def test_a_try_is_bounded_by_its_regions_and_attempts():
    assert waiting.try_events(0, 0) == 29
    assert waiting.try_events(3, 6) == 29 + 42 + 42
    assert waiting.try_events(1, 0) == 43 and waiting.try_events(0, 1) == 36
    # spot-then-on-demand: each region is prepared once per market, and the second market costs 16.
    assert waiting.try_events(3, 6, markets=2) == 29 + 16 + 21 * 3 + 42
    assert waiting.try_events(0, 0, markets=2) == 45 and waiting.try_events(1, 0, markets=2) == 45 + 21


def test_each_try_adds_its_bound_to_the_execution_s_events():
    first, after = waiting.next_try(wait(attempts_before=0), now=START, spread=0, tries_per_execution=40, regions=3, attempts_total=6)
    assert (first, after.events_here) == ("retry", waiting.EVENTS_AT_START + 113)
    second, again = waiting.next_try(
        after.model_copy(update={"attempts_before": 6}), now=START, spread=0, tries_per_execution=40, regions=3, attempts_total=8
    )
    assert (second, again.events_here) == ("retry", waiting.EVENTS_AT_START + 113 + 85)


def test_an_execution_hands_over_before_another_such_try_could_pass_the_history_budget():
    # A try of 15 regions and 600 attempts is bounded by 29 + 210 + 4200 = 4439 events.
    big = waiting.try_events(15, 600)
    fits = wait(events_here=20_000 - 2 * big)
    assert waiting.next_try(fits, now=START, spread=0, tries_per_execution=100, regions=15, attempts_total=600)[0] == "retry"
    over = wait(events_here=20_000 - 2 * big + 1)
    assert waiting.next_try(over, now=START, spread=0, tries_per_execution=100, regions=15, attempts_total=600)[0] == "handover"
    two = waiting.try_events(15, 600, markets=2)
    both = wait(events_here=20_000 - 2 * two)
    assert waiting.next_try(both, now=START, spread=0, tries_per_execution=100, regions=15, attempts_total=600, markets=2)[0] == "retry"
    assert waiting.next_try(
        both.model_copy(update={"events_here": both.events_here + 1}),
        now=START, spread=0, tries_per_execution=100, regions=15, attempts_total=600, markets=2,
    )[0] == "handover"


def test_successor_names_fit_step_functions_eighty_characters():
    assert waiting.successor_name("my-run", 1) == "my-run-c1"
    assert waiting.successor_name("my-run-c1", 2) == "my-run-c1-c2"
    long = "r" * 80
    assert waiting.successor_name(long, 12) == "r" * 76 + "-c12"
    assert len(waiting.successor_name("r" * 77, 3)) == 80
    assert waiting.successor_name("r" * 76, 3) == "r" * 76 + "-c3"


# --- what the user is told -----------------------------------------------------------------


def test_the_expired_cause_lists_what_was_kept_the_tries_the_pools_and_the_teardown():
    run = Run(batch=3, remaining=3, launched=1, instances=[machine(1)], wait=wait(tries=7), attempts_total=3)
    attempts = [attempt(1, "us-west-2a", "launched", 1), attempt(2, "us-west-2b"), attempt(3, "us-west-2a")]
    cause = json.loads(waiting.expired_cause(run, provision(), attempts))
    assert cause == {
        "error": "CAPACITY_WAIT_EXPIRED",
        "message": "Waited for capacity until 2026-05-28T21:26:40Z over 7 tries; 1 of 4 launched. "
        "What was launched is kept and still running.",
        "request_id": "run-w",
        "requested": 4,
        "launched": 1,
        "deadline": "2026-05-28T21:26:40Z",
        "tries": 7,
        "instances": [{"instance_id": "i-00000000000000001", "pool": "spot/us-west-2/us-west-2a/g6.xlarge"}],
        "pools_tried": [
            {"pool": "spot/us-west-2/us-west-2a/g6.xlarge", "outcome": "capacity", "reason": "InsufficientInstanceCapacity"},
            {"pool": "spot/us-west-2/us-west-2b/g6.xlarge", "outcome": "capacity", "reason": "InsufficientInstanceCapacity"},
        ],
        "teardown": {"action": "teardown", "request_id": "run-w"},
        "hint": "End the kept instances with `gpufill teardown run-w` (asks for approval), "
        "or keep them and start another run for the rest.",
    }


def test_an_expired_wait_that_launched_nothing_names_no_teardown():
    run = Run(batch=4, remaining=4, wait=wait(tries=2))
    cause = json.loads(waiting.expired_cause(run, provision(), [attempt(1, "us-west-2a")]))
    assert "teardown" not in cause and cause["instances"] == [] and cause["launched"] == 0
    assert cause["hint"] == "Nothing was launched. Try more regions or instance types, or a longer wait_for_capacity."


def test_an_expired_all_or_nothing_wait_keeps_nothing_and_says_how_many_it_handed_back():
    from gpufill.models.run import Gang

    run = Run(batch=4, remaining=4, wait=wait(tries=12), gang=Gang(rolled_back=12))
    cause = json.loads(waiting.expired_cause(run, provision(all_or_nothing=True), [attempt(1, "us-west-2a", "launched", 1)]))
    assert (cause["launched"], cause["instances"], cause["handed_back"]) == (0, [], 12) and "teardown" not in cause
    assert cause["message"].endswith(
        "0 of 4 launched. all_or_nothing: no try could launch the whole count, and each handed back what it launched "
        "(12 instance(s) terminated, recorded rolled_back); nothing keeps running.")
    assert cause["hint"] == (
        "Nothing keeps running: each try that could not launch all of them handed back what it launched. Try more "
        "regions or instance types, a longer wait_for_capacity, or leave out all_or_nothing to keep a partial fleet.")
    # Without a gang record nothing was handed back; without all_or_nothing nothing is said of it.
    assert json.loads(waiting.expired_cause(run.model_copy(update={"gang": None}), provision(all_or_nothing=True), []))["handed_back"] == 0
    assert "handed_back" not in json.loads(waiting.expired_cause(run, provision(), []))


def test_a_cause_with_thousands_of_pools_groups_them_and_stays_within_the_budget():
    zones = [f"{region}{z}" for region in ("us-west-2", "us-east-1", "eu-west-1") for z in "abcdef"]
    attempts = [
        Attempt(number=n, region=zone[:-1], availability_zone=zone, instance_type=f"type{t:03d}.xlarge", market="spot",
                batch=1, launched=0, outcome="capacity")
        for n, (zone, t) in enumerate(((z, t) for z in zones for t in range(40)), 1)
    ]
    kept = [machine(n) for n in range(250)]
    run = Run(batch=1, remaining=0, launched=250, instances=kept, wait=wait(tries=3))
    text = waiting.expired_cause(run, provision(), attempts)
    cause = json.loads(text)
    assert len(text) <= waiting.CAUSE_BUDGET
    assert len(cause["instances"]) == 250
    assert {"pools": "spot/us-west-2/type000.xlarge", "zones_tried": 6} in cause["pools_tried"]
    assert len(cause["pools_tried"]) == 3 * 40


def test_jitter_is_pinned_so_a_redeployed_step_waits_the_same():
    # The first 8 bytes of sha256("run-w#3"), big-endian, over 2**64.
    assert waiting.jitter("run-w", 3) == 0.7375247124644928
    assert waiting.jitter("a", 1) == 0.6243185559747767


def test_iso_says_utc_whatever_the_machine_s_time_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert waiting.iso(START) == "2026-05-28T20:26:40Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_cause_is_grouped_only_when_it_is_over_its_budget():
    run = Run(batch=1, remaining=3, launched=1, instances=[machine(1)], wait=wait(tries=2))
    attempts = [attempt(1, "us-west-2a"), attempt(2, "us-west-2b")]
    whole = waiting.expired_cause(run, provision(), attempts)
    at_budget = json.loads(waiting.expired_cause(run, provision(), attempts, budget=len(whole)))
    assert [p["pool"] for p in at_budget["pools_tried"]] == [
        "spot/us-west-2/us-west-2a/g6.xlarge", "spot/us-west-2/us-west-2b/g6.xlarge"]
    over = json.loads(waiting.expired_cause(run, provision(), attempts, budget=len(whole) - 1))
    assert over["pools_tried"] == [{"pools": "spot/us-west-2/g6.xlarge", "zones_tried": 2}]
    assert over["instances"] == at_budget["instances"]


# --- the status view's line for a wait item ------------------------------------------------


@pytest.mark.parametrize(("view", "line"), [
    (None, None),
    ({}, None),
    ({"phase": "waiting", "deadline": "T", "next_try_at": "T2", "tries": 3},
     "waiting for capacity until T; next try at T2; 3 tries so far"),
    ({"phase": "waiting", "deadline": "T", "next_try_at": "T2", "tries": 1},
     "waiting for capacity until T; next try at T2; 1 try so far"),
    ({"phase": "waiting", "deadline": "T", "next_try_at": "T2"},
     "waiting for capacity until T; next try at T2; 1 try so far"),
    ({"phase": "trying", "deadline": "T", "tries": 4, "execution": "r-c1"},
     "waiting for capacity until T; try 4 under way in r-c1; 4 tries so far"),
    ({"phase": "stopped", "stopped_by": "teardown-r", "tries": 5},
     "the wait for capacity was ended by teardown teardown-r after 5 tries"),
    ({"phase": "stopped", "stopped_by": "teardown-r", "tries": 1},
     "the wait for capacity was ended by teardown teardown-r after 1 try"),
    ({"phase": "expired", "deadline": "T", "tries": 9},
     "the wait for capacity expired at T after 9 tries (CAPACITY_WAIT_EXPIRED)"),
    ({"phase": "expired", "deadline": "T", "tries": 1},
     "the wait for capacity expired at T after 1 try (CAPACITY_WAIT_EXPIRED)"),
    ({"phase": "ended", "tries": 14}, "the wait for capacity ended: try 14 filled the request"),
    ({"phase": "something else", "tries": 2}, None),
])
def test_the_status_line_of_each_phase(view, line):
    assert waiting.view_line(view) == line


@pytest.mark.parametrize(("name", "kept"), [
    ("run-c1", True), ("run-c12", True), ("a-c0", True), ("run-c1-c2", True),
    ("run-c", False), ("-c1", False), ("run-cx", False), ("run-c1x", False), ("run", False), ("runc1", False),
    ("run-c١", False),  # an Arabic-Indic digit is a digit to str.isdigit, not to a name a run hands over to
])
def test_names_of_the_form_request_c_n_are_kept_for_continued_executions(name, kept):
    assert waiting.is_successor_name(name) is kept


@pytest.mark.parametrize(("deadline", "shown"), [
    (21600, "a number"), ("06:00:00", "'06:00:00'"), (True, "true"), ({"hours": 6}, "an object")])
def test_a_deadline_that_is_not_an_iso_duration_is_refused_saying_what_was_given(deadline, shown):
    from pydantic import ValidationError

    from gpufill.models.request import Request, describe_problems

    with pytest.raises(ValidationError) as refused:
        Request.model_validate({"wait_for_capacity": {"deadline": deadline}})
    assert describe_problems(refused.value) == [{
        "field": "wait_for_capacity.deadline",
        "problem": f"must be an ISO 8601 duration such as 'PT6H' or 'P2D', got {shown}",
    }]


def test_a_successor_is_this_runs_own_start_only_when_it_carries_the_same_request_and_run():
    sent = {"request": {"request_id": "r", "count": 4}, "run": {"launched": 1}}
    same = {waiting.CONTINUATION: sent, "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID": "arn:...:r"}
    assert waiting.handover(sent, same, exists=True) == "continued"
    assert waiting.handover(sent, None, exists=False) == "not_started"
    # Someone else's execution of the name: another input, no input of ours, or not JSON at all.
    other = {waiting.CONTINUATION: {**sent, "run": {"launched": 2}}}
    for found in (other, {"instance_type": "g6.xlarge"}, None, "text"):
        assert waiting.handover(sent, found, exists=True) == "name_taken"


def test_a_failed_hand_over_says_why_in_words_under_a_documented_name():
    taken = waiting.handover_failure("name_taken", "r-c1", {"Error": "StepFunctions.ExecutionAlreadyExistsException"},
                                     "2026-01-02T03:04:05+00:00")
    assert taken["Error"] == "ContinuationNameTaken"
    assert "r-c1 is held by another execution (started 2026-01-02T03:04:05+00:00)" in taken["Cause"]
    unstarted = waiting.handover_failure("not_started", "r-c1", {"Error": "StepFunctions.ServiceUnavailableException"})
    assert unstarted == {"Error": "ContinuationNotStarted", "Cause": (
        "The wait could not continue: starting r-c1 failed (StepFunctions.ServiceUnavailableException) and no "
        "execution of that name exists, so nothing goes on with the request.")}


def test_status_says_a_failed_wait_ended_and_where():
    line = waiting.view_line({"phase": "failed", "execution": "r-c1", "error": "Lambda.ServiceException", "tries": 1})
    assert line == ("the wait for capacity ended: r-c1 failed (Lambda.ServiceException) after 1 try; "
                    "its cause names every instance kept")


def test_status_says_a_failed_wait_counted_its_tries():
    line = waiting.view_line({"phase": "failed", "execution": "r-c1", "error": "Lambda.ServiceException", "tries": 3})
    assert "failed (Lambda.ServiceException) after 3 tries; " in line


def test_status_says_which_block_a_request_runs_in_and_until_when():
    line = waiting.view_line({"phase": "capacity-block-in-use", "capacity_reservation_id": "cr-1", "availability_zone": "us-east-2a",
                              "end": "2026-12-07T11:30:00Z"})
    assert line == ("runs in Capacity Block cr-1 (us-east-2a) until 2026-12-07T11:30:00Z; its teardown is asked an hour "
                    "before, and EC2 ends what still runs 30 minutes before")
