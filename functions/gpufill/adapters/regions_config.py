"""The deployed regions config: default regions and per-region launch overrides (an SSM parameter)."""

from __future__ import annotations

import json
import os
from functools import cache

from pydantic import BaseModel, ConfigDict, Field

from gpufill.adapters.aws import client
from gpufill.constants import ENV_REGIONS_PARAMETER


class RegionOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subnets: dict[str, str] = Field(default_factory=dict, description="availability zone -> subnet id")
    security_group: str | None = None
    ami: str | None = None


class RegionsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    regions: list[str]
    overrides: dict[str, RegionOverride] = Field(default_factory=dict)

    def override(self, region: str) -> RegionOverride:
        return self.overrides.get(region, RegionOverride())


@cache
def load() -> RegionsConfig:
    name = os.environ[ENV_REGIONS_PARAMETER]
    value = client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
    return RegionsConfig.model_validate(json.loads(value))
