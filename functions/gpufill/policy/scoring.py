"""Region scoring (DESIGN.md, "Facts the policy starts from").

score = price points (40) + AZ points (40) + interruption points (20), ranked S/A/B/C.
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


def rank(score: int) -> str:
    return next((letter for floor, letter in RANKS if score >= floor), "C")


def score_regions(facts: list[RegionFacts], instance_type: str) -> list[RegionScore]:
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
            priced.append((region, offer.spot_price, len(offer.zones), offer.advisor_tier))
    if not priced:
        return dropped
    best = min(price for _, price, _, _ in priced)
    scored = []
    for region, price, zones, tier in priced:
        points = {
            "price": price_points(price, best),
            "az": az_points(zones),
            "interruption": interruption_points(tier),
        }
        total = sum(points.values())
        scored.append(
            RegionScore(
                region=region.region,
                instance_type=instance_type,
                spot_price=price,
                az_count=zones,
                advisor_tier=tier,
                points=points,
                score=total,
                rank=rank(total),
            )
        )
    scored.sort(key=lambda s: (-s.score, s.spot_price, s.region))
    return scored + dropped
