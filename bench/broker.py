"""`broker` (simulated): the single-instance spot broker.

Each instance is its own request: walk the regions by classic score and ask each for
one instance without naming an AZ, until one answers. EC2 places an AZ-less launch
wherever the region has capacity; the simulation gives the broker its best case, the
cheapest AZ that has any. The broker keeps nothing between instances, so a region
that failed instance k is asked again for instance k+1; it stops once an instance
fails everywhere, since the next would fare no better.
"""

from __future__ import annotations

from collections import Counter

from bench.cases import Case
from bench.costs import api_seconds, scoring_seconds
from bench.market import SpotMarket
from bench.outcome import Outcome

# Scoring a region takes its offerings and its spot prices.
SCORING_CALLS_PER_REGION = 2


def run(case: Case) -> Outcome:
    market = SpotMarket(case)
    order = market.classic_order()
    answers: Counter[str] = Counter()
    launched, cost, calls = 0, 0.0, 0
    for _ in range(case.count):
        placed = False
        for region, itype in order:
            calls += 1
            outcome, pool = _ask_for_one(market, region, itype)
            answers[outcome] += 1
            if pool is not None:
                market.take(pool, 1)
                launched, cost, placed = launched + 1, cost + pool.price, True
                break
        if not placed:
            break
    return Outcome(
        case=case.name,
        strategy="broker",
        requested=case.count,
        launched=launched,
        run_instances=calls,
        ec2_calls=calls + SCORING_CALLS_PER_REGION * len(case.regions()),
        hourly_cost=round(cost, 4),
        modelled_seconds=round(scoring_seconds() + calls * api_seconds("ec2:RunInstances"), 3),
        status=_status(launched, case.count),
        answers=dict(answers),
        full_batches=answers["launched"],
        ec2_by_api={
            "DescribeInstanceTypeOfferings": len(case.regions()),
            "DescribeSpotPriceHistory": len(case.regions()),
            "RunInstances": calls,
        },
    )


def _ask_for_one(market: SpotMarket, region: str, itype: str):
    pools = market.pools_of(region, itype)
    if pools and market.quota_room(region, pools[0].vcpus) < 1:
        return "quota", None
    open_pools = [p for p in pools if market.left[p] > 0]
    if not open_pools:
        return "capacity", None
    return "launched", min(open_pools, key=lambda p: (p.price, p.zone))


def _status(launched: int, requested: int) -> str:
    if launched == requested:
        return "FULFILLED"
    return "PARTIAL" if launched else "ALL_SPOT_EXHAUSTED"
