"""RollBackGang: an all_or_nothing gang could not complete; end what this run launched, then go on.

Every instance the run holds, and every record of this request not ended yet (a launch the
state may not hold), is terminated and recorded `rolled_back`. Nothing else is touched: the
ids come from this request only, and the role may only terminate this deployment's tagged
instances. No approval is asked: nothing outlived the run. A failed terminate is raised, so
the task retries it (terminating is idempotent); when the retries run out the run ends
PROVISIONING_FAILED naming the instances still held. Then the policy resumes the gang in the
next untried place, waits for capacity holding nothing (with wait_for_capacity, once the try
ended short), or ends the run GANG_NOT_PLACED.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from gpufill.adapters import clock, instances_table, launch_calls, managed_instances, placement_groups, run_store
from gpufill.adapters.aws import TransientAwsError
from gpufill.handlers.events import LoopEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import fill, gang


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=LoopEvent)
    request, run = step.request, step.run
    records = instances_table.request_holdings(request.request_id).records
    held = {i.instance_id: i.region for i in run.instances}
    held.update({i: r["region"] for i, r in records.items() if r.get("state") != "terminated" and r.get("region")})
    by_region: dict[str, list[str]] = {}
    for instance_id, region in sorted(held.items()):
        by_region.setdefault(region, []).append(instance_id)
    now = clock.now()
    reason = gang.rollback_reason(run, request)
    for region, ids in by_region.items():
        terminate(region, ids)
        with managed_instances.retryable("recording the rollback"):
            for instance_id in ids:
                instances_table.mark_rolled_back(
                    instance_id, region=region, request_id=request.request_id, terminated_at=now, reason=reason
                )
    if request.placement == "same-az":
        # Cluster groups this request made: gone once empty (AWS refuses while instances shut down).
        for region in by_region:
            placement_groups.remove_empty(region, managed_instances.deployment(), {request.request_id})
    metrics.add_metric(name="InstancesRolledBack", unit="Count", value=len(held))
    pools = run_store.load_plan(step.plan.key).pools if step.plan else []
    run = fill.after_rollback(run, pools, request, len(held))
    logger.info("gang rolled back", extra={"instances": sorted(held), "next": run.next})
    if run.next == "not_placed":
        rolled = [r for r in instances_table.request_holdings(request.request_id).records.values() if r.get("rolled_back")]
        attempts = run_store.load_attempts(request.request_id, run.attempts_total)
        run = run.model_copy(update={"cause": gang.not_placed_cause(request, attempts, rolled, run.gang.excluded)})
        run = launch_calls.retire(run)  # GANG_NOT_PLACED ends the run: its launch template versions go now
    return run.model_dump(mode="json", exclude_none=True)


def terminate(region: str, instance_ids: list[str]) -> None:
    """EC2 may not know an instance launched a moment ago yet (eventual consistency): retried, never skipped.

    A failed call may have done its work (its reply lost to a timeout or a 5xx): EC2 is asked
    what the instances are now before the failure counts, so instances that are ending are
    never reported as running."""
    try:
        managed_instances.terminate(region, instance_ids)
    except (TransientAwsError, ClientError) as error:
        states = {i: live.state for i, live in managed_instances.by_ids(region, instance_ids).items()}
        if gang.rollback_settled(instance_ids, states):
            logger.info("rollback settled by describing", extra={"region": region, "error": str(error)})
            return
        if isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") == "InvalidInstanceID.NotFound":
            raise TransientAwsError(f"TerminateInstances in {region}: not visible yet: {error}") from error
        raise
