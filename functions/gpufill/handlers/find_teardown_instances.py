"""FindTeardownInstances: what a teardown would terminate (records confirmed live in EC2) and what it refuses."""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import instances_table, managed_instances
from gpufill.handlers.events import RequestEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.models.teardown import LiveInstance, Teardown, TeardownTarget
from gpufill.policy import teardown


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    request = parse(event=event, model=RequestEvent).request
    target = TeardownTarget(request_id=request.target_request_id, instance_ids=request.instance_ids)
    if target.request_id is not None:
        records = {r["instance_id"]: instances_table.plain(r) for r in instances_table.records_for_request(target.request_id)}
        # The request's regions too: an instance tagged for it whose record was never written is still its own.
        live = _live(records, search_regions=request.regions, request_id=target.request_id)
    else:
        records = instances_table.records_by_ids(target.instance_ids or [])
        live = _live(records, search_regions=[], request_id=None)
    allowed, refused = teardown.select(target, records, live)
    result = Teardown(
        request_id=request.request_id,
        status="AWAITING_APPROVAL" if allowed else "NOTHING_TO_TERMINATE",
        target=target,
        requested_by=request.requested_by,
        instances=allowed,
        refused=refused,
        regions=teardown.by_region(allowed),
        hourly_cost=teardown.hourly_cost(allowed),
    )
    logger.info(
        "teardown candidates",
        extra={"allowed": [i.instance_id for i in allowed], "refused": [r.model_dump() for r in refused]},
    )
    metrics.add_metric(name="TeardownRefusedInstances", unit="Count", value=len(refused))
    return result.model_dump(mode="json")


def _live(records: dict[str, dict], *, search_regions: list[str], request_id: str | None) -> dict[str, LiveInstance]:
    """The records' instances as EC2 sees them, plus (by request) the request's tagged instances."""
    by_region: dict[str, list[str]] = {region: [] for region in search_regions}
    for instance_id, record in records.items():
        by_region.setdefault(record["region"], []).append(instance_id)
    live: dict[str, LiveInstance] = {}
    for region, ids in sorted(by_region.items()):
        found = managed_instances.tagged(region, request_id) if request_id is not None else {}
        missing = sorted(set(ids) - set(found))
        if missing:  # untagged, tagged for another request, or gone: the policy tells which
            found.update(managed_instances.by_ids(region, missing))
        live.update(found)
    return live
