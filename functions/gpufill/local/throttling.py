"""EC2's API throttling as AWS documents it ("Request throttling for the Amazon EC2 API"): token
buckets per account, region and API action, refilled on the engine's modelled clock.

- Request buckets: every call takes one token from its action's bucket. The size and refill rate
  come from the action's category: non-mutating (Describe*, List*, Search*, Get*: 100, 20 a
  second), the unfiltered and unpaginated calls of a few of them (DescribeInstances without a
  filter or a page size: a smaller bucket, 50 and 10), mutating (50, 5), resource-intensive
  (50, 5), or the action's own entry in AWS's table of uncategorized actions (RunInstances 5
  and 2, TerminateInstances 100 and 5, CreateTags 100 and 10, PurchaseCapacityBlock and
  DescribeCapacityBlockOfferings 10 and 0.15, ...).
- Resource buckets: RunInstances and StartInstances take one more token per instance from a
  bucket of 1,000 refilled at 2 a second; TerminateInstances and StopInstances at 20 a second.
  A launch must find the tokens for its MinCount (at most the bucket's size) and takes one per
  instance launched once EC2 has answered: a launch into a sold-out pool takes none.

A call that finds its bucket short is answered RequestLimitExceeded (HTTP 503) and takes no
token. `scale` multiplies every size and rate (0 turns throttling off); a test that wants
throttling to happen shrinks the buckets with a small scale.

AWS does not say whether CreateFleet of type instant takes RunInstances' resource tokens; the
engine takes none for it (CreateFleet is a mutating action: 50, 5).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from dataclasses import dataclass
from unittest import mock
from urllib.parse import parse_qs

NON_MUTATING = (100.0, 20.0)
UNFILTERED = (50.0, 10.0)
MUTATING = (50.0, 5.0)
RESOURCE_INTENSIVE = (50.0, 5.0)
NON_MUTATING_PREFIXES = ("Describe", "List", "Search", "Get")
# Non-mutating actions that take from the smaller bucket when called with neither a filter nor pagination.
UNFILTERED_ACTIONS = frozenset(
    {
        "DescribeInstances",
        "DescribeInstanceStatus",
        "DescribeNetworkInterfaces",
        "DescribeSecurityGroups",
        "DescribeSnapshots",
        "DescribeSpotInstanceRequests",
        "DescribeVolumes",
    }
)
RESOURCE_INTENSIVE_ACTIONS = frozenset(
    {
        "AcceptVpcPeeringConnection",
        "AuthorizeSecurityGroupIngress",
        "CancelSpotInstanceRequests",
        "CreateKeyPair",
        "CreateVpcPeeringConnection",
        "DeleteVpcPeeringConnection",
        "RejectVpcPeeringConnection",
        "RevokeSecurityGroupIngress",
        "RequestSpotInstances",
    }
)
# AWS's "uncategorized actions" that gpufill calls or may call, with their own size and rate.
OWN_BUCKETS: dict[str, tuple[float, float]] = {
    "CreateLaunchTemplateVersion": (100.0, 5.0),
    "CreateTags": (100.0, 10.0),
    "DeleteTags": (100.0, 10.0),
    "DescribeCapacityBlockExtensionOfferings": (10.0, 0.15),
    "DescribeCapacityBlockOfferings": (10.0, 0.15),
    "DescribeSpotFleetRequests": (50.0, 3.0),
    "ModifyLaunchTemplate": (100.0, 5.0),
    "PurchaseCapacityBlock": (10.0, 0.15),
    "PurchaseCapacityBlockExtension": (10.0, 0.15),
    "RunInstances": (5.0, 2.0),
    "StartInstances": (5.0, 2.0),
    "TerminateInstances": (100.0, 5.0),
    "CreateNetworkInterface": (100.0, 5.0),
    "DeleteNetworkInterface": (100.0, 5.0),
    "CreateVolume": (100.0, 5.0),
    "DeleteVolume": (100.0, 5.0),
}
# Resource buckets: one token per instance the call launches, starts, stops or terminates.
RESOURCE_BUCKETS: dict[str, tuple[float, float]] = {
    "RunInstances": (1000.0, 2.0),
    "StartInstances": (1000.0, 2.0),
    "TerminateInstances": (1000.0, 20.0),
    "StopInstances": (1000.0, 20.0),
}
_REGION_IN_URL = re.compile(r"\.([a-z]{2}(?:-[a-z]+)+-\d)\.")
_PAGINATION = ("MaxResults", "NextToken")


@dataclass
class TokenBucket:
    """A full bucket of `size` tokens refilled at `rate` a second, up to `size`, on the clock its
    caller passes (seconds)."""

    size: float
    rate: float
    tokens: float = -1.0
    at: float = 0.0

    def __post_init__(self) -> None:
        if self.size <= 0 or self.rate < 0:
            raise ValueError(f"size must be positive and rate not negative, got size {self.size}, rate {self.rate}")
        if self.tokens < 0:
            self.tokens = self.size

    def level(self, now: float) -> float:
        """The tokens in the bucket at `now` (a clock that went back refills nothing)."""
        if now > self.at:
            self.tokens = min(self.size, self.tokens + (now - self.at) * self.rate)
            self.at = now
        return self.tokens

    def has(self, now: float, count: float = 1.0) -> bool:
        return self.level(now) >= count

    def take(self, now: float, count: float = 1.0) -> bool:
        """Take `count` tokens if the bucket holds them; a short bucket keeps what it has."""
        if not self.has(now, count):
            return False
        self.tokens -= count
        return True


def request_bucket(action: str, params: dict[str, list[str]]) -> tuple[str, float, float]:
    """The request bucket a call of `action` with query `params` takes from: (its key, size, rate)."""
    if action in OWN_BUCKETS:
        return action, *OWN_BUCKETS[action]
    if action in RESOURCE_INTENSIVE_ACTIONS:
        return action, *RESOURCE_INTENSIVE
    if action.startswith(NON_MUTATING_PREFIXES):
        if action in UNFILTERED_ACTIONS and not any(
            key.startswith("Filter.") or key in _PAGINATION for key in params
        ):
            return f"{action}:unfiltered", *UNFILTERED
        return action, *NON_MUTATING
    return action, *MUTATING


def resources(action: str, params: dict[str, list[str]]) -> int:
    """How many resource tokens the call needs in the bucket to be taken: the instances it must
    launch at least (MinCount), or the ones it names (InstanceId.N) for a terminate, start or stop;
    0 for every other action."""
    if action not in RESOURCE_BUCKETS:
        return 0
    if action == "RunInstances":
        try:
            return max(1, int((params.get("MinCount") or ["1"])[0]))
        except ValueError:
            return 1
    return sum(1 for key in params if key.startswith("InstanceId."))


class Throttling:
    """The buckets of one simulated account: every EC2 call admitted or throttled at a modelled second."""

    def __init__(self, scale: float = 1.0) -> None:
        if scale < 0:
            raise ValueError(f"throttling: the scale must be 0 (off) or positive, got {scale}")
        self.scale = scale
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._lock = threading.Lock()
        # (region, action) -> calls answered RequestLimitExceeded
        self.throttled: Counter = Counter()

    @property
    def enabled(self) -> bool:
        return self.scale > 0

    def _bucket(self, region: str, key: str, size: float, rate: float, now: float) -> TokenBucket:
        found = self._buckets.get((region, key))
        if found is None:  # a bucket starts full
            found = self._buckets[(region, key)] = TokenBucket(size * self.scale, rate * self.scale, at=now)
        return found

    def admit(self, region: str, action: str, params: dict[str, list[str]], now: float) -> bool:
        """Whether EC2 takes this call now; it takes its tokens if so, and counts a throttle if not.

        The resource bucket must hold the instances the call needs (never more than its size: a
        launch of 10,000 is judged by EC2's capacity, not refused by a bucket it could never fit).
        A terminate, start or stop takes a token per instance it names; a launch takes its tokens
        once EC2 has answered, one per instance launched (launched()): a sold-out pool takes none.
        """
        return self.admit_at(region, action, params, now)[0]

    def admit_at(self, region: str, action: str, params: dict[str, list[str]], now: float) -> tuple[bool, float]:
        """As admit(), with the latest second the call's buckets have seen: a caller whose clock is
        behind it met the buckets as they are then, and goes on from there."""
        if not self.enabled:
            return True, now
        key, size, rate = request_bucket(action, params)
        with self._lock:
            request = self._bucket(region, key, size, rate, now)
            count = resources(action, params)
            resource = None
            if count:
                resource = self._bucket(region, f"{action}:resources", *RESOURCE_BUCKETS[action], now)
                count = min(count, resource.size)
            seen = max(now, request.at, resource.at if resource is not None else now)
            if not request.has(now) or (resource is not None and not resource.has(now, count)):
                self.throttled[(region, action)] += 1
                return False, seen
            request.take(now)
            if resource is not None and action != "RunInstances":
                resource.take(now, count)
            return True, seen

    def launched(self, region: str, count: int, now: float) -> None:
        """RunInstances launched `count` instances: as many resource tokens go (what is left, at most)."""
        if not self.enabled or count < 1:
            return
        with self._lock:
            resource = self._bucket(region, "RunInstances:resources", *RESOURCE_BUCKETS["RunInstances"], now)
            resource.take(now, min(count, resource.level(now)))

    @property
    def total(self) -> int:
        return sum(self.throttled.values())


# What the engine counts as it answers: DynamoDB's conditional-check refusals (two writers on one item).
CONDITIONAL_CODES = ("ConditionalCheckFailed", "TransactionCanceledException")


def at_the_wire(engine):
    """EC2 calls judged by the buckets where botocore sends them, so botocore's retry handler sees
    RequestLimitExceeded as it would see AWS's (backoff_on_the_modelled_clock lets the backoff after
    it pass in modelled time). Also counts DynamoDB's conditional-check refusals for the load
    benchmark. Entered before faults.at_the_wire: a fault a test injects is answered before the
    buckets are asked, and takes no token."""
    from moto.core.botocore_stubber import BotocoreStubber

    from gpufill.local.metrics import LATENCY_MODEL

    original = BotocoreStubber.__call__
    throttling = engine.throttling
    caller = engine.throttle_caller
    latency = LATENCY_MODEL["api_seconds"]
    # Each caller's clock: modelled time only moves with Wait states and backoff, but one caller's
    # calls one after another take the latency model's time on AWS, and the buckets refill in it.
    # Callers at the same modelled second (executions running at once) meet the same tokens; a
    # caller whose clock is behind what a bucket has seen goes on from there (never starved by a
    # clock that another caller's many calls moved ahead).

    def stubbed(stubber, event_name, request, **kwargs):
        if not stubber.enabled:
            return None
        _, service_id, operation = event_name.split(".", 2)
        judged = service_id == "ec2" and engine.throttling_started and throttling.enabled
        if judged:
            found = _REGION_IN_URL.search(request.url)
            region = found.group(1) if found else "us-east-1"
            now = max(engine.elapsed, getattr(caller, "clock", 0.0))
            admitted, seen = throttling.admit_at(region, operation, _params(request.body), now)
            if not admitted:
                caller.clock, caller.pending = seen, True
                return _request_limit_exceeded(request)
            caller.pending = False
            caller.clock = seen + latency.get(f"ec2:{operation}", latency["default"])
        response = original(stubber, event_name, request, **kwargs)
        if judged and operation == "RunInstances" and getattr(response, "status_code", 0) == 200:
            throttling.launched(region, (response.content or b"").count(b"<instanceId>"), now)
        if service_id == "dynamodb" and response is not None and getattr(response, "status_code", 200) == 400:
            body = response.content or b""
            if any(code.encode() in body for code in CONDITIONAL_CODES):
                engine.dynamodb_conflicts += 1
        return response

    return mock.patch.object(BotocoreStubber, "__call__", stubbed)


def backoff_on_the_modelled_clock(engine):
    """botocore's sleep between tries: after a throttle by the buckets, that much modelled time
    passes (the buckets refill meanwhile, as they would while a client waits on AWS); every other
    retry stays free of time, as speedups.no_sleeping_retries makes it. Entered after it."""
    import time

    import botocore.endpoint

    caller = engine.throttle_caller

    class _Clock:
        @staticmethod
        def sleep(seconds: float) -> None:
            if getattr(caller, "pending", False):
                caller.pending = False
                engine.throttle_backoff_seconds += seconds
                # The caller waits that long, and so does the account's clock (others may refill it too).
                caller.clock = max(engine.elapsed, getattr(caller, "clock", 0.0)) + seconds
                engine.advance(seconds)

        def __getattr__(self, name):
            return getattr(time, name)

    return mock.patch.object(botocore.endpoint, "time", _Clock())


def _request_limit_exceeded(request):
    """EC2's answer to a throttled call: RequestLimitExceeded with HTTP 503, in EC2's XML."""
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    body = (
        "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>"
        "</Error></Errors><RequestID>local-throttle</RequestID></Response>"
    )
    headers = {"x-amzn-RequestId": "local-throttle", "Content-Type": "text/xml"}
    return AWSResponse(request.url, 503, headers, MockRawResponse(body.encode()))


def _params(body) -> dict[str, list[str]]:
    if not body:
        return {}
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str):
        return {}
    return parse_qs(body, keep_blank_values=True)
