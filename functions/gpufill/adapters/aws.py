"""boto3 clients, one per service and region for the life of the container."""

from __future__ import annotations

from functools import cache

import boto3
from botocore.config import Config

# "standard" retries throttling codes such as RequestLimitExceeded with jittered backoff.
RETRIES = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=20)


@cache
def client(service: str, region: str | None = None):
    return boto3.client(service, region_name=region, config=RETRIES)


@cache
def resource(service: str, region: str | None = None):
    return boto3.resource(service, region_name=region, config=RETRIES)


def forget_clients() -> None:
    """Drop cached clients (the local engine does this when its simulated account starts and ends)."""
    client.cache_clear()
    resource.cache_clear()
