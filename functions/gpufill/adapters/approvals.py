"""Pending teardown approvals: one item per teardown execution in the instances table, and the SNS topic.

The item's key is "approval#<execution name>" (constants.approval_key). It has no
request_id attribute, so the by-request index never returns it, and the TTL attribute
expires_at removes it a while after its deadline (APPROVAL_RETENTION_SECONDS), long enough
to look up who decided what.

Two writers, each with its own attributes:
- the state machine: token, execution, instances, deadline (AwaitTeardownApproval), whether the
  approvers were told (notification, notification_at, notification_by, notification_error: the
  approval request, then a reminder), then decision, answer_raw (the decision exactly as sent),
  approver, reason, decided_at (RecordApprovalDecision) whatever route the answer took;
- `gpufill approve|reject`: answered_by, answered_at, answer, answer_reason, a claim written
  with a condition before SendTaskSuccess, so a second answer is refused before it is sent.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters.aws import client, resource
from gpufill.adapters.instances_table import plain
from gpufill.constants import (
    APPROVAL_RETENTION_SECONDS,
    ENV_APPROVAL_TOPIC_ARN,
    ENV_INSTANCES_TABLE,
    INSTANCES_TTL_ATTRIBUTE,
    approval_key,
)


class AlreadyAnswered(Exception):
    """The conditional claim failed: someone answered (or the approval ended) first."""


def _table(table=None):
    return table if table is not None else resource("dynamodb").Table(os.environ[ENV_INSTANCES_TABLE])


def record_pending(
    *,
    execution_name: str,
    execution_arn: str,
    task_token: str,
    teardown: dict,
    requested_at: datetime,
    deadline: datetime,
) -> None:
    _put_pending(execution_name, execution_arn, task_token, requested_at, deadline, {
        "target": json.dumps(teardown["target"]),
        "requested_by": teardown.get("requested_by") or "not given",
        # Every id asked for (from the region batches); the details of the listed ones only, so the
        # item stays far below DynamoDB's 400 KB at the maximum number of ids.
        "instance_ids": sorted(i for batch in teardown["regions"] for ids in batch["requests"].values() for i in ids),
        "instances": json.dumps(teardown["instances"]),
    })


def record_pending_purchase(
    *,
    execution_name: str,
    execution_arn: str,
    task_token: str,
    request_id: str,
    offering: dict,
    requested_at: datetime,
    deadline: datetime,
) -> None:
    """A pending Capacity Block purchase: the same item as a teardown's, answered the same way."""
    _put_pending(execution_name, execution_arn, task_token, requested_at, deadline, {
        "approval_for": "capacity-block-purchase",
        "target": json.dumps({"request_id": request_id}),
        "requested_by": request_id,
        "purchase": json.dumps(offering),
        "instances": "[]",
    })


def _put_pending(
    execution_name: str, execution_arn: str, task_token: str, requested_at: datetime, deadline: datetime, asked: dict
) -> None:
    item = {
        "instance_id": approval_key(execution_name),
        "kind": "approval",
        "status": "PENDING",
        "execution_name": execution_name,
        "execution_arn": execution_arn,
        "task_token": task_token,
        **asked,
        "requested_at": requested_at.isoformat(timespec="seconds"),
        "deadline": deadline.isoformat(timespec="seconds"),
        INSTANCES_TTL_ATTRIBUTE: int(deadline.timestamp()) + APPROVAL_RETENTION_SECONDS,
    }
    # A retried approval step gets a new task token: the newest one is the live one, so the item
    # is overwritten, but never once a decision is on it.
    _table().put_item(Item=item, ConditionExpression="attribute_not_exists(decided_at)")


def record_decision(
    execution_name: str, *, decision: str, answer_raw: str | None, approver: str, reason: str | None, decided_at: datetime
) -> dict:
    """The approval item as it is now (its deadline, what was asked)."""
    values = {
        ":decision": decision,
        ":status": decision.upper(),
        ":approver": approver,
        ":at": decided_at.isoformat(timespec="seconds"),
        ":answer": answer_raw,
        ":reason": reason,
    }
    answer = _table().update_item(
        Key={"instance_id": approval_key(execution_name)},
        UpdateExpression=(
            "SET decision = :decision, #status = :status, approver = :approver, decided_at = :at, "
            "answer_raw = :answer, decided_reason = :reason"
        ),
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues=values,
        ReturnValues="ALL_NEW",
    )
    return plain(answer.get("Attributes") or {})


def publish(subject: str, body: str) -> str:
    topic = os.environ[ENV_APPROVAL_TOPIC_ARN]
    return client("sns").publish(TopicArn=topic, Subject=subject, Message=body)["MessageId"]


def ask(subject: str, body: str) -> tuple[str | None, str | None]:
    """Publish an approval request whose approval is already recorded and waits for its answer:
    (message id, None), or (None, why) when the topic refused it (its policy denies, SNS failing
    after botocore's own retries). A refusal never ends the wait: the approval stays answerable
    (`gpufill status` lists it, `gpufill approve|reject` answer it)."""
    try:
        return publish(subject, body), None
    except ClientError as error:
        return None, f"{error.response.get('Error', {}).get('Code', 'ClientError')}: {error}"
    except BotoCoreError as error:
        return None, f"{type(error).__name__}: {error}"


# Whether the approvers heard of an approval: `notification` on its item.
NOTIFICATION_FAILED = "failed"
NOTIFICATION_SENT = "sent"
# Enough of SNS's answer to say why; the item stays far below DynamoDB's 400 KB.
NOTIFICATION_ERROR_MAX = 500


def record_notification(execution_name: str, *, sent: bool, at: datetime, error: str | None = None, by: str) -> bool:
    """Say on the approval item whether its approvers were told: `failed` with the topic's error
    when the publish was refused, `sent` once a later publish (a reminder) got through; `by` is
    which message it was. Only on an item that exists and no decision ended; False when it did
    not write (a lost write only leaves `gpufill status` less precise, never the wait)."""
    try:
        _table().update_item(
            Key={"instance_id": approval_key(execution_name)},
            UpdateExpression="SET notification = :n, notification_at = :at, notification_by = :by, notification_error = :e",
            ConditionExpression="attribute_exists(task_token) AND attribute_not_exists(decided_at)",
            ExpressionAttributeValues={
                ":n": NOTIFICATION_SENT if sent else NOTIFICATION_FAILED,
                ":at": at.isoformat(timespec="seconds"),
                ":by": by,
                ":e": None if sent else (error or "unknown")[:NOTIFICATION_ERROR_MAX],
            },
        )
    except (ClientError, BotoCoreError):
        return False
    return True


# --- the operator's side (gpufill approve / reject); `table` is a boto3 Table of the deployment ---


def get(execution_name: str, table=None) -> dict | None:
    item = _table(table).get_item(Key={"instance_id": approval_key(execution_name)}, ConsistentRead=True).get("Item")
    return plain(item) if item else None


def claim(execution_name: str, *, answer: str, answered_by: str, reason: str | None, at: datetime, table=None) -> None:
    """Write the operator's answer only if nobody answered and no decision is recorded yet."""
    try:
        _table(table).update_item(
            Key={"instance_id": approval_key(execution_name)},
            UpdateExpression="SET answer = :answer, answered_by = :by, answered_at = :at, answer_reason = :reason",
            ConditionExpression=(
                "attribute_exists(task_token) AND attribute_not_exists(answered_at) AND attribute_not_exists(decided_at)"
            ),
            ExpressionAttributeValues={":answer": answer, ":by": answered_by, ":at": at.isoformat(timespec="seconds"), ":reason": reason},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            raise AlreadyAnswered(execution_name) from None
        raise


def release(execution_name: str, *, at: datetime, table=None) -> None:
    """Take back a claim whose SendTaskSuccess was refused, so the item tells the truth."""
    try:
        _table(table).update_item(
            Key={"instance_id": approval_key(execution_name)},
            UpdateExpression="REMOVE answer, answered_by, answered_at, answer_reason",
            ConditionExpression="answered_at = :at",
            ExpressionAttributeValues={":at": at.isoformat(timespec="seconds")},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise


def all_items(table=None, *, pending_only: bool = False) -> list[dict]:
    """Every approval item of the deployment's table (only those still marked PENDING when asked)."""
    from gpufill.constants import APPROVAL_KEY_PREFIX

    condition = "begins_with(instance_id, :approval)"
    values: dict = {":approval": APPROVAL_KEY_PREFIX}
    kwargs: dict = {}
    if pending_only:
        condition += " AND #status = :pending"
        values[":pending"] = "PENDING"
        kwargs["ExpressionAttributeNames"] = {"#status": "status"}
    items: list[dict] = []
    while True:
        page = _table(table).scan(FilterExpression=condition, ExpressionAttributeValues=values, ConsistentRead=True, **kwargs)
        items.extend(plain(i) for i in page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


BATCH_GET_KEYS = 100  # DynamoDB's BatchGetItem limit


def records(instance_ids: list[str], table=None) -> dict[str, dict]:
    """The instance records of these ids (those that exist), read consistently."""
    found: dict[str, dict] = {}
    table = _table(table)
    ids = sorted(set(instance_ids))
    for start in range(0, len(ids), BATCH_GET_KEYS):
        asked: dict = {table.name: {"Keys": [{"instance_id": i} for i in ids[start : start + BATCH_GET_KEYS]], "ConsistentRead": True}}
        while asked:
            reply = table.meta.client.batch_get_item(RequestItems=asked)
            for item in reply.get("Responses", {}).get(table.name, []):
                found[item["instance_id"]] = plain(item)
            asked = reply.get("UnprocessedKeys") or {}
    return found
