"""Typed events of the state machine's Lambda tasks (what each task's Parameters block sends)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from gpufill.models.request import ProvisionRequest
from gpufill.models.run import MarketName, Pool, RegionFacts, Run


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ValidateEvent(_Event):
    request_id: str
    input: Any


class ScoreRegionEvent(_Event):
    request_id: str
    region: str
    instance_types: list[str]


class RankEvent(_Event):
    request: ProvisionRequest
    facts: list[RegionFacts]
    market: MarketName | None = None


class LoopEvent(_Event):
    request: ProvisionRequest
    pools: list[Pool]
    run: Run
    market: MarketName | None = None


class HalveEvent(_Event):
    run: Run
