"""boto3 clients, one per service and region for the life of the container, and which failures are transient."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache

import boto3
from botocore.config import Config
from botocore.retries import standard
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from gpufill.policy.errors import CAPACITY_CODES, classify

# "standard" retries throttling codes such as RequestLimitExceeded with jittered backoff.
RETRIES = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=20)
# The attempts of the AWS calls made inside `attempts()`: "unreached" for one that could not
# connect, "reached" for one that got an answer or may have arrived (a read timeout).
_attempts: ContextVar[list[str] | None] = ContextVar("gpufill_aws_attempts", default=None)


@cache
def client(service: str, region: str | None = None):
    made = boto3.client(service, region_name=region, config=RETRIES)
    if service == "ec2":
        _capacity_is_an_answer(made)
    made.meta.events.register(f"needs-retry.{made.meta.service_model.service_id.hyphenize()}", _note_attempt)
    return made


def _capacity_is_an_answer(ec2) -> None:
    """EC2 answers a sold-out pool with a server error (InsufficientInstanceCapacity is a 500),
    which botocore's standard mode retries like any 5xx: the same pool asked six times for one
    answer. Capacity codes reach the caller at once; every other retry stays botocore's."""
    events = ec2.meta.events
    unique_id = f"retry-config-{ec2.meta.service_model.service_id.hyphenize()}"
    events.unregister("needs-retry.ec2", unique_id=unique_id)
    # botocore's own handler, built as the client built it (registered again, then wrapped).
    handler = standard.register_retry_handler(ec2, max_attempts=ec2.meta.config.retries.get("total_max_attempts"))
    events.unregister("needs-retry.ec2", unique_id=unique_id)

    def needs_retry(**kwargs):
        response = kwargs.get("response")
        parsed = response[1] if response else {}
        if (parsed or {}).get("Error", {}).get("Code") in CAPACITY_CODES:
            return None
        return handler.needs_retry(**kwargs)

    events.register("needs-retry.ec2", needs_retry, unique_id=unique_id)


def _note_attempt(caught_exception=None, **_) -> None:
    seen = _attempts.get()
    if seen is not None:
        unreached = isinstance(caught_exception, (EndpointConnectionError, ConnectTimeoutError))
        seen.append("unreached" if unreached else "reached")


@contextmanager
def attempts():
    """The attempts botocore made of the calls inside, each "reached" or "unreached": a call
    whose last attempt could not connect may still have arrived on an earlier one."""
    seen: list[str] = []
    token = _attempts.set(seen)
    try:
        yield seen
    finally:
        _attempts.reset(token)


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
    """By the error code: EC2 answers capacity with 5xx too, and a sold-out pool is an answer,
    not a failure to try again. Only a server error whose code gpufill does not know is read by
    its status."""
    if isinstance(error, TRANSPORT_ERRORS):
        return True
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        if code in TRANSIENT_CODES:
            return True
        if classify(code) in ("capacity", "quota"):
            return False
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500
    return False
