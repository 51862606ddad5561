"""PurchaseCapacityBlock: buy the approved offering exactly once (adapters.capacity_blocks.purchase_once),
and say when the block starts and ends and what became of its upfront payment.

CheckBlockPayment (the same function, `check`): while EC2 shows the block `payment-pending`, look
at it again (found by its purchase tags; never buys). A `payment-failed` block ends the run
PURCHASE_FAILED with the block named (policy/capacity_blocks.py)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import capacity_blocks, run_store
from gpufill.constants import BLOCK_PAYMENT_PENDING, ENV_DEPLOYMENT
from gpufill.handlers.events import PurchaseEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import capacity_blocks as policy


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=PurchaseEvent)
    offering, owner = step.block["offering"], step.request.owner_id
    if step.check:
        tags = capacity_blocks.block_tags(
            deployment=os.environ[ENV_DEPLOYMENT], request_id=owner, offering_id=offering["offering_id"]
        )
        found = capacity_blocks.bought(offering["region"], tags)
        if found is None:  # bought and shown before: not shown this once; still pending, look again
            logger.warning("bought capacity block not shown", extra={"offering": offering["offering_id"]})
        before = step.block.get("reservation") or {}
        reservation = found or {"CapacityReservationId": before.get("capacity_reservation_id"), "State": BLOCK_PAYMENT_PENDING}
    else:
        reservation, now = capacity_blocks.purchase_once(
            offering["region"], offering["offering_id"], deployment=os.environ[ENV_DEPLOYMENT], request_id=owner
        )
        if now:
            metrics.add_metric(name="CapacityBlocksBought", unit="Count", value=1)
    held = {**_held(reservation, offering), "upfront_fee": offering["upfront_fee"]}
    paid = policy.payment(reservation.get("State"))
    # The run's result names who approved the spend (capacity_block.approved_by), not only the table.
    approved = {name: (step.approval or {}).get(key) for name, key in
                (("approved_by", "approver"), ("approved_at", "decided_at"), ("approval_reason", "reason"))}
    result = {**held, "launch_at": launch_at(offering["start"]), "payment": paid,
              **({k: v for k, v in approved.items() if v is not None})}
    if paid == "failed":
        kept = [{"instance_id": i.instance_id, "region": i.region} for i in (step.run.instances if step.run else [])]
        result["cause"] = policy.purchase_failed_cause(held, request_id=step.request.request_id, kept=kept)
        metrics.add_metric(name="CapacityBlockPaymentsFailed", unit="Count", value=1)
    # What `gpufill status REQUEST` says while the run waits for the payment and the block's start.
    phase = {"pending": "capacity-block-payment", "failed": "capacity-block-payment-failed"}.get(paid, "capacity-block")
    run_store.save_wait(owner, {"phase": phase, "execution": step.request.request_id, **held})
    logger.info("capacity block held", extra={"reservation": reservation["CapacityReservationId"], "payment": paid})
    return result


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
