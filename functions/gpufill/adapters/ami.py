"""The AMI each region launches: the config's override, else the public Deep Learning AMI parameter."""

from __future__ import annotations

from gpufill.adapters import container, regions_config
from gpufill.adapters.aws import client
from gpufill.constants import DLAMI_PARAMETER


@container.cached()
def image_for(region: str) -> str:
    override = regions_config.load().override(region).ami
    return override or latest_public(region)


def latest_public(region: str) -> str:
    return client("ssm", region).get_parameter(Name=DLAMI_PARAMETER)["Parameter"]["Value"]


def resolve_again(region: str) -> str:
    """After InvalidAMIID: ask the public parameter again, bypassing this function's cache and any stale override."""
    image_for.cache_clear()
    return latest_public(region)


def resolve(region: str, *, fresh: bool) -> str:
    return resolve_again(region) if fresh else image_for(region)
