"""PlanBlockLaunch: the bought Capacity Block has started; lay it out as the one pool the fill
loop launches into (RunInstances with MarketType capacity-block, targeting the block), so the
launch, its ClientToken, the records and the readiness are the ones every other launch uses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import run_store
from gpufill.handlers.events import BlockLaunchEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.run import Plan, PlanRef, Pool


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=BlockLaunchEvent)
    request, run, held = step.request, step.run, step.block["reservation"]
    hours = max(1, step.block["offering"]["duration_hours"])
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
    ref = PlanRef(request_id=request.request_id, market="on-demand", scoring="capacity-block", key=key, pools=1)
    return {
        "plan": ref.model_dump(mode="json", exclude_none=True),
        "run": ready.model_dump(mode="json", exclude_none=True),
        "request": request.model_copy(update={"expires_at": expires}).model_dump(mode="json"),
    }


TEARDOWN_BEFORE_END = timedelta(hours=1)


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat()


def _earlier(current: str | None, candidate: str) -> str:
    return candidate if current is None or _moment(candidate) < _moment(current) else current
