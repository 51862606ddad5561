"""How much a market's public signals give away its hidden capacity: AUC against "the pool has capacity".

An AUC of 0.5 is a coin toss; 1.0 tells every open pool from every empty one. The
issue's audit measured 0.87-0.99 for the old generator's per-AZ scores; an honest
score should sit well below that, and the Spot Advisor tier, which is about
interruptions, near 0.5.
"""

from __future__ import annotations

from gpufill.local.market_answers import FEW_TYPES, FEW_TYPES_SCORE_CAP, PLACEMENT_TOP

from bench.cases import Case


def auc(scores: list[float], labels: list[bool]) -> float | None:
    """P(score of a random positive > score of a random negative), ties counting half."""
    pos = sorted(s for s, label in zip(scores, labels) if label)
    neg = sorted(s for s, label in zip(scores, labels) if not label)
    if not pos or not neg:
        return None
    wins = 0.0
    for p in pos:
        below = sum(1 for n in neg if n < p)
        tied = sum(1 for n in neg if n == p)
        wins += below + tied / 2
    return wins / (len(pos) * len(neg))


def _pools(case: Case):
    """(region, zone, type, capacity, the zone's raw score) for every requested pool."""
    for region in case.regions():
        market = case.scenario["regions"].get(region, {})
        for zone, types in sorted(market.get("zones", {}).items()):
            for itype in case.instance_types():
                stock = types.get(itype)
                if stock is not None:
                    raw = stock.get("placement_score") or market.get("placement_score", {}).get(itype)
                    yield region, zone, itype, stock.get("spot", 0), raw


def returned_scores(case: Case) -> dict[tuple[str, str], int]:
    """(region, zone) -> the score GetSpotPlacementScores returns, as the local engine answers it:
    the lowest of the zone's types, capped at 3 when fewer than 3 types are asked, top 10 only."""
    cap = FEW_TYPES_SCORE_CAP if len(set(case.instance_types())) < FEW_TYPES else 10
    zones: dict[tuple[str, str], int] = {}
    for region, zone, _, _, raw in _pools(case):
        if raw:
            zones[(region, zone)] = min(zones.get((region, zone), 10), raw, cap)
    ranked = sorted(zones.items(), key=lambda item: -item[1])[:PLACEMENT_TOP]
    return dict(ranked)


def score_auc(cases: list[Case], as_returned: bool = False) -> float | None:
    """AUC of the per-AZ placement score for "this pool has capacity"; a zone AWS leaves out of
    its top 10 counts as the lowest score (0)."""
    scores, labels = [], []
    for case in cases:
        returned = returned_scores(case) if as_returned else None
        for region, zone, _, capacity, raw in _pools(case):
            scores.append(returned.get((region, zone), 0) if as_returned else (raw or 0))
            labels.append(capacity > 0)
    return auc(scores, labels)


def returned_region_scores(case: Case) -> dict[str, int]:
    """region -> the region-level score (SingleAvailabilityZone=false) as the local engine answers it:
    the best of the region's scores for the asked types, capped at 3 under 3 types, top 10 only."""
    cap = FEW_TYPES_SCORE_CAP if len(set(case.instance_types())) < FEW_TYPES else 10
    found = {}
    for region in case.regions():
        own = case.scenario["regions"].get(region, {}).get("placement_score", {})
        scores = [own[t] for t in case.instance_types() if own.get(t)]
        if scores:
            found[region] = min(max(scores), cap)
    return dict(sorted(found.items(), key=lambda item: -item[1])[:PLACEMENT_TOP])


def region_score_auc(cases: list[Case]) -> float | None:
    """AUC of the region-level score as returned for "this region alone holds the whole request";
    a region AWS leaves out of its top 10 counts as 0."""
    scores, labels = [], []
    for case in cases:
        returned = returned_region_scores(case)
        held: dict[str, int] = {}
        for region, _, _, capacity, _ in _pools(case):
            held[region] = held.get(region, 0) + capacity
        for region, capacity in held.items():
            scores.append(returned.get(region, 0))
            labels.append(capacity >= case.count)
    return auc(scores, labels)


def advisor_auc(cases: list[Case]) -> float | None:
    """AUC of the Spot Advisor's tier (a lower tier reads as better) for "this pool has capacity"."""
    scores, labels = [], []
    for case in cases:
        for region, _, itype, capacity, _ in _pools(case):
            tier = case.scenario["regions"][region].get("advisor_tier", {}).get(itype)
            if tier is not None:
                scores.append(-tier)
                labels.append(capacity > 0)
    return auc(scores, labels)
