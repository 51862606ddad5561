"""Whether an EC2 event about an instance starts a refill run, and what that run asks for.

An instance of a request with `maintain` that EC2 takes away (a spot interruption, a server-side
failure) is replaced by a refill run: a provisioning run for one instance of the same request,
recorded and tagged as that request's, with the pool it was reclaimed from tried last. Anything
a person or gpufill ended on purpose, or the instance ended itself, is left alone, and so is
every instance after a teardown of its request.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gpufill.constants import (
    CAPACITY_BLOCK_TYPE,
    ENDING_STATES,
    EVENT_SOURCE_EC2,
    EXECUTION_NAME_MAX,
    INSTANCE_STATE_CHANGE,
    REFILL_NAME_INFIX,
    SPOT_INTERRUPTION_WARNING,
)
from gpufill.models.request import Request
from gpufill.models.run import Pool

EventKind = Literal["warning", "state-change"]
Ignored = Literal[
    "not-an-interruption",
    "not-ours",
    "no-maintain",
    "request-unknown",
    "teardown",
    "torn-down",
    "capacity-block",
    "already-refilled",
    "not-reclaimed",
    "instance-initiated",
    "user-initiated",
    "reason-unknown",
]
# EC2's state-reason codes (API StateReason): the instance shut itself down (`shutdown -h`, the
# idle watchdog), or someone ended it through the EC2 API (a person, or a gpufill teardown).
INSTANCE_INITIATED = "Client.InstanceInitiatedShutdown"
USER_INITIATED = "Client.UserInitiatedShutdown"
# EC2 ended it for its own reasons (Server.SpotInstanceTermination, Server.InternalError, ...).
SERVER_PREFIX = "Server."
CLIENT_PREFIX = "Client."
# What a spot interruption warning says EC2 will do; only "terminate" takes the instance away.
RECLAIMING_ACTION = "terminate"
# Request fields a refill run does not carry over: the action and what only teardown reads,
# the count (a refill replaces one instance) and the refill itself (set anew).
_NOT_CARRIED = frozenset(
    {"action", "request_id", "instance_ids", "all", "approval_timeout_seconds", "requested_by", "count", "refill", "instance_type"}
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceEvent(_Model):
    """What StartRefill needs of an EventBridge event from EC2."""

    kind: EventKind
    instance_id: str
    region: str
    # state-change: the state EC2 moved the instance to; warning: what EC2 will do ("terminate").
    state: str | None = None
    action: str | None = None


class Decision(_Model):
    refill: bool
    reason: str
    detail: str
    execution_name: str | None = None
    input: dict[str, Any] | None = None
    reclaimed_pool: str | None = None
    # What the old record says happened to the instance.
    interruption: str | None = None
    # A reclaim that would have been refilled but for a teardown still awaiting its approval: that
    # teardown's id (the first by name when several wait), so the rejection or expiry that leaves no
    # teardown waiting starts the refill it held back (refills_to_restart).
    held_by: str | None = None


def read_event(event: dict) -> InstanceEvent | None:
    """The instance event inside an EventBridge envelope, or None for anything else."""
    if event.get("source") != EVENT_SOURCE_EC2 or not isinstance(event.get("detail"), dict):
        return None
    detail, region = event["detail"], event.get("region") or ""
    instance_id = detail.get("instance-id")
    if not isinstance(instance_id, str) or not region:
        return None
    if event.get("detail-type") == SPOT_INTERRUPTION_WARNING:
        return InstanceEvent(kind="warning", instance_id=instance_id, region=region, action=detail.get("instance-action"))
    if event.get("detail-type") == INSTANCE_STATE_CHANGE and detail.get("state") in ENDING_STATES:
        return InstanceEvent(kind="state-change", instance_id=instance_id, region=region, state=detail["state"])
    return None


def execution_name(request_id: str, instance_id: str, after: str | None = None) -> str:
    """One name per (request, instance): EC2's warning and state change start the same run.
    With `after` (restart_after: the run it takes over from, or the teardown that held it back),
    the refill started again once no teardown stops the request: one name per run it follows, so
    a retried ending starts it once.

    A request id long enough to push the name past 80 characters is cut and a hash of the
    whole id keeps names of different requests apart."""
    suffix = f"{REFILL_NAME_INFIX}{instance_id}"
    if after is not None:
        # "-after-r<digest>": never ends like a continued execution's "-c<n>".
        suffix += f"-after-r{hashlib.sha256(after.encode()).hexdigest()[:8]}"
    name = f"{request_id}{suffix}"
    if len(name) <= EXECUTION_NAME_MAX:
        return name
    digest = hashlib.sha256(request_id.encode()).hexdigest()[:8]
    keep = EXECUTION_NAME_MAX - len(suffix) - len(digest) - 1
    return f"{request_id[:keep]}-{digest}{suffix}"


def restart_after(record: dict) -> str:
    """What the name of a restarted refill follows from: the refill run it takes over from, or the
    teardown that held the refill back when none ever started. Never the teardown whose ending
    restarts it, so two endings in a row cannot each start a run of their own for one instance."""
    return record.get("refill_run") or record["refill_held_by"]


def requests_to_resume(target_request_id: str | None, batch_requests: list[str]) -> list[str]:
    """The requests whose maintenance a rejected teardown gives back: the one it names and every
    request whose instances it listed (its mark is removed only where it is that teardown's)."""
    return sorted({*batch_requests, *([target_request_id] if target_request_id else [])})


def _replacement_holds(record: dict | None) -> bool:
    """A replacement still stands for the instance it replaced: running or booting, or reclaimed
    in its turn (then its own refill stands for it). Unknown (no record) counts as standing: a
    refill started again for an instance that is in fact replaced would leave the request over
    its count."""
    if record is None or record.get("refill_run"):
        return True
    return not (record.get("rolled_back") or record.get("terminated_at") or record.get("state") in ENDING_STATES)


def refills_to_restart(records: dict[str, dict], *, released: bool = False) -> list[str]:
    """The reclaimed instances of a request that nothing replaces now: a refill run was started for
    each and stopped by a teardown (it launched nothing, or terminated what it launched), or, once
    `released` (the last teardown that stopped the request's maintenance was rejected or expired,
    so no teardown holds anything back), a waiting teardown held its refill back (never started);
    and no teardown ended them. Oldest id first."""
    return sorted(
        instance_id
        for instance_id, record in records.items()
        if (record.get("refill_run") or (released and record.get("refill_held_by")))
        and not record.get("terminated_by")
        and not any(_replacement_holds(records.get(r)) for r in record.get("replaced_by") or [])
    )


def reclaimed_pool(record: dict) -> str:
    return Pool(
        region=record["region"],
        availability_zone=record["availability_zone"],
        instance_type=record["instance_type"],
        market=record["market"],
    ).key


def refill_input(stored_request: dict, *, request_id: str, instance_id: str, pool: str) -> dict[str, Any]:
    """The execution input of the refill run: the request as it was accepted, for one instance.

    Built from the stored request's fields only (never from the time or the event), so the
    same instance always gives the same input and StartExecution stays idempotent."""
    carried = {k: v for k, v in stored_request.items() if k in Request.model_fields and k not in _NOT_CARRIED}
    carried["maintain"] = True
    # The stored request is the normalised one: its durations are in seconds, under other names.
    if stored_request.get("ready_timeout_seconds") is not None:
        carried["ready_timeout"] = f"PT{int(stored_request['ready_timeout_seconds'])}S"
    if stored_request.get("wait_for_capacity_seconds") is not None:
        carried["wait_for_capacity"] = {"deadline": f"PT{int(stored_request['wait_for_capacity_seconds'])}S"}
        for key, field in (("wait_first_delay_seconds", "first_delay"), ("wait_max_delay_seconds", "max_delay")):
            if stored_request.get(key) is not None:  # the request's own backoff, as it asked it
                carried["wait_for_capacity"][field] = f"PT{int(stored_request[key])}S"
    refill: dict[str, Any] = {"request_id": request_id, "replaces": [instance_id], "reclaimed_pool": pool}
    if stored_request.get("expires_at"):
        # The replacement lives no longer than the instance it replaces: same moment, same schedule.
        refill["expires_at"] = stored_request["expires_at"]
    return {**carried, "action": "provision", "count": 1, "refill": refill}


def _ignore(reason: Ignored, detail: str) -> Decision:
    return Decision(refill=False, reason=reason, detail=detail)


def decide(
    event: InstanceEvent,
    record: dict | None,
    stored_request: dict | None,
    request_records: list[dict],
    state_reason: str | None,
    *,
    stopped_by: str | None = None,
) -> Decision:
    """Refill, or why not. `record` is this deployment's record of the instance (None: it has
    none), `stored_request` the request as accepted, `request_records` every instance record of
    that request, `state_reason` EC2's state-reason code for the instance (state changes only),
    `stopped_by` the teardown that ended the request's maintenance when it was asked (even one
    still awaiting its approval)."""
    instance_id = event.instance_id
    if record is None or not record.get("request_id"):
        return _ignore("not-ours", f"{instance_id} is not an instance this deployment launched")
    request_id = record["request_id"]
    if not record.get("maintain"):
        return _ignore("no-maintain", f"request {request_id} did not ask for maintain")
    if stored_request is None:
        return _ignore("request-unknown", f"request {request_id} is no longer kept, so it cannot be asked for again")
    if record.get("terminated_by"):
        return _ignore("teardown", f"{instance_id} was ended by gpufill teardown {record['terminated_by']}")
    if record.get("market") == CAPACITY_BLOCK_TYPE:
        # It could run only in its block (bought once, ending on its own): a refill would launch
        # outside it, as spot or On-Demand, which nobody approved buying.
        return _ignore("capacity-block", f"{instance_id} ran in Capacity Block {record.get('capacity_reservation_id') or '?'}: "
                                         "a refill would launch outside the block, so none starts")
    ended_by = {r["terminated_by"] for r in request_records if r.get("terminated_by")}
    torn_down = sorted(ended_by | ({stopped_by} if stopped_by else set()))
    if torn_down:
        held = decide(event, record, stored_request, request_records, state_reason) if not ended_by else None
        return Decision(
            refill=False, reason="torn-down",
            detail=f"request {request_id} was torn down ({', '.join(torn_down)}): a teardown stops its maintenance",
            held_by=stopped_by if held is not None and held.refill else None,
            interruption=held.interruption if held is not None and held.refill else None,
        )
    if record.get("replaced_by"):
        return _ignore("already-refilled", f"{instance_id} was already replaced by {', '.join(record['replaced_by'])}")
    if event.kind == "warning":
        if event.action != RECLAIMING_ACTION:
            return _ignore("not-reclaimed", f"EC2 will {event.action or 'not end'} {instance_id}, not take it away")
        interruption = "spot interruption warning"
    elif state_reason == INSTANCE_INITIATED:
        return _ignore("instance-initiated", f"{instance_id} shut itself down (the idle watchdog or `shutdown`)")
    elif state_reason is not None and state_reason.startswith(CLIENT_PREFIX):
        return _ignore("user-initiated", f"{instance_id} was ended through the EC2 API ({state_reason})")
    elif state_reason is None or not state_reason.startswith(SERVER_PREFIX):
        return _ignore("reason-unknown", f"EC2 gives no reason why {instance_id} is {event.state}")
    else:
        interruption = state_reason
    pool = reclaimed_pool(record)
    name = execution_name(request_id, instance_id)
    return Decision(
        refill=True,
        reason="reclaimed",
        detail=f"{instance_id} of request {request_id} was reclaimed ({interruption}); {name} replaces it",
        execution_name=name,
        input=refill_input(stored_request, request_id=request_id, instance_id=instance_id, pool=pool),
        reclaimed_pool=pool,
        interruption=interruption,
    )

