"""`broker` (simulated): a spot broker that asks a region for everything still missing.

Regions (and, within a region, the requested types) go in classic score order. Each
call is one RunInstances with no AZ named, MinCount 1 and MaxCount the whole remaining
count (capped at what the region's spot vCPU quota leaves, which the broker reads as
any account can); EC2 places it in one AZ of the default VPC (bench.market.Ec2). A
(region, type) that launched is asked again, since another AZ may still hold some; one
that fails is remembered and never asked again, and the broker fails over to the next.
It sees only the public view (bench.market.PublicView).
"""

from __future__ import annotations

from collections import Counter

from gpufill import catalog
from gpufill.local.market import DEFAULT_VCPUS

from bench.cases import Case
from bench.costs import api_seconds, scoring_seconds
from bench.market import Ec2, PublicView
from bench.outcome import Outcome

# Scoring a region takes its offerings and its spot prices.
SCORING_CALLS_PER_REGION = 2


def decide(view: PublicView, ec2: Ec2) -> tuple[int, float, Counter, list[str]]:
    """Launch what the broker can; (launched, $/h, answers by outcome, regions used)."""
    remaining, cost = view.count, 0.0
    answers: Counter[str] = Counter()
    used: list[str] = []
    failed: set[tuple[str, str]] = set()
    running_vcpus: Counter[str] = Counter()
    for region, itype in view.classic_order():
        vcpus = catalog.vcpus(itype) or DEFAULT_VCPUS
        while remaining > 0 and (region, itype) not in failed:
            quota = view.quota_vcpus(region)
            room = remaining if quota is None else min(remaining, (quota - running_vcpus[region]) // vcpus)
            if room < 1:
                failed.add((region, itype))
                break
            answer = ec2.run_instances(region, itype, max_count=room)
            if answer.count:
                answers["launched"] += 1
                remaining -= answer.count
                cost += answer.price
                running_vcpus[region] += answer.count * vcpus
                if region not in used:
                    used.append(region)
            else:
                answers.update(answer.errors.values())
                failed.add((region, itype))
        if remaining == 0:
            break
    return view.count - remaining, round(cost, 4), answers, used


def run(case: Case) -> Outcome:
    view, ec2 = PublicView(case), Ec2(case)
    launched, cost, answers, used = decide(view, ec2)
    calls = ec2.calls.get("RunInstances", 0)
    regions = len(case.regions())
    return Outcome(
        case=case.name,
        strategy="broker",
        requested=case.count,
        launched=launched,
        run_instances=calls,
        ec2_calls=calls + SCORING_CALLS_PER_REGION * regions,
        hourly_cost=cost,
        modelled_seconds=round(scoring_seconds() + calls * api_seconds("ec2:RunInstances"), 3),
        status=status(launched, case.count),
        answers=dict(answers),
        full_batches=0,
        ec2_by_api={"DescribeInstanceTypeOfferings": regions, "DescribeSpotPriceHistory": regions, "RunInstances": calls},
        regions_used=used,
    )


def status(launched: int, requested: int) -> str:
    if launched == requested:
        return "FULFILLED"
    return "PARTIAL" if launched else "ALL_SPOT_EXHAUSTED"
