"""launch_mode "fleet": one CreateFleet per region and market, driven by pure policy against random markets."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufill.models.request import Request, normalise
from gpufill.models.run import FleetAnswer, Instance, LaunchResult, Pool, PoolAnswer, RegionLaunch, Run
from gpufill.policy import fill, fleet_moves

REGIONS = ["us-west-2", "us-east-1", "eu-central-1"]


def request_of(**fields):
    return normalise(Request(launch_mode="fleet", **fields), request_id="f", default_regions=REGIONS,
                     home_region="us-east-1")


def pool(region, zone, itype="g6.xlarge", market="spot", price=0.5):
    return Pool(region=region, availability_zone=f"{region}{zone}", instance_type=itype, market=market, price=price)


def instances(p, n, start=0):
    return [Instance(instance_id=f"i-{p.availability_zone}-{p.instance_type}-{start + k}", region=p.region,
                     availability_zone=p.availability_zone, instance_type=p.instance_type, market=p.market,
                     hourly_price=p.price) for k in range(n)]


@st.composite
def markets(draw):
    pools, stock, quota = [], {}, {}
    regions = draw(st.lists(st.sampled_from(REGIONS), min_size=1, max_size=3, unique=True))
    for region in regions:
        quota[region] = draw(st.one_of(st.none(), st.integers(0, 12)))
        for zone in "abc"[: draw(st.integers(1, 3))]:
            for itype in draw(st.lists(st.sampled_from(["g6.xlarge", "g5.xlarge"]), min_size=1, max_size=2, unique=True)):
                p = pool(region, zone, itype)
                pools.append(p)
                stock[p.key] = draw(st.integers(0, 12))
    # The plan may interleave regions (a ranking by pool score does): the fleet still asks each region once.
    order = draw(st.permutations(range(len(pools))))
    return [pools[i] for i in order], stock, quota


def drive(pools, stock, quota, request):
    """Answer CreateFleet as EC2 does (deepest pools first, partial fulfilment, an error per pool it
    could not use), and follow the policy's moves until it stops. Returns the run and every call:
    (region, pool indices covered, target)."""
    stock, used, calls, attempts = dict(stock), {}, [], []
    run = fill.prepare(fill.start(request), pools, request)
    while run.next in ("launch", "prepare", "refresh"):
        if run.next in ("prepare", "refresh"):
            run = fill.enter_region(run, RegionLaunch(region=pools[run.cursor].region, image_id="ami-1", root_volume_gib=200))
            continue
        run = fleet_moves.begin_call(fill.begin_step(run))
        covered = fleet_moves.overrides(run, pools, request)
        region = pools[run.cursor].region
        calls.append((region, covered, run.batch))
        wanted, answers = run.batch, []
        limit = quota.get(region)
        for index in sorted(covered, key=lambda i: -stock[pools[i].key]):
            p = pools[index]
            room = wanted if limit is None else max(0, min(wanted, limit - used.get(region, 0)))
            take = min(room, stock[p.key])
            if take:
                stock[p.key] -= take
                used[region] = used.get(region, 0) + take
                wanted -= take
                answers.append(PoolAnswer(index=index, result=LaunchResult(outcome="launched", instances=instances(p, take, len(calls) * 100))))
            elif stock[p.key] == 0:
                answers.append(PoolAnswer(index=index, result=LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")))
            elif wanted:
                answers.append(PoolAnswer(index=index, result=LaunchResult(outcome="quota", reason="MaxSpotInstanceCountExceeded")))
        run = fleet_moves.after_fleet(run, pools, FleetAnswer(answers=answers), request)
        attempts.extend(run.step_attempts)
    return run, calls, attempts


requests = st.builds(lambda count: request_of(count=count), st.integers(1, 60))


@settings(max_examples=300, deadline=None)
@given(markets(), requests)
def test_never_launches_more_than_requested_and_asks_each_region_once(market, request):
    pools, stock, quota = market
    run, calls, _ = drive(pools, stock, quota, request)
    assert run.launched == len(run.instances) <= request.count
    regions = [region for region, _, _ in calls]
    assert len(regions) == len(set(regions)), "a region was asked twice in one market"
    covered = [index for _, indices, _ in calls for index in indices]
    assert len(covered) == len(set(covered)), "a pool was in two fleets"
    asked = 0
    for _, indices, target in calls:
        assert target == request.count - asked  # each fleet asks for everything still missing
        asked += sum(1 for i in run.instances if pools[indices[0]].region == i.region) if indices else 0


@settings(max_examples=300, deadline=None)
@given(markets(), requests)
def test_fills_whenever_the_market_can_and_no_quota_interferes(market, request):
    pools, stock, quota = market
    run, calls, _ = drive(pools, stock, {r: None for r in quota}, request)
    assert run.launched == min(request.count, sum(stock.values()))
    # Each region's fleet covers all of its pools: the cheapest number of calls with no knowledge.
    assert len(calls) <= len({p.region for p in pools})


@settings(max_examples=200, deadline=None)
@given(markets(), requests)
def test_every_attempt_names_a_pool_of_its_fleet_and_the_log_adds_up(market, request):
    pools, stock, quota = market
    run, calls, attempts = drive(pools, stock, quota, request)
    assert sum(a.launched for a in attempts) == run.launched
    assert [a.number for a in attempts] == list(range(1, len(attempts) + 1))
    assert len({(a.region, a.availability_zone, a.instance_type) for a in attempts}) == len(attempts)


def test_one_fleet_per_region_in_plan_order_and_the_pools_it_could_not_use_are_logged():
    pools = [pool("us-west-2", "a"), pool("us-east-1", "a"), pool("us-west-2", "b"), pool("us-east-1", "b")]
    request = request_of(count=6)
    stock = {pools[0].key: 0, pools[1].key: 4, pools[2].key: 2, pools[3].key: 3}
    run, calls, attempts = drive(pools, stock, {}, request)
    assert [(region, indices, target) for region, indices, target in calls] == [
        ("us-west-2", [0, 2], 6), ("us-east-1", [1, 3], 4)]
    assert [(a.availability_zone, a.batch, a.launched, a.outcome) for a in attempts] == [
        ("us-west-2a", 6, 0, "capacity"), ("us-west-2b", 6, 2, "launched"),
        ("us-east-1a", 4, 4, "launched")]
    assert run.next == "done" and run.launched == 6


def test_a_region_short_of_the_target_is_left_for_the_next_one():
    pools = [pool("us-west-2", "a"), pool("us-east-1", "a")]
    run, calls, _ = drive(pools, {pools[0].key: 1, pools[1].key: 0}, {}, request_of(count=3))
    assert [region for region, _, _ in calls] == ["us-west-2", "us-east-1"]
    assert run.next == "exhausted" and run.launched == 1


def entered(pools, request):
    run = fill.prepare(fill.start(request), pools, request)
    run = fill.enter_region(run, RegionLaunch(region=pools[0].region, image_id="ami-1", root_volume_gib=200))
    return fleet_moves.begin_call(fill.begin_step(run))


def test_a_refusal_of_the_launch_itself_stops_the_run():
    pools = [pool("us-west-2", "a"), pool("us-east-1", "a")]
    run = entered(pools, request_of(count=2))
    failure = LaunchResult(outcome="error", reason="UnauthorizedOperation", message="not allowed")
    moved = fleet_moves.after_fleet(run, pools, FleetAnswer(failure=failure), request_of(count=2))
    assert moved.next == "rejected"
    assert [(a.region, a.reason) for a in moved.step_attempts] == [("us-west-2", "UnauthorizedOperation")]


def test_a_refusal_named_for_a_pool_stops_the_run_too():
    pools = [pool("us-west-2", "a"), pool("us-west-2", "b")]
    answer = FleetAnswer(answers=[PoolAnswer(index=0, result=LaunchResult(outcome="error", reason="InvalidBlockDeviceMapping"))])
    assert fleet_moves.after_fleet(entered(pools, request_of(count=1)), pools, answer, request_of(count=1)).next == "rejected"


def test_a_stale_image_is_resolved_once_then_the_region_is_left():
    pools = [pool("us-west-2", "a"), pool("us-east-1", "a")]
    request = request_of(count=1)
    stale = FleetAnswer(answers=[PoolAnswer(index=0, result=LaunchResult(outcome="error", reason="InvalidAMIID.NotFound"))])
    run = entered(pools, request)
    assert fleet_moves.after_fleet(run, pools, stale, request).next == "refresh"
    refreshed = run.model_copy(update={"launch": run.launch.model_copy(update={"ami_refreshed": True})})
    moved = fleet_moves.after_fleet(refreshed, pools, stale, request)
    assert (moved.next, moved.cursor) == ("prepare", 1)


def test_an_unreachable_region_is_skipped():
    pools = [pool("us-west-2", "a"), pool("us-west-2", "b"), pool("us-east-1", "a")]
    failure = LaunchResult(outcome="error", reason="EndpointConnectionError")
    moved = fleet_moves.after_fleet(entered(pools, request_of(count=1)), pools, FleetAnswer(failure=failure), request_of(count=1))
    assert (moved.next, moved.cursor, moved.blocked) == ("prepare", 2, ["spot/us-west-2"])  # the whole region


def test_an_answer_with_more_instances_than_the_target_is_refused():
    pools = [pool("us-west-2", "a")]
    answer = FleetAnswer(answers=[PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=instances(pools[0], 3)))])
    with pytest.raises(ValueError, match="^CreateFleet returned 3 instances for a target of 2$"):
        fleet_moves.after_fleet(entered(pools, request_of(count=2)), pools, answer, request_of(count=2))


def test_an_answer_naming_one_pool_twice_is_refused():
    pools = [pool("us-west-2", "a")]
    capacity = LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")
    answer = FleetAnswer(answers=[PoolAnswer(index=0, result=capacity), PoolAnswer(index=0, result=capacity)])
    with pytest.raises(ValueError, match="^CreateFleet answered twice for one pool$"):
        fleet_moves.after_fleet(entered(pools, request_of(count=2)), pools, answer, request_of(count=2))


def test_how_ec2_is_asked_to_pick():
    assert fleet_moves.allocation_strategy("spot", request_of()) == "price-capacity-optimized"
    assert fleet_moves.allocation_strategy("on-demand", request_of(market="on-demand")) == "lowest-price"
    assert fleet_moves.allocation_strategy("on-demand", request_of(market="on-demand", on_demand_strategy="latency")) == "prioritized"


def test_a_same_az_gang_asks_for_one_zone_and_all_or_nothing_for_its_whole_remainder():
    run = entered([pool("us-west-2", "a")], request_of(count=4))
    assert (fleet_moves.single_zone(request_of(count=4)), fleet_moves.min_target(run, request_of(count=4))) == (False, None)
    gang = request_of(count=4, placement="same-az")
    assert (fleet_moves.single_zone(gang), fleet_moves.min_target(run, gang)) == (True, None)
    whole = request_of(count=4, placement="same-az", all_or_nothing=True)
    assert (fleet_moves.single_zone(whole), fleet_moves.min_target(run, whole)) == (True, 4)
    assert fleet_moves.min_target(run, request_of(count=4, placement="same-region", all_or_nothing=True)) is None


def test_a_same_region_gang_only_covers_the_region_it_landed_in():
    pools = [pool("us-west-2", "a"), pool("us-east-1", "a"), pool("us-west-2", "b")]
    request = request_of(count=4, placement="same-region")
    run = entered(pools, request)
    answer = FleetAnswer(answers=[PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=instances(pools[0], 1)))])
    moved = fleet_moves.after_fleet(run, pools, answer, request)
    # The gang is anchored in us-west-2, whose fleet already looked at every pool: nothing is left.
    assert moved.next == "exhausted" and moved.launched == 1


def test_the_pools_found_empty_are_those_answered_with_capacity_alone():
    answer = FleetAnswer(answers=[
        PoolAnswer(index=0, result=LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")),
        PoolAnswer(index=1, result=LaunchResult(outcome="quota", reason="VcpuLimitExceeded")),
        PoolAnswer(index=2, result=LaunchResult(outcome="launched", instances=instances(pool("us-west-2", "c"), 1))),
    ])
    assert fleet_moves.pools_found_empty(answer) == [0]


def test_pools_another_run_found_empty_are_asked_for_apart_and_last():
    fresh_a, fresh_b = pool("us-east-1", "b"), pool("us-west-2", "a")
    deferred = pool("us-east-1", "a").model_copy(update={"deferred": True})
    pools = [fresh_a, fresh_b, deferred]
    run, calls, _ = drive(pools, {fresh_a.key: 0, fresh_b.key: 0, deferred.key: 2}, {}, request_of(count=2))
    assert [(region, indices) for region, indices, _ in calls] == [("us-east-1", [0]), ("us-west-2", [1]), ("us-east-1", [2])]
    assert run.next == "done" and {i.availability_zone for i in run.instances} == {"us-east-1a"}


def test_a_quota_answer_closes_that_quota_group_for_the_deferred_fleet_too():
    fresh = pool("us-east-1", "b")
    deferred = pool("us-east-1", "a").model_copy(update={"deferred": True})
    pools = [fresh, deferred]
    run, calls, _ = drive(pools, {fresh.key: 5, deferred.key: 5}, {"us-east-1": 0}, request_of(count=2))
    assert [region for region, _, _ in calls] == ["us-east-1"]
    assert run.next == "exhausted" and run.launched == 0  # the deferred fleet was never sent


def test_the_blocked_keys_of_a_fleet_leave_the_other_tier_and_regions_open():
    fresh = pool("us-east-1", "b")
    deferred = pool("us-east-1", "a").model_copy(update={"deferred": True})
    blocked = [fill.fleet_key(fresh)]
    assert not fill.is_open(fresh, blocked) and fill.is_open(deferred, blocked)
    assert fill.is_open(pool("us-west-2", "a"), blocked)
    assert fill.fleet_key(deferred) == "spot/us-east-1/deferred" and fill.fleet_key(fresh) == "spot/us-east-1/fresh"


def test_a_pool_key_names_each_part_once_and_a_key_of_the_doubled_form_still_blocks_its_pool():
    reserved = pool("us-east-1", "a", market="on-demand").model_copy(update={"capacity_reservation_id": "cr-1"})
    assert fill.pool_key(pool("us-west-2", "a")) == "spot/us-west-2/us-west-2a/g6.xlarge"
    assert fill.pool_key(reserved) == "on-demand/us-east-1/us-east-1a/g6.xlarge/cr-1"
    # A run state written when the key named its market twice is read with each key once.
    legacy = Run(batch=1, remaining=1, blocked=["spot/spot/us-west-2/us-west-2a/g6.xlarge", "spot/us-west-2/G and VT",
                                                "on-demand/on-demand/us-east-1/us-east-1a/g6.xlarge/cr-1"])
    assert legacy.blocked == ["spot/us-west-2/us-west-2a/g6.xlarge", "spot/us-west-2/G and VT",
                              "on-demand/us-east-1/us-east-1a/g6.xlarge/cr-1"]
    assert not fill.is_open(pool("us-west-2", "a"), legacy.blocked) and not fill.is_open(reserved, legacy.blocked)
    assert fill.is_open(pool("us-west-2", "b", itype="p5.48xlarge"), legacy.blocked)


def test_a_stale_image_refused_for_the_whole_call_is_resolved_once():
    pools = [pool("us-west-2", "a"), pool("us-east-1", "a")]
    request = request_of(count=1)
    failure = FleetAnswer(failure=LaunchResult(outcome="error", reason="InvalidAMIID.NotFound", message="gone"))
    run = entered(pools, request)
    moved = fleet_moves.after_fleet(run, pools, failure, request)
    assert (moved.next, moved.cursor, moved.attempts_total) == ("refresh", 0, 1)
    refreshed = run.model_copy(update={"launch": run.launch.model_copy(update={"ami_refreshed": True})})
    again = fleet_moves.after_fleet(refreshed, pools, failure, request)
    assert (again.next, again.cursor, again.blocked) == ("prepare", 1, ["spot/us-west-2/fresh"])


def test_any_other_refusal_of_the_whole_call_leaves_the_fleets_pools_not_the_region():
    fresh, deferred, east = pool("us-west-2", "a"), pool("us-west-2", "b").model_copy(update={"deferred": True}), pool("us-east-1", "a")
    pools = [fresh, east, deferred]
    request = request_of(count=2)
    failure = FleetAnswer(failure=LaunchResult(outcome="throttled", reason="RequestLimitExceeded"))
    moved = fleet_moves.after_fleet(entered(pools, request), pools, failure, request)
    assert (moved.next, moved.cursor, moved.blocked) == ("prepare", 1, ["spot/us-west-2/fresh"])
    assert [(a.availability_zone, a.batch, a.outcome, a.reason) for a in moved.step_attempts] == [
        ("us-west-2a", 2, "throttled", "RequestLimitExceeded")]


def test_pools_ec2_was_too_busy_to_answer_for_are_asked_again_alone_and_only_twice():
    a, b, c, east = pool("us-west-2", "a"), pool("us-west-2", "b"), pool("us-west-2", "c"), pool("us-east-1", "a")
    pools = [a, b, c, east]
    request = request_of(count=4)
    run = entered(pools, request)
    answer = FleetAnswer(answers=[
        PoolAnswer(index=0, result=LaunchResult(outcome="launched", instances=instances(a, 1))),
        PoolAnswer(index=1, result=LaunchResult(outcome="throttled", reason="RequestLimitExceeded")),
        PoolAnswer(index=2, result=LaunchResult(outcome="throttled", reason="InternalError")),
    ])
    moved = fleet_moves.after_fleet(run, pools, answer, request)
    assert (moved.next, moved.fleet_retries) == ("launch", 1)
    again = fleet_moves.begin_call(fill.begin_step(moved))
    assert fleet_moves.overrides(again, pools, request) == [1, 2] and again.batch == 3
    busy = FleetAnswer(answers=[PoolAnswer(index=i, result=LaunchResult(outcome="throttled", reason="InternalError")) for i in (1, 2)])
    twice = fleet_moves.after_fleet(again, pools, busy, request)
    assert (twice.next, twice.fleet_retries) == ("launch", 2)
    left = fleet_moves.after_fleet(fleet_moves.begin_call(fill.begin_step(twice)), pools, busy, request)
    assert (left.next, left.cursor, left.fleet_retries) == ("prepare", 3, 0)
    # No pool EC2 did not answer for was called empty.
    assert fleet_moves.pools_found_empty(busy) == []


def test_a_fleet_answer_invents_no_capacity_for_a_pool_ec2_named_no_answer_for():
    from gpufill.adapters.fleet_launch import FleetCall, _answers

    a, b = pool("us-west-2", "a"), pool("us-west-2", "b")
    call = FleetCall(region="us-west-2", market="spot", pools=[(0, a), (1, b)], target=2, strategy="price-capacity-optimized",
                     subnets={"us-west-2a": "subnet-a", "us-west-2b": "subnet-b"})
    silent = _answers(call, {"FleetId": "fleet-1", "Instances": [], "Errors": []})
    assert {(x.index, x.result.outcome, x.result.reason) for x in silent} == {(0, "throttled", "NotAnswered"), (1, "throttled", "NotAnswered")}
    unnamed = _answers(call, {"Instances": [], "Errors": [{"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "no"}]})
    assert {x.result.outcome for x in unnamed} == {"error"}  # a capacity code naming no pool is no pool's capacity
    named = _answers(call, {"Instances": [], "Errors": [
        {"LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": "g6.xlarge", "SubnetId": "subnet-a"}},
         "ErrorCode": "InsufficientInstanceCapacity"},
        {"ErrorCode": "RequestLimitExceeded"}]})
    assert {(x.index, x.result.outcome) for x in named} == {(0, "capacity"), (1, "throttled")}


def test_busy_pools_whose_quota_group_the_same_answer_closed_are_not_asked_again_the_region_is_left():
    a, b, east = pool("us-west-2", "a"), pool("us-west-2", "b"), pool("us-east-1", "a")
    pools = [a, b, east]
    request = request_of(count=4)
    answer = FleetAnswer(answers=[
        PoolAnswer(index=0, result=LaunchResult(outcome="quota", reason="MaxSpotInstanceCountExceeded")),
        PoolAnswer(index=1, result=LaunchResult(outcome="throttled", reason="RequestLimitExceeded")),
    ])
    moved = fleet_moves.after_fleet(entered(pools, request), pools, answer, request)
    # b is throttled, but the quota answer closed its group (G) here: no call could launch it.
    assert (moved.next, moved.cursor, moved.fleet_retries, moved.batch) == ("prepare", 2, 0, 4)
    assert "spot/us-west-2/fresh" in moved.blocked and "spot/us-west-2/G and VT" in moved.blocked
    assert [(x.availability_zone, x.outcome) for x in moved.step_attempts] == [("us-west-2a", "quota"), ("us-west-2b", "throttled")]
