"""Region scoring (DESIGN.md, "Facts the policy starts from").

classic: price points (40) + AZ points (40) + interruption points (20), ranked S/A/B/C.
blended: the AZ points give way to capacity points, int(40 x best AZ placement score / 10),
from AWS's spot placement scores. The number of AZs offering a type is only a proxy for
capacity; a placement score is AWS's own estimate that a request of this size succeeds, so
it replaces the proxy on the same 40-point scale. Price and interruption points are
unchanged. AWS answers with its top 10 AZs only, so a region with no score in that answer
ranks below every scored one and earns no capacity points.
Price points compare a region with the cheapest region for the same type, so the
scores of one type are only comparable among themselves.
"""

from __future__ import annotations

from gpufill.models.run import RegionFacts, RegionScore

AZ_POINTS = {5: 40, 4: 32, 3: 24, 2: 16}
INTERRUPTION_POINTS = {0: 20, 1: 15, 2: 10, 3: 5}
RANKS = ((75, "S"), (65, "A"), (50, "B"))


def price_points(region_price: float, best_price: float) -> int:
    return int(40 * best_price / region_price)


def az_points(az_count: int) -> int:
    return AZ_POINTS.get(min(az_count, 5), 8)


def interruption_points(tier: int | None) -> int:
    return INTERRUPTION_POINTS.get(tier, 0) if tier is not None else 0


def capacity_points(best_placement_score: int) -> int:
    return int(40 * min(best_placement_score, 10) / 10)


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
