"""The market as the policy-level simulators see it: spot pools, capacity, quotas, classic region order.

It answers RunInstances as the local engine's simulated market does
(gpufill.local.market): a launch whose MinCount exceeds what a pool has left fails
on capacity, and one whose MaxCount would take the region's running spot vCPUs past
its quota fails on quota.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufill import catalog
from gpufill.local.market import DEFAULT_VCPUS
from gpufill.models.run import RegionFacts, TypeFacts, ZoneOffer
from gpufill.policy import scoring

from bench.cases import Case


@dataclass(frozen=True)
class SpotPool:
    region: str
    zone: str
    instance_type: str
    price: float
    capacity: int

    @property
    def vcpus(self) -> int:
        return catalog.vcpus(self.instance_type) or DEFAULT_VCPUS


class SpotMarket:
    """The requested spot pools of one case, and what is left in them as a simulator launches."""

    def __init__(self, case: Case):
        self.case = case
        self.types = case.instance_types()
        self.regions = [r for r in case.regions() if r in case.scenario["regions"]]
        self.pools: list[SpotPool] = []
        self.quota_vcpus: dict[str, int | None] = {}
        for region in self.regions:
            market = case.scenario["regions"][region]
            self.quota_vcpus[region] = (market.get("quota") or {}).get("spot_vcpus")
            for zone, types in sorted(market.get("zones", {}).items()):
                for itype in self.types:
                    stock = types.get(itype)
                    if stock is None:
                        continue
                    # A pool without a spot price is billed at most the on-demand price.
                    price = stock.get("spot_price") or catalog.on_demand_price(itype, region) or 0.0
                    self.pools.append(SpotPool(region, zone, itype, price, stock.get("spot", 0)))
        self.left = {pool: pool.capacity for pool in self.pools}
        self.running_vcpus = {region: 0 for region in self.regions}

    # --- answering a launch --------------------------------------------------------------

    def quota_room(self, region: str, vcpus: int) -> int:
        """How many more instances of `vcpus` the region's spot quota lets run."""
        limit = self.quota_vcpus.get(region)
        if limit is None:
            return 10**9
        return max(0, (limit - self.running_vcpus[region]) // vcpus)

    def take(self, pool: SpotPool, count: int) -> None:
        if count > min(self.left[pool], self.quota_room(pool.region, pool.vcpus)):
            raise ValueError(f"{pool} cannot launch {count}")
        self.left[pool] -= count
        self.running_vcpus[pool.region] += count * pool.vcpus

    # --- what a scorer sees ------------------------------------------------------------------

    def facts(self) -> list[RegionFacts]:
        """What ScoreRegion would report for each region: offered zones, spot prices, advisor tiers."""
        facts = []
        for region in self.regions:
            market = self.case.scenario["regions"][region]
            types = []
            for itype in self.types:
                zones = [
                    ZoneOffer(availability_zone=zone, spot_price=offered[itype].get("spot_price"))
                    for zone, offered in sorted(market.get("zones", {}).items())
                    if itype in offered
                ]
                types.append(
                    TypeFacts(
                        instance_type=itype,
                        zones=zones,
                        advisor_tier=market.get("advisor_tier", {}).get(itype),
                        on_demand_price=catalog.on_demand_price(itype, region),
                    )
                )
            facts.append(RegionFacts(region=region, types=types))
        return facts

    def classic_order(self) -> list[tuple[str, str]]:
        """(region, type) best classic score first: a region's best type score, then types in preference order."""
        scores = [s for t in self.types for s in scoring.score_regions(self.facts(), t) if s.dropped is None]
        best: dict[str, tuple] = {}
        for s in scores:
            key = (-s.score, s.spot_price, s.region)
            best[s.region] = min(best.get(s.region, key), key)
        scored = {(s.region, s.instance_type) for s in scores}
        return [(region, t) for _, _, region in sorted(best.values()) for t in self.types if (region, t) in scored]

    def pools_of(self, region: str, instance_type: str) -> list[SpotPool]:
        return [p for p in self.pools if p.region == region and p.instance_type == instance_type]
