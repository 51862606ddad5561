"""boto3 clients, one per service and region for the life of the container, and which failures are transient."""

from __future__ import annotations

from functools import cache

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

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


# Codes AWS answers when it is busy or briefly broken: worth the same call again later.
TRANSIENT_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestThrottled",
        "SlowDown",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
TRANSPORT_ERRORS = (ReadTimeoutError, ConnectTimeoutError, EndpointConnectionError, ConnectionClosedError)


class TransientAwsError(Exception):
    """An AWS call failed in a way a later try may not (throttling, 5xx, a timeout or a lost connection).

    Handlers raise it after botocore's own retries ran out; every state-machine task retries
    it with backoff and jitter. Its name is part of the state machine's contract.
    """


def is_transient(error: BaseException) -> bool:
    """Also true when a library wrapped the AWS error (Powertools Parameters raises GetParameterError from it)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if _transient(error):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def _transient(error: BaseException) -> bool:
    if isinstance(error, TRANSPORT_ERRORS):
        return True
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return code in TRANSIENT_CODES or status >= 500
    return False
