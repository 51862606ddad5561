"""DescribeCapacityBlockOfferings: one candidate region of FindCapacityBlocks (a Map over the regions).

Asks for each requested type, for a block of what the run still misses (policy.capacity_blocks),
the request's duration, starting within start_within. A region that cannot answer offers nothing
and says why; the choice goes on with the others.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import capacity_blocks, clock
from gpufill.handlers.events import BlockRegionEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy.capacity_blocks import ask_for, shown


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=BlockRegionEvent)
    ask = ask_for(step.request, now=clock.now(), launched=step.launched)
    if ask is None:
        return {"region": step.region, "offerings": [], "error": "no Capacity Block is large enough for what is missing"}
    try:
        found = capacity_blocks.offerings(
            step.region, list(ask.instance_types), ask.count, ask.duration_hours, ask.earliest_start, ask.latest_start
        )
    except capacity_blocks.RegionNotAnswering as error:
        logger.warning("capacity block offerings not read", extra={"region": step.region, "error": str(error)})
        return {"region": step.region, "offerings": [], "error": str(error)[:300]}
    logger.info("capacity block offerings", extra={"region": step.region, "count": len(found)})
    return {"region": step.region, "offerings": [shown(o) for o in found], "error": None}
