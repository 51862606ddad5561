"""This deployment's instances as the table and EC2 tell it together: the status view and
teardown both start here, so both see every instance gpufill launched, whatever failed.

Regions searched: the request's, the deployed regions config, every region a launch intent
or a record names, and for a view of everything the deployment's launch-regions set. In each,
DescribeInstances finds the instances tagged for this deployment (and request); an instance
found that way without a record is recorded on the spot, marked `reconciled`. A record whose
instance has ended gets its TTL (expires_at), so the table does not grow forever.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from gpufill.adapters import instances_table, managed_instances, regions_config
from gpufill.models.teardown import LiveInstance
from gpufill.policy import status

ENDED_RECORD_STATES = ("terminated", "gone")


class Inventory(BaseModel):
    # The records as the table held them before this look (reconciled instances are not in it).
    records: dict[str, dict] = Field(default_factory=dict)
    live: dict[str, LiveInstance] = Field(default_factory=dict)
    regions: list[str] = Field(default_factory=list)
    reconciled: list[str] = Field(default_factory=list)
    deployment: str


def gather(
    *,
    request_id: str | None,
    request_regions: list[str],
    everything: bool,
    now: datetime,
    holdings: instances_table.Holdings | None = None,
) -> Inventory:
    """`request_id`: one request's instances, or None for all of this deployment's.
    `everything`: also search every region a launch was ever attempted in (unfiltered views).
    `holdings`: the table as a caller already read it (the sweep scans once for more than records).
    A throttled or failing table or EC2 call raises TransientAwsError: the step is retried whole."""
    with managed_instances.retryable("looking up this deployment's instances"):
        return _gather(request_id=request_id, request_regions=request_regions, everything=everything, now=now, holdings=holdings)


def _gather(
    *, request_id: str | None, request_regions: list[str], everything: bool, now: datetime, holdings: instances_table.Holdings | None
) -> Inventory:
    if holdings is None:
        holdings = instances_table.request_holdings(request_id) if request_id is not None else instances_table.all_holdings()
    deployment = managed_instances.deployment()
    regions = status.search_regions(
        request_regions=request_regions,
        deployed_regions=regions_config.load().regions,
        intent_regions=holdings.intent_regions,
        record_regions=(r["region"] for r in holdings.records.values() if r.get("region")),
        launch_regions=holdings.launch_regions if everything else (),
    )
    live: dict[str, LiveInstance] = {}
    for region in regions:
        found = managed_instances.tagged(region, request_id)
        # Records whose instance the tag search did not return: terminated, retagged, or gone.
        # Records already known to have ended are history: not looked up again.
        missing = sorted(
            i
            for i, r in holdings.records.items()
            if r.get("region") == region and i not in found and r.get("state") not in ENDED_RECORD_STATES
        )
        if missing:
            found.update(managed_instances.by_ids(region, missing))
        live.update(found)
    reconciled = []
    for instance_id, instance in sorted(live.items()):
        owner = status.owner(instance, deployment) if instance_id not in holdings.records else None
        if owner is not None and instances_table.record_reconciled(instance, request_id=owner, seen_at=now):
            reconciled.append(instance_id)
    for instance_id, state in status.ended(holdings.records, live, now).items():
        instances_table.mark_ended(instance_id, state=state, seen_at=now)
    return Inventory(
        records=holdings.records, live=live, regions=regions, reconciled=reconciled, deployment=deployment
    )
