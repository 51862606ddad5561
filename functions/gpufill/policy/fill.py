"""The probe-and-fill loop's moves: what to do after each launch answer.

launch_mode "partial" asks with MinCount=1, MaxCount=batch, so one call takes whatever a
pool has; a short answer or a capacity error means the pool is empty. launch_mode "exact"
asks for the whole batch and halves it on capacity errors, the classic probe. Quota errors
halve in both modes; at batch 1 a quota error closes that quota group (G and VT, P, ...) in
that region and market, since EC2 counts vCPU quotas per group, region and market. EC2
refusing the launch itself (LAUNCH_REJECTED) stops the run; a stale AMI is resolved again
once per region; a region that cannot be reached is skipped.
The cursor only moves forward, so no pool is tried twice after the cursor left it; a gang
rolled back (policy/gang.py) resumes after the pool where it first landed, in places not tried.
"""

from __future__ import annotations

from gpufill.models.request import ResolvedRequest
from gpufill.policy.rules import FillRules
from gpufill.models.run import Attempt, LaunchResult, Pool, RegionLaunch, Run
from gpufill.policy import gang
from gpufill.policy.boot import hourly_cost
from gpufill.policy.errors import is_rejection, is_stale_ami, not_visible_yet, quota_group, region_unusable
from gpufill.policy.reservations import room_left

# Launch calls one LaunchBatch step may make before handing back to the state machine. Several
# calls a step keep a run at the maxima (15 regions x 10 types x every AZ, exact mode, both
# markets) under Step Functions' 25,000 history events; the probes stay in one region.
MAX_PROBES_PER_STEP = 8
MAX_NOTE = 300  # EC2's message kept with an error attempt


def start(request: ResolvedRequest) -> Run:
    return Run(batch=min(request.batch_max, request.count), remaining=request.count)


def region_key(market: str, region: str) -> str:
    return f"{market}/{region}"


def quota_key(pool: Pool) -> str:
    return f"{pool.market}/{pool.region}/{quota_group(pool.instance_type)}"


def fleet_key(pool: Pool) -> str:
    """The pools one fleet covers: a region's in one market, its deferred pools apart (policy/fleet_moves.py);
    a capacity reservation alone (its fleet targets that reservation and nothing else)."""
    if pool.capacity_reservation_id:
        return f"{pool.market}/{pool.region}/{pool.capacity_reservation_id}"
    return f"{pool.market}/{pool.region}/{'deferred' if pool.deferred else 'fresh'}"


def pool_key(pool: Pool) -> str:
    """One pool a fleet settled while the rest of its region is asked again: "market/region/AZ/type",
    with "/reservation" for a reservation's pool (Pool.key already names the market)."""
    return pool.key


def is_open(pool: Pool, blocked: list[str]) -> bool:
    keys = (region_key(pool.market, pool.region), quota_key(pool), fleet_key(pool), pool_key(pool))
    return not any(key in blocked for key in keys)


def may_try(pool: Pool, run: Run, request: FillRules) -> bool:
    return is_open(pool, run.blocked) and gang.allows(pool, run.gang, request.placement) and reservation_room(pool, run) != 0


def reservation_room(pool: Pool, run: Run) -> int | None:
    """What a capacity reservation pool may still take (None: not a reservation)."""
    return room_left(pool, run.reserved_taken)


def fitted(batch: int, pool: Pool, run: Run) -> int:
    """A batch for a reservation never asks for more than the plan gave the reservation: EC2
    refuses a launch into a targeted reservation beyond its room."""
    room = reservation_room(pool, run)
    return batch if room is None else max(1, min(batch, room))


def prepare(run: Run, pools: list[Pool], request: ResolvedRequest) -> Run:
    """Where the run stands when a region is about to be entered: an open pool to prepare, or nothing left."""
    if run.cursor < len(pools) and may_try(pools[run.cursor], run, request):
        return run.model_copy(update={"next": "prepare", "batch": fitted(run.batch, pools[run.cursor], run)})
    return _advance_from(run.model_copy(update={"launch": None}), pools, request, run.cursor)


def enter_region(run: Run, launch: RegionLaunch) -> Run:
    """The cursor's region entered with `launch`; a waiting run keeps it for its later tries."""
    update: dict = {"launch": launch, "next": "launch"}
    if run.wait is not None:
        update["prepared"] = [*(p for p in run.prepared if p.region != launch.region), launch]
    return run.model_copy(update=update)


def prepared_launch(run: Run, region: str) -> RegionLaunch | None:
    """The launch parameters an earlier try of this waiting run fixed for `region`, if any: the same
    image, volume, security group and subnets, as a first entry (a stale image may be resolved
    again once more on this try)."""
    found = next((p for p in run.prepared if p.region == region), None)
    return None if found is None else found.model_copy(update={"ami_refreshed": False})


def begin_step(run: Run) -> Run:
    return run.model_copy(update={"step_attempts": []})


def after_attempt(run: Run, pools: list[Pool], result: LaunchResult, request: FillRules) -> Run:
    pool = pools[run.cursor]
    if len(result.instances) > run.batch:
        raise ValueError(f"RunInstances returned {len(result.instances)} instances for a batch of {run.batch}")
    moved = record(run, pool, result)
    if result.instances:
        moved = gang.landed(moved, pool, request)
    return _next_move(moved, pools, pool, result, request)


def record(run: Run, pool: Pool, result: LaunchResult) -> Run:
    """One more attempt in the log, and what it launched in the run's holdings."""
    launched = len(result.instances)
    attempt = Attempt(
        number=run.attempts_total + 1,
        region=pool.region,
        availability_zone=pool.availability_zone,
        instance_type=pool.instance_type,
        market=pool.market,
        batch=run.batch,
        launched=launched,
        outcome=result.outcome,
        reason=result.reason,
        capacity_reservation_id=pool.capacity_reservation_id,
        note=result.note or (result.message[:MAX_NOTE] if result.message and _explained(result) else None) or pool.note,
    )
    taken = dict(run.reserved_taken)
    for instance in result.instances:
        if instance.capacity_reservation_id:
            taken[instance.capacity_reservation_id] = taken.get(instance.capacity_reservation_id, 0) + 1
    return run.model_copy(
        update={
            "reserved_taken": taken,
            "attempts_total": run.attempts_total + 1,
            "step_attempts": [*run.step_attempts, attempt],
            "instances": [*run.instances, *result.instances],
            "launched": run.launched + launched,
            "remaining": run.remaining - launched,
            "hourly_cost": round(run.hourly_cost + hourly_cost(result.instances), 4),
        }
    )


def _explained(result: LaunchResult) -> bool:
    """EC2's own words are kept for an error, and for a resource it did not show in time."""
    return result.outcome == "error" or not_visible_yet(result.reason)


def _next_move(run: Run, pools: list[Pool], pool: Pool, result: LaunchResult, request: FillRules) -> Run:
    if run.remaining == 0:
        return run.model_copy(update={"next": "done"})
    code = result.reason
    if result.outcome == "launched":
        if request.launch_mode == "partial" and len(result.instances) < run.batch:
            return advance(run, pools, request)  # the pool gave what it had
        if reservation_room(pool, run) == 0:
            return advance(run, pools, request)  # the reservation's planned room is used
        return run.model_copy(update={"next": "launch", "batch": fitted(min(run.batch, run.remaining), pool, run)})
    if is_rejection(code):
        return run.model_copy(update={"next": "rejected"})
    if is_stale_ami(code):
        if run.launch is None or not run.launch.ami_refreshed:
            return run.model_copy(update={"next": "refresh"})
        return advance(run, pools, request)
    if region_unusable(code):
        return advance(block(run, region_key(pool.market, pool.region)), pools, request)
    if result.outcome == "capacity" and request.launch_mode == "exact" and run.batch > 1:
        return halve(run)
    if result.outcome == "quota":
        if run.batch > 1:
            return halve(run)
        return advance(block(run, quota_key(pool)), pools, request)
    return advance(run, pools, request)


def block(run: Run, key: str) -> Run:
    return run if key in run.blocked else run.model_copy(update={"blocked": [*run.blocked, key]})


def pool_found_empty(batch: int, result: LaunchResult, request: FillRules) -> bool:
    """A capacity answer that says the pool itself is empty, not merely that the batch was too big."""
    return result.outcome == "capacity" and (request.launch_mode == "partial" or batch == 1)


def halve(run: Run) -> Run:
    return run.model_copy(update={"batch": max(1, run.batch // 2), "next": "launch"})


def advance(run: Run, pools: list[Pool], request: FillRules) -> Run:
    """Move to the next pool that is still open; at the end, rewind for the next market."""
    return _advance_from(run, pools, request, run.cursor + 1)


def _advance_from(run: Run, pools: list[Pool], request: FillRules, start_index: int) -> Run:
    fresh_batch = min(request.batch_max, run.remaining) if run.remaining else run.batch
    for index in range(start_index, len(pools)):
        if may_try(pools[index], run, request):
            same_region = run.launch is not None and run.launch.region == pools[index].region
            return run.model_copy(
                update={
                    "cursor": index,
                    "batch": fitted(fresh_batch, pools[index], run),
                    "next": "launch" if same_region else "prepare",
                }
            )
    if gang.must_roll_back(run, request):
        return run.model_copy(update={"next": "rollback"})
    return run.model_copy(
        update={
            "cursor": 0, "batch": fresh_batch, "next": "exhausted", "blocked": [], "launch": None, "reserved_taken": {},
            "gang": gang.for_next_market(run.gang),
        }
    )


def after_rollback(run: Run, pools: list[Pool], request: ResolvedRequest, count: int) -> Run:
    """Start the gang again after the pool where it first landed (the pools before it were
    tried already), outside every place rolled back; an incomplete end of the fill is final,
    unless the run waits for capacity: then, holding nothing, it waits for its next try."""
    final = run.next != "rollback"
    resume = run.gang.resume if run.gang else 0
    cleared = gang.rolled_back(run, request, count)
    if final and run.wait is not None:
        return gang.await_capacity(cleared)
    if final:
        return cleared.model_copy(update={"next": "not_placed"})
    return _advance_from(cleared, pools, request, resume)
