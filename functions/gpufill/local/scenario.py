"""Market scenarios (docs/architecture.md, "The local engine"): who has what capacity, at what price."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    StrictInt,
    field_validator,
    model_validator,
)

# The steps startup/startup.sh reports in the tag gpufill:startup-step, in order, with the share of
# the time to serving at which the engine reports each (the image and the model take the most).
STARTUP_TIMELINE = (
    ("preparing storage", 0.0),
    ("installing watchdog", 0.05),
    ("pulling image and syncing model", 0.1),
    ("syncing model", 0.45),
    ("starting vLLM", 0.7),
    ("loading model", 0.75),
    ("serving", 1.0),
)
StartupStep = Literal[
    "preparing storage", "installing watchdog", "pulling image and syncing model", "syncing model",
    "starting vLLM", "loading model",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Startup(_Model):
    """How startup.sh goes on an instance (gpufill's extension): its model server answers
    `serving_after_seconds` of modelled time after the launch, unless it stalls at a step (never
    leaves it) or fails at one (reports "failed: <step>" when the next step would have come)."""

    serving_after_seconds: NonNegativeFloat = 240.0
    stalls_at: StartupStep | None = None
    fails_at: StartupStep | None = None

    @model_validator(mode="after")
    def _one_ending(self) -> Startup:
        if self.stalls_at and self.fails_at:
            raise ValueError("give stalls_at or fails_at, not both")
        return self


class ZoneStock(_Model):
    spot_price: PositiveFloat | None = None
    spot: NonNegativeInt = 0
    on_demand: NonNegativeInt = 0
    # gpufill's extension of the format: how many spot instances launched here are reclaimed at once,
    # before they ever run (they launch, then go straight to terminated).
    reclaimed_at_launch: NonNegativeInt = 0
    # gpufill's extension: an AZ-level spot placement score (1-10); the region's placement_score otherwise.
    placement_score: int | None = Field(default=None, ge=1, le=10)
    # gpufill's extension: how many instances one cluster placement group can hold here (the free
    # slots of one network segment, in both markets); unset: as many as the zone has.
    cluster: NonNegativeInt | None = None
    # gpufill's extension: how startup goes on instances launched here (the scenario's `startup` otherwise).
    startup: Startup | None = None


class Quota(_Model):
    spot_vcpus: NonNegativeInt | None = None
    on_demand_vcpus: NonNegativeInt | None = None


class RegionMarket(_Model):
    advisor_tier: dict[str, int] = Field(default_factory=dict)
    placement_score: dict[str, int] = Field(default_factory=dict)
    quota: Quota = Field(default_factory=Quota)
    zones: dict[str, dict[str, ZoneStock]] = Field(default_factory=dict)


class Restock(_Model):
    """Capacity that appears later: `at_seconds` of modelled time after the engine starts, the
    zone can launch this many more of `type` (a zone and type the scenario already lists)."""

    at_seconds: NonNegativeFloat
    zone: str
    type: str
    spot: NonNegativeInt = 0
    on_demand: NonNegativeInt = 0


class Drain(_Model):
    """gpufill's extension: other accounts take capacity. At `at_seconds` of modelled time they
    launch `spot` instances of `type` in the zone (one the scenario already lists): its free spot
    capacity falls by that, never below zero. When they want more than is free, EC2 takes capacity
    back from running spot instances; it spreads that over every account in the pool, so this
    account loses one, its newest running there, warned two minutes ahead as an interruption."""

    at_seconds: NonNegativeFloat
    zone: str
    type: str
    spot: StrictInt = Field(ge=1)


class Interruption(_Model):
    """EC2 reclaims an instance: at `at_seconds` of modelled time, the `instance`-th instance
    launched in the account (1-based, in launch order across regions). A spot instance is warned
    and terminated two minutes later; an on-demand one ends at once (a host failure)."""

    at_seconds: NonNegativeFloat
    instance: StrictInt = Field(ge=1)


class CapacityReservation(_Model):
    """gpufill's extension: an On-Demand Capacity Reservation the account holds (local/reservations.py).
    `match` is EC2's InstanceMatchCriteria: an "open" one takes any On-Demand launch of its type and
    AZ that does not opt out, a "targeted" one only launches that name it. `for_deployment` tags it
    `gpufill:deployment=<the engine's first deployment>`, as an operator marks a reservation for gpufill."""

    id: str | None = Field(default=None, pattern=r"^cr-[0-9a-f]{17}$")
    zone: str
    type: str
    count: StrictInt = Field(ge=1)
    match: Literal["open", "targeted"] = "open"
    state: Literal["active", "pending", "expired", "cancelled"] = "active"
    for_deployment: bool = True
    tags: dict[str, str] = Field(default_factory=dict)


class CapacityBlockOffer(_Model):
    """gpufill's extension: a Capacity Block for ML offered for sale (local/capacity_blocks.py):
    `count` instances of `type` in `zone`, starting `start_in_hours` after the engine starts, for
    `duration_hours`, at `upfront_fee` US dollars."""

    id: str | None = Field(default=None, pattern=r"^cb-[0-9a-f]{17}$")
    zone: str
    type: str
    count: StrictInt = Field(ge=1)
    start_in_hours: NonNegativeFloat = 0
    duration_hours: StrictInt = Field(ge=1)
    upfront_fee: NonNegativeFloat


class MarketScenario(_Model):
    description: str = ""
    regions: dict[str, RegionMarket] = Field(default_factory=dict)
    # gpufill's extension: capacity that appears during a run (waits are fast-forwarded).
    restock: list[Restock] = Field(default_factory=list)
    # gpufill's extension: capacity other accounts take during a run, reclaiming from it when short (see Drain).
    drain: list[Drain] = Field(default_factory=list)
    # gpufill's extension: how startup.sh goes on every instance, unless its zone and type say otherwise.
    startup: Startup = Field(default_factory=Startup)
    # gpufill's extension: instances EC2 takes away at a modelled second (see Interruption).
    interruptions: list[Interruption] = Field(default_factory=list)
    # gpufill's extension: On-Demand Capacity Reservations the account holds (see CapacityReservation).
    capacity_reservations: list[CapacityReservation] = Field(default_factory=list)
    # gpufill's extension: Capacity Block offerings for sale (see CapacityBlockOffer).
    capacity_blocks: list[CapacityBlockOffer] = Field(default_factory=list)
    # gpufill's extension: EC2's API throttling at AWS's bucket sizes times this (local/throttling.py);
    # 0 turns it off. LocalEngine(throttling=...) overrides it.
    ec2_throttling: NonNegativeFloat = 1.0

    @field_validator("regions")
    @classmethod
    def _known_regions(cls, value: dict[str, RegionMarket]) -> dict[str, RegionMarket]:
        # The simulated account has the regions gpufill's catalog knows, as a request may name them.
        from gpufill import catalog

        unknown = [r for r in value if r not in catalog.known_regions()]
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))} {'is not a region' if len(unknown) == 1 else 'are not regions'} "
                f"gpufill knows; use one of {', '.join(sorted(catalog.known_regions()))}"
            )
        return value

    @model_validator(mode="after")
    def _zones_belong_to_their_region(self) -> MarketScenario:
        for region, market in self.regions.items():
            for zone in market.zones:
                if not zone.startswith(region) or len(zone) != len(region) + 1:
                    raise ValueError(f"regions.{region}.zones: {zone!r} is not an availability zone of {region}")
        for i, held in enumerate(self.capacity_reservations):
            region = held.zone[:-1]
            if held.type not in self.regions.get(region, RegionMarket()).zones.get(held.zone, {}):
                raise ValueError(
                    f"capacity_reservations[{i}]: {held.zone} does not list {held.type}; list it under "
                    f"regions.{region}.zones.{held.zone} (with spot and on_demand 0 if the reservation is all it has)"
                )
        ids = [held.id for held in self.capacity_reservations if held.id]
        if len(set(ids)) != len(ids):
            raise ValueError("capacity_reservations: an id is given twice")
        for field, events in (("restock", self.restock), ("drain", self.drain)):
            for i, event in enumerate(events):
                region = event.zone[:-1]
                if event.type not in self.regions.get(region, RegionMarket()).zones.get(event.zone, {}):
                    raise ValueError(
                        f"{field}[{i}]: {event.zone} does not list {event.type}; list it under "
                        f"regions.{region}.zones.{event.zone} (with spot 0) so the zone offers the type"
                    )
        return self

    def startup_for(self, zone: str, instance_type: str) -> Startup:
        stock = self.regions.get(zone[:-1], RegionMarket()).zones.get(zone, {}).get(instance_type)
        return stock.startup if stock is not None and stock.startup is not None else self.startup

    @classmethod
    def load(cls, path: str | Path) -> MarketScenario:
        return cls.model_validate(json.loads(Path(path).read_text()))

    def advisor_document(self) -> dict:
        """The scenario's tiers in the Spot Advisor feed's own shape."""
        return {
            "ranges": [{"index": i, "label": label} for i, label in enumerate(["<5%", "5-10%", "10-15%", "15-20%", ">20%"])],
            "spot_advisor": {
                region: {"Linux": {t: {"s": 70, "r": tier} for t, tier in m.advisor_tier.items()}}
                for region, m in self.regions.items()
            },
        }
