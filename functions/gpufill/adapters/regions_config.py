"""The deployed regions config: default regions and per-region launch overrides (an SSM parameter)."""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.parameters import SSMProvider
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


# Each function's own provider, and so its own cache of the parameter (Powertools' default
# provider is one per process). The CDK app imports this module for the model alone: no client
# is made until a function loads the config.
_providers: container.PerFunction[SSMProvider] = container.PerFunction(SSMProvider)


def load() -> RegionsConfig:
    value = _providers.mine().get(os.environ[ENV_REGIONS_PARAMETER], max_age=MAX_AGE_SECONDS, transform="json")
    return RegionsConfig.model_validate(value)


def forget() -> None:
    _providers.forget_all()
