"""What a run keeps in the instances table instead of its state: region facts, ranked pools,
the attempt log, launch intents and the regions a deployment ever launched in.

Step Functions caps a state at 256 KB, so a run's state carries references and counts; the
bulk lives here, compressed. None of these items has a `request_id` attribute except the
intents (kind "intent"), which the by-request index must return for reconciliation.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from decimal import Decimal

from boto3.dynamodb.types import Binary

from gpufill.adapters import clock, container
from gpufill.adapters.aws import resource
from gpufill.constants import (
    ENV_DEPLOYMENT,
    ENV_INSTANCES_TABLE,
    INSTANCES_TABLE_KEY,
    INSTANCES_TTL_ATTRIBUTE,
    INTENT_KEY_PREFIX,
    INTENT_RETENTION_SECONDS,
    KIND_INTENT,
    KIND_MAINTENANCE_PAUSE,
    KIND_PLAN,
    KIND_REQUEST,
    KIND_WAIT,
    MAINTENANCE_PAUSE_KEY,
    MAINTENANCE_PAUSE_SECONDS,
    MAINTENANCE_STOPPED_LEGACY_ATTRIBUTE,
    MAINTENANCE_STOPS_ATTRIBUTE,
    LAUNCH_REGIONS_KEY,
    PLAN_KEY_PREFIX,
    REQUEST_KEY_PREFIX,
    WAIT_KEY_PREFIX,
)
from gpufill.models.run import Attempt, Plan, RegionFacts

BATCH_GET_LIMIT = 100  # DynamoDB BatchGetItem keys per call
BATCH_WRITE_LIMIT = 25  # and BatchWriteItem items


def _table():
    return resource("dynamodb").Table(os.environ[ENV_INSTANCES_TABLE])


def _expires() -> int:
    return int(clock.epoch()) + INTENT_RETENTION_SECONDS


def _pack(value) -> Binary:
    return Binary(gzip.compress(json.dumps(value, separators=(",", ":")).encode(), mtime=0))


def _unpack(blob) -> object:
    return json.loads(gzip.decompress(bytes(blob.value if isinstance(blob, Binary) else blob)))


# --- region facts (ScoreRegion -> RankPools) --------------------------------------------


def facts_key(request_id: str, region: str) -> str:
    return f"facts#{request_id}#{region}"


def save_facts(request_id: str, facts: RegionFacts) -> None:
    _table().put_item(
        Item={
            INSTANCES_TABLE_KEY: facts_key(request_id, facts.region),
            "kind": "facts",
            "body": _pack(facts.model_dump(mode="json", exclude_none=True)),
            INSTANCES_TTL_ATTRIBUTE: _expires(),
        }
    )


def load_facts(request_id: str, regions: list[str]) -> dict[str, RegionFacts]:
    items = _batch_get([facts_key(request_id, r) for r in regions])
    return {
        (facts := RegionFacts.model_validate(_unpack(item["body"]))).region: facts
        for item in items.values()
    }


# --- the ranked plan ---------------------------------------------------------------------


def save_plan(plan: Plan) -> str:
    """Store the plan under a key derived from its content, so a key always names one plan."""
    body = plan.model_dump(mode="json", exclude_none=True)
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    key = f"{PLAN_KEY_PREFIX}{plan.request_id}#{plan.market}#{digest}"
    _table().put_item(
        Item={INSTANCES_TABLE_KEY: key, "kind": KIND_PLAN, "body": _pack(body), INSTANCES_TTL_ATTRIBUTE: _expires()}
    )
    return key


@container.cached(maxsize=32)  # a key names one plan for good: never stale
def load_plan(key: str) -> Plan:
    item = _table().get_item(Key={INSTANCES_TABLE_KEY: key}, ConsistentRead=True).get("Item")
    if item is None:
        raise LookupError(f"plan {key} is not in the table")
    return Plan.model_validate(_unpack(item["body"]))


# --- the attempt log ----------------------------------------------------------------------


def attempt_key(request_id: str, number: int) -> str:
    return f"attempt#{request_id}#{number}"


def save_attempts(request_id: str, attempts: list[Attempt]) -> None:
    """One item per attempt, keyed by its number: a retried step overwrites its own items."""
    name = os.environ[ENV_INSTANCES_TABLE]
    expires = _expires()
    requests = [
        {
            "PutRequest": {
                "Item": {
                    INSTANCES_TABLE_KEY: attempt_key(request_id, attempt.number),
                    "kind": "attempt",
                    "body": json.dumps(attempt.model_dump(mode="json", exclude_none=True)),
                    INSTANCES_TTL_ATTRIBUTE: expires,
                }
            }
        }
        for attempt in attempts
    ]
    dynamodb = resource("dynamodb")
    for start in range(0, len(requests), BATCH_WRITE_LIMIT):
        pending = {name: requests[start : start + BATCH_WRITE_LIMIT]}
        while pending:
            pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}


def load_attempts(request_id: str, total: int) -> list[Attempt]:
    items = _batch_get([attempt_key(request_id, n) for n in range(1, total + 1)])
    attempts = [Attempt.model_validate_json(item["body"]) for item in items.values()]
    return sorted(attempts, key=lambda a: a.number or 0)


# --- launch intents -----------------------------------------------------------------------


def record_intent(*, request_id: str, region: str, client_token: str) -> None:
    """Written before every launch call: whatever fails after it, the region is known to reconcile."""
    _table().put_item(
        Item={
            INSTANCES_TABLE_KEY: f"{INTENT_KEY_PREFIX}{client_token}",
            "kind": KIND_INTENT,
            "request_id": request_id,
            "region": region,
            "client_token": client_token,
            "deployment": os.environ.get(ENV_DEPLOYMENT, ""),
            "created_at": clock.iso_now(),
            INSTANCES_TTL_ATTRIBUTE: _expires(),
        }
    )


def note_launch_region(region: str) -> None:
    """Add the region to the deployment's set of regions ever launched in (teardown `all`, status)."""
    _table().update_item(
        Key={INSTANCES_TABLE_KEY: LAUNCH_REGIONS_KEY},
        UpdateExpression="ADD regions :r SET kind = :k",
        ExpressionAttributeValues={":r": {region}, ":k": "meta"},
    )


# --- waiting for capacity ---------------------------------------------------------------
# One item per request that waits: what `gpufill status` shows while it waits, and where a
# teardown leaves word that the wait should end. Kept by the original request id, so every
# execution of a continued chain writes the same item.


def wait_key(request_id: str) -> str:
    return f"{WAIT_KEY_PREFIX}{request_id}"


def save_wait(request_id: str, view: dict) -> None:
    """Write the wait's view (phase, deadline, next try, tries, execution), keeping a stop mark."""
    # DynamoDB takes numbers as Decimal: a fee in dollars and cents is a float until here.
    fields = {k: Decimal(str(v)) if isinstance(v, float) else v for k, v in view.items() if v is not None}
    gone = [k for k, v in view.items() if v is None]
    update = "SET kind = :kind, " + ", ".join(f"#{k} = :{k}" for k in fields) + f", {INSTANCES_TTL_ATTRIBUTE} = :exp"
    if gone:
        update += " REMOVE " + ", ".join(f"#{k}" for k in gone)
    _table().update_item(
        Key={INSTANCES_TABLE_KEY: wait_key(request_id)},
        UpdateExpression=update,
        ExpressionAttributeNames={f"#{k}": k for k in view},
        ExpressionAttributeValues={**{f":{k}": v for k, v in fields.items()}, ":kind": KIND_WAIT, ":exp": _expires()},
    )


def load_wait(request_id: str) -> dict | None:
    item = _table().get_item(Key={INSTANCES_TABLE_KEY: wait_key(request_id)}, ConsistentRead=True).get("Item")
    return {k: _plain(v) for k, v in item.items()} if item else None


def mark_wait_stopped(request_id: str, *, by: str) -> bool:
    """A teardown of a waiting request: its next try (or its launch into its Capacity Block) ends the
    wait instead of launching. False if it does not wait."""
    try:
        _table().update_item(
            Key={INSTANCES_TABLE_KEY: wait_key(request_id)},
            UpdateExpression="SET stopped_by = :by",
            ConditionExpression="attribute_exists(#key) AND phase IN (:waiting, :trying, :paying, :block, :in_block)",
            ExpressionAttributeNames={"#key": INSTANCES_TABLE_KEY},
            # A run holding a Capacity Block waits too (for the payment, for the block's start) and
            # may launch into it again: the stop mark ends that as it ends a wait for capacity.
            ExpressionAttributeValues={":by": by, ":waiting": "waiting", ":trying": "trying",
                                       ":paying": "capacity-block-payment", ":block": "capacity-block",
                                       ":in_block": "capacity-block-in-use"},
        )
    except _table().meta.client.exceptions.ConditionalCheckFailedException:
        return False
    return True


def _plain(value):
    """DynamoDB numbers come back as Decimal: whole ones as int, the rest as float."""
    from decimal import Decimal

    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


# --- a maintained request, as it was accepted (StartRefill asks for the same again) ---------


def save_request(request_id: str, request: dict) -> None:
    """Kept without expiry: maintenance lasts as long as the request's instances do. The same
    request is written by every step of its run, with the same content; a teardown's stop mark
    on it stays (an update, not a put)."""
    _table().update_item(
        Key={INSTANCES_TABLE_KEY: f"{REQUEST_KEY_PREFIX}{request_id}"},
        UpdateExpression="SET kind = :kind, body = :body",
        ExpressionAttributeValues={":kind": KIND_REQUEST, ":body": _pack(request)},
    )


def load_request(request_id: str) -> dict | None:
    item = _load_request_item(request_id)
    return None if item is None else _unpack(item["body"])  # type: ignore[return-value]


def _load_request_item(request_id: str) -> dict | None:
    return _table().get_item(Key={INSTANCES_TABLE_KEY: f"{REQUEST_KEY_PREFIX}{request_id}"}, ConsistentRead=True).get("Item")


# A request's maintenance is stopped by each teardown asked for it, one mark per teardown, so
# refills stay stopped while any of them waits for its approval and a rejection or an expiry
# removes its own mark only. A mark in the legacy attribute reads as one more and goes the same way.
MAINTENANCE_STOPS = MAINTENANCE_STOPS_ATTRIBUTE
MAINTENANCE_STOPPED_LEGACY = MAINTENANCE_STOPPED_LEGACY_ATTRIBUTE


def end_maintenance(request_id: str, *, by: str) -> bool:
    """A teardown was asked for the request's instances: no refill launches for it from now on,
    whatever the approval says, until every teardown that marked it gave its mark back. False when
    the request is not maintained (no stored request)."""
    try:
        _table().update_item(
            Key={INSTANCES_TABLE_KEY: f"{REQUEST_KEY_PREFIX}{request_id}"},
            UpdateExpression="ADD #stops :by",
            ConditionExpression="attribute_exists(#key)",
            ExpressionAttributeNames={"#key": INSTANCES_TABLE_KEY, "#stops": MAINTENANCE_STOPS},
            ExpressionAttributeValues={":by": {by}},
        )
    except _table().meta.client.exceptions.ConditionalCheckFailedException:
        return False
    return True


def give_back_maintenance(request_id: str, *, by: str) -> frozenset[str] | None:
    """A rejected or expired teardown (or one that asked nobody) removes its own stop mark, once.
    None when it held none; otherwise the marks still standing, as the same write left them: the
    one decision whose removal leaves none is the one that starts the held refills again."""
    client = _table().meta.client
    key = {INSTANCES_TABLE_KEY: f"{REQUEST_KEY_PREFIX}{request_id}"}
    try:
        item = _table().update_item(
            Key=key,
            UpdateExpression="DELETE #stops :by",
            ConditionExpression="contains(#stops, :one)",
            ExpressionAttributeNames={"#stops": MAINTENANCE_STOPS},
            ExpressionAttributeValues={":by": {by}, ":one": by},
            ReturnValues="ALL_NEW",
        )["Attributes"]
    except client.exceptions.ConditionalCheckFailedException:
        try:  # a mark written before marks were per teardown
            item = _table().update_item(
                Key=key,
                UpdateExpression="REMOVE #legacy",
                ConditionExpression="#legacy = :one",
                ExpressionAttributeNames={"#legacy": MAINTENANCE_STOPPED_LEGACY},
                ExpressionAttributeValues={":one": by},
                ReturnValues="ALL_NEW",
            )["Attributes"]
        except client.exceptions.ConditionalCheckFailedException:
            return None
    return _stops(item)


def _stops(item: dict | None) -> frozenset[str]:
    if not item:
        return frozenset()
    legacy = item.get(MAINTENANCE_STOPPED_LEGACY)
    return frozenset(item.get(MAINTENANCE_STOPS) or ()) | ({legacy} if legacy else set())


def maintenance_stops(request_id: str) -> frozenset[str]:
    """Every teardown whose mark stops the request's maintenance now (empty while it is maintained)."""
    return _stops(_load_request_item(request_id))


def maintenance_stopped_by(request_id: str) -> str | None:
    """A teardown that stopped the request's maintenance (the first by name when several did), or
    None while it is maintained."""
    return min(maintenance_stops(request_id), default=None)


def pause_maintenance(*, by: str) -> None:
    """A teardown of everything is listing the deployment's instances: no refill keeps what it
    launches until the teardown has marked every request it ends (then resume_maintenance)."""
    _table().update_item(
        Key={INSTANCES_TABLE_KEY: MAINTENANCE_PAUSE_KEY},
        UpdateExpression="SET kind = :kind, paused_by = :by, #until = :until, #ttl = :ttl",
        ExpressionAttributeNames={"#until": "until", "#ttl": INSTANCES_TTL_ATTRIBUTE},
        ExpressionAttributeValues={":kind": KIND_MAINTENANCE_PAUSE, ":by": by,
                                   ":until": int(clock.epoch()) + MAINTENANCE_PAUSE_SECONDS, ":ttl": _expires()},
    )


def resume_maintenance(*, by: str) -> None:
    """Lift this teardown's pause (a later teardown's own pause stays). An update, not a delete:
    the teardown's function writes the table and deletes nothing."""
    try:
        _table().update_item(
            Key={INSTANCES_TABLE_KEY: MAINTENANCE_PAUSE_KEY},
            UpdateExpression="SET #until = :zero",
            ConditionExpression="paused_by = :by",
            ExpressionAttributeNames={"#until": "until"},
            ExpressionAttributeValues={":by": by, ":zero": 0},
        )
    except _table().meta.client.exceptions.ConditionalCheckFailedException:
        pass


def refills_stopped_by(request_id: str) -> str | None:
    """The teardown a refill of this request must stop for: the one that stopped the request's
    maintenance, or a teardown of everything listing the deployment right now. One strongly
    consistent read of both items."""
    found = _batch_get([f"{REQUEST_KEY_PREFIX}{request_id}", MAINTENANCE_PAUSE_KEY])
    stopped = min(_stops(found.get(f"{REQUEST_KEY_PREFIX}{request_id}")), default=None)
    if stopped:
        return stopped
    pause = found.get(MAINTENANCE_PAUSE_KEY)
    if pause and int(pause.get("until", 0)) > clock.epoch():
        return pause.get("paused_by")
    return None


def _batch_get(keys: list[str]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    name = os.environ[ENV_INSTANCES_TABLE]
    dynamodb = resource("dynamodb")
    for start in range(0, len(keys), BATCH_GET_LIMIT):
        pending = {name: {"Keys": [{INSTANCES_TABLE_KEY: k} for k in keys[start : start + BATCH_GET_LIMIT]], "ConsistentRead": True}}
        while pending:
            reply = dynamodb.batch_get_item(RequestItems=pending)
            for item in reply["Responses"].get(name, []):
                found[item[INSTANCES_TABLE_KEY]] = item
            pending = reply.get("UnprocessedKeys") or {}
    return found


def forget() -> None:
    load_plan.cache_clear()
