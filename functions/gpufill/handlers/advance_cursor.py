"""AdvanceCursor: move to the next open pool; when none is left, say why in the cause."""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.handlers.events import LoopEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.policy import fill
from gpufill.policy.exhaustion import exhaustion_cause


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=LoopEvent)
    run = fill.advance(step.run, step.pools, step.request)
    if run.next == "exhausted":
        market = step.market or "spot"
        run = run.model_copy(update={"cause": exhaustion_cause(run, step.request, market)})
        logger.info("market exhausted", extra={"market": market, "launched": run.launched})
    return run.model_dump(mode="json", exclude_none=True)
