"""RankPools: scores every region and lays out the pools in the order the fill loop tries them.

RankKnownPools runs it for a try after a wait that reuses the facts of an earlier try: it leaves
out the pools found full moments ago and reads the reservations again only when the last read
found some (policy/ranking.leave_out_recently_full, policy/reservations.read_again).

Invoked first as RankFromWarmFacts (`warm`): from the deployment's warm facts, when every one the
request needs is fresh, it ranks at once and, when the first region's launch settings are warm
too, enters that region, so the run's first launch follows without ScoreRegions or PrepareRegion.
"""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill import catalog
from gpufill.adapters import capacity_cache, clock, placement_scores, reservations, run_store, warm_facts
from gpufill.constants import ENV_DEPLOYMENT, LOCAL_HOME_REGION, WAIT_SKIP_FULL_SECONDS
from gpufill.handlers.events import RankEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import MarketName, Plan, PlanRef, Pool, RegionFacts, RegionScore, ReservationSeen, Run
from gpufill.policy import fill, ranking
from gpufill.policy import warm_facts as warm_policy
from gpufill.policy import reservations as reservation_policy

# A plan's output lists the pools up to this many (the first ones are the ones tried first).
MAX_PLAN_POOLS_LISTED = 200


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=RankEvent)
    if step.warm:
        return _from_warm_facts(step)
    request = step.request
    # The regions' facts as this run scored them (dropped regions keep their error); a run that
    # ranked from warm facts stored them the same way, and its state carries only the regions.
    regions = [f.region for f in step.facts] or list(request.regions)
    stored = run_store.load_facts(request.request_id, [r for r in regions if r not in _dropped(step.facts)])
    given = {f.region: f for f in step.facts}
    facts = [stored.get(r) or given.get(r) or RegionFacts(region=r, error="no facts") for r in regions]
    return _answer(_ranked(request, facts, step.market, step.known), request)


def _dropped(facts: list[RegionFacts]) -> set[str]:
    return {f.region for f in facts if f.error is not None}


def _from_warm_facts(step: RankEvent) -> dict:
    """RankFromWarmFacts: rank from the deployment's warm facts when every one the request needs is
    fresh, and enter the first region from its warm launch settings when they cover it; otherwise
    say so, and the run scores every region (ScoreRegions) as if nothing were kept."""
    request = step.request
    now = clock.epoch()
    facts = None
    if not warm_policy.wants_fresh(request):
        facts = warm_policy.warm_region_facts(request, warm_facts.load_scored(request.regions, request.instance_types), now)
    scored = [(r, t) for r in request.regions for t in request.instance_types]
    if facts is None:
        # Noted warm or not: the scheduled refresh keeps what runs use warm (policy/facts_refresh.py).
        warm_facts.note_used(scored=scored, zone_ids=request.scoring == "blended", at=now)
        logger.info("facts not warm: scoring every region", extra={"fresh": warm_policy.wants_fresh(request)})
        return {"warm": False}
    for region_facts in facts:
        # Kept as this run's own facts: its later rankings (On-Demand, after the spot market) read
        # the same facts it ranked with now, whatever the warm ones have become by then.
        run_store.save_facts(request.request_id, region_facts)
    plan = _ranked(request, facts, None)
    run = step.run
    if run is not None and request.action == "provision":
        run = _entered(request, run, plan.pools, now)
    launched = {}
    if run is not None and run.next == "launch" and run.launch is not None:
        # Every AZ the run may launch in there, as PrepareRegion would have looked them up.
        launched = {run.launch.region: {p.availability_zone for p in plan.pools if p.region == run.launch.region}}
    warm_facts.note_used(scored=scored, zone_ids=request.scoring == "blended", launched=launched, at=now)
    answer: dict = {"warm": True, "plan": _answer(plan, request), "facts": [{"region": f.region} for f in facts]}
    if run is not None:
        answer["run"] = run.model_dump(mode="json", exclude_none=True)
    logger.info("ranked from warm facts", extra={"regions": len(facts), "entered": bool(run and run.next == "launch")})
    return answer


def _entered(request: ResolvedRequest, run: Run, pools: list[Pool], now: float) -> Run:
    """The run in its first region from warm launch settings, or as it was (PrepareRegion then
    prepares the region). The region was noted among the deployment's launch regions when its
    settings were first prepared (PrepareRegion notes it before anything else)."""
    moved = fill.prepare(fill.begin_step(run), pools, request)
    if moved.next != "prepare":
        return run
    region = pools[moved.cursor].region
    zones = {p.availability_zone for p in pools if p.region == region}
    launch = warm_policy.warm_launch(request, warm_facts.load_prepared(region), zones, now)
    return run if launch is None else fill.enter_region(moved, launch)


def _ranked(
    request: ResolvedRequest, facts: list[RegionFacts], market_asked: MarketName | None, known: PlanRef | None = None
) -> Plan:
    market = market_asked or ("on-demand" if request.market == "on-demand" else "spot")
    scoring = "classic"
    if market == "spot" and request.scoring == "blended":
        facts, scoring = _with_placement_scores(facts, request)
    blended = scoring == "blended"
    scores = ranking.score_all(facts, request, blended=blended)
    if market == "spot" and request.scoring == "price-capacity":
        scores, scoring = _with_region_scores(scores, request)
        pools = ranking.price_capacity_pools(facts, scores, request)
    elif market == "spot":
        pools = ranking.spot_pools(facts, scores, request, blended=blended)
    else:
        pools = ranking.on_demand_pools(facts, request)
    now = clock.epoch()
    full = capacity_cache.recently_full([p.key for p in pools], now=now)
    pools = ranking.defer_recently_full(pools, full, now)
    if known is not None:
        pools = ranking.leave_out_recently_full(pools, full, now, WAIT_SKIP_FULL_SECONDS)
    seen: list[ReservationSeen] = []
    read_reservations = request.capacity_reservations != "none" if known is None else (
        reservation_policy.read_again(request, known.market, len(known.reservations))
    )
    if market_asked is None and read_reservations:
        # The first market of a try: reservations before any Spot or On-Demand pool.
        seen, reserved = _reservations(request)
        pools = reserved if request.capacity_reservations == "only" else [*reserved, *pools]
        if request.capacity_reservations == "only":
            market = "on-demand"
    logger.info(
        "pools ranked",
        extra={"market": market, "pools": len(pools), "scoring": scoring, "reservations": sum(s.planned > 0 for s in seen)},
    )
    return Plan(
        request_id=request.request_id, market=market, scoring=scoring, regions=scores, pools=pools, reservations=seen
    )


def _answer(plan: Plan, request: ResolvedRequest) -> dict:
    key = run_store.save_plan(plan)
    if request.action == "plan":
        return _plan_answer(plan)
    ref = PlanRef(
        request_id=request.request_id, market=plan.market, scoring=plan.scoring, key=key, pools=len(plan.pools),
        regions=_best_per_region(plan.regions), reservations=plan.reservations[: reservation_policy.MAX_LISTED],
    )
    return ref.model_dump(mode="json", exclude_none=True)


def _reservations(request: ResolvedRequest) -> tuple[list[ReservationSeen], list[Pool]]:
    deployment = os.environ.get(ENV_DEPLOYMENT, "")
    found = [r for region in request.regions for r in reservations.in_region(region, request.instance_types, deployment)]
    seen = reservation_policy.plan(found, request)
    prices = {(s.region, s.instance_type): catalog.on_demand_price(s.instance_type, s.region) for s in seen}
    return seen, reservation_policy.pools(seen, prices)


def _plan_answer(plan: Plan) -> dict:
    """A plan run's output: every score, and the pools up to a number that keeps the output small."""
    answer = plan.model_dump(mode="json", exclude_none=True)
    if len(plan.pools) > MAX_PLAN_POOLS_LISTED:
        answer["pools"] = answer["pools"][:MAX_PLAN_POOLS_LISTED]
        answer["pools_total"] = len(plan.pools)
    return answer


def _best_per_region(scores: list[RegionScore]) -> list[RegionScore]:
    best: dict[str, RegionScore] = {}
    for score in scores:
        held = best.get(score.region)
        if held is None or (held.dropped is not None, -held.score) > (score.dropped is not None, -score.score):
            best[score.region] = score
    return list(best.values())


def _with_region_scores(scores: list[RegionScore], request: ResolvedRequest) -> tuple[list[RegionScore], str]:
    """Without AWS's region scores the order is by price alone: price per fill at the lowest score."""
    home = os.environ.get("AWS_REGION", LOCAL_HOME_REGION)
    regions = sorted({s.region for s in scores if s.dropped is None})
    found = placement_scores.region_scores(request.instance_types, request.count, regions, home_region=home) if regions else {}
    scoring = "price-capacity" if found else (
        "price-capacity (spot placement scores unavailable: by price)" if found is None
        else "price-capacity (no placement score in AWS's answer: by price)"
    )
    return ranking.with_region_scores(scores, found or {}), scoring


def _with_placement_scores(facts: list[RegionFacts], request: ResolvedRequest) -> tuple[list[RegionFacts], str]:
    home = os.environ.get("AWS_REGION", LOCAL_HOME_REGION)
    regions = [r.region for r in facts if r.error is None]
    found = placement_scores.scores(request.instance_types, request.count, regions, home_region=home)
    if found is None:
        return facts, "classic (spot placement scores unavailable)"
    if not found:
        return facts, "classic (no placement score in AWS's answer)"
    return ranking.with_placement_scores(facts, found), "blended"
