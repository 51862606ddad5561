"""`oracle` (simulated): two bounds from full knowledge of every pool's capacity.

- **Launch calls**: a lower bound on launch calls of any kind. One call cannot span
  regions, and one CreateFleet can take everything a region holds (a fleet call counts
  1), so no strategy that launches as many instances as the market allows can do it in
  fewer calls than the fewest regions whose usable capacity (pools, capped by the spot
  quota) covers that many: the largest regions first.
- **Price**: the cheapest feasible fill, cheapest instance units first within each
  pool's capacity and each region's spot quota. Those limits nest (pools inside regions),
  so taking units cheapest-first is optimal, as long as the requested types share a vCPU
  size (they do in the generated set).

The two need not be reachable together (the cheapest fill may span more regions); the
oracle's row reports the call bound next to the cheapest price. The bound is loose on a
market that cannot fill: `realistic_floor` is what a strategy without hidden knowledge
must spend there.
"""

from __future__ import annotations

from bench.cases import Case
from bench.costs import api_seconds, fleet_seconds
from bench.market import PublicView, SpotMarket, SpotPool
from bench.outcome import Outcome


def cheapest_fill(case: Case, count: int | None = None) -> dict[SpotPool, int]:
    """Pool -> instances, for the cheapest way to launch as many of `count` as the market allows."""
    market = SpotMarket(case)
    wanted = case.count if count is None else count
    plan: dict[SpotPool, int] = {}
    for pool in sorted(market.pools, key=lambda p: (p.price, -p.capacity, p.region, p.zone, p.instance_type)):
        if wanted == 0:
            break
        take = min(wanted, market.left[pool], market.quota_room(pool.region, pool.vcpus))
        if take > 0:
            market.take(pool, take)
            plan[pool] = take
            wanted -= take
    return plan


def cheapest_cost(case: Case, count: int) -> float:
    """$/h of the cheapest fleet of `count` instances (or of as many as the market has)."""
    return round(sum(pool.price * n for pool, n in cheapest_fill(case, count).items()), 4)


def batched_calls(case: Case, batch_max: int) -> int:
    """The oracle's calls if each RunInstances may ask for at most `batch_max` instances."""
    return sum(-(-n // batch_max) for n in cheapest_fill(case).values())


def fewest_calls(case: Case) -> int:
    """The fewest calls that could launch the oracle's fill at any price: the deepest pools first.

    Quotas are left out, which can only lower the count, so this is a strict lower bound on
    the calls of any strategy that fills as much as the oracle.
    """
    wanted = sum(cheapest_fill(case).values())
    calls = 0
    for pool in sorted(SpotMarket(case).pools, key=lambda p: -p.capacity):
        if wanted <= 0:
            break
        wanted -= pool.capacity
        calls += 1
    return calls


def region_capacity(case: Case) -> dict[str, int]:
    """Instances each region could launch of the request: its pools' capacity within its spot quota."""
    market = SpotMarket(case)
    usable = {}
    for region in market.regions:
        pools = [p for p in market.pools if p.region == region]
        if pools:
            usable[region] = min(sum(p.capacity for p in pools), market.quota_room(region, min(p.vcpus for p in pools)))
    return usable


def fewest_launch_calls(case: Case) -> tuple[int, int]:
    """(the most instances the market allows, the fewest launch calls that could launch them)."""
    usable = sorted(region_capacity(case).values(), reverse=True)
    feasible = min(case.count, sum(usable))
    calls, got = 0, 0
    for capacity in usable:
        if got >= feasible:
            break
        got += capacity
        calls += 1
    return feasible, calls


def realistic_floor(case: Case, bound: Outcome) -> int:
    """The fewest launch calls a strategy without hidden capacity can count on: the lower bound,
    except on a market that cannot fill the request. There nothing public tells a strategy that
    the regions it has not asked are empty too, so it must ask every region that offers a
    requested type (one fleet call each) before it can stop short."""
    if bound.launched >= case.count:
        return bound.launch_calls
    view = PublicView(case)
    offering = [r for r in view.regions if any(view.offers(r, t) for t in view.types)]
    return max(bound.launch_calls, len(offering))


def run(case: Case) -> Outcome:
    launched, calls = fewest_launch_calls(case)
    return Outcome(
        case=case.name,
        strategy="oracle",
        requested=case.count,
        launched=launched,
        run_instances=0,
        ec2_calls=calls,  # it needs no scoring: it already knows
        hourly_cost=cheapest_cost(case, launched) if launched else 0.0,
        modelled_seconds=round(calls * min(api_seconds("ec2:RunInstances"), fleet_seconds()), 3),
        status="FULFILLED" if launched == case.count else ("PARTIAL" if launched else "ALL_SPOT_EXHAUSTED"),
        answers={"launched": calls} if calls else {},
        full_batches=calls,
        ec2_by_api={"CreateFleet": calls} if calls else {},
    )
