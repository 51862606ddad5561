"""What `gpufill status` says a request costs now and has cost so far (policy/spend.py): an
instance's spend runs from its own launch to now or to its end, at its recorded price or the
catalog's (marked estimated); a Capacity Block's spend is its upfront fee, counted once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufill import catalog
from gpufill.policy import spend

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
G6 = "g6.xlarge"
EAST = "us-east-1"


def at(hours_ago: float) -> str:
    return (NOW - timedelta(hours=hours_ago)).isoformat()


def instance(n: int, state: str = "running", *, request: str = "r1", price: float | None = 0.5, launched: float | None = 2,
             ended: float | None = None, **extra) -> dict:
    found = {"instance_id": f"i-{n}", "request_id": request, "region": EAST, "instance_type": G6, "state": state,
             "hourly_price": price, "launched_at": None if launched is None else at(launched),
             "ended_at": None if ended is None else at(ended), **extra}
    return found


def view(*instances: dict, **fields) -> dict:
    return {"generated_at": NOW.isoformat(), "instances": list(instances), **fields}


def one(status: dict, request_id: str = "r1") -> dict:
    return next(e for e in spend.requests(status) if e["request_id"] == request_id)


# --- an instance: its recorded price from its own launch ---------------------------------------


def test_a_running_instance_costs_its_price_from_its_launch_to_now():
    entry = one(view(instance(1, price=0.5, launched=2), instance(2, price=0.25, launched=4)))
    assert entry["spent"] == 2.0  # 0.5 x 2 h + 0.25 x 4 h
    assert entry["hourly_cost"] == 0.75 and entry["running"] == 2
    assert entry["counts"] == {"running": 2} and entry["ended"] is False
    assert entry["estimated"] is False and entry["price_unknown"] == 0
    assert entry["first_launch"] == at(4)


def test_an_ended_instance_costs_its_price_from_launch_to_the_end_gpufill_saw():
    entry = one(view(instance(1, "terminated", price=0.5, launched=5, ended=2)))
    assert entry["spent"] == 1.5 and entry["hourly_cost"] == 0.0
    assert entry["ended"] is True and entry["running"] == 0


@pytest.mark.parametrize("state", ["terminated", "gone"])
def test_an_instance_whose_end_is_unknown_adds_nothing(state):
    entry = one(view(instance(1, state, price=0.5, launched=5)))
    assert entry["spent"] == 0.0 and entry["ended"] is True


@pytest.mark.parametrize("state", ["pending", "stopping", "shutting-down"])
def test_an_instance_starting_or_stopping_is_paid_for_but_not_counted_as_paying_now(state):
    entry = one(view(instance(1, state, price=0.5, launched=2)))
    assert entry["spent"] == 1.0 and entry["hourly_cost"] == 0.0 and entry["ended"] is False


def test_a_stopped_instance_is_not_billed_at_its_hourly_price():
    entry = one(view(instance(1, "stopped", price=0.5, launched=2)))
    assert entry["spent"] == 0.0 and entry["hourly_cost"] == 0.0
    assert entry["counts"] == {"stopped": 1} and entry["ended"] is False


def test_an_instance_without_a_launch_time_or_launched_after_the_view_adds_nothing():
    entry = one(view(instance(1, launched=None), instance(2, launched=-1), instance(3, launched=None)))
    assert entry["spent"] == 0.0 and entry["hourly_cost"] == 1.5 and entry["first_launch"] == at(-1)


def test_an_instance_without_a_recorded_price_is_counted_at_the_catalog_price_and_marked_estimated():
    listed = catalog.on_demand_price(G6, EAST)
    assert listed is not None
    assert spend.rate({"instance_type": G6, "region": EAST}) == (listed, True)
    entry = one(view(instance(1, price=None, launched=2)))
    assert entry["hourly_cost"] == round(listed, 4) and entry["spent"] == round(2 * listed, 4)
    assert entry["estimated"] is True


def test_an_estimate_that_adds_nothing_does_not_mark_the_request_estimated():
    assert one(view(instance(1, "terminated", price=None, launched=2)))["estimated"] is False
    assert one(view(instance(1, "terminated", price=None, launched=1.5, ended=1)))["estimated"] is True  # under $1
    assert one(view(instance(1, "stopped", price=None, launched=3)))["estimated"] is False
    # One estimated instance marks the request however many are priced.
    assert one(view(instance(1, price=None), instance(2, price=0.5)))["estimated"] is True


def test_a_running_instance_without_any_price_is_counted_as_unknown():
    unknown = {"instance_type": "x9.unknown", "region": EAST}
    assert spend.rate(unknown) == (None, False)
    assert spend.rate({"region": EAST}) == (None, False) and spend.rate({"instance_type": G6}) == (None, False)
    entry = one(view(instance(1, price=None, **unknown), instance(2, "terminated", price=None, **unknown),
                     instance(3, price=None, **unknown)))
    assert entry["price_unknown"] == 2 and entry["hourly_cost"] == 0.0 and entry["spent"] == 0.0
    assert entry["estimated"] is False


def test_a_recorded_price_is_a_float_and_rates_and_spend_are_rounded_to_four_places():
    assert spend.rate({"hourly_price": 2}) == (2.0, False) and isinstance(spend.rate({"hourly_price": 2})[0], float)
    entry = one(view(instance(1, price=0.123456, launched=1)))
    assert entry["hourly_cost"] == 0.1235 and entry["spent"] == 0.1235


# --- a Capacity Block: its fee, once ------------------------------------------------------------


def block_instance(n: int, state: str = "running", *, block: str = "cr-1", fee: float = 1390, **extra) -> dict:
    # The recorded price spreads the fee over the block's instance-hours; the fee is what was paid.
    return instance(n, state, price=28.9583, launched=50, capacity_reservation_id=block, capacity_block_fee=fee, **extra)


def test_a_capacity_block_costs_its_upfront_fee_once_however_long_and_many_instances_run_in_it():
    entry = one(view(block_instance(1), block_instance(2)))
    assert entry["spent"] == 1390.0
    assert entry["hourly_cost"] == 0.0  # paid upfront: nothing more accrues by the hour
    assert entry["capacity_blocks"] == [{"capacity_reservation_id": "cr-1", "upfront_fee": 1390.0}]
    assert spend.rate(block_instance(1)) == (0.0, False)


def test_each_block_of_a_request_counts_once_and_its_other_instances_by_the_hour():
    entry = one(view(block_instance(1, block="cr-b", fee=900), block_instance(2, "terminated", block="cr-a", fee=1390.5),
                     block_instance(3, "gone", block="cr-a", fee=1390.5), instance(4, price=0.5, launched=2)))
    assert entry["spent"] == 2291.5
    assert entry["capacity_blocks"] == [{"capacity_reservation_id": "cr-a", "upfront_fee": 1390.5},
                                        {"capacity_reservation_id": "cr-b", "upfront_fee": 900.0}]
    assert entry["hourly_cost"] == 0.5


def test_a_fee_without_its_block_or_a_fee_that_is_no_number_is_no_block():
    assert spend.block_fee({"capacity_block_fee": 100}) is None
    assert spend.block_fee({"capacity_block_fee": "100", "capacity_reservation_id": "cr-1"}) is None
    assert spend.block_fee({"capacity_block_fee": 100, "capacity_reservation_id": "cr-1"}) == 100.0
    assert one(view(instance(1, price=0.5, launched=2, capacity_block_fee=100)))["spent"] == 1.0


def test_a_block_bought_before_anything_runs_in_it_is_spent_and_keeps_the_request_shown():
    held = [{"request_id": "r2", "capacity_reservation_id": "cr-9", "upfront_fee": 1390}]
    entry = one(view(capacity_blocks=held), "r2")
    assert entry["spent"] == 1390.0 and entry["counts"] == {} and entry["ended"] is False
    assert (entry["hourly_cost"], entry["running"], entry["first_launch"]) == (0.0, 0, None)
    assert (entry["estimated"], entry["price_unknown"]) == (False, 0)
    # Once its instances run, the same block is still paid once, on the request's one line.
    [entry] = spend.requests(view(block_instance(1, block="cr-9", request="r2"), capacity_blocks=held))
    assert entry["spent"] == 1390.0 and entry["request_id"] == "r2"
    # Its instances all ended: the request has ended, its fee stays spent.
    ended = one(view(block_instance(1, "terminated", block="cr-9", request="r2")), "r2")
    assert ended["ended"] is True and ended["spent"] == 1390.0


# --- the view as a whole ------------------------------------------------------------------------


def test_counts_come_from_by_request_and_an_instance_it_leaves_out_is_counted_as_listed():
    status = view(instance(1, request="big"), instance(2, request="small"), instance(3, request=None),
                  by_request={"big": {"running": 150, "terminated": 3}})
    entries = {e["request_id"]: e for e in spend.requests(status)}
    assert entries["big"]["counts"] == {"running": 150, "terminated": 3} and entries["big"]["running"] == 150
    assert entries["small"]["counts"] == {"running": 1}
    assert entries["?"]["counts"] == {"running": 1}  # no request id: still shown, as "?"


def test_counts_are_sorted_by_state():
    entry = one(view(instance(1, "terminated", ended=1), instance(2), instance(3, "pending"), instance(4)))
    assert list(entry["counts"].items()) == [("pending", 1), ("running", 2), ("terminated", 1)]


def test_requests_still_paying_come_first_dearest_first_then_by_id():
    status = view(instance(1, request="cheap", price=0.1), instance(2, request="dear", price=9.0),
                  instance(3, request="also-cheap", price=0.1), instance(4, "terminated", request="done", price=99.0))
    assert [e["request_id"] for e in spend.requests(status)] == ["dear", "also-cheap", "cheap", "done"]


def test_now_is_the_views_own_time_or_the_one_given():
    status = {"instances": [instance(1, price=1.0, launched=2)], "generated_at": NOW.isoformat().replace("+00:00", "Z")}
    assert one(status)["spent"] == 2.0
    assert spend.requests(status, now=NOW + timedelta(hours=1))[0]["spent"] == 3.0


def test_a_view_without_a_usable_time_is_read_at_the_current_time():
    launched = datetime.now(UTC) - timedelta(hours=1)
    status = {"instances": [{**instance(1, price=1.0), "launched_at": launched.isoformat()}], "generated_at": "not a time"}
    assert 0.99 < one(status)["spent"] < 1.1
    assert 0.99 < one({**status, "generated_at": None})["spent"] < 1.1


def test_a_time_without_a_zone_is_read_in_local_time():
    local = NOW.astimezone().replace(tzinfo=None)
    status = view({**instance(1, price=1.0), "launched_at": (local - timedelta(hours=2)).isoformat()})
    assert one(status)["spent"] == 2.0


def test_an_unreadable_launch_or_end_time_adds_nothing():
    assert one(view({**instance(1, price=1.0), "launched_at": "yesterday"}))["spent"] == 0.0
    assert one(view({**instance(1, "terminated", price=1.0), "ended_at": "soon"}))["spent"] == 0.0


@settings(max_examples=40)
@given(st.lists(st.tuples(st.sampled_from(["running", "pending", "stopped", "terminated", "gone"]),
                          st.floats(0.01, 50), st.floats(0, 100), st.booleans()), max_size=8),
       st.floats(100, 100000))
def test_a_block_adds_its_fee_once_to_whatever_else_the_request_spent(instances, fee):
    """However many instances run in a block and for how long, the request's spend is its other
    instances' spend plus the fee, once."""
    others = [instance(n, state, price=price, launched=hours, ended=0 if state == "terminated" else None)
              for n, (state, price, hours, _) in enumerate(instances)]
    inside = [block_instance(100 + n, state, fee=fee) for n, (state, _, _, in_block) in enumerate(instances) if in_block]
    alone = one(view(*others))["spent"] if others else 0.0
    entry = one(view(*others, *inside)) if others or inside else None
    if inside:
        assert entry["spent"] == pytest.approx(alone + fee, abs=1e-3)
    elif entry is not None:
        assert entry["spent"] == alone
