"""`karpenter` (simulated): Karpenter's way of launching spot, one region after another.

Per region (classic score order), one CreateFleet of type instant for the whole
remaining count, spot, price-capacity-optimized, with an override for every acceptable
(AZ, type) the region offers; the fleet launches what it can (partial fulfilment, see
bench.market.Ec2.create_fleet). Every override the fleet answers with
InsufficientInstanceCapacity goes into an ICE cache, as Karpenter's unavailable-offerings
cache does (3 minutes, longer than any run here): later fleets leave it out. A region is
asked again while it launched something and has overrides left outside the cache; then
the next region. It sees only the public view.

Karpenter does not launch the moment a pod is pending: its provisioner batches pending
pods and opens a window that closes only after BATCH_IDLE_DURATION (default 1 s) with no
new pod. Each fleet call here is one provisioning round (the first, and each one after a
fleet that left pods pending), so each waits out that window first (bench/latency.json).
"""

from __future__ import annotations

from collections import Counter

from bench.broker import SCORING_CALLS_PER_REGION, status
from bench.cases import Case
from bench.costs import KARPENTER_BATCH_IDLE_SECONDS, fleet_seconds, scoring_seconds
from bench.market import Ec2, PublicView
from bench.outcome import Outcome


def decide(view: PublicView, ec2: Ec2) -> tuple[int, float, Counter, list[str]]:
    remaining, cost = view.count, 0.0
    answers: Counter[str] = Counter()
    used: list[str] = []
    ice: set[tuple[str, str, str]] = set()  # (region, zone, type)
    regions = list(dict.fromkeys(region for region, _ in view.classic_order()))
    for region in regions:
        while remaining > 0:
            overrides = [
                (zone, itype)
                for itype in view.types
                for zone, _ in view.offers(region, itype)
                if (region, zone, itype) not in ice
            ]
            if not overrides:
                break
            answer = ec2.create_fleet(region, overrides, remaining)
            for (zone, itype), error in answer.errors.items():
                answers[error] += 1
                ice.add((region, zone, itype))
            if answer.count:
                answers["launched"] += 1
                remaining -= answer.count
                cost += answer.price
                if region not in used:
                    used.append(region)
            # Nothing launched, or the region's quota is spent (whatever the pool): on to the next region.
            if not answer.count or "quota" in answer.errors.values():
                break
        if remaining == 0:
            break
    return view.count - remaining, round(cost, 4), answers, used


def run(case: Case) -> Outcome:
    view, ec2 = PublicView(case), Ec2(case)
    launched, cost, answers, used = decide(view, ec2)
    calls = ec2.calls.get("CreateFleet", 0)
    regions = len(case.regions())
    return Outcome(
        case=case.name,
        strategy="karpenter",
        requested=case.count,
        launched=launched,
        run_instances=0,
        ec2_calls=calls + SCORING_CALLS_PER_REGION * regions,
        hourly_cost=cost,
        modelled_seconds=round(scoring_seconds() + calls * (KARPENTER_BATCH_IDLE_SECONDS + fleet_seconds()), 3),
        status=status(launched, case.count),
        answers=dict(answers),
        ec2_by_api={"DescribeInstanceTypeOfferings": regions, "DescribeSpotPriceHistory": regions, "CreateFleet": calls},
        regions_used=used,
    )
