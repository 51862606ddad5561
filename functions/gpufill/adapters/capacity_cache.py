"""Capacity errors shared across executions: a pool that just said "no capacity" is tried last by the next run.

A cache problem never fails a run: it only costs the run the knowledge.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger

from gpufill.adapters import clock
from gpufill.adapters.aws import client, resource
from gpufill.constants import (
    CAPACITY_TABLE_KEY,
    DEFAULT_CAPACITY_CACHE_SECONDS,
    ENV_CAPACITY_CACHE_SECONDS,
    ENV_CAPACITY_TABLE,
    INSTANCES_TTL_ATTRIBUTE,
)

logger = Logger(child=True)
BATCH_GET_LIMIT = 100


def ttl_seconds() -> int:
    return int(os.environ.get(ENV_CAPACITY_CACHE_SECONDS, DEFAULT_CAPACITY_CACHE_SECONDS))


def remember_full(pool_key: str, *, request_id: str, reason: str, now: float | None = None) -> None:
    name = os.environ.get(ENV_CAPACITY_TABLE)
    if not name or ttl_seconds() <= 0:
        return
    now = clock.epoch() if now is None else now
    try:
        resource("dynamodb").Table(name).put_item(
            Item={
                CAPACITY_TABLE_KEY: pool_key,
                INSTANCES_TTL_ATTRIBUTE: int(now + ttl_seconds()),
                "seen_at": int(now),
                "request_id": request_id,
                "reason": reason,
            }
        )
    except Exception as error:  # noqa: BLE001 (see module docstring)
        logger.warning("capacity cache write failed", extra={"pool": pool_key, "error": str(error)})


def recently_full(pool_keys: list[str], *, now: float | None = None) -> dict[str, int]:
    """pool key -> when it said "no capacity" (epoch seconds), for pools whose entry has not expired."""
    name = os.environ.get(ENV_CAPACITY_TABLE)
    if not name or ttl_seconds() <= 0 or not pool_keys:
        return {}
    now = clock.epoch() if now is None else now
    found: dict[str, int] = {}
    unique = list(dict.fromkeys(pool_keys))
    try:
        for start in range(0, len(unique), BATCH_GET_LIMIT):
            keys = [{CAPACITY_TABLE_KEY: {"S": k}} for k in unique[start : start + BATCH_GET_LIMIT]]
            request = {name: {"Keys": keys}}
            while request:
                reply = client("dynamodb").batch_get_item(RequestItems=request)
                for item in reply["Responses"].get(name, []):
                    if int(item[INSTANCES_TTL_ATTRIBUTE]["N"]) > now:
                        found[item[CAPACITY_TABLE_KEY]["S"]] = int(item["seen_at"]["N"])
                request = reply.get("UnprocessedKeys") or None
    except Exception as error:  # noqa: BLE001 (see module docstring)
        logger.warning("capacity cache read failed", extra={"error": str(error)})
        return {}
    return found
