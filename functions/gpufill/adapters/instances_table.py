"""The DynamoDB instances table: one item per launched instance, written as soon as it exists."""

from __future__ import annotations

import os
from datetime import datetime
from decimal import Decimal

from botocore.exceptions import ClientError
from pydantic import BaseModel, Field

from gpufill.adapters import clock
from gpufill.adapters.aws import resource

from gpufill.constants import (
    APPROVAL_KEY_PREFIX,
    ENV_INSTANCES_TABLE,
    KIND_INTENT,
    LAUNCH_REGIONS_KEY,
    INSTANCES_BY_REQUEST_INDEX,
    INSTANCES_TTL_ATTRIBUTE,
    LIFETIME_ATTRIBUTE,
    TERMINATED_RECORD_RETENTION_SECONDS,
)
from gpufill.models.run import Instance
from gpufill.models.teardown import LiveInstance


class InstanceRecordError(Exception):
    """Raised when launched instances could not be recorded; the step is retried with the same ClientToken."""


def _table():
    return resource("dynamodb").Table(os.environ[ENV_INSTANCES_TABLE])


def record_launched(
    instances: list[Instance], *, request_id: str, client_token: str, maintain: bool = False, replaces: list[str] | None = None,
    lifetime_expires_at: str | None = None,
) -> None:
    """`maintain`: EC2 reclaiming one starts a refill run; `replaces`: the instances a refill run launched it for.

    Records only move forward: each attribute is written only where the record lacks it, so a
    retried launch step (its token answered with the same instances) adds what a status run's
    reconciled record was missing, and never takes back what a teardown, a rollback or the boot
    check wrote meanwhile (a terminated instance stays terminated, with who ended it). DynamoDB
    has no conditional batch write, hence one UpdateItem per instance."""
    now = clock.iso_now()
    try:
        for instance in instances:
            item = instance.model_dump(exclude_none=True)
            for money in ("hourly_price", "capacity_block_fee"):  # DynamoDB takes no float
                if item.get(money) is not None:
                    item[money] = Decimal(str(item[money]))
            item.pop("instance_id")
            item.update({"request_id": request_id, "client_token": client_token, "state": "pending", "launched_at": now})
            if maintain:
                item["maintain"] = True
            if replaces:
                item["replaces"] = list(replaces)
            if lifetime_expires_at:
                item[LIFETIME_ATTRIBUTE] = lifetime_expires_at
            _write_missing(instance.instance_id, item)
    except Exception as error:
        raise InstanceRecordError(f"could not record {[i.instance_id for i in instances]}: {error}") from error


def _write_missing(instance_id: str, attributes: dict) -> None:
    names = {f"#a{n}": key for n, key in enumerate(attributes)}
    values = {f":a{n}": value for n, value in enumerate(attributes.values())}
    _table().update_item(
        Key={"instance_id": instance_id},
        UpdateExpression="SET " + ", ".join(f"#a{n} = if_not_exists(#a{n}, :a{n})" for n in range(len(attributes))),
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )


def records_for_request(request_id: str) -> list[dict]:
    table = _table()
    items, kwargs = [], {}
    while True:
        page = table.query(
            IndexName=INSTANCES_BY_REQUEST_INDEX,
            KeyConditionExpression="request_id = :r",
            ExpressionAttributeValues={":r": request_id},
            **kwargs,
        )
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


# --- teardown and status ------------------------------------------------------------------
# Keys starting with APPROVAL_KEY_PREFIX hold pending approvals, not instances (adapters.approvals).


def plain(item: dict) -> dict:
    """A table item with DynamoDB's Decimals turned back into numbers (prices stay floats)."""
    return {key: _plain_value(key, value) for key, value in item.items()}


def _plain_value(key: str, value):
    if isinstance(value, Decimal):
        return _number(key, value)
    if isinstance(value, set):  # string sets (replaced_by) read back as sorted lists
        return sorted(value)
    return value


def _number(key: str, value: Decimal) -> int | float:
    if key != "hourly_price" and value == value.to_integral_value():
        return int(value)
    return float(value)


def records_by_ids(instance_ids: list[str]) -> dict[str, dict]:
    """instance id -> record, for the ids gpufill holds a record of (BatchGetItem, 100 keys a call)."""
    name = os.environ[ENV_INSTANCES_TABLE]
    dynamodb = resource("dynamodb")
    found: dict[str, dict] = {}
    for start in range(0, len(instance_ids), 100):
        keys = [{"instance_id": i} for i in instance_ids[start : start + 100]]
        request = {name: {"Keys": keys, "ConsistentRead": True}}
        while request:
            page = dynamodb.batch_get_item(RequestItems=request)
            for item in page["Responses"].get(name, []):
                found[item["instance_id"]] = plain(item)
            request = page.get("UnprocessedKeys") or {}
    return found


class Holdings(BaseModel):
    """What the table says about where this deployment's instances can be: the instance records,
    the regions launch intents name (a launch whose record was never written still wrote its
    intent first), and the regions any launch was ever attempted in."""

    records: dict[str, dict] = Field(default_factory=dict)
    intent_regions: set[str] = Field(default_factory=set)
    launch_regions: set[str] = Field(default_factory=set)

    def add(self, item: dict) -> None:
        key = item["instance_id"]
        if key == LAUNCH_REGIONS_KEY:
            self.launch_regions |= set(item.get("regions") or ())
        elif item.get("kind") == KIND_INTENT:
            if item.get("region"):
                self.intent_regions.add(item["region"])
        elif not item.get("kind") and not key.startswith(APPROVAL_KEY_PREFIX) and "#" not in key:
            self.records[key] = plain(item)


def request_holdings(request_id: str) -> Holdings:
    """A request's instance records and the regions its intents name (the by-request index holds both)."""
    found = Holdings()
    for item in records_for_request(request_id):
        found.add(item)
    return found


def all_holdings() -> Holdings:
    """Every instance record, every intent's region and the launch-regions set (one scan)."""
    table = _table()
    found = Holdings()
    kwargs: dict = {}
    while True:
        page = table.scan(**kwargs)
        for item in page["Items"]:
            found.add(item)
        if "LastEvaluatedKey" not in page:
            return found
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def record_reconciled(instance: LiveInstance, *, request_id: str, seen_at: datetime) -> dict | None:
    """Record an instance of this deployment found in EC2 without a record (its launch lost the
    write): the record says so (`reconciled`). Never overwrites a record written meanwhile.
    Returns the record written, or None when one already existed."""
    item = {
        "instance_id": instance.instance_id,
        "request_id": request_id,
        "region": instance.region,
        "availability_zone": instance.availability_zone,
        "instance_type": instance.instance_type,
        "market": instance.market,
        "client_token": instance.client_token,
        "state": instance.state,
        "launched_at": instance.launch_time,
        "reconciled": True,
        "reconciled_at": seen_at.isoformat(timespec="seconds"),
    }
    item = {k: v for k, v in item.items() if v is not None}
    try:
        _table().put_item(Item=item, ConditionExpression="attribute_not_exists(instance_id)")
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return None
        raise
    return item


def mark_terminated(
    instance_id: str, *, region: str, request_id: str | None, terminated_at: datetime, terminated_by: str
) -> None:
    """Record that a teardown ended this instance; an instance without a record gets a minimal one."""
    values = {
        ":state": "terminated",
        ":at": terminated_at.isoformat(timespec="seconds"),
        ":by": terminated_by,
        ":region": region,
        ":ttl": int(terminated_at.timestamp()) + TERMINATED_RECORD_RETENTION_SECONDS,
    }
    expression = "SET #state = :state, terminated_at = :at, terminated_by = :by, #region = if_not_exists(#region, :region), #ttl = :ttl"
    if request_id:
        values[":request"] = request_id
        expression += ", request_id = if_not_exists(request_id, :request)"
    _table().update_item(
        Key={"instance_id": instance_id},
        UpdateExpression=expression,
        ExpressionAttributeNames={"#state": "state", "#region": "region", "#ttl": INSTANCES_TTL_ATTRIBUTE},
        ExpressionAttributeValues=values,
    )


def mark_rolled_back(instance_id: str, *, region: str, request_id: str, terminated_at: datetime, reason: str) -> None:
    """An all_or_nothing run terminated its own instance: ended, by the run itself, with no approval,
    and why (policy.gang.rollback_reason)."""
    _table().update_item(
        Key={"instance_id": instance_id},
        UpdateExpression=(
            "SET #state = :state, rolled_back = :yes, rolled_back_reason = :reason, terminated_at = :at, terminated_by = :by, "
            "#region = if_not_exists(#region, :region), request_id = if_not_exists(request_id, :request), #ttl = :ttl"
        ),
        ExpressionAttributeNames={"#state": "state", "#region": "region", "#ttl": INSTANCES_TTL_ATTRIBUTE},
        ExpressionAttributeValues={
            ":state": "terminated",
            ":yes": True,
            ":reason": reason,
            ":at": terminated_at.isoformat(timespec="seconds"),
            ":by": f"rollback:{request_id}",
            ":region": region,
            ":request": request_id,
            ":ttl": int(terminated_at.timestamp()) + TERMINATED_RECORD_RETENTION_SECONDS,
        },
    )


def mark_ended(instance_id: str, *, state: str, seen_at: datetime) -> None:
    """A status run saw this record's instance ended (terminated, or long gone from EC2): say so,
    and give the record its TTL so the table does not grow forever."""
    try:
        _table().update_item(
            Key={"instance_id": instance_id},
            UpdateExpression="SET #state = :state, ended_seen_at = :at, #ttl = :ttl",
            ConditionExpression="attribute_exists(instance_id)",
            ExpressionAttributeNames={"#state": "state", "#ttl": INSTANCES_TTL_ATTRIBUTE},
            ExpressionAttributeValues={
                ":state": state,
                ":at": seen_at.isoformat(timespec="seconds"),
                ":ttl": int(seen_at.timestamp()) + TERMINATED_RECORD_RETENTION_SECONDS,
            },
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise


def record_boot_state(instance: Instance, *, lost: bool) -> None:
    """State and private IP after the launch settled; a lost instance is marked so nobody pays attention to it.
    A record that says the instance was ended (terminated_at) keeps saying so."""
    names = {"#state": "state"}
    values = {":state": instance.state or "unknown", ":now": clock.iso_now()}
    expression = "SET #state = :state, checked_at = :now"
    if instance.private_ip:
        expression += ", private_ip = :ip"
        values[":ip"] = instance.private_ip
    if lost:
        expression += ", lost_reason = :why"
        values[":why"] = "ended before it was running (spot capacity reclaimed at launch)"
    try:
        # What the boot check saw may be older than a teardown's or a rollback's record of the end.
        _table().update_item(
            Key={"instance_id": instance.instance_id},
            UpdateExpression=expression,
            ConditionExpression="attribute_not_exists(terminated_at)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise


# --- maintenance -------------------------------------------------------------------------


def mark_interrupted(instance_id: str, *, interruption: str, refill_run: str, at: datetime) -> None:
    """EC2 reclaimed this instance and `refill_run` replaces it. The record keeps everything else
    it held; a repeated event (the warning, then the state change) writes the same again, but
    keeps what the first one said and when."""
    _mark_reclaimed(instance_id, "refill_run", refill_run, interruption=interruption, at=at)


def mark_refill_held(instance_id: str, *, interruption: str, held_by: str, at: datetime) -> None:
    """EC2 reclaimed this instance while teardown `held_by` awaited its approval: no refill starts
    now, and the record says which teardown held it back, so a rejection starts it."""
    _mark_reclaimed(instance_id, "refill_held_by", held_by, interruption=interruption, at=at)


def mark_refill_restarted(instance_id: str, *, refill_run: str, was: str | None, by: str) -> bool:
    """Claim the restart of this instance's refill: `refill_run` replaces it now, started when
    teardown `by` ended, if its record still names `was` as its refill run (None: none ever
    started). False when another ending claimed it first."""
    condition = "refill_run = :was" if was else "attribute_not_exists(refill_run)"
    try:
        _table().update_item(
            Key={"instance_id": instance_id},
            UpdateExpression="SET refill_run = :run, refill_restarted_by = :by",
            ConditionExpression=f"attribute_exists(instance_id) AND {condition}",
            ExpressionAttributeValues={":run": refill_run, ":by": by, **({":was": was} if was else {})},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True


def _mark_reclaimed(instance_id: str, field: str, value: str, *, interruption: str, at: datetime) -> None:
    _table().update_item(
        Key={"instance_id": instance_id},
        UpdateExpression=f"SET #state = :state, {field} = :value, interruption = if_not_exists(interruption, :what), interrupted_at = if_not_exists(interrupted_at, :at)",
        ConditionExpression="attribute_exists(instance_id)",
        ExpressionAttributeNames={"#state": "state"},
        ExpressionAttributeValues={
            ":state": "interrupted",
            ":what": interruption,
            ":value": value,
            ":at": at.isoformat(timespec="seconds"),
        },
    )


def mark_replaced(instance_ids: list[str], replacements: list[str]) -> None:
    """The refill run launched `replacements` for these instances (a set: a retried step adds nothing)."""
    for instance_id in instance_ids:
        try:
            _table().update_item(
                Key={"instance_id": instance_id},
                UpdateExpression="ADD replaced_by :new",
                ConditionExpression="attribute_exists(instance_id)",
                ExpressionAttributeValues={":new": set(replacements)},
            )
        except ClientError as error:  # no record to annotate: nothing to keep track of
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
