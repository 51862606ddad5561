"""The status view: every managed instance, where it is, what it costs, and what the records disagree on.

No AWS calls here: the handler passes in the table's records and what DescribeInstances sees.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from gpufill.constants import (
    CAPACITY_BLOCK_TYPE,
    LIFETIME_ATTRIBUTE,
    GONE_AFTER_SECONDS,
    INSTANCES_TTL_ATTRIBUTE,
    STATUS_LISTED_INSTANCES,
    STATUS_LISTED_REQUESTS,
    TAG_DEPLOYMENT,
    TAG_MANAGED,
    TAG_REQUEST_ID,
    TAG_STARTUP_STEP,
)
from gpufill.models.teardown import LiveInstance, StatusEntry, StatusReport, TeardownTarget
from gpufill.policy.teardown import ENDED_STATES, MANAGED_VALUE


def search_regions(
    *,
    request_regions: Iterable[str],
    deployed_regions: Iterable[str],
    intent_regions: Iterable[str],
    record_regions: Iterable[str],
    launch_regions: Iterable[str] = (),
) -> list[str]:
    """Every region this deployment could have launched in for what is asked: the request's
    regions, the deployed regions config, every region a launch intent or a record names, and
    (for a view of everything) every region a launch was ever attempted in. A run that chose
    its own regions and lost its records still wrote an intent naming the region first."""
    regions = set(request_regions) | set(deployed_regions) | set(intent_regions) | set(record_regions)
    return sorted(regions | set(launch_regions))


def owner(instance: LiveInstance, deployment: str) -> str | None:
    """The request an unrecorded instance belongs to, when it is this deployment's live instance
    and says which request launched it; None when it must not be recorded as ours."""
    tags = instance.tags
    if instance.state in ENDED_STATES:
        return None
    if tags.get(TAG_MANAGED) != MANAGED_VALUE or tags.get(TAG_DEPLOYMENT) != deployment:
        return None
    return tags.get(TAG_REQUEST_ID) or None


def is_ours(instance: LiveInstance, deployment: str) -> bool:
    return instance.tags.get(TAG_MANAGED) == MANAGED_VALUE and instance.tags.get(TAG_DEPLOYMENT) == deployment

BILLED_STATES = frozenset({"running"})
# States whose time since launch is time being paid for.
HOURS_STATES = frozenset({"pending", "running", "stopping", "shutting-down"})


def report(
    *,
    request_id: str,
    target_request_id: str | None,
    regions: list[str],
    records: Mapping[str, dict],
    live: Mapping[str, LiveInstance],
    now: datetime,
    deployment: str,
    reconciled: Iterable[str] = (),
) -> StatusReport:
    """`records` as the table held them before this run; `reconciled`: the unrecorded instances this run recorded."""
    reconciled = set(reconciled)
    entries: list[StatusEntry] = []
    for instance_id, instance in live.items():
        record = records.get(instance_id)
        if record is None and not is_ours(instance, deployment):
            continue  # never this deployment's: not part of its view
        if record is None:
            finding = "reconciled" if instance_id in reconciled else "unrecorded"
        elif not is_ours(instance, deployment):
            finding = "not-managed"
        else:
            finding = "recorded"
        entries.append(_entry(instance, record, finding, now))
    for instance_id, record in records.items():
        if instance_id in live:
            continue
        if record.get("state") in ("terminated", "interrupted"):
            # gpufill saw it end (a teardown, an interruption or an earlier status run): history, listed last.
            entries.append(_recorded_entry(instance_id, record, state="terminated", finding="recorded"))
        else:
            # A record whose instance EC2 no longer shows at all.
            entries.append(_recorded_entry(instance_id, record, state="gone", finding="gone"))
    return _summarise(request_id, target_request_id, regions, entries, now)


# Listed first: what needs attention, then what is billed, then the rest; history last.
_FINDING_ORDER = {"unrecorded": 0, "reconciled": 0, "gone": 0, "not-managed": 0, "recorded": 1}
_STATE_ORDER = {"running": 0, "pending": 0, "stopping": 1, "stopped": 1, "shutting-down": 2, "terminated": 3}


def _summarise(
    request_id: str, target_request_id: str | None, regions: list[str], entries: list[StatusEntry], now: datetime
) -> StatusReport:
    """Counts over every instance; details of at most STATUS_LISTED_INSTANCES, so a view over
    thousands of records stays far below Step Functions' 256 KB."""
    entries.sort(key=lambda e: (e.region, e.request_id or "", e.instance_id))
    running = [e for e in entries if e.state in BILLED_STATES]
    by_region: dict[str, Counter] = {}
    by_request: dict[str, Counter] = {}
    for e in entries:
        by_region.setdefault(e.region, Counter())[e.state] += 1
        by_request.setdefault(e.request_id or "?", Counter())[e.state] += 1
    biggest = sorted(by_request, key=lambda r: (-sum(by_request[r].values()), r))[:STATUS_LISTED_REQUESTS]
    listed = sorted(entries, key=lambda e: (_FINDING_ORDER.get(e.finding, 0), _STATE_ORDER.get(e.state, 2)))
    listed = listed[:STATUS_LISTED_INSTANCES]
    listed.sort(key=lambda e: (e.region, e.request_id or "", e.instance_id))
    note = None
    if len(listed) < len(entries):
        note = (
            f"{len(listed)} of {len(entries)} instances listed (those needing attention and the billed ones first); "
            'the counts cover all. For one request\'s instances: {"action": "status", "request_id": "<execution name>"}'
        )

    def capped(finding: str) -> list[str]:
        return [e.instance_id for e in entries if e.finding == finding][:STATUS_LISTED_INSTANCES]

    return StatusReport(
        request_id=request_id,
        filter=TeardownTarget(request_id=target_request_id),
        regions=sorted(regions),
        total=len(entries),
        listed=len(listed),
        note=note,
        instances=listed,
        counts=dict(sorted(Counter(e.state for e in entries).items())),
        by_region={r: dict(sorted(c.items())) for r, c in sorted(by_region.items())},
        by_request={r: dict(sorted(by_request[r].items())) for r in sorted(biggest)},
        other_requests=len(by_request) - len(biggest),
        running=len(running),
        # A Capacity Block's instances were paid for upfront: nothing more accrues by the hour.
        hourly_cost=round(sum(e.hourly_price or 0.0 for e in running
                              if e.capacity_block_fee is None and e.market != CAPACITY_BLOCK_TYPE), 4),
        reconciled=capped("reconciled"),
        unrecorded=capped("unrecorded"),
        gone=capped("gone"),
        generated_at=now.isoformat(timespec="seconds"),
    )


def ended(records: Mapping[str, dict], live: Mapping[str, LiveInstance], now: datetime) -> dict[str, str]:
    """Records to mark as ended (instance id -> state), so their TTL can remove them in time:
    EC2 says terminated, or EC2 has not shown the instance for GONE_AFTER_SECONDS since launch
    (a brand-new instance can be invisible for a moment; an old one EC2 forgot has ended)."""
    marks: dict[str, str] = {}
    for instance_id, record in records.items():
        if record.get(INSTANCES_TTL_ATTRIBUTE) is not None:
            continue  # already on its way out
        instance = live.get(instance_id)
        # An interrupted record keeps saying so (maintenance replaced it) once it has ended.
        ended_as = "interrupted" if record.get("state") == "interrupted" else "terminated"
        if instance is not None:
            if instance.state == "terminated":
                marks[instance_id] = ended_as
            continue
        if record.get("state") in ("terminated", "interrupted"):
            marks[instance_id] = ended_as
            continue
        age = hours_since(record.get("launched_at"), now)
        if age is not None and age * 3600 >= GONE_AFTER_SECONDS:
            marks[instance_id] = "gone"
    return marks


def _recorded_entry(instance_id: str, record: dict, *, state: str, finding: str) -> StatusEntry:
    return StatusEntry(
        instance_id=instance_id,
        request_id=record.get("request_id"),
        region=record.get("region", "?"),
        availability_zone=record.get("availability_zone"),
        instance_type=record.get("instance_type"),
        market=record.get("market"),
        hourly_price=record.get("hourly_price"),
        state=state,
        launched_at=record.get("launched_at"),
        finding=finding,
        replaced_by=record.get("replaced_by") or None,
        expires_at=record.get(LIFETIME_ATTRIBUTE),
        ended_at=_ended_at(record) if state == "terminated" else None,
        **_block(record),
    )


def _ended_at(record: Mapping) -> str | None:
    """A teardown or rollback writes terminated_at; a reclaimed instance's end is its interruption
    (EC2 ends it at most two minutes later)."""
    return record.get("terminated_at") or record.get("interrupted_at")


def _entry(instance: LiveInstance, record: dict | None, finding: str, now: datetime) -> StatusEntry:
    record = record or {}
    launched = instance.launch_time or record.get("launched_at")
    return StatusEntry(
        instance_id=instance.instance_id,
        request_id=instance.tags.get(TAG_REQUEST_ID) or record.get("request_id"),
        region=instance.region,
        availability_zone=instance.availability_zone or record.get("availability_zone"),
        instance_type=instance.instance_type or record.get("instance_type"),
        market=record.get("market") or instance.market,
        hourly_price=record.get("hourly_price"),
        state=instance.state,
        launched_at=launched,
        hours_running=hours_since(launched, now) if instance.state in HOURS_STATES else None,
        finding=finding,
        startup_step=instance.tags.get(TAG_STARTUP_STEP),
        replaced_by=record.get("replaced_by") or None,
        expires_at=record.get(LIFETIME_ATTRIBUTE),
        ended_at=_ended_at(record) if instance.state == "terminated" else None,
        **_block(record),
    )


def _block(record: Mapping) -> dict:
    """The Capacity Block an instance runs in and its fee, when its launch recorded one."""
    if record.get("capacity_block_fee") is None:
        return {}
    return {"capacity_reservation_id": record.get("capacity_reservation_id"), "capacity_block_fee": record["capacity_block_fee"]}


def hours_since(timestamp: str | None, now: datetime) -> float | None:
    if not timestamp:
        return None
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round(max((now - then).total_seconds(), 0.0) / 3600, 2)
