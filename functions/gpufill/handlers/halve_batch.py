"""HalveBatch: the pool said capacity (exact mode) or quota; ask it again for half as many."""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.handlers.events import HalveEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.policy import fill


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    run = parse(event=event, model=HalveEvent).run
    return fill.halve(run).model_dump(mode="json", exclude_none=True)
