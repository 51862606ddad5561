"""Spot placement scores: AWS's own 1-10 estimate of how likely a spot request of this size succeeds, per AZ.

Used as AWS defines them: one call per request with every acceptable instance type (AWS
warns that one or two types give scores that are always low), AZ level, every candidate
region at once; only the top 10 AZs come back, and scores are comparable only within that
one answer. The API limits how many distinct configurations an account may ask about in
24 hours, so an answer is kept for every run of the deployment in the capacity table (with
a TTL) as well as in the container. Any failure, AccessDenied included, returns None: the
ranking then falls back to the classic formula and the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import clock
from gpufill.adapters.aws import client, resource
from gpufill.constants import CAPACITY_TABLE_KEY, ENV_CAPACITY_TABLE, INSTANCES_TTL_ATTRIBUTE, LOCAL_HOME_REGION

logger = Logger(child=True)
KEEP_SECONDS = 600
_cache: dict[str, tuple[float, dict]] = {}

ZoneScores = dict[tuple[str, str], int]  # (region, AZ id) -> score


def scores(
    instance_types: list[str], target_capacity: int, regions: list[str], *, home_region: str = LOCAL_HOME_REGION
) -> ZoneScores | None:
    key = _config_key(instance_types, target_capacity, regions)
    kept = _cache.get(key)
    if kept and time.monotonic() - kept[0] < KEEP_SECONDS:
        return kept[1]
    found = _shared(key)
    if found is None:
        try:
            found = _ask(instance_types, target_capacity, regions, home_region)
        except (ClientError, BotoCoreError) as error:
            logger.warning("spot placement scores unavailable; classic scoring", extra={"error": str(error)})
            return None
        _share(key, found)
    _cache[key] = (time.monotonic(), found)
    return found


def _ask(instance_types: list[str], target_capacity: int, regions: list[str], home_region: str) -> ZoneScores:
    found: ZoneScores = {}
    pages = client("ec2", home_region).get_paginator("get_spot_placement_scores").paginate(
        InstanceTypes=sorted(set(instance_types)),
        TargetCapacity=target_capacity,
        TargetCapacityUnitType="units",
        SingleAvailabilityZone=True,
        RegionNames=sorted(set(regions)),
    )
    for page in pages:
        for entry in page["SpotPlacementScores"]:
            found[(entry["Region"], entry["AvailabilityZoneId"])] = int(entry["Score"])
    return found


def _config_key(instance_types: list[str], target_capacity: int, regions: list[str]) -> str:
    config = {"types": sorted(set(instance_types)), "capacity": target_capacity, "regions": sorted(set(regions))}
    return "placement#" + hashlib.sha256(json.dumps(config).encode()).hexdigest()[:24]


def _shared(key: str) -> ZoneScores | None:
    """Another run's answer to the same configuration, while it is fresh."""
    name = os.environ.get(ENV_CAPACITY_TABLE)
    if not name:
        return None
    try:
        item = resource("dynamodb").Table(name).get_item(Key={CAPACITY_TABLE_KEY: key}).get("Item")
    except (ClientError, BotoCoreError) as error:
        logger.warning("shared placement scores unreadable", extra={"error": str(error)})
        return None
    if not item or int(item.get(INSTANCES_TTL_ATTRIBUTE, 0)) < clock.epoch():
        return None
    return {(region, zone): score for region, zone, score in json.loads(item["scores"])}


def _share(key: str, found: ZoneScores) -> None:
    name = os.environ.get(ENV_CAPACITY_TABLE)
    if not name:
        return
    try:
        resource("dynamodb").Table(name).put_item(
            Item={
                CAPACITY_TABLE_KEY: key,
                "scores": json.dumps([[r, z, s] for (r, z), s in sorted(found.items())]),
                INSTANCES_TTL_ATTRIBUTE: int(clock.epoch() + KEEP_SECONDS),
            }
        )
    except (ClientError, BotoCoreError) as error:
        logger.warning("placement scores not shared", extra={"error": str(error)})


def reset() -> None:
    _cache.clear()
