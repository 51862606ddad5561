"""LaunchBatch: one RunInstances for the pool under the cursor, every instance recorded before returning."""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import ami, capacity_cache, ec2, instances_table, network, regions_config
from gpufill.constants import ENV_INSTANCE_PROFILE_ARN, ENV_STARTUP_BUCKET, LOCAL_HOME_REGION
from gpufill.handlers.events import LoopEvent
from gpufill.handlers.observability import logger, metrics, tracer
from gpufill.launch.user_data import render_user_data
from gpufill.models.request import ProvisionRequest
from gpufill.models.run import LaunchResult, Pool
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
    try:
        spec = launch_spec(request, pool)
    except (network.NetworkSetupError, ClientError, BotoCoreError) as error:
        # No place to launch in this region: recorded as an error attempt, and the cursor moves on.
        result = LaunchResult(outcome="error", reason=type(error).__name__, note=str(error))
    else:
        result = ec2.launch(
            pool,
            min_count=1 if request.launch_mode == "partial" else run.batch,
            max_count=run.batch,
            client_token=token,
            spec=spec,
            resolve_ami=ami.resolve_again,
        )
    if result.instances:
        # Recorded before the step returns: if this fails the step is retried with the same token.
        instances_table.record_launched(result.instances, request_id=request.request_id, client_token=token)
        metrics.add_metric(name="InstancesLaunched", unit="Count", value=len(result.instances))
    if fill.pool_found_empty(run, result, request):
        capacity_cache.remember_full(pool.key, request_id=request.request_id, reason=result.reason or "capacity")
    logger.info(
        "batch answered",
        extra={"pool": pool.key, "batch": run.batch, "outcome": result.outcome, "launched": len(result.instances)},
    )
    return fill.after_attempt(run, pool, result, request).model_dump(mode="json", exclude_none=True)


def launch_spec(request: ProvisionRequest, pool: Pool) -> ec2.LaunchSpec:
    override = regions_config.load().override(pool.region)
    home = os.environ.get("AWS_REGION", LOCAL_HOME_REGION)
    return ec2.LaunchSpec(
        image_id=ami.image_for(pool.region),
        request_id=request.request_id,
        user_tags=request.tags,
        subnet_id=override.subnets.get(pool.availability_zone) or network.default_subnet(pool.region, pool.availability_zone),
        security_group_ids=(override.security_group or network.instance_security_group(pool.region),),
        instance_profile_arn=os.environ.get(ENV_INSTANCE_PROFILE_ARN) or None,
        user_data=render_user_data(
            region=home, bucket=os.environ[ENV_STARTUP_BUCKET], image=request.image, model_id=request.model_id
        ),
        root_volume_gib=request.root_volume_gib,
    )
