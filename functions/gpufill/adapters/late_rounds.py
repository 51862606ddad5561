"""The item that holds a request's late rounds of the spend guard (policy.lifetime.late_step).

Key "late#<request id>" in the instances table. Every change is one conditional write on the
round and phase it was decided from, so a launch step, the round's teardown listing and its
decision, racing, each see the item as the others left it: a write that lost is decided again.
"""

from __future__ import annotations

import os

from botocore.exceptions import ClientError

from gpufill.adapters import clock
from gpufill.adapters.aws import resource
from gpufill.adapters.instances_table import plain
from gpufill.constants import (
    ENV_INSTANCES_TABLE,
    INSTANCES_TABLE_KEY,
    INSTANCES_TTL_ATTRIBUTE,
    KIND_LATE_ROUNDS,
    LATE_ROUNDS_KEY_PREFIX,
    LATE_ROUNDS_RETENTION_SECONDS,
)
from gpufill.policy.lifetime import LATE_ANSWERED, LATE_ASKED, LATE_OPEN


def _table():
    return resource("dynamodb").Table(os.environ[ENV_INSTANCES_TABLE])


def _key(request_id: str) -> dict:
    return {INSTANCES_TABLE_KEY: f"{LATE_ROUNDS_KEY_PREFIX}{request_id}"}


def _written(**kwargs) -> bool:
    """One conditional UpdateItem; False when its condition did not hold."""
    try:
        _table().update_item(Key=kwargs.pop("key"), **kwargs)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True


def read(request_id: str) -> dict | None:
    item = _table().get_item(Key=_key(request_id), ConsistentRead=True).get("Item")
    return None if item is None else plain(item)  # launches: a string set, read back as a sorted list


def open_round(request_id: str, *, number: int, due: str, launch: str, expect: dict | None) -> bool:
    """Make round `number` the request's open round, opened by `launch`, if the item is still as
    `expect` said (None: there is none)."""
    if expect is None:
        condition, values = "attribute_not_exists(#key)", {}
    else:
        condition, values = "#round = :was AND phase = :phase", {":was": expect["round"], ":phase": expect["phase"]}
    return _written(
        key=_key(request_id),
        UpdateExpression=(
            "SET kind = :kind, #round = :round, phase = :open, due = :due, opened_by = :launch, #ttl = :ttl "
            "REMOVE #until ADD launches :launches"
        ),
        ConditionExpression=condition,
        ExpressionAttributeNames={"#round": "round", "#until": "until", "#ttl": INSTANCES_TTL_ATTRIBUTE,
                                  **({"#key": INSTANCES_TABLE_KEY} if expect is None else {})},
        ExpressionAttributeValues={":kind": KIND_LATE_ROUNDS, ":round": number, ":open": LATE_OPEN, ":due": due,
                                   ":launch": launch, ":launches": {launch}, ":ttl": _ttl(), **values},
    )


def join(request_id: str, *, number: int, launch: str) -> bool:
    """Add `launch` to open round `number`; False when the round is no longer open."""
    return _written(
        key=_key(request_id),
        UpdateExpression="ADD launches :launches",
        ConditionExpression="#round = :round AND phase = :open",
        ExpressionAttributeNames={"#round": "round"},
        ExpressionAttributeValues={":round": number, ":open": LATE_OPEN, ":launches": {launch}},
    )


def mark_asked(request_id: str, *, number: int, until: str) -> bool:
    """Round `number`'s teardown lists now: later launches are not in it. `until`: the latest its
    approval may wait."""
    return _written(
        key=_key(request_id),
        UpdateExpression="SET phase = :asked, #until = :until",
        ConditionExpression="#round = :round AND phase = :open",
        ExpressionAttributeNames={"#round": "round", "#until": "until"},
        ExpressionAttributeValues={":round": number, ":open": LATE_OPEN, ":asked": LATE_ASKED, ":until": until},
    )


def mark_answered(request_id: str, *, number: int) -> bool:
    """Round `number` asks nobody any more (decided, expired, or nothing to ask about)."""
    return _written(
        key=_key(request_id),
        UpdateExpression="SET phase = :answered",
        ConditionExpression="#round = :round AND phase IN (:open, :asked)",
        ExpressionAttributeNames={"#round": "round"},
        ExpressionAttributeValues={":round": number, ":open": LATE_OPEN, ":asked": LATE_ASKED, ":answered": LATE_ANSWERED},
    )


def _ttl() -> int:
    return int(clock.epoch()) + LATE_ROUNDS_RETENTION_SECONDS
