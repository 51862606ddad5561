"""The launch step's decide and read (policy/launch_step.py), pure: which call a step makes, with
which token, pools, target and groups; how an answer moves the run; which pools it found empty."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufill.models.request import Refill, Request, normalise
from gpufill.models.run import FleetAnswer, Instance, LaunchResult, Pool, PoolAnswer, RegionLaunch, Run
from gpufill.policy import fill, launch_step as moves, rules
from gpufill.policy.tokens import client_token

REGION = "us-west-2"
SETUP = RegionLaunch(region=REGION, image_id="ami-1", root_volume_gib=200, subnets={"us-west-2a": "subnet-a", "us-west-2b": "subnet-b"})
A = Pool(region=REGION, availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot", price=0.4)
B = Pool(region=REGION, availability_zone="us-west-2b", instance_type="g6.xlarge", market="spot", price=0.5)
EAST = Pool(region="us-east-1", availability_zone="us-east-1a", instance_type="g6.xlarge", market="spot", price=0.3)
EFA = Pool(region=REGION, availability_zone="us-west-2a", instance_type="g6.12xlarge", market="spot", price=2.0)


def request(**fields):
    return normalise(Request(**{"count": 4, "regions": [REGION, "us-east-1"], **fields}), request_id="req-1",
                     default_regions=[REGION], home_region="us-east-1")


def run_at(**fields):
    return Run(**{"batch": 2, "remaining": 4, "next": "launch", "attempts_total": 6, "launch": SETUP, **fields})


def decide(run, pools, req, made=0):
    return moves.decide(run, pools, req, made=made, state_machine="arn:sm", deployment="prod")


def instances(pool, n):
    return [Instance(instance_id=f"i-{pool.availability_zone}-{k}", region=pool.region, availability_zone=pool.availability_zone,
                     instance_type=pool.instance_type, market=pool.market, hourly_price=pool.price) for k in range(n)]


# --- decide ---------------------------------------------------------------------------------------


def test_a_fleet_step_is_one_create_fleet_over_the_regions_open_pools_for_everything_missing():
    step = decide(run_at(), [A, B, EAST], request(launch_mode="fleet"))
    call = step.call
    assert (call.api, call.region, call.market, call.target, call.min_target) == ("CreateFleet", REGION, "spot", 4, None)
    assert call.pools == ((0, A), (1, B)) and call.subnets == SETUP.subnets
    assert call.token == client_token("arn:sm", "req-1", 7) and call.strategy == "price-capacity-optimized"
    assert (call.single_zone, call.placement_groups, call.reservations_off) == (False, {}, False)
    assert step.run.batch == 4  # the run the answer is read against asks for all four
    assert decide(step.run, [A, B, EAST], request(launch_mode="fleet"), made=1).call is None


def test_a_same_az_all_or_nothing_gang_fleet_asks_one_zone_for_all_in_each_zones_cluster_group():
    other = EFA.model_copy(update={"availability_zone": "us-west-2b"})
    twin = EFA.model_copy(update={"instance_type": "g6.48xlarge"})
    req = request(launch_mode="fleet", placement="same-az", all_or_nothing=True, instance_types=["g6.12xlarge"])
    call = decide(run_at(), [EFA, twin, other], req).call
    assert (call.single_zone, call.min_target) == (True, 4)
    assert call.placement_groups == {"us-west-2a": "gpufill-prod-req-1-us-west-2a", "us-west-2b": "gpufill-prod-req-1-us-west-2b"}


def test_an_on_demand_fleet_keeps_out_of_open_reservations_only_when_asked():
    od = [A.model_copy(update={"market": "on-demand"})]
    assert decide(run_at(), od, request(launch_mode="fleet", market="on-demand", capacity_reservations="none")).call.reservations_off
    assert not decide(run_at(), od, request(launch_mode="fleet", market="on-demand")).call.reservations_off
    assert decide(run_at(), od, request(launch_mode="fleet", market="on-demand", on_demand_strategy="latency")).call.strategy == "prioritized"


def test_a_capacity_block_is_launched_by_run_instances_even_in_fleet_mode():
    block = A.model_copy(update={"market": "on-demand", "capacity_reservation_id": "cr-1", "capacity_block": True, "reserved": 4})
    call = decide(run_at(), [block], request(launch_mode="fleet", market="on-demand")).call
    assert (call.api, call.pools, call.capacity_reservation_id) == ("RunInstances", ((0, block),), "cr-1")


def test_a_probe_asks_the_pool_under_the_cursor_for_the_batch_or_part_of_it():
    exact = decide(run_at(cursor=1), [A, B], request(launch_mode="exact")).call
    assert (exact.api, exact.region, exact.market, exact.pools, exact.target, exact.min_target) == (
        "RunInstances", REGION, "spot", ((1, B),), 2, 2)
    assert exact.subnets == {"us-west-2b": "subnet-b"} and exact.token == client_token("arn:sm", "req-1", 7)
    partial = decide(run_at(), [A, B], request(launch_mode="partial")).call
    assert (partial.target, partial.min_target) == (2, 1)
    assert decide(run_at(), [A], request(launch_mode="exact", capacity_reservations="none")).call.reservations_off


def test_a_probe_into_a_zone_without_a_subnet_names_none_and_makes_no_group():
    lone = EFA.model_copy(update={"availability_zone": "us-west-2c"})
    call = decide(run_at(), [lone], request(launch_mode="exact", placement="same-az", instance_types=["g6.12xlarge"])).call
    assert (call.subnets, call.placement_groups) == ({}, {})
    grouped = decide(run_at(), [EFA], request(launch_mode="exact", placement="same-az", instance_types=["g6.12xlarge"])).call
    assert grouped.placement_groups == {"us-west-2a": "gpufill-prod-req-1-us-west-2a"}


def test_probing_stops_when_the_run_leaves_launch_or_the_step_made_its_share():
    assert decide(run_at(next="prepare"), [A], request(launch_mode="exact")).call is None
    assert decide(run_at(), [A], request(launch_mode="exact"), made=fill.MAX_PROBES_PER_STEP).call is None
    assert decide(run_at(), [A], request(launch_mode="exact"), made=fill.MAX_PROBES_PER_STEP - 1).call is not None


def test_what_the_instances_are_launched_and_recorded_with_comes_from_the_request_that_owns_them():
    refill = request(launch_mode="exact", maintain=True, count=1, tags={"team": "ml"}, model_id="org/model",
                     refill=Refill(request_id="req-0", replaces=["i-0123456789abcdef0"]))
    step = decide(run_at(), [A], refill.model_copy(update={"expires_at": "2026-12-04T14:00:00+00:00"}))
    assert step.records == moves.Records(request_id="req-1", owner_id="req-0", maintain=True, replaces=["i-0123456789abcdef0"],
                                         expires_at="2026-12-04T14:00:00+00:00")
    assert (step.settings.owner_id, step.settings.tags, step.settings.model_id) == ("req-0", {"team": "ml"}, "org/model")
    assert step.rules == rules.Rules(launch_mode="exact", batch_max=refill.batch_max, placement="any", all_or_nothing=False)
    plain = decide(run_at(), [A], request(launch_mode="exact")).records
    assert (plain.owner_id, plain.maintain, plain.replaces, plain.expires_at) == ("req-1", False, None, None)


# --- read -----------------------------------------------------------------------------------------


def test_a_fleet_answer_moves_the_run_and_names_the_ordinary_pools_it_found_empty():
    reserved = B.model_copy(update={"capacity_reservation_id": "cr-1"})
    pools = [A, reserved, EAST]
    step = decide(run_at(), [A, reserved, EAST], request(launch_mode="fleet"))
    answer = FleetAnswer(answers=[
        PoolAnswer(index=0, result=LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")),
        PoolAnswer(index=1, result=LaunchResult(outcome="capacity", reason="ReservationCapacityExceeded"))])
    read = moves.read(step, pools, answer)
    assert read.found_empty == ((0, "capacity"),)
    assert (read.run.attempts_total, read.run.launched, read.run.cursor, read.run.next) == (8, 0, 2, "prepare")


@pytest.mark.parametrize(("mode", "batch", "reason", "found"), [
    ("exact", 2, "InsufficientInstanceCapacity", ()),  # only the batch was too big: halved, not empty
    ("exact", 1, "InsufficientInstanceCapacity", ((0, "InsufficientInstanceCapacity"),)),
    ("partial", 2, None, ((0, "capacity"),)),
])
def test_a_probe_answer_finds_a_pool_empty_only_when_the_pool_itself_is(mode, batch, reason, found):
    step = decide(run_at(batch=batch), [A, B], request(launch_mode=mode))
    read = moves.read(step, [A, B], LaunchResult(outcome="capacity", reason=reason))
    assert read.found_empty == found
    # Halved in the same pool, or on to the next with a fresh batch of everything missing.
    assert (read.run.cursor, read.run.batch) == ((0, 1) if found == () else (1, 4))


def test_a_reservation_is_never_remembered_empty_and_launched_instances_are_taken():
    reserved = A.model_copy(update={"market": "on-demand", "capacity_reservation_id": "cr-1"})
    step = decide(run_at(batch=1), [reserved], request(launch_mode="exact", market="on-demand"))
    assert moves.read(step, [reserved], LaunchResult(outcome="capacity", reason="ReservationCapacityExceeded")).found_empty == ()
    step = decide(run_at(), [A, B], request(launch_mode="exact"))
    read = moves.read(step, [A, B], LaunchResult(outcome="launched", instances=instances(A, 2)))
    assert (read.run.launched, read.run.remaining, read.run.next, read.found_empty) == (2, 2, "launch", ())


def test_an_answer_is_read_only_for_a_call_of_its_kind():
    fleet = decide(run_at(), [A], request(launch_mode="fleet"))
    probe = decide(run_at(), [A], request(launch_mode="exact"))
    with pytest.raises(TypeError, match="^a CreateFleet is answered by a FleetAnswer$"):
        moves.read(fleet, [A], LaunchResult(outcome="capacity"))
    with pytest.raises(TypeError, match="^a RunInstances is answered by a LaunchResult$"):
        moves.read(probe, [A], FleetAnswer())
    with pytest.raises(ValueError, match="^an answer read for a step that made no call$"):
        moves.read(decide(run_at(), [A], request(launch_mode="fleet"), made=1), [A], FleetAnswer())


def test_launched_lists_every_instance_an_answer_names():
    assert moves.launched(LaunchResult(outcome="launched", instances=instances(A, 2))) == instances(A, 2)
    both = FleetAnswer(answers=[PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=instances(A, 1))),
                                PoolAnswer(index=1, result=LaunchResult(outcome="launched", instances=instances(B, 2)))])
    assert moves.launched(both) == instances(A, 1) + instances(B, 2)


# --- properties over whole steps ------------------------------------------------------------------

ZONES = {"us-west-2": "abc", "us-east-1": "ab"}


@st.composite
def plans(draw):
    pools = []
    for region, zones in ZONES.items():
        for zone in zones[: draw(st.integers(1, len(zones)))]:
            for itype in draw(st.lists(st.sampled_from(["g6.xlarge", "g6.12xlarge"]), min_size=1, max_size=2, unique=True)):
                pools.append(Pool(region=region, availability_zone=f"{region}{zone}", instance_type=itype, market="spot", price=0.5,
                                  deferred=draw(st.booleans())))
    # As ranked plans are: a region's fresh pools, then every region's deferred ones.
    return sorted(pools, key=lambda p: (p.deferred, list(ZONES).index(p.region)))


requests = st.builds(
    lambda count, batch, mode, placement: normalise(
        Request(count=count, batch_max=min(batch, count), launch_mode=mode, placement=placement, regions=list(ZONES)),
        request_id="p", default_regions=list(ZONES), home_region="us-east-1"),
    st.integers(1, 12), st.integers(1, 8), st.sampled_from(["fleet", "exact", "partial"]), st.sampled_from(["any", "same-az"]),
)


def answer_for(call, draw_count):
    """An answer EC2 could give: never more than the target, never less than the minimum when it launches."""
    if call.api == moves.CREATE_FLEET:
        left, answers = call.target, []
        for index, pool in call.pools:
            n = min(left, draw_count(0, call.target))
            left -= n
            result = LaunchResult(outcome="launched", instances=instances(pool, n)) if n else \
                LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")
            answers.append(PoolAnswer(index=index, result=result))
        return FleetAnswer(answers=answers)
    [(_, pool)] = call.pools
    n = draw_count(0, call.target)
    if n and n >= (call.min_target or 1):
        return LaunchResult(outcome="launched", instances=instances(pool, n))
    return LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")


@settings(max_examples=100, deadline=None)
@given(plans(), requests, st.data())
def test_a_step_never_asks_for_more_than_is_missing_and_names_a_pool_once_per_call(pools, req, data):
    run = fill.prepare(fill.start(req), pools, req)
    run = fill.enter_region(fill.begin_step(run), SETUP.model_copy(update={"region": pools[run.cursor].region}))
    made, refused, emptied = 0, {}, set()
    while (step := decide(run, pools, req, made=made)).call is not None:
        call = step.call
        indices = [index for index, _ in call.pools]
        assert len(indices) == len(set(indices))  # every pool at most once in a call
        assert 1 <= call.target <= step.run.remaining and (call.min_target or 1) <= call.target
        assert all(pools[i].region == call.region for i in indices)
        # A pool found empty is not asked again in the step; one that refused a batch only for a smaller one.
        assert not emptied & set(indices)
        assert all(call.target < refused[i] for i in indices if i in refused)
        answer = answer_for(call, lambda lo, hi: data.draw(st.integers(lo, hi)))
        read = moves.read(step, pools, answer)
        assert read.run.launched <= req.count and {i for i, _ in read.found_empty} <= set(indices)
        emptied |= {i for i, _ in read.found_empty}
        if call.api == moves.RUN_INSTANCES:
            refused = {} if answer.instances else {indices[0]: call.target}
        run, made = read.run, made + 1
    if req.launch_mode == "fleet":
        assert made == 1  # a fleet step is one call
    assert made <= fill.MAX_PROBES_PER_STEP
