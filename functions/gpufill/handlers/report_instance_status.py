"""ReportInstanceStatus: every managed instance as EC2 sees it now, checked against the table."""

from __future__ import annotations

from datetime import UTC, datetime

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import instances_table, managed_instances
from gpufill.handlers.events import RequestEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.models.teardown import LiveInstance
from gpufill.policy import status


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    request = parse(event=event, model=RequestEvent).request
    wanted = request.target_request_id
    if wanted is not None:
        records = {r["instance_id"]: instances_table.plain(r) for r in instances_table.records_for_request(wanted)}
    else:
        records = instances_table.all_records()
    # The request's regions (or the deployed ones), and every region a record points at.
    regions = sorted(set(request.regions) | {r["region"] for r in records.values() if r.get("region")})
    live: dict[str, LiveInstance] = {}
    for region in regions:
        found = managed_instances.tagged(region, wanted)
        missing = sorted(i for i, r in records.items() if r.get("region") == region and i not in found)
        if missing:
            found.update(managed_instances.by_ids(region, missing))
        live.update(found)
    result = status.report(
        request_id=request.request_id,
        target_request_id=wanted,
        regions=regions,
        records=records,
        live=live,
        now=datetime.now(UTC),
    )
    logger.info("status", extra={"counts": result.counts, "unrecorded": result.unrecorded, "gone": result.gone})
    metrics.add_metric(name="RunningInstances", unit="Count", value=result.running)
    return result.model_dump(mode="json")
