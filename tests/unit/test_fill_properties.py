"""The fill loop driven by pure policy against random markets: invariants that must hold for any market."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufill.models.request import Request, normalise
from gpufill.models.run import Instance, LaunchResult, Pool
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


def drive(pools, stock, quota, request):
    """Answer RunInstances as EC2 would, and follow the policy's moves until it stops."""
    stock, used, calls = dict(stock), {r: 0 for r in quota}, []
    run = fill.start(request)
    run = run if pools else fill.advance(run, pools, request)
    while run.next not in ("done", "exhausted"):
        if run.next == "halve":
            run = fill.halve(run)
            continue
        if run.next == "advance":
            run = fill.advance(run, pools, request)
            continue
        pool = pools[run.cursor]
        low = 1 if request.launch_mode == "partial" else run.batch
        calls.append((pool.key, low, run.batch))
        if quota[pool.region] is not None and used[pool.region] + run.batch > quota[pool.region]:
            result = LaunchResult(outcome="quota", reason="MaxSpotInstanceCountExceeded")
        elif stock[pool.key] < low or stock[pool.key] == 0:
            result = LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")
        else:
            n = min(run.batch, stock[pool.key])
            stock[pool.key] -= n
            used[pool.region] += n
            result = LaunchResult(outcome="launched", instances=[
                Instance(instance_id=f"i-{len(calls)}-{k}", region=pool.region, availability_zone=pool.availability_zone,
                         instance_type=pool.instance_type, market="spot", hourly_price=0.5) for k in range(n)])
        run = fill.after_attempt(run, pool, result, request)
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
    for n, attempt in enumerate(run.attempts):
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


def test_a_quota_error_at_batch_one_closes_the_region():
    request = normalise(Request(count=4), request_id="q", default_regions=REGIONS, home_region="us-east-1")
    pools = [Pool(region=r, availability_zone=f"{r}{z}", instance_type="g6.xlarge", market="spot")
             for r in ("us-west-2", "us-east-1") for z in "ab"]
    run, calls = drive(pools, {p.key: 9 for p in pools}, {"us-west-2": 0, "us-east-1": None}, request)
    assert [(key.split("/")[2], batch) for key, _, batch in calls] == [
        ("us-west-2a", 4), ("us-west-2a", 2), ("us-west-2a", 1), ("us-east-1a", 4)]
    assert run.launched == 4
