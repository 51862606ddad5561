"""TerminateRegionInstances: one branch of the TerminateInstances Map, after the approval.

Every instance is looked at once more first: only those still tagged gpufill:managed=true,
gpufill:deployment=<this deployment> and with their request are terminated (tags can change
while a person decides). Only the ids of the approved batch are ever sent to TerminateInstances.
"""

from __future__ import annotations


from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock, instances_table, managed_instances, placement_groups
from gpufill.handlers.events import TerminateRegionEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import teardown


@logger.inject_lambda_context(correlation_id_path="teardown_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=TerminateRegionEvent)
    batch = step.batch
    approved = batch.instance_ids
    live = managed_instances.by_ids(batch.region, approved)
    deployment = managed_instances.deployment()
    to_end, skipped, ended_before = [], [], []
    for instance_id in approved:
        why = teardown.refusal(
            instance_id, {"region": batch.region}, live.get(instance_id), batch.request_of(instance_id) or None, deployment
        )
        if why is None:
            to_end.append(instance_id)
            continue
        if why.reason == "already-terminated":
            ended_before.append(instance_id)  # ended meanwhile (a spot interruption, or a retried step)
        else:
            skipped.append(why)
    previous = managed_instances.terminate(batch.region, to_end) if to_end else {}
    now = clock.now()
    with managed_instances.retryable("recording the terminations"):
        for instance_id in to_end + ended_before:
            instances_table.mark_terminated(
                instance_id,
                region=batch.region,
                request_id=batch.request_of(instance_id) or None,
                terminated_at=now,
                terminated_by=step.teardown_id,
            )
    # The torn-down requests' cluster placement groups in this region that no instance holds any more.
    placement_groups.remove_empty(batch.region, deployment, set(batch.requests) - {""})
    result = teardown.region_termination(
        batch.region, terminated=to_end, previous=previous, already_ended=ended_before, skipped=skipped, at=now
    )
    logger.info("region torn down", extra={"region": batch.region, "terminated": to_end, "skipped": len(skipped)})
    metrics.add_metric(name="InstancesTerminated", unit="Count", value=len(to_end))
    return result.model_dump(mode="json")
