"""Spot placement scores: AWS's own 1-10 estimate of how likely a spot request of this size succeeds.

Used as AWS defines them: one call per request with every acceptable instance type (AWS
warns that one or two types give scores that are always low) and up to 10 candidate regions,
the most a call takes: more regions are asked in calls of 10 (sorted, so the same candidates
make the same calls), each answering its top 10. AWS compares scores only within one answer;
past 10 candidates there is no single answer to be had, so the calls' scores are read side by
side on their 1-10 scale. Each call is one configuration against the account's 24-hour limit.
Two levels: per AZ (`scores`, SingleAvailabilityZone: what a launch into one AZ meets) and
per region (`region_scores`: AWS assumes a fleet free to use every AZ, which is what a
fleet launch is). The API limits how many distinct configurations an account may ask about in
24 hours, so an answer is kept for every run of the deployment in the capacity table (with
a TTL) as well as in the container. Any failure, AccessDenied included, returns None: the
ranking then goes without them (blended falls back to the classic formula, price-capacity
to price alone) and the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import os

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import clock, container
from gpufill.adapters.aws import client, resource
from gpufill.constants import (
    CAPACITY_TABLE_KEY,
    ENV_CAPACITY_TABLE,
    INSTANCES_TTL_ATTRIBUTE,
    LOCAL_HOME_REGION,
    PLACEMENT_SCORE_REGIONS_PER_CALL,
)

logger = Logger(child=True)
KEEP_SECONDS = 600
# Each function's own answers: config key -> (monotonic time kept, scores).
_cache: container.PerFunction[dict[str, tuple[float, dict]]] = container.PerFunction(dict)

ZoneScores = dict[tuple[str, str], int]  # (region, AZ id) -> score
RegionScores = dict[str, int]  # region -> score


def scores(
    instance_types: list[str], target_capacity: int, regions: list[str], *, home_region: str = LOCAL_HOME_REGION
) -> ZoneScores | None:
    return _scores(instance_types, target_capacity, regions, home_region, single_zone=True)


def region_scores(
    instance_types: list[str], target_capacity: int, regions: list[str], *, home_region: str = LOCAL_HOME_REGION
) -> RegionScores | None:
    return _scores(instance_types, target_capacity, regions, home_region, single_zone=False)


def _scores(
    instance_types: list[str], target_capacity: int, regions: list[str], home_region: str, *, single_zone: bool
) -> dict | None:
    key = _config_key(instance_types, target_capacity, regions, single_zone)
    mine = _cache.mine()
    kept = mine.get(key)
    # The answer's age on the clock every run reads (modelled on the local engine, where a container's
    # wall seconds would keep an answer through hours of modelled waiting that AWS would ask again).
    if kept and 0 <= clock.epoch() - kept[0] < KEEP_SECONDS:
        return kept[1]
    found = _shared(key)
    if found is None:
        try:
            found = _ask(instance_types, target_capacity, regions, home_region, single_zone)
        except (ClientError, BotoCoreError) as error:
            logger.warning("spot placement scores unavailable; ranking without them", extra={"error": str(error)})
            return None
        _share(key, found)
    mine[key] = (clock.epoch(), found)
    return found


def _ask(instance_types: list[str], target_capacity: int, regions: list[str], home_region: str, single_zone: bool) -> dict:
    found: dict = {}
    paginator = client("ec2", home_region).get_paginator("get_spot_placement_scores")
    for chunk in region_chunks(regions):
        pages = paginator.paginate(
            InstanceTypes=sorted(set(instance_types)),
            TargetCapacity=target_capacity,
            TargetCapacityUnitType="units",
            SingleAvailabilityZone=single_zone,
            RegionNames=chunk,
        )
        for page in pages:
            for entry in page["SpotPlacementScores"]:
                key = (entry["Region"], entry["AvailabilityZoneId"]) if single_zone else entry["Region"]
                found[key] = int(entry["Score"])
    return found


def region_chunks(regions: list[str]) -> list[list[str]]:
    """The candidate regions, sorted and without repeats, in calls of at most 10 (EC2's limit)."""
    ordered = sorted(set(regions))
    size = PLACEMENT_SCORE_REGIONS_PER_CALL
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def _config_key(instance_types: list[str], target_capacity: int, regions: list[str], single_zone: bool) -> str:
    config = {"types": sorted(set(instance_types)), "capacity": target_capacity, "regions": sorted(set(regions))}
    if not single_zone:  # AZ-level keys stay as they were, so answers already shared still match
        config["level"] = "region"
    return "placement#" + hashlib.sha256(json.dumps(config).encode()).hexdigest()[:24]


def _shared(key: str) -> dict | None:
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
    # AZ level: [region, AZ id, score]; region level: [region, score].
    return {(row[0], row[1]) if len(row) == 3 else row[0]: row[-1] for row in json.loads(item["scores"])}


def _share(key: str, found: dict) -> None:
    name = os.environ.get(ENV_CAPACITY_TABLE)
    if not name:
        return
    try:
        resource("dynamodb").Table(name).put_item(
            Item={
                CAPACITY_TABLE_KEY: key,
                "scores": json.dumps([[*(k if isinstance(k, tuple) else (k,)), s] for k, s in sorted(found.items())]),
                INSTANCES_TTL_ATTRIBUTE: int(clock.epoch() + KEEP_SECONDS),
            }
        )
    except (ClientError, BotoCoreError) as error:
        logger.warning("placement scores not shared", extra={"error": str(error)})


def reset() -> None:
    _cache.forget_all()
