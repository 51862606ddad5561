"""WaitUntilRunning: one round of checking the launched instances; the state machine pauses between rounds."""

from __future__ import annotations

from collections import defaultdict

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import ec2, instances_table, run_store
from gpufill.handlers.events import LoopEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import boot


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=LoopEvent)
    run = step.run
    if run.wait is not None and run.boot_rounds == 0:
        # The fill is over: a wait for capacity ends here, and `gpufill status` stops saying it waits.
        run_store.save_wait(step.request.request_id, {"phase": "ended", "tries": run.wait.tries, "next_try_at": None})
    by_region: dict[str, list[str]] = defaultdict(list)
    for instance in run.instances:
        by_region[instance.region].append(instance.instance_id)
    seen = {iid: fact for region, ids in by_region.items() for iid, fact in ec2.instance_states(region, ids).items()}
    settled = boot.settle(run, seen)
    before = {i.instance_id: (i.state, i.private_ip) for i in run.instances}
    newly_lost = [i for i in settled.lost if i.instance_id in before]
    for instance in settled.instances + newly_lost:
        if before.get(instance.instance_id) != (instance.state, instance.private_ip):
            instances_table.record_boot_state(instance, lost=instance in newly_lost)
    if newly_lost:
        logger.warning("instances lost before running", extra={"ids": [i.instance_id for i in newly_lost]})
        metrics.add_metric(name="InstancesLostAtLaunch", unit="Count", value=len(newly_lost))
    return settled.model_dump(mode="json", exclude_none=True)
