"""The market as the policy-level simulators see it: spot pools, capacity, quotas, classic region order.

It answers RunInstances as the local engine's simulated market does
(gpufill.local.market): a launch whose MinCount exceeds what a pool has left fails
on capacity, and one whose MaxCount would take the region's running spot vCPUs past
its quota fails on quota.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufill import catalog
from gpufill.local.fleet_allocation import Pool as AllocationPool
from gpufill.local.fleet_allocation import allocate
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


# --- what a strategy may see and call ------------------------------------------------------------

# Fields of a zone's stock that only EC2 knows: how much is left, and what happens to a launch.
HIDDEN_FIELDS = ("spot", "on_demand", "reclaimed_at_launch", "cluster", "startup")


def public_scenario(scenario: dict) -> dict:
    """The scenario with every hidden field of every zone's stock taken out: prices, tiers and scores stay."""
    regions = {}
    for region, market in scenario.get("regions", {}).items():
        zones = {
            zone: {t: {k: v for k, v in stock.items() if k not in HIDDEN_FIELDS} for t, stock in types.items()}
            for zone, types in market.get("zones", {}).items()
        }
        regions[region] = {**{k: v for k, v in market.items() if k != "zones"}, "zones": zones}
    return {"regions": regions}


class PublicView:
    """What AWS tells any account about a case's market: offered zones and types, spot prices,
    Spot Advisor tiers, placement scores as returned, and the account's spot quotas. No capacity:
    the simulated strategies are given this and an Ec2 client, never the SpotMarket."""

    def __init__(self, case: Case):
        self.count = case.count
        self.types = case.instance_types()
        self.scenario = public_scenario(case.scenario)
        self.regions = [r for r in case.regions() if r in self.scenario["regions"]]
        public_case = Case(name=case.name, scenario=self.scenario, request=case.request, tier=case.tier)
        self._market = SpotMarket(public_case)  # built from the public scenario: every capacity reads 0

    def offers(self, region: str, instance_type: str) -> list[tuple[str, float]]:
        """(zone, spot price) where the region offers the type."""
        return [(p.zone, p.price) for p in self._market.pools_of(region, instance_type)]

    def quota_vcpus(self, region: str) -> int | None:
        return self._market.quota_vcpus.get(region)

    def classic_order(self) -> list[tuple[str, str]]:
        return self._market.classic_order()


@dataclass
class Launched:
    """One launch call's answer: instances by (zone, type), and the pools that answered with an error."""

    instances: dict[tuple[str, str], int]
    errors: dict[tuple[str, str], str]
    price: float

    @property
    def count(self) -> int:
        return sum(self.instances.values())


class Ec2:
    """The launch APIs a simulated strategy calls, answered from the hidden market; each call is counted."""

    def __init__(self, case: Case):
        self.__market = SpotMarket(case)
        self.calls: dict[str, int] = {}

    def _count(self, api: str) -> None:
        self.calls[api] = self.calls.get(api, 0) + 1

    def _room(self, region: str, vcpus: int) -> int:
        return self.__market.quota_room(region, vcpus)

    def run_instances(self, region: str, instance_type: str, max_count: int, min_count: int = 1) -> Launched:
        """RunInstances with no subnet named: EC2 uses a default subnet of the default VPC, so one AZ.

        EC2 does not document how it picks that AZ; the model gives the caller its best case,
        the AZ that can launch the most (the cheapest among equals). MaxCount past the region's
        spot vCPU quota fails on quota, as the local engine's market answers; fewer than
        MinCount available anywhere fails on capacity.
        """
        self._count("RunInstances")
        market = self.__market
        pools = market.pools_of(region, instance_type)
        if not pools:
            return Launched({}, {(region, instance_type): "unsupported"}, 0.0)
        if max_count > market.quota_room(region, pools[0].vcpus):
            return Launched({}, {(region, instance_type): "quota"}, 0.0)
        best = min(pools, key=lambda p: (-market.left[p], p.price, p.zone))
        take = min(max_count, market.left[best])
        if take < min_count:
            return Launched({}, {(region, instance_type): "capacity"}, 0.0)
        market.take(best, take)
        return Launched({(best.zone, instance_type): take}, {}, round(take * best.price, 4))

    def create_fleet(self, region: str, overrides: list[tuple[str, str]], target: int) -> Launched:
        """CreateFleet, type instant, spot, price-capacity-optimized, one override per (zone, type).

        Answered by the same allocation model as the local engine's CreateFleet
        (gpufill.local.fleet_allocation), so a simulated Karpenter and gpufill's fleets on the
        engine meet one EC2: the cheapest pool that holds the whole target, else the deepest
        pools first; partial fulfilment up to the region's spot vCPU quota; an error for every
        override found empty (or emptied when the fleet fell short) or cut short by the quota.
        """
        self._count("CreateFleet")
        market = self.__market
        wanted = set(overrides)
        pools = {(p.zone, p.instance_type): p for p in market.pools if p.region == region and (p.zone, p.instance_type) in wanted}
        ordered = [pools[o] for o in overrides if o in pools]
        limit = market.quota_vcpus.get(region)
        room = None if limit is None else max(0, limit - market.running_vcpus[region])
        allocation = allocate(
            [AllocationPool(key=(p.zone, p.instance_type), left=market.left[p], price=p.price, vcpus=p.vcpus) for p in ordered],
            target,
            "price-capacity-optimized",
            quota_vcpus=room,
        )
        price = 0.0
        for key, count in allocation.counts.items():
            market.take(pools[key], count)
            price += count * pools[key].price
        return Launched(dict(allocation.counts), dict(allocation.errors), round(price, 4))
