"""The deployed regions config: default regions and per-region launch overrides (an SSM parameter)."""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities import parameters
from pydantic import BaseModel, ConfigDict, Field

from gpufill.constants import ENV_REGIONS_PARAMETER

# A changed parameter reaches running Lambda containers within this many seconds.
MAX_AGE_SECONDS = 60


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


def load() -> RegionsConfig:
    value = parameters.get_parameter(os.environ[ENV_REGIONS_PARAMETER], max_age=MAX_AGE_SECONDS, transform="json")
    return RegionsConfig.model_validate(value)


def forget() -> None:
    parameters.clear_caches()
