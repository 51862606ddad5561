"""`python -m bench.replay`: region orders for a fleet per region, compared in seconds, not minutes.

gpufill's default launch (and the karpenter baseline) is one CreateFleet per region, in some
order, for everything still missing, with the regions' failed pools left out of later fleets.
Given the same order, the same EC2 model (bench.market.Ec2, the allocation the local engine's
CreateFleet uses) gives the same launches: replaying the classic order reproduces karpenter's
results and the blended order gpufill's former default, market for market. So candidate orders
can be compared here on many markets before one is run on the state machine by `python -m
bench --gpufill-scoring ...`. Each order sees only what a strategy may: the public view and the
placement scores the local engine returns (bench.leak), never capacity.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace

from gpufill.models.run import RegionFacts
from gpufill.policy import ranking, scoring

from bench.cases import Case
from bench.generate import COUNTS, DEFAULT_SEED, generated
from bench.leak import returned_region_scores, returned_scores
from bench.market import Ec2, PublicView, SpotMarket
from bench.oracle import cheapest_cost

Order = Callable[[Case, PublicView], list[str]]


def fleet_per_region(view: PublicView, ec2: Ec2, regions: list[str]) -> tuple[int, float]:
    """Launched and $/h: one fleet per region in order, again while it launches, failed pools left out."""
    remaining, cost, failed = view.count, 0.0, set()
    for region in regions:
        while remaining > 0:
            overrides = [
                (zone, t) for t in view.types for zone, _ in view.offers(region, t) if (region, zone, t) not in failed
            ]
            if not overrides:
                break
            answer = ec2.create_fleet(region, overrides, remaining)
            failed |= {(region, *key) for key in answer.errors}
            remaining -= answer.count
            cost += answer.price
            if not answer.count or "quota" in answer.errors.values():
                break
        if remaining == 0:
            break
    return view.count - remaining, cost


def _facts(case: Case) -> list[RegionFacts]:
    """ScoreRegion's facts, each AZ's id taken to be its name (the scores below are keyed so)."""
    return [
        f.model_copy(update={"types": [
            t.model_copy(update={"zones": [z.model_copy(update={"zone_id": z.availability_zone}) for z in t.zones]})
            for t in f.types
        ]})
        for f in SpotMarket(case).facts()
    ]


def _request(case: Case) -> SimpleNamespace:
    return SimpleNamespace(instance_types=case.instance_types(), count=case.count)


def _regions(pools) -> list[str]:
    return list(dict.fromkeys(p.region for p in pools))


def classic(case: Case, view: PublicView) -> list[str]:
    return list(dict.fromkeys(region for region, _ in view.classic_order()))


def blended(case: Case, view: PublicView) -> list[str]:
    facts = ranking.with_placement_scores(_facts(case), returned_scores(case))
    scores = ranking.score_all(facts, _request(case), blended=True)
    return _regions(ranking.spot_pools(facts, scores, _request(case), blended=True))


def price_capacity(exponent: float | None = None) -> Order:
    def order(case: Case, view: PublicView) -> list[str]:
        facts, request = _facts(case), _request(case)
        scores = ranking.score_all(facts, request)
        if exponent is None:
            scores = ranking.with_region_scores(scores, returned_region_scores(case))
        else:  # another weight, for the side-by-side table
            found = returned_region_scores(case)
            scores = [
                s.model_copy(update={"price_per_fill": s.spot_price / max(found.get(s.region) or 1, 1) ** exponent})
                if s.dropped is None else s
                for s in scores
            ]
        return _regions(ranking.price_capacity_pools(facts, scores, request))

    return order


def score_then_price(case: Case, view: PublicView) -> list[str]:
    """AWS's region score first, price among equals: the score as the only capacity signal."""
    found = returned_region_scores(case)
    return sorted(classic(case, view), key=lambda r: (-(found.get(r) or 0), _cheapest(view, r), r))


def _cheapest(view: PublicView, region: str) -> float:
    return min(price for t in view.types for _, price in view.offers(region, t))


ORDERS: dict[str, Order] = {
    "classic (karpenter's order)": classic,
    "blended (the former default)": blended,
    "price alone": price_capacity(0.0),
    "region score, then price": score_then_price,
    "price ÷ score^0.1": price_capacity(0.1),
    f"price ÷ score^{scoring.CAPACITY_EXPONENT} (price-capacity)": price_capacity(),
    "price ÷ score^0.3": price_capacity(0.3),
    "price ÷ score^0.4": price_capacity(0.4),
}


def replay(order: Order, cases: list[Case]) -> dict:
    calls, cost, cheapest = Counter(), Counter(), Counter()
    for case in cases:
        view, ec2 = PublicView(case), Ec2(case)
        launched, dollars = fleet_per_region(view, ec2, order(case, view))
        calls[case.count] += ec2.calls.get("CreateFleet", 0)
        cost[case.count] += dollars
        cheapest[case.count] += cheapest_cost(case, launched)
    return {"calls": calls, "cost": cost, "cheapest": cheapest}


def table(cases: list[Case]) -> list[str]:
    lines = [
        "| region order | launch calls Σ | per count " + " / ".join(map(str, COUNTS)) + " | fleet $/h Σ | Σ$/h ÷ Σcheapest |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, order in ORDERS.items():
        r = replay(order, cases)
        buckets = " / ".join(str(r["calls"][c]) for c in COUNTS)
        total, cheapest = sum(r["cost"].values()), sum(r["cheapest"].values())
        lines.append(f"| {name} | {sum(r['calls'].values())} | {buckets} | {total:.2f} | {total / cheapest:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    cases = [c for n in range(args.seeds) for c in generated(args.seed + n)]
    print(f"{len(cases)} generated markets, seeds {args.seed}–{args.seed + args.seeds - 1}\n")
    print("\n".join(table(cases)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
