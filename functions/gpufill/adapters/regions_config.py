"""The deployed regions config: default regions and per-region launch overrides (an SSM parameter)."""

from __future__ import annotations

import json
import os
import time

from pydantic import BaseModel, ConfigDict, Field

from gpufill.adapters import container
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


# Each function's own copy of the parameter: name -> (monotonic time read, value).
_kept: container.PerFunction[dict[str, tuple[float, dict]]] = container.PerFunction(dict)


def load() -> RegionsConfig:
    name = os.environ[ENV_REGIONS_PARAMETER]
    mine = _kept.mine()
    kept = mine.get(name)
    if kept is None or time.monotonic() - kept[0] >= MAX_AGE_SECONDS:
        kept = mine[name] = (time.monotonic(), _read(name))
    return RegionsConfig.model_validate(kept[1])


def _read(name: str) -> dict:
    # Imported here: the CDK app imports this module for the model alone, without boto3's clients.
    from gpufill.adapters.aws import client

    return json.loads(client("ssm").get_parameter(Name=name)["Parameter"]["Value"])


def forget() -> None:
    _kept.forget_all()
