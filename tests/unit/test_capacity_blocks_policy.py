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
