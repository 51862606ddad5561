"""Gang placement driven by pure policy against random markets: invariants for any market."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufill.models.request import Request, normalise
from gpufill.models.run import Instance, LaunchResult, Pool, RegionLaunch
from gpufill.policy import fill, gang

REGIONS = ["us-west-2", "us-east-1", "eu-central-1"]
TYPES = ["g6.xlarge", "g5.xlarge"]


@st.composite
def markets(draw):
    """Pools of two types over up to three regions of up to three AZs, in a random try order."""
    pools, stock = [], {}
    for region in draw(st.lists(st.sampled_from(REGIONS), min_size=1, max_size=3, unique=True)):
        for zone in "abc"[: draw(st.integers(1, 3))]:
            for itype in TYPES[: draw(st.integers(1, 2))]:
                pool = Pool(region=region, availability_zone=f"{region}{zone}", instance_type=itype, market="spot")
                pools.append(pool)
                stock[pool.key] = draw(st.integers(0, 6))
    order = draw(st.permutations(range(len(pools))))
    return [pools[i] for i in order], stock


requests = st.builds(
    lambda count, batch, mode, placement, aon: normalise(
        Request(count=count, batch_max=min(batch, count), launch_mode=mode, placement=placement, all_or_nothing=aon),
        request_id="g", default_regions=REGIONS, home_region="us-east-1"),
    st.integers(1, 12), st.integers(1, 6), st.sampled_from(["partial", "exact"]),
    st.sampled_from(["any", "same-region", "same-az"]), st.booleans(),
)


def drive(pools, stock, request):
    """Answer RunInstances from `stock` and follow the policy, rollbacks included, until it stops.

    Returns the final run, every call (pool key) in order, the most instances held at once,
    and each gang's instances (the ones rolled back, then the ones kept)."""
    stock, calls, live, most, gangs = dict(stock), [], [], 0, []
    run = fill.prepare(fill.start(request), pools, request)
    while True:
        if run.next in ("prepare", "refresh"):
            run = fill.enter_region(run, RegionLaunch(region=pools[run.cursor].region, image_id="ami-1", root_volume_gib=200))
        elif run.next == "launch":
            pool = pools[run.cursor]
            calls.append(pool.key)
            low = 1 if request.launch_mode == "partial" else run.batch
            if stock[pool.key] < low or stock[pool.key] == 0:
                result = LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")
            else:
                n = min(run.batch, stock[pool.key])
                stock[pool.key] -= n
                result = LaunchResult(outcome="launched", instances=[
                    Instance(instance_id=f"i-{len(calls)}-{k}", region=pool.region, availability_zone=pool.availability_zone,
                             instance_type=pool.instance_type, market="spot") for k in range(n)])
                live += result.instances
                most = max(most, len(live))
            run = fill.after_attempt(fill.begin_step(run), pools, result, request)
        elif run.next == "rollback" or (run.next == "exhausted" and request.all_or_nothing):
            gangs.append(list(run.instances))
            live = []
            run = fill.after_rollback(run, pools, request, len(run.instances))
        else:
            gangs.append(list(run.instances))
            return run, calls, most, gangs


def place_stock(pools, stock, placement):
    places: dict[str | None, int] = {}
    for pool in pools:
        where = gang.place(pool, placement)
        places[where] = places.get(where, 0) + stock[pool.key]
    return places


@settings(max_examples=400, deadline=None)
@given(markets(), requests)
def test_never_holds_more_than_requested(market, request):
    pools, stock = market
    run, _, most, _ = drive(pools, stock, request)
    assert most <= request.count
    assert run.launched == len(run.instances) <= request.count


@settings(max_examples=400, deadline=None)
@given(markets(), requests)
def test_every_gang_shares_one_place(market, request):
    pools, stock = market
    _, _, _, gangs = drive(pools, stock, request)
    for instances in gangs:
        if request.placement == "same-az":
            assert len({(i.region, i.availability_zone) for i in instances}) <= 1
        if request.placement == "same-region":
            assert len({i.region for i in instances}) <= 1


@settings(max_examples=400, deadline=None)
@given(markets(), requests)
def test_each_pool_is_tried_in_one_stretch_even_across_rollbacks(market, request):
    pools, stock = market
    _, calls, _, _ = drive(pools, stock, request)
    stretches = [key for n, key in enumerate(calls) if n == 0 or calls[n - 1] != key]
    assert len(stretches) == len(set(stretches)), "a pool was tried again after the cursor left it"


@settings(max_examples=400, deadline=None)
@given(markets(), requests)
def test_all_or_nothing_places_the_gang_exactly_when_one_place_can_hold_it(market, request):
    pools, stock = market
    run, _, _, gangs = drive(pools, stock, request)
    if not request.all_or_nothing:
        return
    fits = max(place_stock(pools, stock, request.placement).values()) >= request.count
    if fits:
        assert (run.next, run.launched) == ("done", request.count)
    else:
        assert (run.next, run.launched, run.instances) == ("not_placed", 0, [])
        assert run.gang.rolled_back == sum(len(g) for g in gangs)


@settings(max_examples=300, deadline=None)
@given(markets(), requests)
def test_without_all_or_nothing_a_short_gang_is_kept_in_its_place(market, request):
    pools, stock = market
    run, _, _, gangs = drive(pools, stock, request)
    if request.all_or_nothing:
        return
    assert len(gangs) == 1, "nothing is rolled back without all_or_nothing"
    if request.placement == "any":
        assert run.launched == min(request.count, sum(stock.values()))
