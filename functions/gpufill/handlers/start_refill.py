"""StartRefill: EventBridge delivers EC2's interruption warnings and ending state changes, from
every deployed region, here; an instance of a request with `maintain` that EC2 reclaimed gets a
refill run. Every other event is answered with the reason it starts nothing.

The warning and the state change of one instance name the same execution, with the same input,
so the second start is the first one (see adapters.executions).
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import capacity_cache, clock, executions, instances_table, managed_instances, run_store
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import refill


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    seen = refill.read_event(event)
    if seen is None:
        return {"refill": False, "reason": "not-an-interruption", "detail": f"{event.get('detail-type')!r} is not handled"}
    record = instances_table.records_by_ids([seen.instance_id]).get(seen.instance_id)
    request_id = (record or {}).get("request_id")
    stored = run_store.load_request(request_id) if request_id and record.get("maintain") else None
    stopped_by = run_store.maintenance_stopped_by(request_id) if stored else None
    siblings = list(instances_table.request_holdings(request_id).records.values()) if stored else []
    reason = None
    if stored and seen.kind == "state-change":
        reason = managed_instances.state_reason(seen.region, seen.instance_id)
    decision = refill.decide(seen, record, stored, siblings, reason, stopped_by=stopped_by)
    logger.info("instance event", extra={"event": seen.model_dump(), "decision": decision.model_dump(exclude={"input"})})
    if not decision.refill:
        if decision.held_by:
            instances_table.mark_refill_held(
                seen.instance_id, interruption=decision.interruption, held_by=decision.held_by, at=clock.now()
            )
        metrics.add_metric(name="InterruptionsIgnored", unit="Count", value=1)
        return decision.model_dump(exclude={"input"}, exclude_none=True)
    capacity_cache.remember_full(decision.reclaimed_pool, request_id=request_id, reason="reclaimed")
    instances_table.mark_interrupted(
        seen.instance_id, interruption=decision.interruption, refill_run=decision.execution_name, at=clock.now()
    )
    arn = executions.start(decision.execution_name, decision.input)
    metrics.add_metric(name="RefillsStarted", unit="Count", value=1)
    return {**decision.model_dump(exclude={"input"}, exclude_none=True), "execution_arn": arn}
