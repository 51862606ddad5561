"""LaunchBatch: launch calls for the pools under the cursor, each recorded before the step returns.

The step runs in three movements (policy/launch_step.py): policy decides the call, one adapter
makes it (adapters/launch_calls.py), policy reads the answer into the run; this handler only
sequences them and records what was launched (the instances table, the lifetime schedule, the
capacity cache, the attempt log).

With launch_mode "fleet" the step makes one CreateFleet over every open pool of the region
(policy/fleet_moves.py); otherwise RunInstances calls, one pool at a time, up to
fill.MAX_PROBES_PER_STEP in one region, halving the batch and moving the cursor between them as
the policy says. Every call is exactly-once: its ClientToken comes from the deployment, the
request and the attempt number, its parameters were fixed by PrepareRegion, an intent naming the
region is written before it, and an unsettled answer is looked up by token. A retried step
therefore repeats the very same calls, and EC2 answers a call that had launched with the
instances it launched then.
"""

from __future__ import annotations

import os
from dataclasses import replace

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from gpufill.adapters import (
    capacity_cache,
    clock,
    ec2,
    instances_table,
    late_rounds,
    launch_calls,
    managed_instances,
    placement_groups,
    run_store,
    schedules,
    visibility,
)
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
from gpufill.models.run import Attempt, FleetAnswer, Instance, MarketName, PlanRef, Pool, RegionLaunch, Run
from gpufill.policy import exhaustion, fill, launch_step as moves, lifetime, template_versions
from gpufill.policy.launch_step import Records, Settings

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
    stopped = run.model_copy(update={"next": "stopped", "cause": said, "instances": [], "launched": 0, "hourly_cost": 0.0})
    return launch_calls.retire(stopped)


def launch_step(step: LoopEvent, request: ResolvedRequest, plan, pools: list[Pool], run: Run, context: LambdaContext) -> dict:
    """decide → call → read, until policy decides no more calls; then the step's end recorded."""
    if request.maintain and request.refill is None:
        # Kept before anything launches, so every instance that can be reclaimed has a request to refill.
        run_store.save_request(request.request_id, request.model_dump(mode="json", exclude_none=True))
    deployment = os.environ.get(ENV_DEPLOYMENT, "")
    grouped: set[str] = set()  # regions where this step made a cluster placement group
    made = 0
    while True:
        decided = moves.decide(run, pools, request, made=made, state_machine=step.state_machine, deployment=deployment)
        if decided.call is None or (made and context.get_remaining_time_in_millis() < RESERVED_MILLIS):
            break
        call = decided.call
        answer = launch_calls.make(decided, launch_spec(decided.settings, decided.run.launch, deployment))
        if answer.grouped:
            grouped.add(answer.grouped)
        keep(moves.launched(answer.answer), decided.records, call.token, step.state_machine)
        read = moves.read(decided, pools, answer.answer)
        if isinstance(answer.answer, FleetAnswer):  # the run's version in the region, for its later fleets and its end
            read = replace(read, run=template_versions.remember(read.run, answer.answer.template_version))
        for index, reason in read.found_empty:
            capacity_cache.remember_full(pools[index].key, request_id=decided.records.request_id, reason=reason)
        log_answer(call, answer.answer)
        run, made = read.run, made + 1
    tidy_groups(grouped, run, pools, decided.records.request_id, deployment)
    # A run the state machine ends after this step (no task follows) deletes its launch template
    # versions now; one that goes on keeps them for its next fleets.
    ending = template_versions.ends_after(run, request, plan.market, plan.scoring)
    ended, wait = exhaustion.step_end(run, request, step_attempts(run, decided.records.request_id), plan.market, plan.reservations)
    if wait is not None:
        run_store.save_wait(decided.records.owner_id, wait)
    return (launch_calls.retire(ended) if ending else ended).model_dump(mode="json", exclude_none=True)


def log_answer(call: moves.LaunchCall, answer) -> None:
    launched = moves.launched(answer)
    if call.api == moves.CREATE_FLEET:
        logger.info("fleet answered", extra={
            "region": call.region, "pools": len(call.pools), "target": call.target, "launched": len(launched),
            "failure": answer.failure.reason if answer.failure else None,
        })
        return
    [(_, pool)] = call.pools
    logger.info("batch answered", extra={"pool": pool.key, "batch": call.target, "outcome": answer.outcome, "launched": len(launched)})


def tidy_groups(grouped: set[str], run: Run, pools: list[Pool], request_id: str, deployment: str) -> None:
    """A cluster group is made before the launch that may fill it; in a region the run leaves, the
    groups that got no instance are deleted now, so groups stay only where the gang launched (a
    rollback or a teardown deletes those). Never fails the step: a group left behind only counts
    toward the region's placement-group quota, and the request's teardown tries it again."""
    staying = pools[run.cursor].region if run.next in ("launch", "refresh") and run.cursor < len(pools) else None
    for region in sorted(grouped - {staying}):
        try:
            placement_groups.remove_empty(region, deployment, {request_id})
        except (ClientError, TransientAwsError) as error:
            logger.warning("empty cluster groups not deleted", extra={"region": region, "error": str(error)})


def keep(instances: list[Instance], records: Records, token: str, state_machine: str) -> None:
    """Recorded before the step returns: if this fails the step is retried with the same tokens."""
    if not instances:
        return
    instances_table.record_launched(
        instances, request_id=records.owner_id, client_token=token, maintain=records.maintain, replaces=records.replaces,
        lifetime_expires_at=records.expires_at,
    )
    if records.replaces:
        instances_table.mark_replaced(records.replaces, [i.instance_id for i in instances])
    if records.expires_at:
        # With the records, so no instance of the request runs unguarded: a failure here retries
        # the step, whose launches answer with the same instances, and the schedule's name is
        # the request's (or, at or past the expiry, the launch's round), so it is made once
        # however often this runs.
        launch = lifetime.late_round(records.expires_at, clock.now(), token)
        if launch is None:
            if schedules.schedule_expiry(records.owner_id, records.expires_at, state_machine):
                logger.info("lifetime scheduled", extra={"expires_at": records.expires_at})
        else:
            join_late_round(records.owner_id, records.expires_at, state_machine, launch)
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


def launch_spec(settings: Settings, setup: RegionLaunch, deployment: str) -> ec2.LaunchSpec:
    """What every instance of the step is launched with; the call adds its subnet, group and reservation choice."""
    return ec2.LaunchSpec(
        image_id=setup.image_id,
        request_id=settings.owner_id,
        deployment=deployment,
        user_tags=settings.tags,
        security_group_ids=(setup.security_group_id,) if setup.security_group_id else (),
        instance_profile_arn=os.environ.get(ENV_INSTANCE_PROFILE_ARN) or None,
        user_data=render_user_data(
            region=os.environ.get("AWS_REGION", LOCAL_HOME_REGION),
            bucket=os.environ[ENV_STARTUP_BUCKET],
            image=settings.image,
            model_id=settings.model_id,
        ),
        root_volume_gib=setup.root_volume_gib,
        kms_key_id=os.environ.get(ENV_EBS_KMS_KEY_ARN) or None,
    )


def step_attempts(run: Run, request_id: str) -> list[Attempt]:
    """The step's attempts added to the run's log; the whole log when the run is exhausted (its cause lists them)."""
    if run.step_attempts:
        run_store.save_attempts(request_id, run.step_attempts)
    return run_store.load_attempts(request_id, run.attempts_total) if run.next == "exhausted" else []


def finish_step(run: Run, request: ResolvedRequest, market: MarketName, plan: PlanRef | None = None) -> Run:
    """What PrepareRegion does at the end of its step, as LaunchBatch does: log its attempts, explain a stop."""
    seen = plan.reservations if plan is not None else []
    ending = plan is not None and template_versions.ends_after(run, request, market, plan.scoring)
    ended, wait = exhaustion.step_end(run, request, step_attempts(run, request.request_id), market, seen)
    if wait is not None:
        run_store.save_wait(request.owner_id, wait)
    return launch_calls.retire(ended) if ending else ended
