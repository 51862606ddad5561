"""Spot placement scores: AWS's own 1-10 estimate of how likely a spot request of this size succeeds, per AZ.

Asked once per instance type for all regions (ten regions per call, the API's limit) and
kept for the life of the container. Any failure, AccessDenied included, returns None:
the ranking then falls back to the classic formula and the run goes on.
"""

from __future__ import annotations

import time

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters.aws import client
from gpufill.constants import LOCAL_HOME_REGION

logger = Logger(child=True)
REGIONS_PER_CALL = 10
KEEP_SECONDS = 300
_cache: dict[tuple, tuple[float, dict]] = {}

ZoneScores = dict[tuple[str, str], int]  # (region, AZ id) -> score


def scores(instance_type: str, target_capacity: int, regions: list[str], *, home_region: str = LOCAL_HOME_REGION) -> ZoneScores | None:
    key = (instance_type, target_capacity, tuple(sorted(regions)))
    kept = _cache.get(key)
    if kept and time.monotonic() - kept[0] < KEEP_SECONDS:
        return kept[1]
    found: ZoneScores = {}
    try:
        ec2 = client("ec2", home_region)
        for start in range(0, len(regions), REGIONS_PER_CALL):
            pages = ec2.get_paginator("get_spot_placement_scores").paginate(
                InstanceTypes=[instance_type],
                TargetCapacity=target_capacity,
                TargetCapacityUnitType="units",
                SingleAvailabilityZone=True,
                RegionNames=regions[start : start + REGIONS_PER_CALL],
            )
            for page in pages:
                for entry in page["SpotPlacementScores"]:
                    found[(entry["Region"], entry["AvailabilityZoneId"])] = int(entry["Score"])
    except (ClientError, BotoCoreError) as error:
        logger.warning("spot placement scores unavailable; classic scoring", extra={"error": str(error)})
        return None
    _cache[key] = (time.monotonic(), found)
    return found


def reset() -> None:
    _cache.clear()
