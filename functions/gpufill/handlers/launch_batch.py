"""LaunchBatch: launch calls for the pools under the cursor, each recorded before the step returns.

With launch_mode "fleet" the step makes one CreateFleet over every open pool of the region
(policy/fleet_moves.py); otherwise RunInstances calls, one pool at a time.

One step makes up to fill.MAX_PROBES_PER_STEP calls in one region, halving the batch and moving
the cursor between them as the policy says. Every call is exactly-once: its ClientToken comes
from the deployment, the request and the attempt number, its parameters were fixed by
PrepareRegion, an intent naming the region is written before it, and an unsettled answer is
looked up by token. A retried step therefore repeats the very same calls, and EC2 answers a
call that had launched with the instances it launched then.
"""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from gpufill.adapters import (
    capacity_cache,
    clock,
    ec2,
    instances_table,
    late_rounds,
    managed_instances,
    placement_groups,
    run_store,
    schedules,
    visibility,
)
from gpufill.adapters import fleet_launch
from gpufill.adapters.aws import TransientAwsError
from gpufill.constants import (
    ENV_DEPLOYMENT,
    ENV_EBS_KMS_KEY_ARN,
    ENV_INSTANCE_PROFILE_ARN,
    ENV_STARTUP_BUCKET,
    LOCAL_HOME_REGION,
    METRIC_CAPACITY_ANSWERS,
)
from gpufill.handlers.events import LoopEvent
from gpufill.handlers.observability import count, logger, metrics, tracer, transient_aws_errors
from gpufill.bootstrap.user_data import render_user_data
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import Instance, LaunchResult, MarketName, PlanRef, Pool, RegionLaunch, Run
from gpufill.policy import block_use, fill, fleet_moves, gang, lifetime
from gpufill.policy.exhaustion import exhaustion_cause, no_reservation_room_cause, rejection_cause
from gpufill.policy.tokens import client_token

# Stop starting calls when less than this is left of the function's time: a call may take 20 s.
RESERVED_MILLIS = 30_000


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=LoopEvent)
    request, plan = step.request, step.plan
    pools = run_store.load_plan(plan.key).pools
    if request.maintain and request.refill is None:
        # Kept before anything launches, so every instance that can be reclaimed has a request to refill.
        run_store.save_request(request.request_id, request.model_dump(mode="json", exclude_none=True))
    run = fill.begin_step(step.run)
    if request.refill is not None and (stopped_by := run_store.refills_stopped_by(request.owner_id)):
        return refill_stopped(run, request, stopped_by).model_dump(mode="json", exclude_none=True)
    # A resource created a moment ago is waited for only while the step keeps its reserve.
    with visibility.time_left(lambda: (context.get_remaining_time_in_millis() - RESERVED_MILLIS) / 1000):
        answer = launch_step(step, request, plan, pools, run, context)
    for attempt in answer.get("step_attempts") or []:  # the dashboard's capacity answers by region and type
        count(METRIC_CAPACITY_ANSWERS, 1, region=attempt["region"], instance_type=attempt["instance_type"], outcome=attempt["outcome"])
    if request.refill is not None and answer.get("instances"):
        # Asked again after the records are written: a teardown that stops maintenance writes its
        # mark before it lists the request's records, so either it listed this refill's instances
        # or this read sees its mark (both are strongly consistent).
        if stopped_by := run_store.refills_stopped_by(request.owner_id):
            return refill_stopped(Run.model_validate(answer), request, stopped_by).model_dump(mode="json", exclude_none=True)
    return answer


def refill_stopped(run: Run, request: ResolvedRequest, stopped_by: str) -> Run:
    """A teardown of the request was asked while this refill ran: the refill launches nothing more,
    and what it launched (never used, perhaps never listed by the teardown) is terminated now,
    as a gang's rollback is: nothing outlived the run."""
    by_region: dict[str, list[str]] = {}
    for instance in run.instances:
        by_region.setdefault(instance.region, []).append(instance.instance_id)
    now = clock.now()
    for region, ids in sorted(by_region.items()):
        try:
            managed_instances.terminate(region, sorted(ids))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "InvalidInstanceID.NotFound":
                raise
            # Launched a moment ago and not visible yet: the retried step finds them by token.
            raise TransientAwsError(f"TerminateInstances in {region}: not visible yet: {error}") from error
        for instance_id in sorted(ids):
            instances_table.mark_rolled_back(
                instance_id, region=region, request_id=request.owner_id, terminated_at=now,
                reason=f"refill stopped: teardown {stopped_by} of the request was asked while it ran",
            )
    ended = sorted(i.instance_id for i in run.instances)
    logger.info("refill stopped by a teardown", extra={"teardown": stopped_by, "terminated": ended})
    metrics.add_metric(name="RefillsStopped", unit="Count", value=1)
    said = f"teardown {stopped_by} of request {request.owner_id} was asked while this refill ran: nothing more is launched"
    if ended:
        said += f"; the {len(ended)} instance(s) it launched were terminated unused: {', '.join(ended)}"
    return run.model_copy(update={"next": "stopped", "cause": said, "instances": [], "launched": 0, "hourly_cost": 0.0})


def launch_step(step: LoopEvent, request: ResolvedRequest, plan, pools: list[Pool], run: Run, context: LambdaContext) -> dict:
    grouped: set[str] = set()  # regions where this step made a cluster placement group
    if request.launch_mode == "fleet" and not any(p.capacity_block for p in pools):  # a block: RunInstances
        run = launch_fleet(step, request, pools, run, grouped)
        tidy_groups(grouped, run, pools, request)
        return finish_step(run, request, plan.market, plan).model_dump(mode="json", exclude_none=True)
    probes = 0
    while run.next == "launch" and probes < fill.MAX_PROBES_PER_STEP:
        if probes and context.get_remaining_time_in_millis() < RESERVED_MILLIS:
            break
        pool = pools[run.cursor]
        token = client_token(step.state_machine, request.request_id, run.attempts_total + 1)
        batch = run.batch
        result = launch(request, run.launch, pool, batch, token, grouped)
        keep(result.instances, request, token, step.state_machine)
        # A reservation's room is read afresh by every plan: only ordinary pools enter the capacity cache.
        if fill.pool_found_empty(batch, result, request) and pool.capacity_reservation_id is None:
            capacity_cache.remember_full(pool.key, request_id=request.request_id, reason=result.reason or "capacity")
        run = fill.after_attempt(run, pools, result, request)
        probes += 1
        logger.info(
            "batch answered",
            extra={"pool": pool.key, "batch": batch, "outcome": result.outcome, "launched": len(result.instances)},
        )
    tidy_groups(grouped, run, pools, request)
    return finish_step(run, request, plan.market, plan).model_dump(mode="json", exclude_none=True)


def tidy_groups(grouped: set[str], run: Run, pools: list[Pool], request: ResolvedRequest) -> None:
    """A cluster group is made before the launch that may fill it; in a region the run leaves, the
    groups that got no instance are deleted now, so groups stay only where the gang launched (a
    rollback or a teardown deletes those). Never fails the step: a group left behind only counts
    toward the region's placement-group quota, and the request's teardown tries it again."""
    staying = pools[run.cursor].region if run.next in ("launch", "refresh") and run.cursor < len(pools) else None
    for region in sorted(grouped - {staying}):
        try:
            placement_groups.remove_empty(region, os.environ.get(ENV_DEPLOYMENT, ""), {request.request_id})
        except (ClientError, TransientAwsError) as error:
            logger.warning("empty cluster groups not deleted", extra={"region": region, "error": str(error)})


def keep(instances: list[Instance], request: ResolvedRequest, token: str, state_machine: str) -> None:
    """Recorded before the step returns: if this fails the step is retried with the same tokens."""
    if not instances:
        return
    replaces = request.refill.replaces if request.refill else None
    instances_table.record_launched(
        instances, request_id=request.owner_id, client_token=token, maintain=request.maintain, replaces=replaces,
        lifetime_expires_at=request.expires_at,
    )
    if replaces:
        instances_table.mark_replaced(replaces, [i.instance_id for i in instances])
    if request.expires_at:
        # With the records, so no instance of the request runs unguarded: a failure here retries
        # the step, whose launches answer with the same instances, and the schedule's name is
        # the request's (or, at or past the expiry, the launch's round), so it is made once
        # however often this runs.
        launch = lifetime.late_round(request.expires_at, clock.now(), token)
        if launch is None:
            if schedules.schedule_expiry(request.owner_id, request.expires_at, state_machine):
                logger.info("lifetime scheduled", extra={"expires_at": request.expires_at})
        else:
            join_late_round(request.owner_id, request.expires_at, state_machine, launch)
    metrics.add_metric(name="InstancesLaunched", unit="Count", value=len(instances))


LATE_ROUND_TRIES = 5


def join_late_round(request_id: str, expires_at: str, state_machine: str, launch: str) -> None:
    """A launch at or after the expiry is asked about in the request's one late round: it joins
    the open round, or opens the next (policy.lifetime.late_step). Each write is conditional on the
    item it was decided from; one that lost a race is decided again from the item as it is now."""
    for _ in range(LATE_ROUND_TRIES):
        step = lifetime.late_step(late_rounds.read(request_id), launch, clock.now())
        if step["do"] == "nothing":
            return
        if step["do"] == "join":
            if late_rounds.join(request_id, number=step["round"], launch=launch):
                logger.info("late launch joins the open late round", extra={"late_round": step["round"]})
                return
            continue
        if step["do"] == "open" and not late_rounds.open_round(
            request_id, number=step["round"], due=step["due"], launch=launch, expect=step["expect"]
        ):
            continue
        # Opened now, or by this launch before (a retried step): its schedule, made once.
        if schedules.schedule_expiry(request_id, expires_at, state_machine, str(step["round"]), at=step["due"]):
            logger.info("late round scheduled", extra={"late_round": step["round"], "due": step["due"]})
        return
    raise TransientAwsError(f"the late rounds of {request_id} changed {LATE_ROUND_TRIES} times while this launch joined them")


def launch_fleet(step: LoopEvent, request: ResolvedRequest, pools: list[Pool], run: Run, grouped: set[str]) -> Run:
    """One CreateFleet over the region's open pools, for everything still missing."""
    here = pools[run.cursor]
    run = fleet_moves.begin_call(run, here)
    indices = fleet_moves.overrides(run, pools, request)
    deployment = os.environ.get(ENV_DEPLOYMENT, "")
    groups = {}
    for index in indices:
        group = gang.cluster_group(request, pools[index], deployment)
        if group and pools[index].availability_zone not in groups:
            placement_groups.ensure(here.region, group, request_id=request.request_id, deployment=deployment)
            groups[pools[index].availability_zone] = group
            grouped.add(here.region)
    call = fleet_launch.FleetCall(
        region=here.region,
        market=here.market,
        pools=[(index, pools[index]) for index in indices],
        target=run.batch,
        strategy=fleet_moves.allocation_strategy(here.market, request),
        subnets=run.launch.subnets,
        single_zone=fleet_moves.single_zone(request),
        min_target=fleet_moves.min_target(run, request),
        placement_groups=groups,
        capacity_reservation_id=here.capacity_reservation_id,
    )
    token = client_token(step.state_machine, request.request_id, run.attempts_total + 1)
    run_store.record_intent(request_id=request.owner_id, region=here.region, client_token=token)
    spec = launch_spec(request, run.launch, reservations_off=request.capacity_reservations == "none" and here.market == "on-demand")
    answer = fleet_launch.launch(call, spec, token)
    keep([i for item in answer.answers for i in item.result.instances], request, token, step.state_machine)
    for index in fleet_moves.pools_found_empty(answer):
        if pools[index].capacity_reservation_id is not None:
            continue
        capacity_cache.remember_full(pools[index].key, request_id=request.request_id, reason="capacity")
    if answer.template_version:
        # Only now: the fleet answered and what it launched is recorded.
        fleet_launch.retire_version(here.region, answer.template_version)
    logger.info(
        "fleet answered",
        extra={
            "region": here.region,
            "pools": len(indices),
            "target": run.batch,
            "launched": sum(len(item.result.instances) for item in answer.answers),
            "failure": answer.failure.reason if answer.failure else None,
        },
    )
    return fleet_moves.after_fleet(run, pools, answer, request)


def launch(request: ResolvedRequest, setup: RegionLaunch, pool: Pool, batch: int, token: str, grouped: set[str]) -> LaunchResult:
    subnet = setup.subnets.get(pool.availability_zone)
    if subnet is None:
        return LaunchResult(outcome="error", reason="NoSubnet", message=f"no subnet to launch into in {pool.availability_zone}")
    deployment = os.environ.get(ENV_DEPLOYMENT, "")
    group = gang.cluster_group(request, pool, deployment)
    if group:
        placement_groups.ensure(pool.region, group, request_id=request.request_id, deployment=deployment)
        grouped.add(pool.region)
    spec = launch_spec(request, setup, subnet_id=subnet, placement_group=group, reservations_off=request.capacity_reservations == "none")
    run_store.record_intent(request_id=request.owner_id, region=pool.region, client_token=token)
    return ec2.launch(
        pool,
        min_count=1 if request.launch_mode == "partial" else batch,
        max_count=batch,
        client_token=token,
        spec=spec,
    )


def launch_spec(
    request: ResolvedRequest,
    setup: RegionLaunch,
    *,
    subnet_id: str | None = None,
    placement_group: str | None = None,
    reservations_off: bool = False,
) -> ec2.LaunchSpec:
    return ec2.LaunchSpec(
        reservations_off=reservations_off,
        image_id=setup.image_id,
        request_id=request.owner_id,
        deployment=os.environ.get(ENV_DEPLOYMENT, ""),
        placement_group=placement_group,
        user_tags=request.tags,
        subnet_id=subnet_id,
        security_group_ids=(setup.security_group_id,) if setup.security_group_id else (),
        instance_profile_arn=os.environ.get(ENV_INSTANCE_PROFILE_ARN) or None,
        user_data=render_user_data(
            region=os.environ.get("AWS_REGION", LOCAL_HOME_REGION),
            bucket=os.environ[ENV_STARTUP_BUCKET],
            image=request.image,
            model_id=request.model_id,
        ),
        root_volume_gib=setup.root_volume_gib,
        kms_key_id=os.environ.get(ENV_EBS_KMS_KEY_ARN) or None,
    )


def finish_step(run: Run, request: ResolvedRequest, market: MarketName, plan: PlanRef | None = None) -> Run:
    """What PrepareRegion and LaunchBatch do at the end of every step: log its attempts, explain a stop."""
    if run.step_attempts:
        run_store.save_attempts(request.request_id, run.step_attempts)
    if run.next == "exhausted":
        attempts = run_store.load_attempts(request.request_id, run.attempts_total)
        if request.capacity_reservations == "only":
            seen = plan.reservations if plan is not None else []
            return run.model_copy(update={"cause": no_reservation_room_cause(run, attempts, request, seen)})
        return run.model_copy(update={"cause": exhaustion_cause(run, attempts, request, market)})
    if run.next == "rejected":
        cause = rejection_cause(run, request)
        if run.capacity_block is not None:  # a paid block the run leaves: named, here and in `gpufill status`
            cause = block_use.with_block(cause, run.capacity_block, run.launched)
            run_store.save_wait(request.owner_id, block_use.ended_view(
                run.capacity_block, execution=request.request_id, error="LAUNCH_REJECTED", launched=run.launched))
        return run.model_copy(update={"cause": cause})
    return run
