"""CheckServing: one round of reading the startup step each instance reported; the state machine pauses between rounds."""

from __future__ import annotations

from collections import defaultdict

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock, ec2
from gpufill.handlers.events import LoopEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.policy import readiness


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=LoopEvent)
    by_region: dict[str, list[str]] = defaultdict(list)
    for instance in step.run.instances:
        by_region[instance.region].append(instance.instance_id)
    seen = {iid: fact for region, ids in by_region.items() for iid, fact in ec2.instance_states(region, ids).items()}
    run = readiness.check(step.run, seen, now=clock.epoch(), timeout_seconds=step.request.ready_timeout_seconds)
    if run.next == "ready":
        serving = readiness.serving_count(run)
        logger.info("model servers checked", extra={"serving": serving, "not_serving": len(run.instances) - serving})
        metrics.add_metric(name="InstancesServing", unit="Count", value=serving)
        metrics.add_metric(name="InstancesNotServing", unit="Count", value=len(run.instances) - serving)
    return run.model_dump(mode="json", exclude_none=True)
