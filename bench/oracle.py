"""`oracle` (simulated): knows every pool's capacity, so it never asks where nothing is left.

The cheapest feasible fill takes the cheapest instance units first, within each
pool's capacity and each region's spot quota. Those limits nest (pools inside
regions), so taking units cheapest-first is optimal, as long as the requested types
share a vCPU size (they do in the generated set). Among equal prices the deeper pool
goes first, and each pool used costs one RunInstances for exactly what it gives: the
fewest calls that reach the cheapest fill. Nothing real can do better, so it is the
lower bound the other strategies are measured against.
"""

from __future__ import annotations

from bench.cases import Case
from bench.costs import api_seconds
from bench.market import SpotMarket, SpotPool
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


def run(case: Case) -> Outcome:
    plan = cheapest_fill(case)
    launched, calls = sum(plan.values()), len(plan)
    return Outcome(
        case=case.name,
        strategy="oracle",
        requested=case.count,
        launched=launched,
        run_instances=calls,
        ec2_calls=calls,  # it needs no scoring: it already knows
        hourly_cost=round(sum(pool.price * n for pool, n in plan.items()), 4),
        modelled_seconds=round(calls * api_seconds("ec2:RunInstances"), 3),
        status="FULFILLED" if launched == case.count else ("PARTIAL" if launched else "ALL_SPOT_EXHAUSTED"),
        answers={"launched": calls} if calls else {},
        full_batches=calls,
        ec2_by_api={"RunInstances": calls} if calls else {},
    )
