"""Region scoring (docs/capacity-intelligence.md, "How the pools are ordered").

classic: price points (40) + AZ points (40) + interruption points (20), ranked S/A/B/C.
blended: the AZ points give way to capacity points, int(40 x best AZ placement score / 10),
from AWS's spot placement scores. The number of AZs offering a type is only a proxy for
capacity; a placement score is AWS's own estimate that a request of this size succeeds, so
it replaces the proxy on the same 40-point scale. Price and interruption points are
unchanged. AWS answers with its top 10 AZs only, so a region with no score in that answer
ranks below every scored one and earns no capacity points.
Price points compare a region with the cheapest region for the same type, so the
scores of one type are only comparable among themselves.

price-capacity: no points. A fleet launch hands EC2 every pool of a region and EC2 takes the
cheapest that holds the request, so what a region is worth is the price its fleet would pay
and the chance the fleet fills: its cheapest spot price divided by AWS's region-level
placement score raised to CAPACITY_EXPONENT (price_per_fill). The price is the stronger
signal: a score of 3 against 1 is worth a region about 20 % dearer, no more, because scores
are estimates (low and coarse for one or two types, which is most GPU requests).
"""

from __future__ import annotations

from gpufill.models.run import RegionFacts, RegionScore

AZ_POINTS = {5: 40, 4: 32, 3: 24, 2: 16}
INTERRUPTION_POINTS = {0: 20, 1: 15, 2: 10, 3: 5}
RANKS = ((75, "S"), (65, "A"), (50, "B"))
# How far a region's placement score discounts its price in price_per_fill. Chosen on the
# benchmark's 100 generated markets (docs/benchmark.md, "Choosing the default") and checked on
# 400 markets of other seeds: lower lets empty cheap regions cost launch calls, higher buys
# dearer fleets from regions a noisy score overrates.
CAPACITY_EXPONENT = 0.2
# AWS answers with its top 10 regions only; a region outside them scored no more than the
# lowest score, so it is taken at the bottom of the scale.
LOWEST_PLACEMENT_SCORE = 1


def price_points(region_price: float, best_price: float) -> int:
    return int(40 * best_price / region_price)


def az_points(az_count: int) -> int:
    return AZ_POINTS.get(min(az_count, 5), 8)


def interruption_points(tier: int | None) -> int:
    return INTERRUPTION_POINTS.get(tier, 0) if tier is not None else 0


def capacity_points(best_placement_score: int) -> int:
    return int(40 * min(best_placement_score, 10) / 10)


def price_per_fill(spot_price: float, region_placement_score: int | None) -> float:
    """The region's cheapest spot price, discounted by how likely AWS rates a fleet there to fill:
    lower is better. Cheaper at an equal or higher score is always lower."""
    score = max(LOWEST_PLACEMENT_SCORE, min(region_placement_score or LOWEST_PLACEMENT_SCORE, 10))
    return spot_price / score**CAPACITY_EXPONENT


def rank(score: int) -> str:
    return next((letter for floor, letter in RANKS if score >= floor), "C")


def score_regions(facts: list[RegionFacts], instance_type: str, *, blended: bool = False) -> list[RegionScore]:
    """Every region's score for one type, best first; regions without a price come last, dropped."""
    priced: list[tuple[RegionFacts, float, int, int | None]] = []
    dropped: list[RegionScore] = []
    for region in facts:
        offer = next((t for t in region.types if t.instance_type == instance_type), None)
        if region.error:
            dropped.append(RegionScore(region=region.region, instance_type=instance_type, dropped=region.error))
        elif offer is None or not offer.zones:
            dropped.append(
                RegionScore(region=region.region, instance_type=instance_type, dropped="type not offered in any zone")
            )
        elif offer.spot_price is None:
            dropped.append(
                RegionScore(
                    region=region.region,
                    instance_type=instance_type,
                    az_count=len(offer.zones),
                    dropped="no spot price",
                )
            )
        else:
            priced.append((region, offer, offer.spot_price))
    if not priced:
        return dropped
    best = min(price for _, _, price in priced)
    scored = []
    for region, offer, price in priced:
        placement = [z.placement_score for z in offer.zones if z.placement_score is not None]
        points = {"price": price_points(price, best)}
        if blended:
            points["capacity"] = capacity_points(max(placement)) if placement else 0
        else:
            points["az"] = az_points(len(offer.zones))
        points["interruption"] = interruption_points(offer.advisor_tier)
        total = sum(points.values())
        scored.append(
            RegionScore(
                region=region.region,
                instance_type=instance_type,
                spot_price=price,
                az_count=len(offer.zones),
                advisor_tier=offer.advisor_tier,
                placement_score=max(placement) if placement else None,
                points=points,
                score=total,
                rank=rank(total),
            )
        )
    scored.sort(key=lambda s: (-s.score, s.spot_price, s.region))
    return scored + dropped
