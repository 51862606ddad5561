"""ReportInstanceStatus: every instance of this deployment as EC2 sees it now, checked against the table.

Unrecorded instances of this deployment are recorded as they are seen (adapters.inventory),
so every instance gpufill launched is in the status view within one status run.
"""

from __future__ import annotations


from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock, inventory, run_store, sweep_store
from gpufill.handlers.events import RequestEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import status, waiting


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    request = parse(event=event, model=RequestEvent).request
    wanted = request.target_request_id
    now = clock.now()
    found = inventory.gather(request_id=wanted, request_regions=request.regions, everything=wanted is None, now=now)
    result = status.report(
        request_id=request.request_id,
        target_request_id=wanted,
        regions=found.regions,
        records=found.records,
        live=found.live,
        now=now,
        deployment=found.deployment,
        reconciled=found.reconciled,
    )
    logger.info(
        "status",
        extra={"counts": result.counts, "reconciled": result.reconciled, "unrecorded": result.unrecorded, "gone": result.gone},
    )
    metrics.add_metric(name="RunningInstances", unit="Count", value=result.running)
    metrics.add_metric(name="ReconciledInstances", unit="Count", value=len(result.reconciled))
    answer = result.model_dump(mode="json")
    if wanted is None:
        # The sweep's last pass (docs/operations.md): when it ran and what it found.
        last = sweep_store.last_summary()
        if last is not None:
            answer["sweep"] = last
    if wanted is not None:
        # wait_for_capacity: one item per request, whichever execution of its chain wrote it last.
        view = run_store.load_wait(wanted)
        line = waiting.view_line(view)
        if line:
            answer["waiting"] = line
        # A bought block is spent before any instance runs in it: its fee counts from the purchase.
        held = waiting.block_held(wanted, view)
        if held:
            answer["capacity_blocks"] = [held]
    return answer
