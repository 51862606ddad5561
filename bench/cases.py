"""A bench case: one market scenario and the request every strategy makes against it."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufill.local.scenario import MarketScenario

# Scarcity tiers, plenty first. A tier is how much of the market is sold out and how
# deep the rest is relative to the request; the plot groups cases by tier.
TIERS = ("plenty", "ample", "tight", "scarce", "nearly sold out")
# Sold-out share of a market's pools at which each tier ends (hand-written markets are
# placed by this measure; generated ones are built to land in their tier).
TIER_CEILINGS = (0.15, 0.35, 0.55, 0.75, 1.01)


@dataclass(frozen=True)
class Case:
    name: str
    scenario: dict  # a market scenario (docs/architecture.md, "The local engine")
    request: dict  # execution input, before a strategy adds its own fields
    tier: str
    source: str = "generated"
    notes: dict = field(default_factory=dict)

    @property
    def count(self) -> int:
        return int(self.request.get("count", 1))

    def market(self) -> MarketScenario:
        return MarketScenario.model_validate(self.scenario)

    def instance_types(self) -> list[str]:
        return list(self.request.get("instance_types") or [self.request.get("instance_type", "g6.xlarge")])

    def regions(self) -> list[str]:
        return list(self.request.get("regions") or sorted(self.scenario["regions"]))

    @property
    def sold_out_share(self) -> float:
        """Share of the requested spot pools (zone x type) with no capacity at all."""
        stocks = [
            types[t].get("spot", 0)
            for region in self.regions()
            for types in self.scenario["regions"].get(region, {}).get("zones", {}).values()
            for t in self.instance_types()
            if t in types
        ]
        return sum(1 for s in stocks if s == 0) / len(stocks) if stocks else 1.0


def tier_of(sold_out_share: float) -> str:
    return next(t for t, ceiling in zip(TIERS, TIER_CEILINGS) if sold_out_share < ceiling)
