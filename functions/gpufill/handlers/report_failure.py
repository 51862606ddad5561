"""ReportFailure: a step failed for good; name every instance launched so far and the teardown that ends them."""

from __future__ import annotations

import json

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock, instances_table, launch_calls, run_store
from gpufill.handlers.events import FailureEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import block_use
from gpufill.policy.result import failure_cause


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=FailureEvent)
    request_id = step.request.owner_id if step.request else None
    # The table knows instances the state does not: a step that launched, recorded, then failed.
    recorded = instances_table.records_for_request(request_id) if request_id else []
    if step.request and step.request.refill:  # a refill run's own instances, not its request's others
        recorded = [r for r in recorded if r.get("replaces") == step.request.refill.replaces]
    # A gang rollback that failed part-way: what it already ended is no longer the user's to end.
    ended = {r["instance_id"] for r in recorded if r.get("rolled_back")}
    run = step.run
    if run is not None:  # the run ends: its launch template versions are no longer needed
        run = launch_calls.retire(run)
    if run is not None and ended:
        run = run.model_copy(update={"instances": [i for i in run.instances if i.instance_id not in ended]})
    live = [r for r in recorded if "kind" not in r and r["instance_id"] not in ended]
    cause = failure_cause(request_id, run, live, step.failure)
    held = _block_held(step, run)
    if held is not None:  # a paid block the run leaves: named in the cause and in `gpufill status`
        launched = len(json.loads(cause).get("instances") or [])
        cause = block_use.with_block(cause, held, launched)
        run_store.save_wait(step.request.owner_id, block_use.ended_view(
            held, execution=step.execution or step.request.request_id, error="PROVISIONING_FAILED", launched=launched))
    elif step.request and run is not None and run.wait is not None:
        # `gpufill status` must not go on saying a try is under way (in a successor that never ran).
        run_store.save_wait(
            step.request.request_id,
            {
                "phase": "failed",
                "execution": step.execution or step.request.request_id,
                "error": step.failure.get("Error") or "unknown error",
                "deadline": run.wait.deadline,
                "tries": run.wait.tries,
                "launched": run.launched,
                "next_try_at": None,
                "updated_at": clock.iso_now(),
            },
        )
    logger.error("run failed", extra={"error": step.failure.get("Error"), "request_id": request_id})
    metrics.add_metric(name="RunsFailed", unit="Count", value=1)
    return {"cause": cause}


def _block_held(step: FailureEvent, run) -> dict | None:
    """The Capacity Block this run bought, if it bought one: on the run once it launches into the
    block, and before that in the status item the purchase wrote for this execution."""
    if run is not None and run.capacity_block is not None:
        return run.capacity_block
    if step.request is None or step.request.capacity_block is None:
        return None
    view = run_store.load_wait(step.request.owner_id) or {}
    mine = view.get("execution") in (step.execution, step.request.request_id)
    if mine and view.get("phase") in ("capacity-block", "capacity-block-payment", "capacity-block-in-use") and view.get("capacity_reservation_id"):
        return view
    return None
