"""The fleet launch's moves (launch_mode "fleet"): one CreateFleet per region and market.

The call covers every pool of the region the run may still try (each pool an override: its
AZ's subnet and its instance type) and asks for everything still missing; EC2 picks the pools
(price-capacity-optimized for spot, the request's On-Demand strategy otherwise), launches what
it can and names each pool it could not launch in. Whatever it answered, those pools are then
done for that market, since EC2 has looked at all of them: the cursor goes on to the next region.
A pool EC2 did not answer for (RequestLimitExceeded or InternalError in the fleet's Errors, or
no word at all while the fleet fell short) was not tried: the region is asked again for those
pools alone, with a new token, up to MAX_FLEET_RETRIES times; the pools it answered stay settled.
Pools another run found empty moments ago (deferred by the capacity cache) are left out of the
region's first fleet and asked for apart when the cursor reaches them at the end of the plan, so
they are tried last, as in the other modes. Every pool is asked for at most once per market.
"""

from __future__ import annotations

from gpufill.models.request import ResolvedRequest
from gpufill.policy.rules import FillRules
from gpufill.models.run import FleetAnswer, LaunchResult, Pool, Run
from gpufill.policy import fill, gang
from gpufill.policy.errors import is_rejection, is_stale_ami, region_unusable

SPOT_STRATEGY = "price-capacity-optimized"
# cost: the cheapest pools first, as EC2 knows On-Demand prices; latency: the plan's order,
# which is the request's region and type preference.
ON_DEMAND_STRATEGY = {"cost": "lowest-price", "latency": "prioritized"}
# Calls made again in one region for the pools EC2 was too busy to answer for.
MAX_FLEET_RETRIES = 2


def overrides(run: Run, pools: list[Pool], request: FillRules) -> list[int]:
    """The pools one call covers: from the cursor on, every pool of its region, market and
    deferral the run may try."""
    here = pools[run.cursor]
    return [
        index
        for index in range(run.cursor, len(pools))
        if fill.fleet_key(pools[index]) == fill.fleet_key(here) and fill.may_try(pools[index], run, request)
    ]


def allocation_strategy(market: str, request: ResolvedRequest) -> str:
    return SPOT_STRATEGY if market == "spot" else ON_DEMAND_STRATEGY[request.on_demand_strategy]


def single_zone(request: ResolvedRequest) -> bool:
    """A same-az gang asks EC2 to put the whole fleet in one AZ."""
    return request.placement == "same-az"


def min_target(run: Run, request: ResolvedRequest) -> int | None:
    """An all-or-nothing same-az gang asks for all it misses or nothing (EC2 takes a minimum
    target only with a single AZ); other gangs are rolled back by the run as in other modes."""
    if request.all_or_nothing and single_zone(request):
        return run.remaining
    return None


def begin_call(run: Run, pool: Pool | None = None) -> Run:
    """The call asks for everything still missing; a reservation's, for what the plan gave it."""
    batch = run.remaining if pool is None else fill.fitted(run.remaining, pool, run)
    return run.model_copy(update={"batch": batch})


def after_fleet(run: Run, pools: list[Pool], answer: FleetAnswer, request: FillRules) -> Run:
    """Log an attempt per pool EC2 answered for, take its instances, and move on."""
    here = pools[run.cursor]
    if answer.failure is not None:
        return _after_failure(fill.record(run, here, answer.failure), pools, answer.failure, request)
    ordered = sorted(answer.answers, key=lambda a: a.index)
    launched = sum(len(a.result.instances) for a in ordered)
    if launched > run.batch:
        raise ValueError(f"CreateFleet returned {launched} instances for a target of {run.batch}")
    if len({a.index for a in ordered}) != len(ordered):
        raise ValueError("CreateFleet answered twice for one pool")
    moved = run
    for item in ordered:
        moved = fill.record(moved, pools[item.index], item.result)
    for item in ordered:
        if item.result.instances:
            moved = gang.landed(moved, pools[item.index], request)
    if moved.remaining == 0:
        return moved.model_copy(update={"next": "done"})
    codes = [item.result.reason for item in ordered if not item.result.instances]
    if any(is_rejection(code) for code in codes):
        return moved.model_copy(update={"next": "rejected"})
    if not launched and codes and all(is_stale_ami(code) for code in codes):
        return _refresh_or_leave(moved, pools, request)
    for item in ordered:
        if item.result.outcome == "quota":  # that quota group is spent in this region and market
            moved = fill.block(moved, fill.quota_key(pools[item.index]))
    unasked = [item for item in ordered if item.result.outcome == "throttled" and not item.result.instances]
    if unasked and run.fleet_retries < MAX_FLEET_RETRIES:
        return _ask_again(moved, pools, [item for item in ordered if item not in unasked], request)
    return _leave(moved, pools, here, request)


def _ask_again(run: Run, pools: list[Pool], settled: list, request: FillRules) -> Run:
    """EC2 was busy for some pools: the next call covers them alone (the others are settled)."""
    for item in settled:
        run = fill.block(run, fill.pool_key(pools[item.index]))
    if not overrides(run, pools, request):
        return _leave(run, pools, pools[run.cursor], request)
    return run.model_copy(update={"next": "launch", "fleet_retries": run.fleet_retries + 1})


def _after_failure(run: Run, pools: list[Pool], failure: LaunchResult, request: FillRules) -> Run:
    if is_rejection(failure.reason):
        return run.model_copy(update={"next": "rejected"})
    if is_stale_ami(failure.reason):
        return _refresh_or_leave(run, pools, request)
    here = pools[run.cursor]
    if region_unusable(failure.reason):
        return fill.advance(fill.block(run, fill.region_key(here.market, here.region)), pools, request)
    return _leave(run, pools, here, request)


def _refresh_or_leave(run: Run, pools: list[Pool], request: FillRules) -> Run:
    """A stale AMI is resolved once per region, then the call is made again with the fresh one."""
    if run.launch is None or not run.launch.ami_refreshed:
        return run.model_copy(update={"next": "refresh"})
    return _leave(run, pools, pools[run.cursor], request)


def _leave(run: Run, pools: list[Pool], here: Pool, request: FillRules) -> Run:
    """The pools this fleet covered are done for the market: on to the next open pool."""
    left = run.model_copy(update={"fleet_retries": 0})
    return fill.advance(fill.block(left, fill.fleet_key(here)), pools, request)


def pools_found_empty(answer: FleetAnswer) -> list[int]:
    """The pools EC2 said had no capacity: remembered so other runs try them last."""
    return [item.index for item in answer.answers if item.result.outcome == "capacity" and not item.result.instances]
