"""LaunchBatch: one RunInstances for the pool under the cursor, every instance recorded before returning."""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import ami, ec2, instances_table, regions_config
from gpufill.constants import ENV_INSTANCE_PROFILE_ARN
from gpufill.handlers.events import LoopEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.policy import fill
from gpufill.policy.tokens import client_token


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=LoopEvent)
    request, run = step.request, step.run
    pool = step.pools[run.cursor]
    token = client_token(request.request_id, len(run.attempts) + 1)
    min_count = 1 if request.launch_mode == "partial" else run.batch
    result = ec2.launch(
        pool,
        min_count=min_count,
        max_count=run.batch,
        client_token=token,
        spec=_launch_spec(request.request_id, request.tags, pool.region, pool.availability_zone),
        resolve_ami=ami.resolve_again,
    )
    if result.instances:
        # Recorded before the step returns: if this fails the step is retried with the same token.
        instances_table.record_launched(result.instances, request_id=request.request_id, client_token=token)
        metrics.add_metric(name="InstancesLaunched", unit="Count", value=len(result.instances))
    logger.info(
        "batch answered",
        extra={"pool": pool.key, "batch": run.batch, "outcome": result.outcome, "launched": len(result.instances)},
    )
    return fill.after_attempt(run, pool, result, request).model_dump(mode="json", exclude_none=True)


def _launch_spec(request_id: str, tags: dict[str, str], region: str, zone: str) -> ec2.LaunchSpec:
    override = regions_config.load().override(region)
    return ec2.LaunchSpec(
        image_id=ami.image_for(region),
        request_id=request_id,
        user_tags=tags,
        subnet_id=override.subnets.get(zone),
        security_group_ids=(override.security_group,) if override.security_group else (),
        instance_profile_arn=os.environ.get(ENV_INSTANCE_PROFILE_ARN) or None,
    )
