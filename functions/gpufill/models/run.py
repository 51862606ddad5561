"""The state a provisioning run carries from one state-machine step to the next."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MarketName = Literal["spot", "on-demand"]
Outcome = Literal["launched", "capacity", "quota", "throttled", "error"]
NextMove = Literal["launch", "halve", "advance", "done", "exhausted", "wait", "ready"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ZoneOffer(_Model):
    availability_zone: str
    zone_id: str | None = None
    spot_price: float | None = None
    placement_score: int | None = None


class TypeFacts(_Model):
    """What one region offers of one instance type."""

    instance_type: str
    zones: list[ZoneOffer] = Field(default_factory=list)
    advisor_tier: int | None = None
    on_demand_price: float | None = None

    @property
    def spot_price(self) -> float | None:
        prices = [z.spot_price for z in self.zones if z.spot_price is not None]
        return min(prices) if prices else None


class RegionFacts(_Model):
    """ScoreRegion's answer for one region: the facts, or why the region is out."""

    region: str
    types: list[TypeFacts] = Field(default_factory=list)
    error: str | None = None


class RegionScore(_Model):
    region: str
    instance_type: str
    spot_price: float | None = None
    az_count: int = 0
    advisor_tier: int | None = None
    placement_score: float | None = None
    points: dict[str, int] = Field(default_factory=dict)
    score: int = 0
    rank: str = "C"
    dropped: str | None = None


class Pool(_Model):
    """One place to ask for capacity: a region, an AZ, an instance type, a market."""

    region: str
    availability_zone: str
    instance_type: str
    market: MarketName
    price: float | None = None
    note: str | None = None

    @property
    def key(self) -> str:
        return f"{self.market}/{self.region}/{self.availability_zone}/{self.instance_type}"


class Attempt(_Model):
    region: str
    availability_zone: str
    instance_type: str
    market: MarketName
    batch: int
    launched: int
    outcome: Outcome
    reason: str | None = None
    note: str | None = None


class Instance(_Model):
    instance_id: str
    region: str
    availability_zone: str
    instance_type: str
    market: MarketName
    hourly_price: float | None = None
    state: str | None = None
    private_ip: str | None = None
    connect: str | None = None


class Plan(_Model):
    request_id: str
    status: Literal["PLANNED"] = "PLANNED"
    market: MarketName
    scoring: str = "classic"
    regions: list[RegionScore] = Field(default_factory=list)
    pools: list[Pool] = Field(default_factory=list)


class Run(_Model):
    """The fill loop's cursor and everything it has done so far."""

    cursor: int = 0
    batch: int
    remaining: int
    launched: int = 0
    next: NextMove = "launch"
    attempts: list[Attempt] = Field(default_factory=list)
    instances: list[Instance] = Field(default_factory=list)
    hourly_cost: float = 0.0
    blocked_regions: list[str] = Field(default_factory=list)
    cause: str | None = None
    lost: list[Instance] = Field(default_factory=list)
    boot_rounds: int = 0
    # For fleets too large to list a command per instance: the command with REGION and INSTANCE_ID to fill in.
    connect_template: str | None = None


class LaunchResult(_Model):
    """What one RunInstances call came back with, already classified."""

    outcome: Outcome
    reason: str | None = None
    instances: list[Instance] = Field(default_factory=list)
    note: str | None = None
