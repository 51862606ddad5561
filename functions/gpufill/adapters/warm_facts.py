"""Warm facts in the instances table: what ScoreRegion scored and PrepareRegion prepared, kept for
the deployment's next runs (policy/warm_facts.py decides when they are used).

Items are keyed per region and instance type (the scoring facts) and per region (the launch
settings), so requests of different types share what they have in common. Reads are strongly
consistent: a run right after another sees what it wrote. Writing is best effort: a fact that
could not be kept only means the next run asks AWS again.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters.aws import resource
from gpufill.constants import (
    ENV_INSTANCES_TABLE,
    INSTANCES_TABLE_KEY,
    INSTANCES_TTL_ATTRIBUTE,
    FACTS_REFRESH_WINDOW_SECONDS,
    KIND_WARM,
    WARM_FACTS_KEY_PREFIX,
    WARM_LAUNCH_KEY_PREFIX,
    WARM_USED_KEY,
)
from gpufill.models.run import RegionFacts, TypeFacts
from gpufill.policy import warm_facts
from gpufill.policy.facts_refresh import Usage
from gpufill.policy.warm_facts import PreparedRegion, ScoredType

logger = Logger(child=True)
BATCH_GET_LIMIT = 100  # DynamoDB BatchGetItem keys per call


def _table():
    return resource("dynamodb").Table(os.environ[ENV_INSTANCES_TABLE])


def facts_key(region: str, instance_type: str) -> str:
    return f"{WARM_FACTS_KEY_PREFIX}{region}#{instance_type}"


def launch_key(region: str) -> str:
    return f"{WARM_LAUNCH_KEY_PREFIX}{region}"


def save_scored(facts: RegionFacts, *, written_at: float, zone_ids: bool) -> None:
    """One item per type of a region ScoreRegion scored (a region dropped for an error is not kept)."""
    if facts.error is not None:
        return
    try:
        for t in facts.types:
            _table().put_item(
                Item={
                    INSTANCES_TABLE_KEY: facts_key(facts.region, t.instance_type),
                    "kind": KIND_WARM,
                    "body": t.model_dump_json(exclude_none=True),
                    "written_at": str(written_at),
                    "zone_ids": zone_ids,
                    INSTANCES_TTL_ATTRIBUTE: warm_facts.expires_at("scoring", written_at),
                }
            )
    except (ClientError, BotoCoreError) as error:
        logger.warning("scoring facts not kept", extra={"region": facts.region, "error": str(error)})


def load_scored(regions: list[str], instance_types: list[str]) -> dict[tuple[str, str], ScoredType]:
    """Every kept (region, type) of those asked, fresh or not (the policy judges), in one read of up to 100;
    none when the table cannot be read."""
    keys = {facts_key(r, t): (r, t) for r in regions for t in instance_types}
    found: dict[tuple[str, str], ScoredType] = {}
    for item in _batch_get(list(keys)) or []:
        region, _ = keys[item[INSTANCES_TABLE_KEY]]
        found[keys[item[INSTANCES_TABLE_KEY]]] = ScoredType(
            region=region,
            facts=TypeFacts.model_validate_json(item["body"]),
            written_at=float(item["written_at"]),
            zone_ids=bool(item.get("zone_ids", False)),
        )
    return found


def save_prepared(prepared: PreparedRegion) -> None:
    """PrepareRegion's answer for a region (an UpdateItem: the role writes single items that way)."""
    try:
        _table().update_item(
            Key={INSTANCES_TABLE_KEY: launch_key(prepared.region)},
            UpdateExpression="SET kind = :k, image_id = :i, snapshot_gib = :g, security_group_id = :s, "
            "subnets = :n, zones = :z, written_at = :w, #ttl = :e",
            ExpressionAttributeNames={"#ttl": INSTANCES_TTL_ATTRIBUTE},
            ExpressionAttributeValues={
                ":k": KIND_WARM,
                ":i": prepared.image_id,
                ":g": prepared.snapshot_gib or 0,
                ":s": prepared.security_group_id or "",
                ":n": dict(prepared.subnets),
                ":z": list(prepared.zones),
                ":w": str(prepared.written_at),
                ":e": warm_facts.expires_at("launch", prepared.written_at),
            },
        )
    except (ClientError, BotoCoreError) as error:
        logger.warning("launch settings not kept", extra={"region": prepared.region, "error": str(error)})


def load_prepared(region: str) -> PreparedRegion | None:
    """The region's kept launch settings, fresh or not (the policy judges); None when none are kept.
    Read with BatchGetItem, strongly consistent: the call every reader's role already has."""
    items = _batch_get([launch_key(region)])
    if not items:  # none kept, or unreadable: the run prepares the region as if none were
        return None
    item = items[0]
    return PreparedRegion(
        region=region,
        image_id=str(item["image_id"]),
        snapshot_gib=int(item["snapshot_gib"]) or None,
        security_group_id=str(item["security_group_id"]) or None,
        subnets={str(z): str(s) for z, s in item.get("subnets", {}).items()},
        zones=tuple(str(z) for z in item.get("zones", [])),
        written_at=float(item["written_at"]),
    )


# --- what runs used (the facts refresh renews those only) ------------------------------------
# One item, one attribute per use: "scored|<region>|<type>" and "zone_ids|<region>|<type>" (the
# last use, and the last blended one), "launched|<region>" (the last launch there) and
# "zones|<region>" (a string set: every AZ launched in, added to by each run).
_USE_KINDS = ("scored", "zone_ids", "launched", "zones")


def note_used(
    *, scored: list[tuple[str, str]] = (), zone_ids: bool = False, launched: dict[str, set[str]] | None = None, at: float
) -> None:
    """Stamp what a run used (best effort: a use not noted only means the refresh may skip it)."""
    stamps = {f"scored|{r}|{t}": at for r, t in scored}
    if zone_ids:
        stamps.update({f"zone_ids|{r}|{t}": at for r, t in scored})
    launched = {r: z for r, z in (launched or {}).items() if z}
    stamps.update({f"launched|{r}": at for r in launched})
    if not stamps:
        return
    names = {"#ttl": INSTANCES_TTL_ATTRIBUTE}
    values: dict = {":k": KIND_WARM, ":e": int(at + FACTS_REFRESH_WINDOW_SECONDS) + 1}
    sets = ["kind = :k", "#ttl = :e"]
    for number, (name, stamp) in enumerate(sorted(stamps.items())):
        names[f"#s{number}"], values[f":s{number}"] = name, str(stamp)
        sets.append(f"#s{number} = :s{number}")
    adds = []
    for number, (region, zones) in enumerate(sorted(launched.items())):
        names[f"#z{number}"], values[f":z{number}"] = f"zones|{region}", set(zones)
        adds.append(f"#z{number} :z{number}")
    try:
        _table().update_item(
            Key={INSTANCES_TABLE_KEY: WARM_USED_KEY},
            UpdateExpression="SET " + ", ".join(sets) + (" ADD " + ", ".join(adds) if adds else ""),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )
    except (ClientError, BotoCoreError) as error:
        logger.warning("use of warm facts not noted", extra={"error": str(error)})


def load_used() -> Usage:
    """What runs used, as noted (the refresh raises if it cannot read it: Scheduler records the failure)."""
    item = _table().get_item(Key={INSTANCES_TABLE_KEY: WARM_USED_KEY}, ConsistentRead=True).get("Item") or {}
    found: dict[str, dict] = {kind: {} for kind in _USE_KINDS}
    for name, value in item.items():
        kind, _, rest = name.partition("|")
        if kind not in found or not rest:
            continue
        key = tuple(rest.split("|")) if kind in ("scored", "zone_ids") else rest
        if kind in ("scored", "zone_ids") and len(key) != 2:
            continue
        found[kind][key] = tuple(sorted(str(z) for z in value)) if kind == "zones" else float(value)
    return Usage(scored=found["scored"], zone_ids=found["zone_ids"], launched=found["launched"], zones=found["zones"])


def _batch_get(keys: list[str]) -> list[dict] | None:
    """The items kept under `keys`; None when the table could not be read (the run then asks AWS)."""
    try:
        return _read(keys)
    except (ClientError, BotoCoreError) as error:
        logger.warning("warm facts unreadable", extra={"error": str(error)})
        return None


def _read(keys: list[str]) -> list[dict]:
    found: list[dict] = []
    name = os.environ[ENV_INSTANCES_TABLE]
    dynamodb = resource("dynamodb")
    for start in range(0, len(keys), BATCH_GET_LIMIT):
        pending = {
            name: {"Keys": [{INSTANCES_TABLE_KEY: k} for k in keys[start : start + BATCH_GET_LIMIT]], "ConsistentRead": True}
        }
        while pending:
            reply = dynamodb.batch_get_item(RequestItems=pending)
            found.extend(reply["Responses"].get(name, []))
            pending = reply.get("UnprocessedKeys") or {}
    return found
