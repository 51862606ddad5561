"""The status view: every managed instance, where it is, what it costs, and what the records disagree on.

No AWS calls here: the handler passes in the table's records and what DescribeInstances sees.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime

from gpufill.constants import TAG_DEPLOYMENT, TAG_MANAGED, TAG_REQUEST_ID
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
        # A record whose instance EC2 no longer shows: "gone", unless gpufill itself ended it.
        if instance_id not in live and record.get("state") != "terminated":
            entries.append(
                StatusEntry(
                    instance_id=instance_id,
                    request_id=record.get("request_id"),
                    region=record.get("region", "?"),
                    availability_zone=record.get("availability_zone"),
                    instance_type=record.get("instance_type"),
                    market=record.get("market"),
                    hourly_price=record.get("hourly_price"),
                    state="gone",
                    launched_at=record.get("launched_at"),
                    finding="gone",
                )
            )
    entries.sort(key=lambda e: (e.region, e.request_id or "", e.instance_id))
    running = [e for e in entries if e.state in BILLED_STATES]
    return StatusReport(
        request_id=request_id,
        filter=TeardownTarget(request_id=target_request_id),
        regions=sorted(regions),
        instances=entries,
        counts=dict(sorted(Counter(e.state for e in entries).items())),
        running=len(running),
        hourly_cost=round(sum(e.hourly_price or 0.0 for e in running), 4),
        reconciled=[e.instance_id for e in entries if e.finding == "reconciled"],
        unrecorded=[e.instance_id for e in entries if e.finding == "unrecorded"],
        gone=[e.instance_id for e in entries if e.finding == "gone"],
        generated_at=now.isoformat(timespec="seconds"),
    )


def _entry(instance: LiveInstance, record: dict | None, finding: str, now: datetime) -> StatusEntry:
    record = record or {}
    launched = instance.launch_time or record.get("launched_at")
    return StatusEntry(
        instance_id=instance.instance_id,
        request_id=instance.tags.get(TAG_REQUEST_ID) or record.get("request_id"),
        region=instance.region,
        availability_zone=instance.availability_zone or record.get("availability_zone"),
        instance_type=instance.instance_type or record.get("instance_type"),
        market=record.get("market") or ("spot" if instance.spot else "on-demand"),
        hourly_price=record.get("hourly_price"),
        state=instance.state,
        launched_at=launched,
        hours_running=hours_since(launched, now) if instance.state in HOURS_STATES else None,
        finding=finding,
    )


def hours_since(timestamp: str | None, now: datetime) -> float | None:
    if not timestamp:
        return None
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round(max((now - then).total_seconds(), 0.0) / 3600, 2)
