"""CloudTrail's record of who started each execution, and LookupEvents over it (moto has neither).

AWS records every StartExecution as a management event naming the caller (`userIdentity.arn`) and
the execution it made (`responseElements.executionArn`), and delivers it to LookupEvents within
minutes, not at once. The engine records each start with the principal that signed it, as its IAM
judge sees it: a handler's function role session, the state machine's role session (moto's
interpreter key), or a person of the account (`engine.people`, by access key); a start signed by
anyone else is recorded with the key's ARN unknown. An event is visible DELIVERY_SECONDS of
modelled time after the call (gpufill.adapters.clock), so code that reads it at once sees nothing,
as on AWS. LookupEvents filters by EventName and the StartTime/EndTime window (on the event's
time) only; newest first, no pagination (the engine's runs are few).
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from unittest import mock

from gpufill.adapters import clock

# "CloudTrail typically delivers events within an average of about 5 minutes of an API call."
DELIVERY_SECONDS = 300


@dataclass(frozen=True)
class TrailEvent:
    name: str
    at: datetime
    visible_at: float  # modelled epoch seconds
    caller_arn: str
    record: dict


class Trail:
    def __init__(self) -> None:
        self.events: list[TrailEvent] = []
        self._lock = threading.Lock()

    def record_start(self, execution_arn: str, started: datetime, caller_arn: str) -> None:
        record = {
            "eventVersion": "1.09",
            "userIdentity": {"type": "IAMUser" if ":user/" in caller_arn else "AssumedRole", "arn": caller_arn},
            "eventTime": started.isoformat(),
            "eventSource": "states.amazonaws.com",
            "eventName": "StartExecution",
            "responseElements": {"executionArn": execution_arn, "startDate": started.isoformat()},
            "eventID": str(uuid.uuid4()),
            "managementEvent": True,
            "eventCategory": "Management",
        }
        with self._lock:
            self.events.append(TrailEvent("StartExecution", started, clock.epoch() + DELIVERY_SECONDS, caller_arn, record))

    def lookup(self, name: str | None, start: datetime | None, end: datetime | None) -> list[dict]:
        now = clock.epoch()
        with self._lock:
            found = [
                e for e in self.events
                if e.visible_at <= now and (name is None or e.name == name)
                and (start is None or e.at >= start) and (end is None or e.at <= end)
            ]
        return [
            {"EventId": e.record["eventID"], "EventName": e.name, "EventTime": e.at.timestamp(),
             "EventSource": "states.amazonaws.com", "Username": e.caller_arn.rsplit("/", 1)[-1],
             "CloudTrailEvent": json.dumps(e.record)}
            for e in sorted(found, key=lambda e: e.at, reverse=True)
        ]


def patches(engine):
    """Record StartExecution callers; answer cloudtrail:LookupEvents from the trail."""
    from contextlib import ExitStack

    from moto.cloudtrail.responses import CloudTrailResponse
    from moto.stepfunctions.responses import StepFunctionResponse

    original_start = StepFunctionResponse.start_execution

    def start_execution(response):
        result = original_start(response)
        started = result.result
        engine.trail.record_start(started["executionArn"], _as_datetime(started["startDate"]), _caller(engine, _access_key(response.headers)))
        return result

    def lookup_events(response):
        body = json.loads(response.body or "{}")
        names = [a["AttributeValue"] for a in body.get("LookupAttributes", []) if a.get("AttributeKey") == "EventName"]
        start, end = (_epoch(body.get(key)) for key in ("StartTime", "EndTime"))
        return json.dumps({"Events": engine.trail.lookup(names[0] if names else None, start, end)})

    stack = ExitStack()
    stack.enter_context(mock.patch.object(StepFunctionResponse, "start_execution", start_execution))
    stack.enter_context(mock.patch.object(CloudTrailResponse, "lookup_events", lookup_events, create=True))
    return stack


def _caller(engine, access_key: str) -> str:
    from gpufill.local.iam.enforcement import STATE_MACHINE_ACCESS_KEY
    from gpufill.local.iam.principals import principal

    function = getattr(engine._invocation, "function", None)
    if function is not None:
        return principal(function.role, function.name, engine.account).arn
    if access_key == STATE_MACHINE_ACCESS_KEY:
        return principal(next(iter(engine.deployments.values())).app.state_machine_role, "execution", engine.account).arn
    person = engine.people.get(access_key)
    return person.arn if person else f"arn:aws:iam::{engine.account}:user/unknown-key-{access_key}"


def _access_key(headers) -> str:
    """Credential=KEY/… of the SigV4 Authorization header (moto's own reader wants 20 capitals)."""
    authorization = headers.get("Authorization") or ""
    authorization = authorization.decode() if isinstance(authorization, bytes) else authorization
    return authorization.split("Credential=", 1)[1].split("/", 1)[0] if "Credential=" in authorization else ""


def _as_datetime(value) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(value), UTC)


def _epoch(value) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, UTC)
    return _as_datetime(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
