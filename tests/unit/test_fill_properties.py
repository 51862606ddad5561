"""The fill loop driven by pure policy against random markets: invariants that must hold for any market."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufill.models.request import Request, normalise
from gpufill.models.run import Instance, LaunchResult, Pool, RegionLaunch
from gpufill.policy import fill

REGIONS = ["us-west-2", "us-east-1", "eu-central-1"]


@st.composite
def markets(draw):
    pools, stock, quota = [], {}, {}
    for region in draw(st.lists(st.sampled_from(REGIONS), min_size=1, max_size=3, unique=True)):
        quota[region] = draw(st.one_of(st.none(), st.integers(0, 12)))
        for zone in "abc"[: draw(st.integers(1, 3))]:
            pool = Pool(region=region, availability_zone=f"{region}{zone}", instance_type="g6.xlarge",
                        market="spot", price=0.5)
            pools.append(pool)
            stock[pool.key] = draw(st.integers(0, 12))
    return pools, stock, quota


def drive(pools, stock, quota, request, *, families=None):
    """Answer RunInstances as EC2 would, and follow the policy's moves until it stops.

    Returns the final run, every call made, and every attempt in order (the state only keeps
    the last step's; here every attempt is collected as the attempt log would be)."""
    stock, used, calls, attempts = dict(stock), {}, [], []
    run = fill.prepare(fill.start(request), pools, request)
    while run.next in ("launch", "prepare", "refresh"):
        if run.next in ("prepare", "refresh"):
            run = fill.enter_region(run, RegionLaunch(region=pools[run.cursor].region, image_id="ami-1", root_volume_gib=200))
            continue
        pool = pools[run.cursor]
        low = 1 if request.launch_mode == "partial" else run.batch
        calls.append((pool.key, low, run.batch))
        group = (pool.region, (families or {}).get(pool.instance_type, "G"))
        limit = quota.get(pool.region)
        if limit is not None and used.get(group, 0) + run.batch > limit:
            result = LaunchResult(outcome="quota", reason="MaxSpotInstanceCountExceeded")
        elif stock[pool.key] < low or stock[pool.key] == 0:
            result = LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")
        else:
            n = min(run.batch, stock[pool.key])
            stock[pool.key] -= n
            used[group] = used.get(group, 0) + n
            result = LaunchResult(outcome="launched", instances=[
                Instance(instance_id=f"i-{len(calls)}-{k}", region=pool.region, availability_zone=pool.availability_zone,
                         instance_type=pool.instance_type, market="spot", hourly_price=0.5) for k in range(n)])
        run = fill.after_attempt(fill.begin_step(run), pools, result, request)
        attempts.extend(run.step_attempts)
    run.__dict__["all_attempts"] = attempts
    return run, calls


requests = st.builds(
    lambda count, batch, mode: normalise(
        Request(count=count, batch_max=min(batch, count), launch_mode=mode),
        request_id="p", default_regions=REGIONS, home_region="us-east-1"),
    st.integers(1, 40), st.integers(1, 8), st.sampled_from(["partial", "exact"]),
)


@settings(max_examples=300, deadline=None)
@given(markets(), requests)
def test_never_launches_more_than_requested_and_ends(market, request):
    pools, stock, quota = market
    run, calls = drive(pools, stock, quota, request)
    assert run.launched == len(run.instances) <= request.count
    assert all(batch <= request.batch_max for _, _, batch in calls)
    assert run.next == "done" or run.launched < request.count


@settings(max_examples=300, deadline=None)
@given(markets(), requests)
def test_each_pool_is_tried_in_one_stretch_and_never_after_it_said_capacity(market, request):
    pools, stock, quota = market
    run, calls = drive(pools, stock, quota, request)
    order = [key for key, _, _ in calls]
    stretches = [key for n, key in enumerate(order) if n == 0 or order[n - 1] != key]
    assert len(stretches) == len(set(stretches)), "a pool was returned to after the cursor left it"
    for n, attempt in enumerate(run.all_attempts):
        if attempt.outcome == "capacity" and (request.launch_mode == "partial" or attempt.batch == 1):
            key = f"spot/{attempt.region}/{attempt.availability_zone}/{attempt.instance_type}"
            assert key not in order[n + 1:]


@settings(max_examples=300, deadline=None)
@given(markets(), requests)
def test_fills_whenever_the_market_can_and_no_quota_interferes(market, request):
    pools, stock, quota = market
    no_quota = {r: None for r in quota}
    run, _ = drive(pools, stock, no_quota, request)
    assert run.launched == min(request.count, sum(stock.values()))


def test_a_quota_error_at_batch_one_closes_that_quota_group_in_the_region_not_the_region():
    request = normalise(Request(count=4), request_id="q", default_regions=REGIONS, home_region="us-east-1")
    pools = [Pool(region=r, availability_zone=f"{r}{z}", instance_type="g6.xlarge", market="spot")
             for r in ("us-west-2", "us-east-1") for z in "ab"]
    run, calls = drive(pools, {p.key: 9 for p in pools}, {"us-west-2": 0, "us-east-1": None}, request)
    assert [(key.split("/")[2], batch) for key, _, batch in calls] == [
        ("us-west-2a", 4), ("us-west-2a", 2), ("us-west-2a", 1), ("us-east-1a", 4)]
    assert run.launched == 4


def test_a_g_family_quota_leaves_the_p_family_of_the_same_region_open():
    request = normalise(Request(count=2, instance_types=["g6.xlarge", "p5.48xlarge"]), request_id="q",
                        default_regions=REGIONS, home_region="us-east-1")
    pools = [Pool(region="us-west-2", availability_zone="us-west-2a", instance_type=t, market="spot")
             for t in ("g6.xlarge", "p5.48xlarge")]
    families = {"g6.xlarge": "G", "p5.48xlarge": "P"}
    run, calls = drive(pools, {p.key: 9 for p in pools}, {"us-west-2": 1}, request, families=families)
    # One G instance fits the quota; the next G batch is refused and the P pool takes the rest.
    assert [(key.split("/")[3], batch) for key, _, batch in calls] == [
        ("g6.xlarge", 2), ("g6.xlarge", 1), ("g6.xlarge", 1), ("p5.48xlarge", 1)]
    assert run.launched == 2
    blocked = fill.after_attempt(
        fill.enter_region(fill.start(request), RegionLaunch(region="us-west-2", image_id="ami", root_volume_gib=200)).model_copy(update={"batch": 1}),
        pools, LaunchResult(outcome="quota", reason="VcpuLimitExceeded"), request)
    assert blocked.blocked == ["spot/us-west-2/G and VT"]
    assert (blocked.cursor, blocked.next) == (1, "launch")  # the P pool in the same region is still open


def test_ec2_refusing_the_launch_itself_stops_the_run_at_once():
    request = normalise(Request(count=2), request_id="r", default_regions=REGIONS, home_region="us-east-1")
    pools = [Pool(region="us-west-2", availability_zone=f"us-west-2{z}", instance_type="g6.xlarge", market="spot") for z in "ab"]
    run = fill.enter_region(fill.start(request), RegionLaunch(region="us-west-2", image_id="ami", root_volume_gib=200))
    run = fill.after_attempt(run, pools, LaunchResult(outcome="error", reason="InvalidBlockDeviceMapping"), request)
    assert (run.next, run.cursor) == ("rejected", 0)


def test_a_stale_ami_is_resolved_again_once_per_region_then_the_pool_is_left():
    request = normalise(Request(count=2), request_id="s", default_regions=REGIONS, home_region="us-east-1")
    pools = [Pool(region="us-west-2", availability_zone=f"us-west-2{z}", instance_type="g6.xlarge", market="spot") for z in "ab"]
    stale = LaunchResult(outcome="error", reason="InvalidAMIID.NotFound")
    run = fill.enter_region(fill.start(request), RegionLaunch(region="us-west-2", image_id="ami", root_volume_gib=200))
    run = fill.after_attempt(run, pools, stale, request)
    assert (run.next, run.cursor) == ("refresh", 0)
    run = fill.enter_region(run, RegionLaunch(region="us-west-2", image_id="ami-2", root_volume_gib=200, ami_refreshed=True))
    run = fill.after_attempt(run, pools, stale, request)
    assert (run.next, run.cursor) == ("launch", 1)
    assert run.attempts_total == 2 and [a.number for a in run.step_attempts] == [1, 2]


def test_an_unreachable_region_is_skipped_for_the_market():
    request = normalise(Request(count=2), request_id="u", default_regions=REGIONS, home_region="us-east-1")
    pools = [Pool(region=r, availability_zone=f"{r}{z}", instance_type="g6.xlarge", market="spot")
             for r in ("us-west-2", "us-east-1") for z in "ab"]
    run = fill.enter_region(fill.start(request), RegionLaunch(region="us-west-2", image_id="ami", root_volume_gib=200))
    run = fill.after_attempt(run, pools, LaunchResult(outcome="error", reason="EndpointConnectionError"), request)
    assert (run.cursor, run.next, run.blocked) == (2, "prepare", ["spot/us-west-2"])
