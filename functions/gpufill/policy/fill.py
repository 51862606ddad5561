"""The probe-and-fill loop's moves: what to do after each RunInstances answer.

launch_mode "partial" asks with MinCount=1, MaxCount=batch, so one call takes
whatever a pool has; a short answer or a capacity error means the pool is empty.
launch_mode "exact" asks for the whole batch and halves it on capacity errors,
the classic probe. Quota errors halve in both modes; at batch 1 a quota error
closes the region for that market, since quotas are regional.
The cursor only moves forward, so no pool is tried twice in one market.
"""

from __future__ import annotations

from gpufill.models.request import ProvisionRequest
from gpufill.models.run import Attempt, LaunchResult, Pool, Run


def start(request: ProvisionRequest) -> Run:
    return Run(batch=min(request.batch_max, request.count), remaining=request.count)


def after_attempt(run: Run, pool: Pool, result: LaunchResult, request: ProvisionRequest) -> Run:
    launched = len(result.instances)
    if launched > run.batch:
        raise ValueError(f"RunInstances returned {launched} instances for a batch of {run.batch}")
    attempt = Attempt(
        region=pool.region,
        availability_zone=pool.availability_zone,
        instance_type=pool.instance_type,
        market=pool.market,
        batch=run.batch,
        launched=launched,
        outcome=result.outcome,
        reason=result.reason,
        note=result.note or pool.note,
    )
    remaining = run.remaining - launched
    spent = sum(i.hourly_price or 0.0 for i in result.instances)
    moved = run.model_copy(
        update={
            "attempts": [*run.attempts, attempt],
            "instances": [*run.instances, *result.instances],
            "launched": run.launched + launched,
            "remaining": remaining,
            "hourly_cost": round(run.hourly_cost + spent, 4),
        }
    )
    return moved.model_copy(update=_next_move(moved, pool, result, request))


def _next_move(run: Run, pool: Pool, result: LaunchResult, request: ProvisionRequest) -> dict:
    if run.remaining == 0:
        return {"next": "done"}
    if result.outcome == "launched":
        drained = request.launch_mode == "partial" and len(result.instances) < run.batch
        if drained:
            return {"next": "advance"}
        return {"next": "launch", "batch": min(run.batch, run.remaining)}
    if result.outcome == "capacity" and request.launch_mode == "exact" and run.batch > 1:
        return {"next": "halve"}
    if result.outcome == "quota":
        if run.batch > 1:
            return {"next": "halve"}
        return {"next": "advance", "blocked_regions": [*run.blocked_regions, pool.region]}
    return {"next": "advance"}


def pool_found_empty(run: Run, result: LaunchResult, request: ProvisionRequest) -> bool:
    """A capacity answer that says the pool itself is empty, not merely that the batch was too big."""
    return result.outcome == "capacity" and (request.launch_mode == "partial" or run.batch == 1)


def halve(run: Run) -> Run:
    return run.model_copy(update={"batch": max(1, run.batch // 2), "next": "launch"})


def advance(run: Run, pools: list[Pool], request: ProvisionRequest) -> Run:
    """Move to the next pool that is still open; at the end, rewind for the next market."""
    fresh_batch = min(request.batch_max, run.remaining)
    for index in range(run.cursor + 1, len(pools)):
        if pools[index].region not in run.blocked_regions:
            return run.model_copy(update={"cursor": index, "batch": fresh_batch, "next": "launch"})
    return run.model_copy(update={"cursor": 0, "batch": fresh_batch, "next": "exhausted", "blocked_regions": []})

