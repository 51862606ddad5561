"""Which approval an answer is for, and what an answer did, read from the approval items and the
execution's history.

Pure: `gpufill approve|reject` and any other route that answers (gpufill.approve.answer) use the
same rules, so a request id never silently picks one of two pending approvals, and a lost reply is
reported from what Step Functions recorded, never guessed from the error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

PURCHASE, TEARDOWN = "purchase", "teardown"
KINDS = (PURCHASE, TEARDOWN)
PURCHASE_MARK = "capacity-block-purchase"  # the approval item's approval_for when it asks to buy a block
AWAIT_STATE = {PURCHASE: "AwaitPurchaseApproval", TEARDOWN: "AwaitTeardownApproval"}
PURCHASE_STATE = "PurchaseCapacityBlock"

Kind = Literal["purchase", "teardown"]
Taken = Literal["waiting", "answered", "timed_out", "ended", "not_asked"]


def kind_of(item: dict) -> Kind:
    return PURCHASE if item.get("approval_for") == PURCHASE_MARK else TEARDOWN


def approval_id(item: dict) -> str:
    """An approval's own id, `KIND:EXECUTION`: it names exactly one approval whatever else has the name."""
    return f"{kind_of(item)}:{item['execution_name']}"


def split_id(text: str) -> tuple[Kind | None, str]:
    """("purchase", "run-1") for "purchase:run-1"; (None, text) for a bare name."""
    kind, sep, name = text.partition(":")
    if sep and kind in KINDS and name:
        return kind, name  # type: ignore[return-value]
    return None, text


def target_of(item: dict) -> dict:
    """Only what the approval names: {"request_id": ...}, {"instance_ids": [...]} or {"all": true}."""
    try:
        target = json.loads(item.get("target") or "{}")
    except ValueError:
        return {}
    return {k: v for k, v in target.items() if v} if isinstance(target, dict) else {}


def is_pending(item: dict, now: datetime) -> bool:
    """Not answered, not decided, and before its deadline."""
    if item.get("answered_at") or item.get("decided_at") or "task_token" not in item:
        return False
    deadline = str(item.get("deadline") or "")
    return not deadline or deadline > now.isoformat(timespec="seconds")


def about_request(item: dict, request_id: str) -> bool:
    """The approval is this request's: its purchase (asked by the request's own run) or a teardown of it."""
    return target_of(item).get("request_id") == request_id


@dataclass(frozen=True)
class Match:
    """What a name given to approve|reject points at: the one approval to answer, or why none."""

    chosen: dict | None
    pending: tuple[dict, ...] = ()  # more than one pending: listed, nothing answered
    whole_deployment: dict | None = None  # only a teardown of everything waits: never answered by a request id


def match(text: str, items: list[dict], now: datetime) -> Match:
    """The approval `text` names among `items` (every approval item of the deployment).

    `KIND:EXECUTION` names one approval; a bare name is an execution's (a teardown's name, or a
    run whose purchase waits) or a request id. When several pending approvals answer to it, none is
    chosen. With none pending, the newest one it names is chosen, so the answer is refused saying
    what its first answer did."""
    kind, name = split_id(text)
    if kind is not None:
        found = [i for i in items if i.get("execution_name") == name and kind_of(i) == kind]
        return Match(chosen=found[0] if found else None)
    named = [i for i in items if i.get("execution_name") == name or about_request(i, name)]
    waiting = sorted((i for i in named if is_pending(i, now)), key=lambda i: str(i.get("requested_at", "")))
    if len(waiting) > 1:
        return Match(chosen=None, pending=tuple(waiting))
    if waiting:
        return Match(chosen=waiting[0])
    everything = [i for i in items if is_pending(i, now) and target_of(i).get("all")]
    if everything and not any(i.get("execution_name") == name for i in named):
        return Match(chosen=None, whole_deployment=everything[0])
    if named:
        return Match(chosen=max(named, key=lambda i: str(i.get("requested_at", ""))))
    return Match(chosen=None)


def covering(instance_ids: list[str], items: list[dict], now: datetime) -> dict[str, dict]:
    """instance id -> the pending teardown approval that already asks to terminate it."""
    covered: dict[str, dict] = {}
    for item in sorted(items, key=lambda i: str(i.get("requested_at", ""))):
        if kind_of(item) != TEARDOWN or not is_pending(item, now):
            continue
        for instance_id in item.get("instance_ids") or []:
            covered.setdefault(instance_id, item)
    return {i: covered[i] for i in instance_ids if i in covered}


# A record's state once its instance has ended: ended by gpufill (terminated_at), or seen ended or
# long gone from EC2 by a status run (policy/spend.py's ended states).
GONE_STATES = frozenset({"shutting-down", "terminated", "gone"})


def all_gone(instance_ids: list[str], records: dict[str, dict]) -> bool:
    """Every instance the teardown asks about has ended (its record says so) or has no record left
    (expired after its end): approving it would terminate nothing."""
    if not instance_ids:
        return False
    return all(
        records.get(i) is None or records[i].get("terminated_at") or records[i].get("state") in GONE_STATES
        for i in instance_ids
    )


# --- what an answer did, read from the execution -------------------------------------------------


@dataclass(frozen=True)
class Taking:
    """What Step Functions did with the approval's task token, from the execution's history."""

    taken: Taken
    answer: dict | None = None  # the answer it took: {"decision", "approver", "reason"}


def answer_taken(kind: Kind, history: list[dict], execution_status: str) -> Taking:
    """The latest wait of the approval state: still waiting, answered (with what), timed out,
    or the execution ended without an answer (stopped, failed)."""
    state = AWAIT_STATE[kind]
    inside, taking = False, Taking("not_asked")
    for event in history:
        entered = (event.get("stateEnteredEventDetails") or {}).get("name")
        if entered == state:
            inside, taking = True, Taking("waiting")
            continue
        if not inside:
            continue
        kind_of_event = event.get("type")
        if kind_of_event == "TaskSucceeded":
            taking = Taking("answered", _json((event.get("taskSucceededEventDetails") or {}).get("output")))
        elif kind_of_event == "TaskFailed":
            details = event.get("taskFailedEventDetails") or {}
            taking = Taking("answered", {"decision": "rejected", "reason": details.get("cause") or details.get("error")})
        elif kind_of_event == "TaskTimedOut":
            taking = Taking("timed_out")
        elif (event.get("stateExitedEventDetails") or {}).get("name") == state:
            inside = False
    if taking.taken == "waiting" and execution_status != "RUNNING":
        return Taking("ended")
    return taking


def is_this_answer(taking: Taking, decision: str, approver: str) -> bool:
    """The answer Step Functions took is the one this caller sent (same decision, same approver)."""
    answer = taking.answer or {}
    return taking.taken == "answered" and answer.get("decision") == decision and answer.get("approver") == approver


@dataclass(frozen=True)
class Effect:
    """What the answered approval did so far: `done` once it is final (bought or not, terminated or not)."""

    done: bool
    text: str
    bought: bool | None = None
    terminated: list[str] | None = None


def effect(kind: Kind, history: list[dict], execution_status: str, output: dict | None) -> Effect:
    if kind == PURCHASE:
        return _purchase_effect(history, execution_status)
    return _teardown_effect(history, execution_status, output)


def _purchase_effect(history: list[dict], status: str) -> Effect:
    for event in history:
        details = event.get("stateExitedEventDetails") or {}
        if details.get("name") == PURCHASE_STATE:
            held = ((_json(details.get("output")) or {}).get("block") or {}).get("reservation") or {}
            return Effect(
                True,
                f"the Capacity Block was bought: {held.get('instance_count')} x {held.get('instance_type')} in "
                f"{held.get('availability_zone')}, {held.get('start')} to {held.get('end')}, reservation "
                f"{held.get('capacity_reservation_id')}, upfront ${float(held.get('upfront_fee') or 0):,.2f}",
                bought=True,
            )
    failed = next((e for e in reversed(history) if e.get("type") == "ExecutionFailed"), None)
    error = ((failed or {}).get("executionFailedEventDetails") or {}).get("error")
    if error in ("PURCHASE_REJECTED", "PURCHASE_EXPIRED"):
        return Effect(True, f"nothing was bought (the run ended {error})", bought=False)
    entered = any((e.get("stateEnteredEventDetails") or {}).get("name") == PURCHASE_STATE for e in history)
    if status == "RUNNING":
        return Effect(False, "the Capacity Block is being bought" if entered else "the run goes on to buy the block")
    if entered:
        return Effect(True, f"the purchase step did not finish (the run ended {status}{f': {error}' if error else ''}); "
                            "check the account's Capacity Reservations for a block bought for this request")
    return Effect(True, f"nothing was bought (the run ended {status}{f': {error}' if error else ''})", bought=False)


def _teardown_effect(history: list[dict], status: str, output: dict | None) -> Effect:
    if status == "RUNNING":
        approved = any((e.get("stateEnteredEventDetails") or {}).get("name") == "TerminateInstances" for e in history)
        return Effect(False, "its instances are being terminated" if approved else "the teardown records the answer")
    result = (output or {}).get("status")
    if result == "TERMINATED":
        ended = sorted(i for region in (output or {}).get("terminated") or [] for i in region.get("terminated") or [])
        gone = sorted(i for region in (output or {}).get("terminated") or [] for i in region.get("already_ended") or [])
        text = f"{len(ended)} instance(s) terminated" + (f": {' '.join(ended)}" if ended else "")
        if gone:
            text += f"; {len(gone)} had already ended"
        return Effect(True, text, terminated=ended)
    if result in ("REJECTED", "EXPIRED"):
        return Effect(True, f"nothing was terminated (the teardown ended {result})", terminated=[])
    return Effect(True, f"the teardown ended {status}" + (f" ({result})" if result else "") +
                  "; what it terminated is in its history (gpufill watch)")


def _json(text: str | None) -> dict | None:
    try:
        value = json.loads(text or "null")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
