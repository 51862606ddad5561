"""What the sweep keeps in the instances table: when each finding was last notified, and its
last pass's summary (read by the status view). One scan a pass reads the records, the pending
approvals and the notified findings together.

Items: "sweep-finding#<finding key>" (kind `sweep`, notified_at, a TTL a day after the
re-notification is due, so a finding that ended leaves nothing behind) and "sweep#last"
(kind `sweep`, the summary as JSON: its costs are floats, which DynamoDB items do not take).
Neither has a request_id, so the by-request index never returns them.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from gpufill.adapters.aws import resource
from gpufill.adapters.instances_table import Holdings, plain
from gpufill.constants import (
    APPROVAL_KEY_PREFIX,
    ENV_INSTANCES_TABLE,
    INSTANCES_TTL_ATTRIBUTE,
    KIND_SWEEP,
    SWEEP_FINDING_KEY_PREFIX,
    SWEEP_RENOTIFY_SECONDS,
    SWEEP_SUMMARY_KEY,
)


class TableView(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    holdings: Holdings = Field(default_factory=Holdings)
    approvals: list[dict] = Field(default_factory=list)
    notified: dict[str, datetime] = Field(default_factory=dict)


def _table():
    return resource("dynamodb").Table(os.environ[ENV_INSTANCES_TABLE])


def scan() -> TableView:
    view = TableView()
    table, kwargs = _table(), {}
    while True:
        page = table.scan(**kwargs)
        for item in page["Items"]:
            key = item["instance_id"]
            if key.startswith(APPROVAL_KEY_PREFIX):
                view.approvals.append(plain(item))
            elif key.startswith(SWEEP_FINDING_KEY_PREFIX) and item.get("notified_at"):
                view.notified[key.removeprefix(SWEEP_FINDING_KEY_PREFIX)] = datetime.fromisoformat(item["notified_at"])
            else:
                view.holdings.add(item)
        if "LastEvaluatedKey" not in page:
            return view
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def mark_notified(key: str, at: datetime) -> None:
    expires = at + timedelta(seconds=2 * SWEEP_RENOTIFY_SECONDS)
    _table().put_item(
        Item={
            "instance_id": SWEEP_FINDING_KEY_PREFIX + key,
            "kind": KIND_SWEEP,
            "notified_at": at.isoformat(timespec="seconds"),
            INSTANCES_TTL_ATTRIBUTE: int(expires.timestamp()),
        }
    )


def save_summary(summary: dict) -> None:
    _table().put_item(Item={"instance_id": SWEEP_SUMMARY_KEY, "kind": KIND_SWEEP, "summary": json.dumps(summary)})


def last_summary() -> dict | None:
    """The last pass's summary, or None when no sweep has run."""
    item = _table().get_item(Key={"instance_id": SWEEP_SUMMARY_KEY}).get("Item")
    return json.loads(item["summary"]) if item and item.get("summary") else None
