"""Which instances a teardown may terminate, which it refuses, and why. No AWS calls here.

The rule: gpufill terminates an instance only when it is live, carries the tags
gpufill:managed=true and gpufill:deployment=<this deployment>, and is tagged with the request
it is being torn down for. For a teardown by request that is the request named; for a teardown
by instance ids it is the request gpufill recorded the instance under, so a record and a tag
that disagree are refused; for a teardown of everything, the recorded or (unrecorded) tagged one.
An id gpufill holds no record of is refused: it would not know the region, and it did not
launch it as far as its records go.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from gpufill.constants import TAG_DEPLOYMENT, TAG_MANAGED, TAG_REQUEST_ID, TEARDOWN_LISTED_INSTANCES
from gpufill.models.teardown import (
    LiveInstance,
    RegionBatch,
    RegionTermination,
    Refusal,
    Teardown,
    TeardownInstance,
    TeardownTarget,
)

MANAGED_VALUE = "true"
ENDED_STATES = frozenset({"shutting-down", "terminated"})


def candidates(target: TeardownTarget, records: Mapping[str, dict], live: Mapping[str, LiveInstance]) -> list[str]:
    """The ids to judge, in a stable order: the ids as given, or the request's records then its unrecorded instances."""
    if target.instance_ids is not None:
        return list(target.instance_ids)
    # Everything: a record gpufill itself marked terminated is history, not a candidate.
    recorded = sorted(
        (i for i in records if not (target.all and records[i].get("state") == "terminated")),
        key=lambda i: (records[i].get("region", ""), i),
    )
    unrecorded = sorted((i for i in live if i not in records), key=lambda i: (live[i].region, i))
    return recorded + unrecorded


def refusal(
    instance_id: str, record: dict | None, live: LiveInstance | None, expected_request: str | None, deployment: str
) -> Refusal | None:
    """Why this instance must not be terminated, or None when it may be."""
    if record is None and live is None:
        return Refusal(
            instance_id=instance_id,
            reason="unknown",
            detail="gpufill holds no record of this instance, so it did not launch it (or its record is gone)",
        )
    if live is None:
        if record and record.get("state") == "terminated":
            ended = record.get("terminated_at") or record.get("ended_at") or "earlier"
            return Refusal(instance_id=instance_id, reason="already-terminated", detail=f"terminated {ended}")
        region = record.get("region", "its region") if record else "its region"
        return Refusal(instance_id=instance_id, reason="gone", detail=f"no such instance in {region} any more")
    if live.state in ENDED_STATES:
        return Refusal(instance_id=instance_id, reason="already-terminated", detail=f"already {live.state}")
    if live.tags.get(TAG_MANAGED) != MANAGED_VALUE:
        return Refusal(
            instance_id=instance_id,
            reason="not-managed",
            detail=f"not tagged {TAG_MANAGED}={MANAGED_VALUE}: gpufill only terminates instances it launched",
        )
    if live.tags.get(TAG_DEPLOYMENT) != deployment:
        return Refusal(
            instance_id=instance_id,
            reason="other-deployment",
            detail=f"tagged {TAG_DEPLOYMENT}={live.tags.get(TAG_DEPLOYMENT)!r}, not {deployment!r}: "
            "one deployment never ends another's instances",
        )
    tagged = live.tags.get(TAG_REQUEST_ID)
    if expected_request is None or tagged != expected_request:
        return Refusal(
            instance_id=instance_id,
            reason="other-request",
            detail=f"tagged {TAG_REQUEST_ID}={tagged!r}, not {expected_request!r}",
        )
    return None


def select(
    target: TeardownTarget, records: Mapping[str, dict], live: Mapping[str, LiveInstance], deployment: str
) -> tuple[list[TeardownInstance], list[Refusal]]:
    """Split the teardown's candidates into the instances to ask approval for and the refused ones."""
    allowed: list[TeardownInstance] = []
    refused: list[Refusal] = []
    for instance_id in candidates(target, records, live):
        record, instance = records.get(instance_id), live.get(instance_id)
        # By request, the request named is the one to match; by ids, the request it was recorded
        # under; for everything, the request it was recorded under or (unrecorded) tagged with.
        if target.request_id is not None:
            expected = target.request_id
        elif target.all and record is None and instance is not None:
            expected = instance.tags.get(TAG_REQUEST_ID)
        else:
            expected = (record or {}).get("request_id")
        if target.instance_ids is not None and record is None:
            instance = None  # an id without a record is unknown, whatever EC2 says
        why = refusal(instance_id, record, instance, expected, deployment)
        if why is not None:
            refused.append(why)
            continue
        assert instance is not None
        allowed.append(_teardown_instance(instance, record))
    return allowed, refused


def hold_for_pending(
    allowed: list[TeardownInstance], refused: list[Refusal], pending: Mapping[str, dict]
) -> tuple[list[TeardownInstance], list[Refusal]]:
    """Instances another pending teardown already asks to end (`pending`: instance id -> its approval
    item) are refused here, naming that teardown and its approve command: one question per instance,
    so an answer to one never leaves the same instances waiting in another."""
    kept: list[TeardownInstance] = []
    held: list[Refusal] = []
    for instance in allowed:
        item = pending.get(instance.instance_id)
        if item is None:
            kept.append(instance)
            continue
        approval = f"teardown:{item['execution_name']}"
        held.append(Refusal(
            instance_id=instance.instance_id,
            reason="awaiting-approval",
            detail=f"teardown {item['execution_name']} already asks to end it and waits for an answer until "
                   f"{item.get('deadline')}: gpufill approve {approval} (or gpufill reject {approval})",
        ))
    return kept, [*held, *refused]


def _teardown_instance(live: LiveInstance, record: dict | None) -> TeardownInstance:
    record = record or {}
    return TeardownInstance(
        instance_id=live.instance_id,
        request_id=live.tags.get(TAG_REQUEST_ID),
        region=live.region,
        availability_zone=live.availability_zone or record.get("availability_zone"),
        instance_type=live.instance_type or record.get("instance_type"),
        market=record.get("market") or live.market,
        hourly_price=record.get("hourly_price"),
        state=live.state,
        launched_at=record.get("launched_at") or live.launch_time,
        recorded=bool(record),
    )


def maintenance_to_stop(target: TeardownTarget, allowed: Iterable[TeardownInstance]) -> list[str]:
    """The requests whose maintenance a teardown ends: the request named, and the request of
    every instance it asks to end (a teardown of any of a request's instances stops its refills)."""
    owners = {i.request_id for i in allowed if i.request_id}
    if target.request_id is not None:
        owners.add(target.request_id)
    return sorted(owners)


def gives_back_maintenance(allowed: Iterable[TeardownInstance], refused: Iterable[Refusal]) -> bool:
    """A teardown that asks nobody because another pending teardown already asks about its instances
    holds nothing back: its own stop marks go (the other's stay, so refills stay stopped until that
    one is answered). One that asks nobody because nothing of the request is left keeps its marks:
    it was asked to end the request, and the request stays without refills, as before."""
    return not list(allowed) and any(r.reason == "awaiting-approval" for r in refused)


def requests_recorded(records: Mapping[str, dict], *, maintained_only: bool = False) -> list[str]:
    """The requests these records belong to (with `maintained_only`, those launched with
    `maintain`: the only ones a refill can be running for)."""
    return sorted({
        r["request_id"] for r in records.values()
        if isinstance(r, dict) and r.get("request_id") and (r.get("maintain") or not maintained_only)
    })


def replacements(named: Iterable[str], records: Mapping[str, dict]) -> list[str]:
    """The instances refills launched in place of the named ones (`replaced_by` on their records),
    not already named: a teardown of instance ids ends those too, since a refill that recorded its
    replacement before the teardown stopped the request's maintenance keeps it."""
    named = set(named)
    return sorted({
        new for i in named for new in ((records.get(i) or {}).get("replaced_by") or ()) if new not in named
    })


def by_region(instances: Iterable[TeardownInstance]) -> list[RegionBatch]:
    """One Map branch per region, regions, requests and ids sorted so a rerun sends the same batches."""
    grouped: dict[str, dict[str, list[str]]] = {}
    for instance in instances:
        grouped.setdefault(instance.region, {}).setdefault(instance.request_id or "", []).append(instance.instance_id)
    return [
        RegionBatch(region=r, requests={req: sorted(ids) for req, ids in sorted(requests.items())})
        for r, requests in sorted(grouped.items())
    ]


def found(
    *, request_id: str, target: TeardownTarget, requested_by: str | None, allowed: list[TeardownInstance],
    refused: list[Refusal],
) -> Teardown:
    """FindTeardownInstances' answer: every instance to terminate in the region batches, the
    details of the first few, and counts, so the state stays small at the maximum number of ids."""
    listed = TEARDOWN_LISTED_INSTANCES
    note = None
    if len(allowed) > listed or len(refused) > listed:
        note = (
            f"details of the first {listed} instances (and refusals) are listed; every one of the "
            f"{len(allowed)} to terminate is in `regions`, and the instances table holds each record"
        )
    return Teardown(
        request_id=request_id,
        status="AWAITING_APPROVAL" if allowed else "NOTHING_TO_TERMINATE",
        target=target,
        requested_by=requested_by,
        instance_count=len(allowed),
        instances=allowed[:listed],
        refused_count=len(refused),
        refused_reasons=dict(sorted(Counter(r.reason for r in refused).items())),
        refused=refused[:listed],
        regions=by_region(allowed),
        hourly_cost=hourly_cost(allowed),
        note=note,
    )


def hourly_cost(instances: Iterable[TeardownInstance]) -> float:
    return round(sum(i.hourly_price or 0.0 for i in instances), 4)


def region_termination(
    region: str,
    *,
    terminated: list[str],
    previous: Mapping[str, str],
    already_ended: list[str],
    skipped: list[Refusal],
    at: datetime,
) -> RegionTermination:
    """One Map branch's answer: ids and counts, not a record per instance (the table has those)."""
    return RegionTermination(
        region=region,
        terminated_at=at.isoformat(timespec="seconds"),
        terminated_count=len(terminated),
        terminated=sorted(terminated),
        previous_states=dict(sorted(Counter(previous.get(i, "unknown") for i in terminated).items())),
        already_ended=sorted(already_ended),
        skipped_count=len(skipped),
        skipped=skipped[:TEARDOWN_LISTED_INSTANCES],
    )
