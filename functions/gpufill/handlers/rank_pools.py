"""RankPools: scores every region and lays out the pools in the order the fill loop tries them."""

from __future__ import annotations

import os
import time

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import capacity_cache, placement
from gpufill.constants import LOCAL_HOME_REGION
from gpufill.handlers.events import RankEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.models.request import ProvisionRequest
from gpufill.models.run import Plan, RegionFacts
from gpufill.policy import ranking


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=RankEvent)
    request, facts = step.request, step.facts
    market = step.market or ("on-demand" if request.market == "on-demand" else "spot")
    scoring = "classic"
    if market == "spot" and request.scoring == "blended":
        facts, scoring = _with_placement_scores(facts, request)
    blended = scoring == "blended"
    scores = ranking.score_all(facts, request, blended=blended)
    if market == "spot":
        pools = ranking.spot_pools(facts, scores, request, blended=blended)
    else:
        pools = ranking.on_demand_pools(facts, request)
    now = time.time()
    pools = ranking.defer_recently_full(pools, capacity_cache.recently_full([p.key for p in pools], now=now), now)
    logger.info("pools ranked", extra={"market": market, "pools": len(pools), "scoring": scoring})
    plan = Plan(request_id=request.request_id, market=market, scoring=scoring, regions=scores, pools=pools)
    return plan.model_dump(mode="json", exclude_none=True)


def _with_placement_scores(facts: list[RegionFacts], request: ProvisionRequest) -> tuple[list[RegionFacts], str]:
    home = os.environ.get("AWS_REGION", LOCAL_HOME_REGION)
    regions = [r.region for r in facts if r.error is None]
    for instance_type in request.instance_types:
        found = placement.scores(instance_type, request.count, regions, home_region=home)
        if found is None:
            return facts, "classic (spot placement scores unavailable)"
        facts = ranking.with_placement_scores(facts, instance_type, found)
    return facts, "blended"
