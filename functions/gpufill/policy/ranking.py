"""The order in which pools are tried.

Spot, with several instance types: regions go best score first, a region's score
being the best score any requested type earns there; inside a region the types go
in the request's preference order; inside a type the AZs go cheapest spot price
first (AZs with no recent price last). So a strong region is exhausted for every
acceptable type before the run pays the latency of moving to a weaker region.

Spot, price-capacity (the default): regions go lowest price per fill first (scoring.
price_per_fill: the region's cheapest spot price over any requested type, discounted by AWS's
region-level placement score), the order a fleet per region wants; inside a region, as above
with AZs cheapest first. The classic points are still computed, for the plan to show.

On-demand: regions go by the strategy (cost: price then latency from the origin;
latency: latency then price), judged on the most preferred type the region offers;
inside a region types keep preference order and AZs go in name order, since the
on-demand price is the same across a region's AZs.
"""

from __future__ import annotations

from gpufill import catalog
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import Pool, RegionFacts, RegionScore, TypeFacts, ZoneOffer
from gpufill.policy.scoring import price_per_fill, score_regions

UNKNOWN = float("inf")


def score_all(facts: list[RegionFacts], request: ResolvedRequest, *, blended: bool = False) -> list[RegionScore]:
    scores: list[RegionScore] = []
    for instance_type in request.instance_types:
        scores.extend(score_regions(facts, instance_type, blended=blended))
    return scores


def with_placement_scores(facts: list[RegionFacts], scores: dict[tuple[str, str], int]) -> list[RegionFacts]:
    """Copy each AZ's placement score (keyed by region and AZ id) onto every type's facts.

    One answer scores the whole set of acceptable types per AZ, so each type offered there
    carries it."""

    def zone(region: str, z: ZoneOffer) -> ZoneOffer:
        score = scores.get((region, z.zone_id)) if z.zone_id else None
        return z.model_copy(update={"placement_score": score}) if score is not None else z

    return [
        r.model_copy(
            update={"types": [t.model_copy(update={"zones": [zone(r.region, z) for z in t.zones]}) for t in r.types]}
        )
        for r in facts
    ]


def with_region_scores(scores: list[RegionScore], region_scores: dict[str, int]) -> list[RegionScore]:
    """Each scored region's AWS region-level placement score and price per fill."""
    return [
        s.model_copy(
            update={
                "placement_score": region_scores.get(s.region),
                "price_per_fill": round(price_per_fill(s.spot_price, region_scores.get(s.region)), 6),
            }
        )
        if s.dropped is None
        else s
        for s in scores
    ]


def price_capacity_regions(scores: list[RegionScore]) -> list[str]:
    """Regions lowest price per fill first: each region judged by its best type (the fleet takes any)."""
    best: dict[str, tuple[float, float]] = {}
    for s in scores:
        if s.dropped is None and s.price_per_fill is not None:
            key = (s.price_per_fill, s.spot_price)
            best[s.region] = min(best.get(s.region, key), key)
    return sorted(best, key=lambda region: (*best[region], region))


def price_capacity_pools(facts: list[RegionFacts], scores: list[RegionScore], request: ResolvedRequest) -> list[Pool]:
    usable = {(s.region, s.instance_type) for s in scores if s.dropped is None}
    return _pools_in(facts, price_capacity_regions(scores), usable, request, blended=False)


def spot_pools(
    facts: list[RegionFacts], scores: list[RegionScore], request: ResolvedRequest, *, blended: bool = False
) -> list[Pool]:
    usable = [s for s in scores if s.dropped is None]
    best_by_region: dict[str, RegionScore] = {}
    standing = lambda s: (blended and s.placement_score is not None, s.score)  # noqa: E731
    for s in usable:
        if s.region not in best_by_region or standing(s) > standing(best_by_region[s.region]):
            best_by_region[s.region] = s
    # Blended: a region in AWS's top-10 answer goes before any region outside it.
    regions = sorted(
        best_by_region.values(),
        key=lambda s: (blended and s.placement_score is None, -s.score, s.spot_price, s.region),
    )
    scored_pairs = {(s.region, s.instance_type) for s in usable}
    return _pools_in(facts, [s.region for s in regions], scored_pairs, request, blended=blended)


def _pools_in(
    facts: list[RegionFacts], regions: list[str], scored_pairs: set[tuple[str, str]], request: ResolvedRequest,
    *, blended: bool,
) -> list[Pool]:
    """Every pool of each region in turn: types in preference order, AZs in _zone_order."""
    pools: list[Pool] = []
    for region in regions:
        for instance_type in request.instance_types:
            if (region, instance_type) not in scored_pairs:
                continue
            offer = _offer(facts, region, instance_type)
            zones = sorted(offer.zones, key=lambda z: _zone_order(z, blended))
            pools.extend(
                Pool(
                    region=region,
                    availability_zone=z.availability_zone,
                    instance_type=instance_type,
                    market="spot",
                    price=z.spot_price,
                )
                for z in zones
            )
    return pools


def on_demand_pools(facts: list[RegionFacts], request: ResolvedRequest) -> list[Pool]:
    def region_key(region: RegionFacts) -> tuple[float, float, str]:
        offer = next(_offers_in_preference(region, request))
        price = offer.on_demand_price if offer.on_demand_price is not None else UNKNOWN
        latency = catalog.latency_ms(request.origin_region, region.region)
        latency = float(latency) if latency is not None else UNKNOWN
        if request.on_demand_strategy == "latency":
            return (latency, price, region.region)
        return (price, latency, region.region)

    offering = [r for r in facts if r.error is None and any(_offers_in_preference(r, request))]
    pools: list[Pool] = []
    for region in sorted(offering, key=region_key):
        for offer in _offers_in_preference(region, request):
            pools.extend(
                Pool(
                    region=region.region,
                    availability_zone=z.availability_zone,
                    instance_type=offer.instance_type,
                    market="on-demand",
                    price=offer.on_demand_price,
                )
                for z in sorted(offer.zones, key=lambda z: z.availability_zone)
            )
    return pools


def _zone_order(zone: ZoneOffer, blended: bool) -> tuple:
    """Cheapest first; with blended scoring the AZ AWS rates likeliest to have capacity goes first."""
    by_price = (zone.spot_price is None, zone.spot_price or 0.0, zone.availability_zone)
    if blended:
        return (-(zone.placement_score or 0), *by_price)
    return by_price


def _offers_in_preference(region: RegionFacts, request: ResolvedRequest):
    by_type = {t.instance_type: t for t in region.types if t.zones}
    return (by_type[t] for t in request.instance_types if t in by_type)


def _offer(facts: list[RegionFacts], region: str, instance_type: str) -> TypeFacts:
    region_facts = next(r for r in facts if r.region == region)
    return next(t for t in region_facts.types if t.instance_type == instance_type)


def defer_recently_full(pools: list[Pool], recently_full: dict[str, int], now: float) -> list[Pool]:
    """Pools another run found empty moments ago go to the end, in their order, not out of the run:
    capacity comes back, and a pool tried last is still tried."""
    fresh = [p for p in pools if p.key not in recently_full]
    deferred = [
        p.model_copy(
            update={
                "note": f"answered capacity {int(now - recently_full[p.key])} s ago in another run; tried last",
                "deferred": True,
            }
        )
        for p in pools
        if p.key in recently_full
    ]
    return fresh + deferred


def leave_out_recently_full(pools: list[Pool], recently_full: dict[str, int], now: float, within: int) -> list[Pool]:
    """A try that reuses its facts asks no pool found full less than `within` seconds ago, by this
    run or another: its answer has most likely not changed yet (Karpenter keeps such offerings out
    for 3 minutes). The pools keep their order; the next try asks them again."""
    return [p for p in pools if p.key not in recently_full or now - recently_full[p.key] >= within]
