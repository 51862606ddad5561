"""Which capacity reservations a run uses, how many instances each takes, and how the fill loop
keeps within what it planned (policy/reservations.py, policy/fill.py)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufill.models.request import Request, normalise
from gpufill.models.run import Instance, LaunchResult, RegionLaunch
from gpufill.policy import fill
from gpufill.policy.exhaustion import no_reservation_room_cause
from gpufill.policy.reservations import Reservation, first_market, pools, plan, read_again

WEST, EAST = "us-west-2", "us-east-1"


def request(**fields):
    return normalise(
        Request(**{"count": 4, "instance_types": ["g6.xlarge", "g5.xlarge"], "regions": [WEST, EAST], **fields}),
        request_id="r", default_regions=[WEST], home_region=EAST,
    )


def held(n, available, *, region=WEST, zone="a", itype="g6.xlarge", mine=True, state="active", match="open"):
    return Reservation(
        capacity_reservation_id=f"cr-{n:017x}", region=region, availability_zone=f"{region}{zone}", instance_type=itype,
        available=available, match=match, state=state, for_deployment=mine,
    )


def planned(seen):
    return {s.capacity_reservation_id: s.planned for s in seen if s.planned}


def test_reservations_of_this_deployment_take_what_they_have_room_for_until_the_count_is_met():
    seen = plan([held(1, 3), held(2, 3, zone="b")], request(count=4))
    assert planned(seen) == {held(1, 3).capacity_reservation_id: 3, held(2, 3, zone="b").capacity_reservation_id: 1}


def test_named_reservations_come_first_then_type_preference_then_region_order_then_the_roomiest():
    g5 = held(1, 4, itype="g5.xlarge")
    east = held(2, 4, region=EAST)
    small = held(3, 1)
    big = held(4, 4)
    named = held(5, 1, mine=False)
    seen = plan([g5, east, small, big, named], request(count=6, capacity_reservation_ids=[named.capacity_reservation_id]))
    order = [s.capacity_reservation_id for s in seen if s.planned]
    assert order == [named.capacity_reservation_id, big.capacity_reservation_id, small.capacity_reservation_id]
    assert [s.capacity_reservation_id for s in seen if not s.planned] == [east.capacity_reservation_id, g5.capacity_reservation_id]


def test_a_reservation_nobody_named_of_another_deployment_type_or_state_is_listed_with_why_not():
    seen = {s.capacity_reservation_id: s.why_not for s in plan(
        [held(1, 2, mine=False), held(2, 2, itype="p5.48xlarge"), held(3, 2, state="pending"), held(4, 0), held(5, 2, region="eu-west-1")],
        request(),
    )}
    assert seen == {
        held(1, 2).capacity_reservation_id: "neither tagged for this deployment nor named in the request",
        held(2, 2).capacity_reservation_id: "holds p5.48xlarge, not a requested type",
        held(3, 2).capacity_reservation_id: "not active (pending)",
        held(4, 0).capacity_reservation_id: "no room: every reserved instance is in use",
        held(5, 2).capacity_reservation_id: "in eu-west-1, not a candidate region",
    }


def test_a_reservation_pool_is_on_demand_at_the_on_demand_price_and_carries_its_share():
    seen = plan([held(1, 3)], request(count=2))
    [pool] = pools(seen, {(WEST, "g6.xlarge"): 0.984})
    assert (pool.market, pool.price, pool.reserved, pool.capacity_reservation_id) == ("on-demand", 0.984, 2, held(1, 3).capacity_reservation_id)
    assert pool.key == f"on-demand/{WEST}/{WEST}a/g6.xlarge/{pool.capacity_reservation_id}"
    assert pool.note == f"capacity reservation {held(1, 3).capacity_reservation_id} (open)"
    # A reservation the plan gives nothing is no pool.
    assert len(pools(plan([held(1, 3), held(2, 0, zone="b")], request(count=2)), {})) == 1


@given(
    st.lists(st.tuples(st.integers(0, 8), st.booleans(), st.sampled_from(["g6.xlarge", "g5.xlarge", "p5.48xlarge"])), max_size=8),
    st.integers(1, 20),
)
def test_never_more_than_a_reservation_has_room_for_nor_more_than_requested(found, count):
    reservations = [held(n, available, mine=mine, itype=itype) for n, (available, mine, itype) in enumerate(found)]
    seen = plan(reservations, request(count=count))
    room = {r.capacity_reservation_id: r.available for r in reservations}
    assert all(0 <= s.planned <= room[s.capacity_reservation_id] for s in seen)
    assert sum(s.planned for s in seen) <= count
    usable = sum(r.available for r in reservations if r.for_deployment and r.instance_type != "p5.48xlarge")
    assert sum(s.planned for s in seen) == min(count, usable)  # and nothing usable is left out


def drive(reservation_pools, room, request):
    """The fill loop over reservation pools, each answering as EC2 does to a launch naming it."""
    room, calls = dict(room), []
    run = fill.prepare(fill.start(request), reservation_pools, request)
    while run.next in ("launch", "prepare"):
        if run.next == "prepare":
            run = fill.enter_region(run, RegionLaunch(region=reservation_pools[run.cursor].region, image_id="ami-1", root_volume_gib=200))
            continue
        pool = reservation_pools[run.cursor]
        calls.append((pool.capacity_reservation_id, run.batch))
        low = 1 if request.launch_mode == "partial" else run.batch
        if room[pool.capacity_reservation_id] < low:
            result = LaunchResult(outcome="capacity", reason="ReservationCapacityExceeded")
        else:
            n = min(run.batch, room[pool.capacity_reservation_id])
            room[pool.capacity_reservation_id] -= n
            result = LaunchResult(outcome="launched", instances=[
                Instance(instance_id=f"i-{len(calls)}{k}", region=pool.region, availability_zone=pool.availability_zone,
                         instance_type=pool.instance_type, market="on-demand", capacity_reservation_id=pool.capacity_reservation_id)
                for k in range(n)
            ])
        run = fill.after_attempt(run, reservation_pools, result, request)
    return run, calls


def test_the_fill_asks_a_reservation_for_no_more_than_its_share_and_moves_on_once_it_is_used():
    wanted = request(count=5, batch_max=4, launch_mode="exact")
    seen = plan([held(1, 1), held(2, 3, zone="b")], wanted)
    run, calls = drive(pools(seen, {}), {s.capacity_reservation_id: s.available for s in seen}, wanted)
    assert calls == [(held(2, 3).capacity_reservation_id, 3), (held(1, 1).capacity_reservation_id, 1)]
    assert run.launched == 4 and run.next == "exhausted" and run.reserved_taken == {}


def test_only_with_nothing_found_names_the_deployment_and_the_regions_searched():
    import json

    wanted = request(capacity_reservations="only")
    cause = json.loads(no_reservation_room_cause(fill.start(wanted), [], wanted, []))
    assert cause["error"] == "NO_RESERVATION_ROOM" and cause["launched"] == 0
    assert f"g6.xlarge, g5.xlarge in {WEST}, {EAST}" in cause["message"]
    assert '"capacity_reservations": "open"' in cause["hint"]


def test_the_request_checks_reservation_fields_and_names_them():
    import pytest

    from gpufill.models.request import RequestProblems

    with pytest.raises(ValueError, match="capacity_reservation_ids"):
        Request(capacity_reservation_ids=["cr-0123"])
    with pytest.raises(ValueError, match="more than once"):
        Request(capacity_reservation_ids=["cr-0123456789abcdef0", "cr-0123456789abcdef0"])
    with pytest.raises((RequestProblems, ValueError), match="capacity_reservation_ids: names reservations"):
        Request(capacity_reservations="none", capacity_reservation_ids=["cr-0123456789abcdef0"])
    with pytest.raises((RequestProblems, ValueError), match="market: .*only"):
        Request(capacity_reservations="only", market="spot")
    with pytest.raises(ValueError, match="capacity_reservations"):
        Request(capacity_reservations="first")
    assert request().capacity_reservations == "open"


def test_a_reservation_the_count_does_not_need_says_so_and_the_planned_ones_are_listed_first():
    seen = plan([held(1, 2, region=EAST), held(2, 2), held(3, 2, zone="b")], request(count=4))
    # Region order first (us-west-2, then us-east-1), then the roomiest, then the id.
    assert [(s.capacity_reservation_id, s.planned) for s in seen] == [
        (held(2, 2).capacity_reservation_id, 2), (held(3, 2).capacity_reservation_id, 2), (held(1, 2).capacity_reservation_id, 0)]
    assert seen[2].why_not == "not needed: the count is met by the reservations before it"
    every = plan([held(1, 2, region=EAST), held(2, 2)], request(count=4))
    assert [s.capacity_reservation_id for s in every] == [held(2, 2).capacity_reservation_id, held(1, 2).capacity_reservation_id]


def test_a_named_reservation_and_then_the_roomiest_are_used_before_the_others():
    named = held(9, 2, mine=False)
    seen = plan([held(1, 4), named], request(count=1, capacity_reservation_ids=[named.capacity_reservation_id]))
    assert planned(seen) == {named.capacity_reservation_id: 1}
    assert planned(plan([held(1, 1), held(2, 3, zone="b")], request(count=3))) == {held(2, 3).capacity_reservation_id: 3}


def test_a_reservation_pool_has_room_for_its_planned_share_less_what_this_plan_put_in_it():
    from gpufill.models.run import Pool
    from gpufill.policy.reservations import room_left

    pool = Pool(region=WEST, availability_zone=f"{WEST}a", instance_type="g6.xlarge", market="on-demand",
                capacity_reservation_id="cr-1", reserved=3)
    assert room_left(pool, {}) == 3 and room_left(pool, {"cr-1": 2, "cr-2": 9}) == 1 and room_left(pool, {"cr-1": 5}) == 0
    assert room_left(pool.model_copy(update={"reserved": None}), {}) == 0  # a share never planned is no room
    assert room_left(pool.model_copy(update={"capacity_reservation_id": None}), {}) is None


@pytest.mark.parametrize("setting, market, known_market, seen, reads", [
    ("none", "spot", "spot", 3, False),  # a run that keeps out of reservations never reads them
    ("only", "on-demand", "on-demand", 0, True),  # reservations are all it may launch into
    ("open", "spot", "spot", 0, False),  # none last time: looked for again when the facts are due
    ("open", "spot", "spot", 2, True),  # their room changes as instances launch and end
    ("open", "spot-then-on-demand", "on-demand", 0, True),  # the plan held is On-Demand's, which read none
    ("open", "on-demand", "on-demand", 0, False),
])
def test_a_try_that_reuses_its_facts_reads_reservations_again_only_where_they_can_have_changed(setting, market, known_market, seen, reads):
    r = request(capacity_reservations=setting, market=market)
    assert read_again(r, known_market, seen) is reads
    assert first_market(r) == ("on-demand" if market == "on-demand" else "spot")
