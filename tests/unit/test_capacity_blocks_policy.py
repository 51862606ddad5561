"""Capacity Blocks for ML: AWS's rules on a request's capacity_block, and which offering a run
buys (policy/capacity_blocks.py, models/request.py)."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gpufill.models.request import Request, RequestProblems, describe_problems, normalise
from gpufill.models.capacity_block_rules import ALLOWED_DURATIONS_HOURS
from gpufill.policy.capacity_blocks import (
    Ask,
    Offering,
    block_count,
    choose,
    no_capacity_block_cause,
    why_not,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
WEST, EAST = "us-west-2", "us-east-1"
P5 = "p5.48xlarge"
BLOCK = {"max_upfront_usd": 10000, "duration_hours": 24, "start_within": "P14D"}


def problems(**fields):
    try:
        Request(**fields)
    except (ValidationError, RequestProblems) as error:
        return {p["field"]: p["problem"] for p in describe_problems(error)}
    return {}


def ask(**overrides):
    fields = dict(
        instance_types=("p5.48xlarge",), regions=(WEST, EAST), count=2, duration_hours=24,
        earliest_start=NOW, latest_start=NOW + timedelta(days=14), max_upfront_usd=10000.0,
    )
    return Ask(**{**fields, **overrides})


def offer(n, fee, *, region=WEST, start_days=1.0, count=2, hours=24, itype="p5.48xlarge", currency="USD", minutes=0,
          span=None):
    start = NOW + timedelta(days=start_days)
    return Offering(
        offering_id=f"cb-{n:017x}", region=region, availability_zone=f"{region}a", instance_type=itype,
        instance_count=count, start=start, end=start + (span or timedelta(hours=hours, minutes=minutes)),
        duration_hours=hours, duration_minutes=minutes, upfront_fee=fee, currency=currency,
    )


# --- AWS's rules on the request ------------------------------------------------------------


def test_durations_are_whole_days_to_14_then_weeks_to_182_days():
    assert ALLOWED_DURATIONS_HOURS[:3] == (24, 48, 72)
    assert 336 in ALLOWED_DURATIONS_HOURS and 360 not in ALLOWED_DURATIONS_HOURS
    assert 504 in ALLOWED_DURATIONS_HOURS and ALLOWED_DURATIONS_HOURS[-1] == 182 * 24


def test_a_valid_capacity_block_is_carried_to_the_run_with_its_window_in_seconds():
    request = normalise(Request(count=4, capacity_block=BLOCK), request_id="r", default_regions=[WEST], home_region=EAST)
    assert request.capacity_block.duration_hours == 24
    assert request.capacity_block.start_within_seconds == 14 * 86400
    assert request.capacity_block.max_upfront_usd == 10000.0


@pytest.mark.parametrize(
    ("block", "field", "words"),
    [
        ({**BLOCK, "duration_hours": 30}, "capacity_block.duration_hours", "whole days"),
        ({**BLOCK, "duration_hours": 360}, "capacity_block.duration_hours", "7-day steps"),
        ({**BLOCK, "duration_hours": 183 * 24}, "capacity_block.duration_hours", "from 24"),
        ({**BLOCK, "start_within": "P57D"}, "capacity_block.start_within", "8 weeks"),
        ({**BLOCK, "start_within": 3600}, "capacity_block.start_within", "ISO 8601"),
        ({**BLOCK, "max_upfront_usd": 0}, "capacity_block.max_upfront_usd", "greater than 0"),
        ({**BLOCK, "max_upfront_usd": "5000"}, "capacity_block.max_upfront_usd", "number"),
        ({"duration_hours": 24, "start_within": "P1D"}, "capacity_block.max_upfront_usd", "required"),
        ({**BLOCK, "budget": 1}, "capacity_block.budget", "unknown field"),
    ],
)
def test_a_block_aws_would_not_sell_is_refused_naming_the_field(block, field, words):
    found = problems(count=2, capacity_block=block)
    assert field in found and words.lower() in found[field].lower(), found


def test_the_count_must_be_a_block_size_and_the_market_needs_the_block():
    assert "1, 2, 4, 8, 16, 32 or 64" in problems(count=6, capacity_block=BLOCK)["count"]
    assert "needs capacity_block" in problems(count=2, market="capacity-block")["capacity_block"]
    assert problems(count=64, market="capacity-block", capacity_block=BLOCK) == {}


def test_capacity_block_does_not_go_with_reservations_only_or_teardown():
    assert "reservations alone" in problems(count=2, capacity_block=BLOCK, capacity_reservations="only")["capacity_block"]
    assert "only goes with action" in problems(action="teardown", request_id="r", capacity_block=BLOCK)["capacity_block"]


def test_a_partly_filled_run_buys_the_smallest_block_that_holds_the_rest():
    assert [block_count(n) for n in (1, 3, 5, 64, 65)] == [1, 4, 8, 64, None]


# --- the pick --------------------------------------------------------------------------------


def test_the_lowest_upfront_fee_across_regions_is_picked():
    choice = choose([offer(1, 9000), offer(2, 7000, region=EAST), offer(3, 8000)], ask())
    assert choice.picked.offering_id == offer(2, 7000).offering_id
    assert choice.picked.region == EAST


def test_a_tie_in_fee_goes_to_the_earliest_start():
    choice = choose([offer(1, 7000, start_days=5), offer(2, 7000, start_days=2, region=EAST)], ask())
    assert choice.picked.offering_id == offer(2, 7000).offering_id


def test_offerings_that_do_not_fit_are_listed_with_their_reason():
    offers = [
        offer(1, 20000),
        offer(2, 100, count=4),
        offer(3, 100, hours=48),
        offer(4, 100, start_days=20),
        offer(5, 100, itype="p4d.24xlarge"),
        offer(6, 100, region="eu-central-1"),
        offer(7, 100, currency="EUR"),
    ]
    choice = choose(offers, ask())
    assert choice.picked is None
    reasons = {s.offering.offering_id[-1]: s.why_not for s in choice.seen}
    assert "above max_upfront_usd" in reasons["1"]
    assert "block of 2" in reasons["2"]
    assert "a day or more beyond the 24 hours asked" in reasons["3"]
    assert "after start_within" in reasons["4"]
    assert "not a requested type" in reasons["5"]
    assert "not a candidate region" in reasons["6"]
    assert "US dollars" in reasons["7"]


def test_blocks_end_at_1130_utc_so_one_lasting_hours_and_minutes_fits_when_it_covers_the_ask_within_a_day():
    # AWS offers, for an asked 24 hours, blocks slightly shorter and slightly longer (each ends at 11:30 UTC).
    longer, shorter, day_more = offer(1, 100, hours=25, minutes=30), offer(2, 90, hours=22, minutes=35), offer(3, 80, hours=48)
    choice = choose([longer, shorter, day_more], ask())
    assert choice.picked == longer
    reasons = {s.offering.offering_id[-1]: s.why_not for s in choice.seen}
    assert reasons["2"] == "lasts 22 h 35 min, less than the 24 hours asked"
    assert reasons["3"] == "lasts 48 h, a day or more beyond the 24 hours asked"
    assert why_not(offer(4, 1, hours=47, minutes=59), ask()) is None
    assert why_not(offer(5, 1, hours=24), ask()) is None


def test_an_offering_in_several_segments_is_refused_with_its_reason():
    # Its dates span 30 hours but it holds 24: not one block gpufill can launch into.
    split = offer(1, 100, hours=24, span=timedelta(hours=30))
    assert choose([split], ask()).picked is None
    assert why_not(split, ask()) == (
        "runs in several segments: 2026-12-05T12:00:00Z to 2026-12-06T18:00:00Z spans 30 h but it holds 24 h of capacity"
    )


def test_the_no_capacity_block_cause_names_every_offer_and_the_budget():
    cause = json.loads(no_capacity_block_cause(choose([offer(1, 20000), offer(2, 15000)], ask()), ask(), request_id="r"))
    assert cause["error"] == "NO_CAPACITY_BLOCK"
    assert [o["upfront_fee"] for o in cause["offered"]] == [15000, 20000]
    assert all("above max_upfront_usd" in o["why_not"] for o in cause["offered"])
    assert "$15,000.00" in cause["message"] and cause["asked"]["max_upfront_usd"] == 10000.0
    empty = json.loads(no_capacity_block_cause(choose([], ask()), ask(), request_id="r"))
    assert empty["offered"] == [] and "Nothing was bought" in empty["message"]


offers_strategy = st.lists(
    st.builds(
        offer,
        st.integers(0, 10_000),
        st.floats(1, 30000, allow_nan=False),
        region=st.sampled_from([WEST, EAST, "eu-central-1"]),
        start_days=st.floats(-1, 30),
        count=st.sampled_from([1, 2, 4]),
        hours=st.sampled_from([22, 24, 25, 47, 48]),
        minutes=st.integers(0, 59),
        itype=st.sampled_from(["p5.48xlarge", "p4d.24xlarge"]),
    ),
    max_size=12,
    unique_by=lambda o: o.offering_id,
)


@given(offers=offers_strategy, budget=st.floats(1, 30000, allow_nan=False))
def test_the_pick_never_exceeds_the_budget_never_misfits_and_is_the_cheapest_fit(offers, budget):
    wanted = ask(max_upfront_usd=budget)
    choice = choose(offers, wanted)
    fitting = [o for o in offers if why_not(o, wanted) is None]
    if choice.picked is None:
        assert fitting == []
        return
    assert choice.picked.upfront_fee <= budget
    assert why_not(choice.picked, wanted) is None
    assert choice.picked.upfront_fee == min(o.upfront_fee for o in fitting)
    # It covers the asked duration, and by less than a day more.
    assert timedelta(hours=24) <= choice.picked.lasts < timedelta(hours=48)
    assert {s.offering.offering_id for s in choice.seen} == {o.offering_id for o in offers}


def test_status_says_which_block_a_request_holds_until_its_start_and_then_runs_in():
    from gpufill.policy.waiting import view_line

    held = {"capacity_reservation_id": "cr-0123456789abcdef0", "instance_count": 2, "instance_type": P5,
            "availability_zone": "us-east-2a", "start": "2026-12-06T11:30:00Z", "end": "2026-12-07T11:30:00Z",
            "execution": "r1"}
    waiting = view_line({"phase": "capacity-block", **held})
    assert "holds Capacity Block cr-0123456789abcdef0 (2 x p5.48xlarge in us-east-2a)" in waiting
    assert "from 2026-12-06T11:30:00Z to 2026-12-07T11:30:00Z; r1 launches into it at its start" in waiting
    assert "until 2026-12-07T11:30:00Z" in view_line({"phase": "capacity-block-in-use", **held})
    assert "paid" not in waiting
    assert view_line({"phase": "capacity-block-payment", **held}).endswith(
        "its payment is pending, and r1 looks again every minute")
    assert "(PURCHASE_FAILED)" in view_line({"phase": "capacity-block-payment-failed", **held})
    stopped = view_line({"phase": "capacity-block-stopped", "stopped_by": "down-1", **held})
    assert stopped.startswith("the launch into Capacity Block cr-0123456789abcdef0 was stopped by teardown down-1")


@pytest.mark.parametrize(("state", "said"), [("payment-pending", "pending"), ("payment-failed", "failed"),
                                             ("scheduled", "paid"), ("active", "paid"), (None, "paid")])
def test_a_blocks_state_says_whether_its_payment_is_pending_failed_or_through(state, said):
    from gpufill.policy.capacity_blocks import payment

    assert payment(state) == said


def test_a_failed_payment_names_the_block_and_what_still_runs():
    from gpufill.policy.capacity_blocks import purchase_failed_cause

    held = {"capacity_reservation_id": "cr-0123456789abcdef0", "instance_count": 2, "instance_type": P5,
            "availability_zone": "us-east-2a", "start": "2026-12-06T11:30:00Z", "end": "2026-12-07T11:30:00Z",
            "upfront_fee": 1390.0}
    cause = json.loads(purchase_failed_cause(held, request_id="r1", kept=[]))
    assert cause["error"] == "PURCHASE_FAILED" and cause["capacity_block"] == {**held, "payment": "failed"}
    assert cause["message"] == (
        "The upfront payment for Capacity Block cr-0123456789abcdef0 (2 x p5.48xlarge in us-east-2a, from "
        "2026-12-06T11:30:00Z to 2026-12-07T11:30:00Z, upfront fee $1,390.00) failed (payment-failed): EC2 releases "
        "the block, and nothing was launched into it."
    )
    kept = json.loads(purchase_failed_cause(held, request_id="r1", kept=[{"instance_id": "i-1", "region": "us-east-2"}]))
    assert kept["instances"] == [{"instance_id": "i-1", "region": "us-east-2"}]
    assert kept["message"].endswith("The 1 instance(s) launched before the block still run: end them with gpufill teardown r1.")
    assert cause["request_id"] == "r1" and cause["instances"] == []
    assert cause["hint"] == "Check the account's payment method and limits for Capacity Blocks, then run the request again."


def test_a_proposed_block_says_its_length_in_hours_and_minutes_to_its_1130_utc_end():
    from gpufill.policy.capacity_blocks import describe_block

    shorter = {**PROPOSED, "end": "2026-12-06T11:05:00Z", "duration_hours": 23, "duration_minutes": 35}
    assert describe_block(shorter) == (
        "2 x p5.48xlarge in us-west-2a (us-west-2), from 2026-12-05T11:30:00Z to 2026-12-06T11:05:00Z (23 h 35 min), "
        "upfront fee $1,390.50")
    assert "(24 h)" in describe_block(PROPOSED)  # an offering without minutes lasts whole hours


def test_status_says_what_a_held_block_was_paid_and_counts_it_as_spent():
    from gpufill.policy.waiting import block_held, view_line

    held = {"capacity_reservation_id": "cr-1", "instance_count": 2, "instance_type": P5, "availability_zone": "us-east-2a",
            "start": "2026-12-06T11:30:00Z", "end": "2026-12-07T11:30:00Z", "execution": "r1", "upfront_fee": 1390.5}
    assert "to 2026-12-07T11:30:00Z, paid $1,390.50 upfront; r1 launches" in view_line({"phase": "capacity-block", **held})
    assert "until 2026-12-07T11:30:00Z, paid $1,390.50 upfront; its teardown" in view_line(
        {"phase": "capacity-block-in-use", **held})
    expected = {"request_id": "r1", "capacity_reservation_id": "cr-1", "upfront_fee": 1390.5}
    assert block_held("r1", {"phase": "capacity-block", **held}) == expected
    assert block_held("r1", {"phase": "capacity-block-in-use", **held, "upfront_fee": 1390}) == {**expected, "upfront_fee": 1390.0}
    assert isinstance(block_held("r1", {"phase": "capacity-block", **held, "upfront_fee": 1390})["upfront_fee"], float)
    assert block_held("r1", {"phase": "waiting", **held}) is None
    # Bought and paid, whatever became of the run: stopped by a teardown, tried again, ended unused.
    for phase in ("capacity-block-stopped", "capacity-block-trying", "capacity-block-ended"):
        assert block_held("r1", {"phase": phase, **held}) == expected
    # Not paid (yet): the payment pending, or failed (EC2 releases the block).
    assert block_held("r1", {"phase": "capacity-block-payment", **held}) is None
    assert block_held("r1", {"phase": "capacity-block-payment-failed", **held}) is None
    assert block_held("r1", {"phase": "capacity-block", **{k: v for k, v in held.items() if k != "upfront_fee"}}) is None
    assert block_held("r1", None) is None and block_held("r1", {}) is None


# --- the exact words and numbers a person reads (policy/capacity_blocks.py) ---------------------


def test_every_duration_aws_sells_and_no_other():
    from gpufill.models.capacity_block_rules import allowed_durations_hours, duration_problem

    daily, weekly = tuple(range(24, 14 * 24 + 1, 24)), tuple(range(21 * 24, 182 * 24 + 1, 7 * 24))
    assert allowed_durations_hours() == ALLOWED_DURATIONS_HOURS == daily + weekly
    assert all(duration_problem(h) is None for h in daily + weekly)
    assert duration_problem(25) == "must be whole days (a multiple of 24 hours) from 24 to 4368, got 25"
    assert duration_problem(360) == (
        "360 hours (15 days) is not a Capacity Block duration: past 14 days blocks come in 7-day steps "
        "(the nearest are 336 and 504)")
    assert "(the nearest are 504 and 672)" in duration_problem(528)
    assert "(the nearest are 4200 and 4368)" in duration_problem(4224)
    assert duration_problem(0) == "must be from 24 (1 day) to 4368 (182 days), got 0"
    assert duration_problem(4392) == "must be from 24 (1 day) to 4368 (182 days), got 4392"


def test_a_block_holds_a_power_of_two_up_to_64_instances():
    from gpufill.models.capacity_block_rules import count_problem

    assert [count_problem(n) for n in (1, 2, 4, 8, 16, 32, 64)] == [None] * 7
    assert count_problem(3) == "a Capacity Block holds 1, 2, 4, 8, 16, 32 or 64 instances, got 3"
    assert count_problem(128) is not None and count_problem(0) is not None
    assert [block_count(n) for n in (0, 2, 9, 33)] == [1, 2, 16, 64]


def test_each_reason_an_offering_is_refused_says_what_and_against_what():
    assert why_not(offer(1, 100, itype="p4d.24xlarge"), ask()) == "holds p4d.24xlarge, not a requested type"
    assert why_not(offer(1, 100, region="eu-central-1"), ask()) == "in eu-central-1, not a candidate region"
    assert why_not(offer(1, 100, count=4), ask()) == "holds 4 instances, the run needs a block of 2"
    assert why_not(offer(1, 100, hours=48), ask()) == "lasts 48 h, a day or more beyond the 24 hours asked"
    assert why_not(offer(1, 100, start_days=-1), ask()) == "starts 2026-12-03T12:00:00Z, before the run could use it"
    assert why_not(offer(1, 100, start_days=15), ask()) == (
        "starts 2026-12-19T12:00:00Z, after start_within (by 2026-12-18T12:00:00Z)")
    assert why_not(offer(1, 100, currency="EUR"), ask()) == "priced in EUR, max_upfront_usd is in US dollars"
    assert why_not(offer(1, 12345.5), ask()) == "upfront fee $12,345.50 is above max_upfront_usd $10,000.00"


def test_an_offering_at_the_edges_of_the_window_and_the_budget_fits():
    assert why_not(offer(1, 10000, start_days=0), ask()) is None
    assert why_not(offer(1, 10000, start_days=14), ask()) is None


def test_a_tie_in_fee_and_start_goes_to_the_requests_type_then_region_order_then_the_offering_id():
    types = ask(instance_types=("p4d.24xlarge", P5))
    assert choose([offer(1, 500), offer(2, 500, itype="p4d.24xlarge")], types).picked.offering_id == offer(2, 0).offering_id
    assert choose([offer(1, 500, region=EAST), offer(2, 500)], ask()).picked.offering_id == offer(2, 0).offering_id
    assert choose([offer(2, 500), offer(1, 500)], ask()).picked.offering_id == offer(1, 0).offering_id


def test_an_offering_listed_twice_is_seen_once_and_a_fitting_one_not_picked_says_what_was():
    choice = choose([offer(1, 700), offer(2, 600, region=EAST), offer(1, 700)], ask())
    assert [s.offering.offering_id for s in choice.seen] == [offer(2, 0).offering_id, offer(1, 0).offering_id]
    assert choice.seen[0].why_not is None
    assert choice.seen[1].why_not == (
        "fits, but $600.00 in us-east-1a starting 2026-12-05T12:00:00Z was picked (lower fee or earlier start)")


def test_an_offering_is_shown_with_its_times_in_utc_and_read_back_the_same():
    from gpufill.policy.capacity_blocks import from_shown, shown

    o = offer(7, 1390.5)
    found = shown(o)
    assert found == {"offering_id": o.offering_id, "region": WEST, "availability_zone": "us-west-2a", "instance_type": P5,
                     "instance_count": 2, "start": "2026-12-05T12:00:00Z", "end": "2026-12-06T12:00:00Z",
                     "duration_hours": 24, "duration_minutes": 0, "upfront_fee": 1390.5, "currency": "USD"}
    assert from_shown(found) == o
    assert from_shown({**found, "start": "2026-12-05T12:00:00+00:00", "extra": 1}) == o


def test_the_cause_when_nothing_was_offered_says_what_was_asked_and_where():
    wanted = ask(instance_types=(P5, "p4d.24xlarge"))
    cause = json.loads(no_capacity_block_cause(choose([], wanted), wanted, request_id="r9", regions_failed={EAST: "timed out"}))
    assert cause["message"] == (
        "No Capacity Block of 2 x p5.48xlarge or p4d.24xlarge for 24 hours was offered in us-west-2, us-east-1 "
        "starting by 2026-12-18T12:00:00Z. Nothing was bought.")
    assert cause["request_id"] == "r9" and cause["regions_not_answering"] == {EAST: "timed out"}
    assert cause["asked"] == {"instance_types": [P5, "p4d.24xlarge"], "regions": [WEST, EAST], "instance_count": 2,
                              "duration_hours": 24, "start_by": "2026-12-18T12:00:00Z", "max_upfront_usd": 10000.0}
    assert cause["offered"] == [] and cause["offered_not_listed"] == 0
    assert cause["hint"] == ("Raise max_upfront_usd to at least the fee of an offering listed, widen start_within (up to P56D), "
                             "choose another duration, or add regions and instance types.")


def test_the_cause_lists_at_most_forty_offerings_and_counts_the_rest():
    offers = [offer(n, 20000 + n) for n in range(45)]
    cause = json.loads(no_capacity_block_cause(choose(offers, ask()), ask(), request_id="r"))
    assert len(cause["offered"]) == 40 and cause["offered_not_listed"] == 5
    assert cause["offered"][0]["upfront_fee"] == 20000 and cause["offered"][0]["start"].endswith("Z")
    assert cause["regions_not_answering"] == {}
    assert cause["message"] == (
        "45 Capacity Block offering(s) seen, none fits: the cheapest was $20,000.00 against max_upfront_usd "
        "$10,000.00, and each one's reason is listed. Nothing was bought.")


def test_a_run_asks_for_a_block_of_what_it_still_misses_starting_within_its_window():
    from types import SimpleNamespace

    from gpufill.policy.capacity_blocks import ask_for

    block = SimpleNamespace(duration_hours=48, start_within_seconds=3 * 86400, max_upfront_usd=5000.0)
    request = SimpleNamespace(capacity_block=block, count=10, instance_types=[P5], regions=[WEST, EAST])
    wanted = ask_for(request, now=NOW, launched=3)
    assert wanted == Ask(instance_types=(P5,), regions=(WEST, EAST), count=8, duration_hours=48, earliest_start=NOW,
                         latest_start=NOW + timedelta(days=3), max_upfront_usd=5000.0)
    assert ask_for(request, now=NOW).count == 16
    assert ask_for(SimpleNamespace(**{**vars(request), "count": 2}), now=NOW).count == 2  # nothing launched yet
    assert ask_for(request, now=NOW, launched=10).count == 1  # a whole count launched still asks for the least
    assert ask_for(SimpleNamespace(**{**vars(request), "count": 100}), now=NOW) is None
    assert ask_for(SimpleNamespace(**{**vars(request), "capacity_block": None}), now=NOW) is None


PROPOSED = {"offering_id": "cb-0123", "region": WEST, "availability_zone": "us-west-2a", "instance_type": P5,
            "instance_count": 2, "start": "2026-12-05T11:30:00Z", "end": "2026-12-06T11:30:00Z", "duration_hours": 24,
            "upfront_fee": 1390.5}


def test_the_purchase_approval_says_what_is_bought_for_how_much_and_how_to_answer():
    from gpufill.policy.capacity_blocks import purchase_message

    commands = {"approve": "gpufill approve x", "reject": "gpufill reject x"}
    subject, body = purchase_message(PROPOSED, request_id="r1", commands=commands, expires=NOW)
    assert subject == "gpufill: approve buying a Capacity Block $1,390 for r1"
    assert body.splitlines() == [
        "Request r1 asks to BUY a Capacity Block for ML, paid upfront and not refundable:",
        "  region:         us-west-2",
        "  zone:           us-west-2a",
        "  instance type:  p5.48xlarge",
        "  instances:      2",
        "  start:          2026-12-05T11:30:00Z",
        "  end:            2026-12-06T11:30:00Z",
        "  upfront fee:    $1,390.50 USD",
        "  offering:       cb-0123",
        "This approval expires at 2026-12-04T12:00:00+00:00; after that nothing is bought.",
        "",
        "To approve:",
        "  gpufill approve x",
        "To reject:",
        "  gpufill reject x",
    ]
    long_subject, priced = purchase_message({**PROPOSED, "currency": "EUR"}, request_id="r" * 90, commands=commands, expires=NOW)
    assert len(long_subject) == 99  # SNS: a subject is under 100 characters
    assert "  upfront fee:    $1,390.50 EUR" in priced.splitlines()


@pytest.mark.parametrize(("error", "said"), [
    ("PURCHASE_REJECTED", 'the purchase approval was answered with something other than "approved"'),
    ("PURCHASE_EXPIRED", "nobody answered the purchase approval before its deadline"),
])
def test_a_purchase_not_approved_says_why_and_that_nothing_was_bought(error, said):
    from gpufill.policy.capacity_blocks import purchase_ended_cause

    cause = json.loads(purchase_ended_cause(error, PROPOSED, request_id="r1"))
    assert cause == {
        "error": error,
        "message": f"{said}: nothing was bought. Proposed: 2 x p5.48xlarge in us-west-2a (us-west-2), from "
                   "2026-12-05T11:30:00Z to 2026-12-06T11:30:00Z (24 h), upfront fee $1,390.50.",
        "request_id": "r1",
        "proposed": PROPOSED,
        "hint": "Run the request again to be asked again (offerings change); approve with gpufill approve EXECUTION.",
    }
