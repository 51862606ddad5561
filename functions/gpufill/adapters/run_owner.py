"""Who started the execution an approval belongs to, as AWS recorded it (separate_approver).

Step Functions keeps no caller on an execution; CloudTrail does: the StartExecution management
event names the caller (userIdentity.arn) and the execution it made (responseElements.executionArn).
LookupEvents filters by event name only, so the events of a short window around the execution's
start are read and matched by ARN. CloudTrail delivers an event within minutes, not at once:
until it has, the owner is unknown and the caller is told to try again (never waved through).
"""

from __future__ import annotations

import json
from datetime import timedelta

from gpufill.adapters import approvals
from gpufill.adapters.aws import client

# StartExecution is recorded when it is called; the execution's startDate is the same moment
# give or take the call's own latency.
WINDOW = timedelta(minutes=2)
MAX_PAGES = 10


def started_by(approval: str) -> str | None:
    """The ARN that started `approval`'s execution, or None while CloudTrail has no record of it."""
    name = approval.rsplit(":", 1)[-1]
    item = approvals.get(name) or {}
    arn = item.get("execution_arn")
    if not arn:
        return None
    started = client("stepfunctions").describe_execution(executionArn=arn)["startDate"]
    pages = client("cloudtrail").get_paginator("lookup_events").paginate(
        LookupAttributes=[{"AttributeKey": "EventName", "AttributeValue": "StartExecution"}],
        StartTime=started - WINDOW,
        EndTime=started + WINDOW,
        PaginationConfig={"MaxItems": MAX_PAGES * 50, "PageSize": 50},
    )
    for page in pages:
        for event in page.get("Events", []):
            recorded = json.loads(event.get("CloudTrailEvent") or "{}")
            if (recorded.get("responseElements") or {}).get("executionArn") == arn:
                return (recorded.get("userIdentity") or {}).get("arn")
    return None
