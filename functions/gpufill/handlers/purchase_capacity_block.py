"""PurchaseCapacityBlock: buy the approved offering exactly once (adapters.capacity_blocks.purchase_once),
and say when the block starts and ends."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import capacity_blocks, run_store
from gpufill.constants import ENV_DEPLOYMENT
from gpufill.handlers.events import PurchaseEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=PurchaseEvent)
    offering = step.block["offering"]
    reservation, now = capacity_blocks.purchase_once(
        offering["region"], offering["offering_id"], deployment=os.environ[ENV_DEPLOYMENT], request_id=step.request.owner_id
    )
    if now:
        metrics.add_metric(name="CapacityBlocksBought", unit="Count", value=1)
    held = _held(reservation, offering)
    # What `gpufill status REQUEST` says while the run waits for the block's start.
    run_store.save_wait(step.request.owner_id, {"phase": "capacity-block", "execution": step.request.request_id, **held,
                                                "upfront_fee": offering["upfront_fee"]})
    logger.info("capacity block held", extra={"reservation": reservation["CapacityReservationId"], "bought_now": now})
    return {**held, "upfront_fee": offering["upfront_fee"], "launch_at": launch_at(offering["start"])}


def _held(reservation: dict, offering: dict) -> dict:
    return {
        "capacity_reservation_id": reservation["CapacityReservationId"],
        "region": offering["region"],
        "availability_zone": reservation.get("AvailabilityZone", offering["availability_zone"]),
        "instance_type": offering["instance_type"],
        "instance_count": offering["instance_count"],
        "start": offering["start"],
        "end": offering["end"],
    }


# EC2 turns the block active at its start; the launch waits a minute past it, so a clock a second
# apart never meets a block still "scheduled".
START_MARGIN = timedelta(minutes=1)


def launch_at(start: str) -> str:
    moment = datetime.fromisoformat(start.replace("Z", "+00:00")) + START_MARGIN
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
