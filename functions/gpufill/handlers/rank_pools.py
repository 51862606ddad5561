"""RankPools: scores every region and lays out the pools in the order the fill loop tries them."""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

import time

from gpufill.adapters import capacity_cache
from gpufill.handlers.events import RankEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.models.run import Plan
from gpufill.policy import ranking


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=RankEvent)
    request = step.request
    market = step.market or ("on-demand" if request.market == "on-demand" else "spot")
    scores = ranking.score_all(step.facts, request)
    if market == "spot":
        pools = ranking.spot_pools(step.facts, scores, request)
    else:
        pools = ranking.on_demand_pools(step.facts, request)
    now = time.time()
    pools = ranking.defer_recently_full(pools, capacity_cache.recently_full([p.key for p in pools], now=now), now)
    logger.info("pools ranked", extra={"market": market, "pools": len(pools)})
    return Plan(request_id=request.request_id, market=market, regions=scores, pools=pools).model_dump(mode="json")
