"""PrepareRegion: before the first launch in a region, fix that region's launch parameters in the run.

A waiting run's later tries enter a region with the parameters an earlier try fixed (run.prepared),
until it reads the regions' facts again: no image lookup per try.

The AMI (and its root snapshot size), the security group and the subnet of each AZ are
resolved here, once, and carried in the state: every LaunchBatch retry then sends the
identical request, so its ClientToken can never meet other parameters. After a stale-AMI
answer the same state resolves the image again, and the relaunch is a step of its own.
What a region resolved is kept as warm launch settings (adapters/warm_facts.py) and used instead
of the look-ups while fresh, except after a stale-AMI answer.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError

from gpufill.adapters import ami, clock, ec2, network, regions_config, run_store, warm_facts
from gpufill.adapters.aws import is_transient
from gpufill.handlers.events import LoopEvent
from gpufill.handlers.launch_batch import finish_step
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import LaunchResult, Pool, RegionLaunch
from gpufill.policy import fill
from gpufill.policy import warm_facts as warm_policy
from gpufill.policy.warm_facts import PreparedRegion


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=LoopEvent)
    request, plan = step.request, step.plan
    pools = run_store.load_plan(plan.key).pools
    refresh = step.run.next == "refresh"
    run = fill.prepare(fill.begin_step(step.run), pools, request)
    while run.next == "prepare":
        pool = pools[run.cursor]
        try:
            run_store.note_launch_region(pool.region)
            known = None if refresh else fill.prepared_launch(run, pool.region)
            launch = known or region_launch(request, pool.region, pools, fresh=refresh, before=step.run.launch)
        except (network.NetworkSetupError, ClientError, EndpointConnectionError, ConnectTimeoutError) as error:
            if isinstance(error, ClientError) and is_transient(error):
                raise
            # No way to launch in this region: recorded against its first pool, and the region is skipped.
            reason = _reason(error)
            logger.warning("region skipped", extra={"region": pool.region, "reason": reason})
            result = LaunchResult(outcome="error", reason=reason, message=str(error))
            run = fill.after_attempt(run, pools, result, request)
            refresh = False
            continue
        run = fill.enter_region(run, launch)
    return finish_step(run, request, plan.market, plan).model_dump(mode="json", exclude_none=True)


def region_launch(
    request: ResolvedRequest, region: str, pools: list[Pool], *, fresh: bool, before: RegionLaunch | None
) -> RegionLaunch:
    zones = sorted({p.availability_zone for p in pools if p.region == region})
    refreshed = fresh or bool(before and before.region == region and before.ami_refreshed)
    started = clock.epoch()
    # Noted for the scheduled refresh, which keeps the launch settings of regions runs use warm.
    warm_facts.note_used(launched={region: set(zones)}, at=started)
    if not fresh:  # after a stale-AMI answer the region is always looked up again
        warm = warm_policy.warm_launch(request, warm_facts.load_prepared(region), set(zones), started)
        if warm is not None:
            return warm.model_copy(update={"ami_refreshed": refreshed})
    prepared = look_up_launch(region, zones, fresh=fresh)
    return RegionLaunch(
        region=region,
        image_id=prepared.image_id,
        root_volume_gib=max(request.root_volume_gib, prepared.snapshot_gib or 0),
        security_group_id=prepared.security_group_id,
        subnets=prepared.subnets,
        ami_refreshed=refreshed,
    )


def look_up_launch(region: str, zones: list[str], *, fresh: bool = False) -> PreparedRegion:
    """The region's image, root snapshot size, security group and a subnet per AZ, looked up and
    kept as warm launch settings (PrepareRegion, and the scheduled refresh of them)."""
    started = clock.epoch()
    override = regions_config.load().override(region)
    image = ami.resolve(region, fresh=fresh)
    snapshot = ec2.root_snapshot_gib(region, image)
    subnets = {}
    for zone in zones:
        subnet = override.subnets.get(zone)
        if subnet is None:
            try:
                subnet = network.default_subnet(region, zone)
            except network.NetworkSetupError:
                continue  # that AZ's pools answer "no subnet" and the cursor moves on
        subnets[zone] = subnet
    if not subnets:
        raise network.NetworkSetupError(f"no subnet to launch into in {region}; name subnets in the regions config")
    security_group = override.security_group or network.instance_security_group(region)
    prepared = PreparedRegion(
        region=region, image_id=image, snapshot_gib=snapshot, security_group_id=security_group,
        subnets=subnets, zones=tuple(zones), written_at=started,
    )
    # Kept for the deployment's next runs (RankFromWarmFacts enters the region from them).
    warm_facts.save_prepared(prepared)
    return prepared


def _reason(error: Exception) -> str:
    if isinstance(error, network.NetworkSetupError):
        return "NetworkSetupError"
    if isinstance(error, ClientError):
        return error.response.get("Error", {}).get("Code", "ClientError")
    return type(error).__name__
