"""Faults injected where they happen on AWS, for tests of what gpufill does when things fail.

Reach it as `engine.faults` on a running LocalEngine. Three layers:

- `aws(...)`: an AWS API call is refused or its reply is lost. The fault is produced
  where botocore sends the HTTP request, so botocore's own retry handler sees it
  exactly as it would see AWS's answer: a throttling code or a 5xx is retried by the
  client's standard retry mode (the sleeps between tries cost no wall time inside the
  engine), a 4xx that is not throttling is raised at once, a transport failure
  (ReadTimeout, ConnectTimeout, EndpointConnectionError) is retried as a timeout.
- `lambda_invoke(...)`: the Lambda service fails a task's invocation, before the
  handler runs or after it did its work (a function timeout after the side effects).
- `kill_at(...)`: the function dies when its handler reaches an AWS call, before the
  call is made (the container is killed mid-handler; the state machine sees
  `Sandbox.Timedout`).

- `meanwhile_at(...)`: when a handler reaches an AWS call, something else happens in the
  account first (another run's step lands in between two of its calls), then the call goes on.

- `fleet_errors(...)`: a CreateFleet of type instant succeeds but lists an error for some or
  all of its overrides instead of trying them (RequestLimitExceeded, InternalError,
  UnauthorizedOperation, ... inside a 200 answer), optionally without naming the override.
- `payment_failed(...)`: the upfront payment of the next Capacity Block bought fails: the block
  stays `payment-pending` for a while, then is `payment-failed` (local/capacity_blocks.py).
- `schedule_twice(...)`: EventBridge Scheduler delivers a schedule's event twice (at least once).
- `block_late(minutes)`: a bought Capacity Block turns `active` minutes after its start.
- `not_visible(...)`: EC2's eventual consistency after create: the next resource of a kind
  created (a launch template, its new version, a placement group, a security group) is not
  found by the next N calls that reference it, as AWS documents for the EC2 API.

Every rule counts as it fires; `engine.faults.injected` and the run's metrics
(`faults_injected`) report how many faults were actually injected, so a test can
assert that the fault it planned really happened.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from unittest import mock

# Lambda errors a task may see from the Lambda service, as Step Functions names them.
LAMBDA_ERRORS = ("Sandbox.Timedout", "Lambda.Unknown", "Lambda.ServiceException")
TRANSPORT_ERRORS = ("ReadTimeout", "ConnectTimeout", "EndpointConnectionError")

# HTTP status AWS answers with each error code (anything else is a 400 client error).
_STATUS = {
    "RequestLimitExceeded": 503,  # EC2 throttling
    "Throttling": 400,
    "ThrottlingException": 400,
    "ThrottledException": 400,
    "ProvisionedThroughputExceededException": 400,
    "RequestThrottled": 400,
    "TooManyRequestsException": 429,
    "SlowDown": 503,
    "InternalError": 500,
    "InternalFailure": 500,
    "InternalServerError": 500,
    "ServiceUnavailable": 503,
    "Unavailable": 503,
    "RequestTimeout": 408,
    "RequestTimeoutException": 408,
}
# boto3 client names whose botocore service id differs.
_SERVICE_IDS = {"stepfunctions": "sfn", "states": "sfn", "logs": "cloudwatch-logs"}
# How each service's protocol spells an error (botocore parses the reply as it would AWS's).
_QUERY_SERVICES = {"sns", "sqs", "iam", "sts", "cloudformation"}
_REGION_IN_URL = re.compile(r"\.([a-z]{2}(?:-[a-z]+)+-\d)\.")


class KilledInvocation(BaseException):
    """The function's container died mid-handler. A BaseException so that no handler's
    `except Exception` can swallow it: nothing after the kill point runs."""


@dataclass
class _Rule:
    layer: str  # "aws" | "invoke" | "kill" | "meanwhile" | "fleet" | "visibility" | "payment" | "schedule"
    service: str | None = None
    operation: str | None = None
    region: str | None = None
    task: str | None = None
    error: str = ""
    after: bool = False
    times: int | None = 1
    fired: int = 0
    # "fleet": how many overrides (the first ones sent) answer the error, None for all; and
    # whether the errors come without LaunchTemplateAndOverrides.
    overrides: int | None = None
    unnamed: bool = False
    # "visibility": the kind of resource, and how many calls referencing it miss it.
    kind: str | None = None
    calls: int = 0
    # kill: what happens in the account while the killed step awaits its retry; meanwhile: before the call.
    meanwhile: Callable[[], None] | None = None
    # How many matching calls still pass before the rule fires (kill: the Nth call, not the first).
    skip: int = 0

    def spent(self) -> bool:
        return self.times is not None and self.fired >= self.times


@dataclass
class Faults:
    """The fault rules of one simulated account. Rules fire in the order they were added."""

    _rules: list[_Rule] = field(default_factory=list)
    injected: Counter = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # (region, kind, key) -> how many more calls referencing that new resource miss it
    _fresh: dict = field(default_factory=dict)
    # block_late: how long after its start a bought Capacity Block turns active
    block_late_seconds: float = 0.0

    # --- what tests call ---------------------------------------------------------------

    def aws(
        self,
        service: str,
        operation: str,
        *,
        error: str,
        region: str | None = None,
        after: bool = False,
        times: int | None = 1,
    ) -> None:
        """Make the next `times` calls of `service`.`operation` (boto3 names, e.g. "ec2",
        "RunInstances") fail with `error`, in `region` or any region.

        `error` is an AWS error code ("RequestLimitExceeded", "InternalError",
        "ServiceUnavailable", "UnauthorizedOperation", ...), answered with AWS's HTTP status,
        or a transport failure: "ReadTimeout", "ConnectTimeout", "EndpointConnectionError".
        With `after=True` the call takes effect and then its reply is lost: the caller gets
        the error although AWS did the work (a launch that launched, a write that was written).
        Each botocore attempt counts as one call, so `times=1` with a retried code is absorbed
        by the client's own retries; `times=None` fails every attempt.
        """
        if after and error in ("ConnectTimeout", "EndpointConnectionError"):
            raise ValueError(f"error: {error} means the request never reached AWS; after=True cannot apply")
        self._add(_Rule("aws", _service_id(service), operation, region, None, error, after, times))

    def lambda_invoke(
        self, task: str, *, error: str = "Sandbox.Timedout", after_handler: bool = False, times: int | None = 1
    ) -> None:
        """Make the next `times` invocations of `task` (a function name such as "LaunchBatch")
        fail with `error`, one of "Sandbox.Timedout", "Lambda.Unknown", "Lambda.ServiceException".

        Before the handler (default): the handler never runs. `after_handler=True`: the handler
        runs to its end (its AWS side effects happen) and the state machine gets the error
        instead of the result, as when a function times out after its work was done.
        """
        if error not in LAMBDA_ERRORS:
            raise ValueError(f"error: {error!r} is not one of {', '.join(LAMBDA_ERRORS)}")
        self._add(_Rule("invoke", task=task, error=error, after=after_handler, times=times))

    def kill_at(
        self,
        service: str,
        operation: str,
        *,
        task: str | None = None,
        times: int | None = 1,
        meanwhile: Callable[[], None] | None = None,
        skip: int = 0,
    ) -> None:
        """Kill the invocation of `task` (any task when None) when its handler reaches
        `service`.`operation`, before the call is made; the state machine sees `Sandbox.Timedout`.
        `meanwhile` runs once the function is dead and before the state machine retries the step:
        whatever else happens in the account in that while (a teardown that lands then).
        `skip` lets that many matching calls through first (a step killed at its second launch).

        Example: kill_at("dynamodb", "UpdateItem", task="LaunchBatch") is a LaunchBatch
        that died between RunInstances and the DynamoDB write of its records.
        """
        self._add(
            _Rule("kill", _service_id(service), operation, task=task, error="Sandbox.Timedout", times=times,
                  meanwhile=meanwhile, skip=skip)
        )

    def meanwhile_at(
        self, service: str, operation: str, *, task: str, meanwhile: Callable[[], None], skip: int = 0
    ) -> None:
        """When `task`'s handler reaches `service`.`operation` (after `skip` such calls), run
        `meanwhile` first, then make the call as usual: a race in which another run's work lands
        between two calls of this step (a teardown decided while another one lists)."""
        self._add(_Rule("meanwhile", _service_id(service), operation, task=task, meanwhile=meanwhile, skip=skip))

    def fleet_errors(
        self,
        error: str,
        *,
        region: str | None = None,
        overrides: int | None = None,
        unnamed: bool = False,
        times: int | None = 1,
    ) -> None:
        """Make the next `times` CreateFleet calls of type instant (in `region` or any) answer
        `error` in their Errors list for the first `overrides` overrides they were sent (all when
        None), which EC2 then does not try; the other overrides are allocated as usual.

        `error` is one of local/ec2_errors.py's FLEET_ERRORS: RequestLimitExceeded and
        InternalError (EC2 busy: the call succeeded, those pools were not asked),
        UnfulfillableCapacity, MaxFleetCountExceeded, InsufficientFreeAddressesInSubnet,
        AuthFailure.ServiceLinkedRoleCreationNotPermitted, UnauthorizedOperation,
        InsufficientInstanceCapacity. With `unnamed=True` the error comes once, without
        LaunchTemplateAndOverrides, as EC2 sometimes answers.
        """
        from gpufill.local.ec2_errors import FLEET_ERRORS

        if error not in FLEET_ERRORS:
            raise ValueError(f"error: {error!r} is not one of {', '.join(FLEET_ERRORS)}")
        self._add(_Rule("fleet", "ec2", "CreateFleet", region, error=error, times=times, overrides=overrides, unnamed=unnamed))

    def payment_failed(self, *, after_minutes: int = 10, times: int | None = 1) -> None:
        """The upfront payment of the next `times` Capacity Blocks bought fails: each block is
        `payment-pending` for `after_minutes` modelled minutes, then `payment-failed` (AWS gives a
        payment up to 12 hours; the block is never usable)."""
        if after_minutes < 1:
            raise ValueError(f"after_minutes: must be at least 1, got {after_minutes}")
        self._add(_Rule("payment", "ec2", "PurchaseCapacityBlock", error="payment-failed", times=times, calls=after_minutes))

    def for_payment(self) -> _Rule | None:
        """The payment fault of the Capacity Block being bought (its `calls` are the minutes it stays pending), or None."""
        return self._take("payment")

    def not_visible(self, kind: str, *, calls: int = 1, region: str | None = None, times: int | None = 1) -> None:
        """The next `times` resources of `kind` created (in `region` or any) are unknown to the
        next `calls` calls that reference them, which EC2 answers with the kind's NotFound code
        (local/visibility.py): "launch-template", "launch-template-version", "placement-group",
        "security-group". AWS: "if you run a command to modify or describe the resource that you
        just created, its ID might not have propagated throughout the system"."""
        from gpufill.local.visibility import NOT_FOUND

        if kind not in NOT_FOUND:
            raise ValueError(f"kind: {kind!r} is not one of {', '.join(NOT_FOUND)}")
        if calls < 1:
            raise ValueError(f"calls: must be at least 1, got {calls}")
        self._add(_Rule("visibility", "ec2", region=region, error=NOT_FOUND[kind], times=times, kind=kind, calls=calls))

    def schedule_twice(self, name: str, *, times: int | None = 1) -> None:
        """EventBridge Scheduler delivers the next `times` events of schedule `name` twice (its
        delivery is at least once): the target is called again right after."""
        self._add(_Rule("schedule", task=name, times=times))

    def for_schedule(self, name: str) -> _Rule | None:
        """Whether this delivery of schedule `name` comes twice."""
        return self._take("schedule", task=name)
    def block_late(self, minutes: float) -> None:
        """Every Capacity Block bought turns `active` this many minutes after its start (until then
        DescribeCapacityReservations says `scheduled` and a launch into it finds no room). AWS:
        a block's state can take minutes to change at its start; launches are tried again."""
        if minutes <= 0:
            raise ValueError(f"minutes: must be positive, got {minutes}")
        self.block_late_seconds = minutes * 60

    def block_still_scheduled(self) -> None:
        """A launch met a block past its start that is not active yet (block_late)."""
        with self._lock:
            self.injected["capacity-block:late"] += 1

    def created(self, region: str, kind: str, key: str) -> None:
        """The simulated EC2 created a resource: it may start out unseen, as a rule says."""
        with self._lock:
            for rule in self._rules:
                if rule.layer == "visibility" and not rule.spent() and rule.kind == kind and rule.region in (None, region):
                    rule.fired += 1  # counted as injected when a call misses the resource
                    self._fresh[(region, kind, key)] = rule.calls
                    return

    def unseen(self, region: str, kind: str, key: str) -> bool:
        """Whether this call referencing the resource misses it (and counts as one of its calls)."""
        with self._lock:
            left = self._fresh.get((region, kind, key), 0)
            if left < 1:
                return False
            self._fresh[(region, kind, key)] = left - 1
            self.injected[f"visibility:{kind}"] += 1
            return True

    def for_fleet(self, region: str) -> _Rule | None:
        """The per-override errors this CreateFleet answers, or None."""
        return self._take("fleet", region=region)

    def clear(self) -> None:
        """Drop every rule not yet spent (the counts stay)."""
        with self._lock:
            self._rules.clear()

    @property
    def total(self) -> int:
        return sum(self.injected.values())

    # --- what the engine calls -----------------------------------------------------------

    def _add(self, rule: _Rule) -> None:
        if rule.times is not None and rule.times < 1:
            raise ValueError(f"times: must be at least 1 or None (every call), got {rule.times}")
        with self._lock:
            self._rules.append(rule)

    def _take(self, layer: str, **match) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.layer != layer or rule.spent():
                    continue
                if any(getattr(rule, k) is not None and getattr(rule, k) != v for k, v in match.items()):
                    continue
                if rule.skip:
                    rule.skip -= 1
                    continue
                rule.fired += 1
                self.injected[f"{layer}:{rule.service or rule.task}:{rule.operation or rule.error}"] += 1
                return rule
        return None

    def for_aws_call(self, service_id: str, operation: str, url: str, task: str | None) -> tuple[str, _Rule] | None:
        """The fault to inject into this HTTP request, as ("kill" | "aws", rule), or None."""
        for layer in ("kill", "meanwhile"):
            rule = self._take(layer, service=service_id, operation=operation, task=task)
            if rule is not None:
                return layer, rule
        found = _REGION_IN_URL.search(url)
        rule = self._take("aws", service=service_id, operation=operation, region=found.group(1) if found else None)
        return ("aws", rule) if rule is not None else None

    def for_invocation(self, task: str) -> _Rule | None:
        return self._take("invoke", task=task)


def _service_id(service: str) -> str:
    return _SERVICE_IDS.get(service.lower(), service.lower())


def raise_or_answer(rule: _Rule, service_id: str, operation: str, request):
    """Raise the transport failure, or return the HTTP error reply AWS would send."""
    from botocore.awsrequest import AWSResponse
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    transport = {
        "ReadTimeout": ReadTimeoutError,
        "ConnectTimeout": ConnectTimeoutError,
        "EndpointConnectionError": EndpointConnectionError,
    }
    if rule.error in transport:
        raise transport[rule.error](endpoint_url=request.url)
    from gpufill.local import ec2_errors

    code = rule.error
    status = ec2_errors.status(code) if service_id == "ec2" else _STATUS.get(code, 400)
    message = f"{operation} failed: {code} (injected by the local engine)"
    headers = {"x-amzn-RequestId": "local-fault", "x-amzn-ErrorType": code}
    if service_id == "ec2":
        body = (
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            "<RequestID>local-fault</RequestID></Response>"
        )
        headers["Content-Type"] = "text/xml"
    elif service_id in _QUERY_SERVICES:
        kind = "Receiver" if status >= 500 else "Sender"
        body = (
            f"<ErrorResponse><Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message></Error>"
            "<RequestId>local-fault</RequestId></ErrorResponse>"
        )
        headers["Content-Type"] = "text/xml"
    elif service_id == "s3":
        body = f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>local-fault</RequestId></Error>"
        headers["Content-Type"] = "application/xml"
    else:  # json and rest-json services (DynamoDB, SSM, Step Functions, Lambda)
        import json

        body = json.dumps({"__type": code, "message": message})
        headers["Content-Type"] = "application/x-amz-json-1.0"

    from moto.core.botocore_stubber import MockRawResponse

    return AWSResponse(request.url, status, headers, MockRawResponse(body.encode()))


def at_the_wire(engine):
    """AWS-level faults, injected where botocore sends the HTTP request to moto, so that
    botocore's retry handler sees them as it would see AWS's answers."""
    from moto.core.botocore_stubber import BotocoreStubber

    original = BotocoreStubber.__call__
    faults = engine.faults

    def stubbed(stubber, event_name, request, **kwargs):
        if not stubber.enabled:
            return None
        _, service_id, operation = event_name.split(".", 2)
        task = getattr(engine._invocation, "task", None)
        found = faults.for_aws_call(service_id, operation, request.url, task)
        if found is None:
            return original(stubber, event_name, request, **kwargs)
        layer, rule = found
        if layer in ("kill", "meanwhile"):
            if rule.meanwhile is not None:
                # What happens elsewhere in the account is not this function's doing.
                function, engine._invocation.function = getattr(engine._invocation, "function", None), None
                try:
                    rule.meanwhile()
                finally:
                    engine._invocation.function = function
            if layer == "meanwhile":
                return original(stubber, event_name, request, **kwargs)
            raise KilledInvocation(f"{task} killed at {service_id}:{operation}")
        if rule.after:
            original(stubber, event_name, request, **kwargs)  # AWS did it; the reply is lost
        return raise_or_answer(rule, service_id, operation, request)

    return mock.patch.object(BotocoreStubber, "__call__", stubbed)

