"""Seeded market scenarios in the market scenario format (docs/architecture.md), plus the hand-written ones in examples/.

A generated market has 5-8 real regions with the AZ letters EC2 (and moto) knows,
3-6 AZs each where the region has that many, and capacity spread unevenly: some
regions dry, some AZs deep, others empty. Scarcity runs from plenty to nearly sold
out, requests ask for 1, 4, 16 or 64 instances, and some regions carry a spot vCPU
quota. The same seed always gives the same cases.

What a strategy can learn about a market is what AWS tells it, and no more:

- Spot placement scores are *estimates*: a noisy guess (noise ``score_noise``, in
  doublings of capacity, default DEFAULT_SCORE_NOISE) at how far a pool's capacity
  covers the request, so a score tells an open pool from an empty one only loosely
  (bench.leak measures how loosely). The engine then caps them low when fewer than
  three types are asked for and returns the top 10 only, as GetSpotPlacementScores does.
- The Spot Advisor tier is the bucket of a (region, type)'s *interruption* rate, drawn
  from a stream of its own: it says nothing about capacity.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from gpufill import catalog

from bench.cases import TIERS, Case, tier_of

DEFAULT_SEED = 20261106
DEFAULT_SCENARIOS = 20  # one case per (tier, count); the examples come on top
REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"
DEFAULT_EXAMPLE_REQUEST = "provision-spot.json"

# Zone letters as EC2 names them (not every region has a, b, c).
REGION_ZONES = {
    "us-east-1": "abcdef",
    "us-east-2": "abc",
    "us-west-2": "abcd",
    "eu-central-1": "abc",
    "ap-northeast-1": "acd",
    "eu-west-1": "abc",
    "ap-southeast-1": "abc",
    "ca-central-1": "abd",
    "ap-northeast-2": "abcd",
    "eu-west-2": "abc",
    "eu-north-1": "abc",
}
COUNTS = (1, 4, 16, 64)
PRIMARY_TYPE = "g6.xlarge"
SECOND_TYPE = "g5.xlarge"  # same vCPUs as g6.xlarge, so a regional quota counts both alike
ORIGIN = "us-east-1"

# tier -> (chance a pool is sold out, capacity of the whole market as a multiple of the request)
SCARCITY = {
    "plenty": (0.05, 8.0),
    "ample": (0.2, 4.0),
    "tight": (0.4, 2.0),
    "scarce": (0.6, 1.2),
    "nearly sold out": (0.8, 0.6),
}
DEPTH_FLOOR = 8
QUOTA_CHANCE = 0.3
# One standard deviation of a placement score's error, in doublings of (1 + capacity / count):
# at 1.0 an estimate is off by a factor of about two as often as not. AWS publishes no accuracy
# for its scores; this default keeps them informative but far from an oracle (AUC ~0.65).
DEFAULT_SCORE_NOISE = 1.0
# The Spot Advisor's interruption buckets (<5 %, 5-10 %, 10-15 %, 15-20 %, >20 %).
ADVISOR_BUCKETS = (0.05, 0.10, 0.15, 0.20)
QUOTA_VCPUS = (8, 16, 32, 64, 128)


def generated(
    seed: int = DEFAULT_SEED,
    scenarios: int = DEFAULT_SCENARIOS,
    score_noise: float = DEFAULT_SCORE_NOISE,
    reservations: float = 0.0,
) -> list[Case]:
    """Tiers cycle fastest and counts next, so 20 cases cover every (tier, count) once.
    `reservations`: the share of cases whose account holds an On-Demand Capacity Reservation."""
    rng = random.Random(seed)
    cases = []
    for index in range(scenarios):
        tier = TIERS[index % len(TIERS)]
        count = COUNTS[(index // len(TIERS)) % len(COUNTS)]
        # Interruption rates come from a stream of their own, so the advisor tier cannot follow capacity.
        advisor_rng = random.Random(f"advisor-{seed}-{index}")
        case = _case(rng, advisor_rng, index, tier, count, score_noise)
        # Reservations, too, so a seed's markets are the same with or without them.
        reservation_rng = random.Random(f"reservation-{seed}-{index}")
        if reservation_rng.random() < reservations:
            _add_reservation(reservation_rng, case)
        cases.append(case)
    return cases


def _add_reservation(rng: random.Random, case: Case) -> None:
    """One reservation tagged for the deployment in a zone the market lists, holding up to the
    request's count (reservations are what a team bought for its own fleet)."""
    zones = [(zone, itype) for region in case.scenario["regions"].values() for zone, types in region["zones"].items() for itype in types]
    zone, itype = rng.choice(sorted(zones))
    held = {"zone": zone, "type": itype, "count": rng.randint(1, max(1, case.request["count"])),
            "match": rng.choice(["open", "targeted"])}
    case.scenario["capacity_reservations"] = [held]
    case.notes["capacity_reservation"] = held


def _case(
    rng: random.Random, advisor_rng: random.Random, index: int, tier: str, count: int, score_noise: float
) -> Case:
    regions = sorted(rng.sample(sorted(REGION_ZONES), rng.randint(5, 8)))
    types = [PRIMARY_TYPE, SECOND_TYPE] if rng.random() < 0.3 else [PRIMARY_TYPE]
    sold_out, depth = SCARCITY[tier]
    pools = _pools(rng, regions, types, sold_out)
    # Depth is relative to the request, with a floor: even a market that is plenty for one
    # instance holds more than a handful of them.
    _spread(rng, pools, total=max(1, round(max(count, DEPTH_FLOOR) * depth * rng.uniform(0.7, 1.3))))
    scenario = {"description": f"{tier}: {count} x {'/'.join(types)} over {len(regions)} regions", "regions": {}}
    interruption = {r: {t: round(advisor_rng.betavariate(1.2, 8.0), 4) for t in types} for r in regions}
    for region in regions:
        market = _region(rng, region, types, pools, count, score_noise, interruption[region])
        scenario["regions"][region] = market
    request = {
        "action": "provision",
        "instance_types": types,
        "count": count,
        "market": "spot",
        "regions": regions,
        "origin_region": ORIGIN,
    }
    slug = tier.replace(" ", "-")
    return Case(
        name=f"g{index:02d}-{slug}-n{count}",
        scenario=scenario,
        request=request,
        tier=tier,
        notes={"interruption_rate": interruption, "score_noise": score_noise},
    )


def _pools(rng: random.Random, regions: list[str], types: list[str], sold_out: float) -> dict:
    """(region, zone, type) -> {"price", "open"}: which pools exist and which have anything left."""
    pools = {}
    for region in regions:
        letters = REGION_ZONES[region]
        zones = sorted(rng.sample(letters, rng.randint(min(3, len(letters)), min(6, len(letters)))))
        dry_region = rng.random() < sold_out / 2  # scarcity comes in whole regions, too
        discount = rng.uniform(0.28, 0.45)
        for itype in types:
            on_demand = catalog.on_demand_price(itype, region)
            for letter in zones:
                pools[(region, f"{region}{letter}", itype)] = {
                    "price": round(on_demand * discount * rng.uniform(0.94, 1.12), 4),
                    "open": not dry_region and rng.random() >= sold_out,
                    "spot": 0,
                }
    return pools


def _spread(rng: random.Random, pools: dict, total: int) -> None:
    """Share `total` instances unevenly over the open pools: a few deep ones, many shallow."""
    open_pools = [key for key in sorted(pools) if pools[key]["open"]]
    if not open_pools:
        return
    weights = [rng.paretovariate(1.2) for _ in open_pools]
    scale = total / sum(weights)
    for key, weight in zip(open_pools, weights):
        pools[key]["spot"] = max(1, round(weight * scale))


def _region(
    rng: random.Random, region: str, types: list[str], pools: dict, count: int, noise: float, interruption: dict
) -> dict:
    mine = {key: pool for key, pool in pools.items() if key[0] == region}
    market: dict = {
        "advisor_tier": {t: advisor_tier(interruption[t]) for t in types},
        "placement_score": {
            t: placement_score(rng, sum(p["spot"] for k, p in mine.items() if k[2] == t), count, noise) for t in types
        },
        "zones": {},
    }
    if rng.random() < QUOTA_CHANCE:
        market["quota"] = {"spot_vcpus": rng.choice(QUOTA_VCPUS)}
    for (_, zone, itype), pool in sorted(mine.items()):
        market["zones"].setdefault(zone, {})[itype] = {
            "spot_price": pool["price"],
            "spot": pool["spot"],
            "placement_score": placement_score(rng, pool["spot"], count, noise),
        }
    return market


def placement_score(rng: random.Random, capacity: int, count: int, noise: float = DEFAULT_SCORE_NOISE) -> int:
    """A spot placement score (1-10) for a request of `count` where `capacity` is left.

    EC2's score estimates how likely a request of that size is to succeed, from its own
    view of the pool (other accounts' demand, capacity it may free, a snapshot that lags),
    not from the count a launch will meet. So the score follows log2(1 + capacity / count)
    with a gaussian error of `noise` doublings: an empty pool scores 2 on average, one
    that holds the request 4-5, one that holds it eight times over 9.
    """
    estimate = math.log2(1 + capacity / count) + rng.gauss(0.0, noise)
    return max(1, min(10, round(2 + 2.3 * estimate)))


def advisor_tier(interruption_rate: float) -> int:
    """The Spot Advisor's bucket (0: <5 % ... 4: >20 %) of a monthly interruption rate."""
    return sum(1 for edge in ADVISOR_BUCKETS if interruption_rate >= edge)


def examples() -> list[Case]:
    """Each market in examples/markets with the request of the same name, else the README's request."""
    cases = []
    for path in sorted((EXAMPLES / "markets").glob("*.json")):
        scenario = json.loads(path.read_text())
        if scenario.get("capacity_reservations"):
            continue  # the strategies compared know Spot and On-Demand only: a reserved market would favour gpufill
        paired = EXAMPLES / "requests" / path.name
        request_path = paired if paired.exists() else EXAMPLES / "requests" / DEFAULT_EXAMPLE_REQUEST
        request = json.loads(request_path.read_text())
        probe = Case(name=f"ex-{path.stem}", scenario=scenario, request=request, tier=TIERS[0], source="example")
        cases.append(
            Case(
                name=probe.name,
                scenario=scenario,
                request=request,
                tier=tier_of(probe.sold_out_share),
                source=f"examples/markets/{path.name} + examples/requests/{request_path.name}",
            )
        )
    return cases


def all_cases(
    seed: int = DEFAULT_SEED,
    scenarios: int = DEFAULT_SCENARIOS,
    with_examples: bool = True,
    score_noise: float = DEFAULT_SCORE_NOISE,
) -> list[Case]:
    return generated(seed, scenarios, score_noise) + (examples() if with_examples else [])


def main(argv: list[str] | None = None) -> None:
    """`python -m bench.generate --seed N --out DIR`: write the cases as scenario + request files."""
    parser = argparse.ArgumentParser(prog="python -m bench.generate", description=main.__doc__)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--scenarios", type=int, default=DEFAULT_SCENARIOS)
    parser.add_argument("--score-noise", type=float, default=DEFAULT_SCORE_NOISE)
    parser.add_argument("--reservations", type=float, default=0.0, help="share of cases holding a capacity reservation")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for case in generated(args.seed, args.scenarios, args.score_noise, args.reservations):
        (args.out / f"{case.name}.market.json").write_text(json.dumps(case.scenario, indent=2) + "\n")
        (args.out / f"{case.name}.request.json").write_text(json.dumps(case.request, indent=2) + "\n")
    print(f"wrote {args.scenarios} cases to {args.out}")


if __name__ == "__main__":
    main()
