"""PlanBlockLaunch: the bought Capacity Block has started; lay it out as the one pool the fill
loop launches into (RunInstances with MarketType capacity-block, targeting the block), so the
launch, its ClientToken, the records and the readiness are the ones every other launch uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock, run_store, schedules
from gpufill.handlers.events import BlockLaunchEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.run import Plan, PlanRef, Pool
from gpufill.policy import block_use


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=BlockLaunchEvent)
    if step.phase == "retry":
        return try_again(step)
    request, run, held = step.request, step.run, step.block["reservation"]
    stopped = (run_store.load_wait(request.owner_id) or {}).get("stopped_by")
    if stopped:
        # The request's teardown was asked while the run waited for the block: nothing is launched
        # into it (the block stays bought, unused until its end), as a teardown ends a wait for capacity.
        run_store.save_wait(request.owner_id, {"phase": "capacity-block-stopped", "execution": request.request_id, **{
            k: held[k] for k in ("capacity_reservation_id", "availability_zone", "start", "end", "upfront_fee")}})
        logger.info("launch into the capacity block stopped by a teardown", extra={"teardown": stopped})
        return {"stopped_by": stopped, "capacity_block": held}
    offered = step.block["offering"]
    # Hours plus minutes: every block ends at 11:30 UTC (CapacityBlockDurationMinutes).
    hours = max(1.0, offered["duration_hours"] + offered.get("duration_minutes", 0) / 60)
    pool = Pool(
        region=held["region"],
        availability_zone=held["availability_zone"],
        instance_type=held["instance_type"],
        market="on-demand",
        # What an instance-hour of the block costs: its upfront fee spread over its instances and hours.
        price=round(held["upfront_fee"] / (held["instance_count"] * hours), 4),
        capacity_reservation_id=held["capacity_reservation_id"],
        reserved=held["instance_count"],
        capacity_block=True,
        upfront_fee=held["upfront_fee"],
        note=f"capacity block {held['capacity_reservation_id']} until {held['end']}",
    )
    plan = Plan(request_id=request.request_id, market="on-demand", scoring="capacity-block", pools=[pool])
    key = run_store.save_plan(plan)
    missing = request.count - run.launched
    ready = run.model_copy(
        update={"cursor": 0, "next": "prepare", "batch": max(1, min(request.batch_max, missing)), "remaining": missing,
                "launch": None, "blocked": [], "reserved_taken": {}, "cause": None, "capacity_block": held}
    )
    run_store.save_wait(request.owner_id, {"phase": "capacity-block-in-use", "execution": request.request_id,
                                           **{k: held[k] for k in ("capacity_reservation_id", "availability_zone", "start", "end", "upfront_fee")}})
    logger.info("launching into the capacity block", extra={"pool": pool.key, "missing": missing})
    # The request's teardown is asked (behind its approval, as max_lifetime's is) an hour before the
    # block ends; EC2 itself ends what still runs in it 30 minutes before the end.
    expires = _earlier(request.expires_at, _iso(_moment(held["end"]) - TEARDOWN_BEFORE_END))
    if request.expires_at is not None and expires != request.expires_at and run.launched:
        # Instances launched before the block made the request's max_lifetime schedule: it moves
        # to the block's end, whichever comes first (a block's launches would not move it).
        moved = schedules.move_expiry(request.owner_id, expires, step.state_machine)
        logger.info("lifetime moved to the block's end", extra={"expires_at": expires, "moved": moved})
    ref = PlanRef(request_id=request.request_id, market="on-demand", scoring="capacity-block", key=key, pools=1)
    return {
        "plan": ref.model_dump(mode="json", exclude_none=True),
        "run": ready.model_dump(mode="json", exclude_none=True),
        "request": request.model_copy(update={"expires_at": expires}).model_dump(mode="json"),
    }


def try_again(step: BlockLaunchEvent) -> dict:
    """TryBlockAgain: the launches into the block left part of the count missing (EC2 answered no
    room: a block can turn active minutes after its start). Wait and try again while the block is
    usable; otherwise end, naming the block, the run's status view included."""
    request, run, held = step.request, step.run, step.block["reservation"]
    tries = int((step.block.get("retry") or {}).get("tries", 0)) + 1
    delay = block_use.next_try(clock.now(), tries, held)
    if delay is not None:
        at = (clock.now() + timedelta(seconds=delay)).isoformat().replace("+00:00", "Z")
        run_store.save_wait(request.owner_id, block_use.trying_view(
            held, execution=step.execution or request.request_id, tries=tries, next_try_at=at, launched=run.launched))
        logger.info("capacity block tried again", extra={"tries": tries, "delay_seconds": delay, "launched": run.launched})
        return {"next": "retry", "tries": tries, "delay_seconds": delay}
    if run.launched:  # what runs in the block is kept: the run ends PARTIAL, its result naming the block
        return {"next": "partial", "tries": tries}
    last = run.step_attempts[-1].reason if run.step_attempts else None
    run_store.save_wait(request.owner_id, block_use.ended_view(
        held, execution=step.execution or request.request_id, error=block_use.UNUSED_ERROR, launched=0))
    logger.warning("capacity block not used", extra={"tries": tries, "reservation": held["capacity_reservation_id"]})
    metrics.add_metric(name="CapacityBlocksUnused", unit="Count", value=1)
    cause = block_use.unused_cause(request.request_id, request.count, held, tries, last)
    return {"next": "unused", "tries": tries, "cause": cause}


TEARDOWN_BEFORE_END = timedelta(hours=1)


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat()


def _earlier(current: str | None, candidate: str) -> str:
    return candidate if current is None or _moment(candidate) < _moment(current) else current
