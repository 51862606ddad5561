"""ChooseCapacityBlock: the fitting offering with the lowest upfront fee across the regions
(policy.capacity_blocks.choose), or the NO_CAPACITY_BLOCK cause listing what was offered."""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock
from gpufill.handlers.events import ChooseBlockEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import capacity_blocks as policy


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=ChooseBlockEvent)
    request = step.request
    ask = policy.ask_for(request, now=clock.now(), launched=step.launched)
    offers = [policy.from_shown(o) for region in step.found for o in region.get("offerings", [])]
    failed = {r["region"]: r["error"] for r in step.found if r.get("error")}
    if ask is None:
        return {"found": False, "cause": _too_large(request, step.launched)}
    choice = policy.choose(offers, ask)
    if choice.picked is None:
        logger.info("no capacity block fits", extra={"offered": len(offers)})
        return {"found": False, "cause": policy.no_capacity_block_cause(choice, ask, request_id=request.request_id, regions_failed=failed)}
    picked = policy.shown(choice.picked)
    logger.info("capacity block chosen", extra={"block": picked, "offered": len(offers)})
    metrics.add_metric(name="CapacityBlocksChosen", unit="Count", value=1)
    return {
        "found": True,
        "offering": picked,
        "start": picked["start"],
        "offered": len(offers),
        "rejected_cause": policy.purchase_ended_cause("PURCHASE_REJECTED", picked, request_id=request.request_id),
        "expired_cause": policy.purchase_ended_cause("PURCHASE_EXPIRED", picked, request_id=request.request_id),
    }


def _too_large(request, launched: int) -> str:
    import json

    return json.dumps(
        {
            "error": "NO_CAPACITY_BLOCK",
            "message": f"{request.count - launched} instances are missing; a Capacity Block holds at most 64. Nothing was bought.",
            "request_id": request.request_id,
            "offered": [],
        }
    )
