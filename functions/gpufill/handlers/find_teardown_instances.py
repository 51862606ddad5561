"""FindTeardownInstances: what a teardown would terminate (records confirmed live in EC2) and what it refuses."""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from datetime import timedelta

from gpufill.adapters import approvals, clock, executions, instances_table, inventory, late_rounds, managed_instances, run_store
from gpufill.constants import LIFETIME_ATTRIBUTE
from gpufill.handlers import refill_restarts
from gpufill.handlers.events import TeardownListingEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.request import MAX_TEARDOWN_IDS
from gpufill.models.teardown import LiveInstance, TeardownTarget
from gpufill.policy import answers, approval, lifetime, teardown

# How much later than this listing the round's approval may still be asked (its step retried).
APPROVAL_ASKED_WITHIN_SECONDS = 300


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=TeardownListingEvent)
    request = step.request
    target = TeardownTarget(request_id=request.target_request_id, instance_ids=request.instance_ids, all=request.all)
    listing = target
    late = None
    marked: set[str] = set()  # the requests whose maintenance this teardown stopped
    if target.all:
        # Every region this deployment ever launched in, every record, every tagged instance.
        # Refills pause before the records are read and each maintained request is marked before
        # the pause lifts: a refill running now either recorded its replacement before this
        # listing (it is listed) or reads the pause or its request's mark after recording it, and
        # terminates what it launched (handlers/launch_batch.py).
        run_store.pause_maintenance(by=request.request_id)
        try:
            found = inventory.gather(request_id=None, request_regions=request.regions, everything=True, now=clock.now())
            for owner in teardown.requests_recorded(found.records, maintained_only=True):
                run_store.end_maintenance(owner, by=request.request_id)
                marked.add(owner)
        finally:
            run_store.resume_maintenance(by=request.request_id)
        records, live, deployment = found.records, found.live, found.deployment
    elif target.request_id is not None:
        # Maintenance ends before the request's records are read: a refill running now either
        # recorded its instances before this (they are listed below) or reads this mark after
        # recording them, and terminates what it launched (handlers/launch_batch.py).
        run_store.end_maintenance(target.request_id, by=request.request_id)
        marked.add(target.request_id)
        # A late round of the spend guard lists now: a launch recorded from here on opens the next
        # round (due once this one's approval can no longer wait), never a second one asking at once.
        late = lifetime.late_round_of(target.request_id, request.request_id) if request.trigger else None
        if late is not None:
            until = clock.now() + timedelta(seconds=request.approval_timeout_seconds + APPROVAL_ASKED_WITHIN_SECONDS)
            late_rounds.mark_asked(target.request_id, number=late, until=until.isoformat(timespec="seconds"))
        # Every region the request could have launched in: an instance tagged for it whose record
        # was never written is still its own (and is recorded now).
        found = inventory.gather(
            request_id=target.request_id, request_regions=request.regions, everything=False, now=clock.now()
        )
        records, live, deployment = found.records, found.live, found.deployment
    else:
        with managed_instances.retryable("looking up the instances named"):
            named = list(target.instance_ids or [])
            for owner in teardown.requests_recorded(instances_table.records_by_ids(named)):
                run_store.end_maintenance(owner, by=request.request_id)
                marked.add(owner)
            # Read again after the marks: a refill replacing a named instance either wrote its
            # replacement on that record before this read (it is listed with the ids given) or
            # reads the mark after, and terminates what it launched.
            records = instances_table.records_by_ids(named)
            extra = teardown.replacements(named, records)
            while extra and len(named) < MAX_TEARDOWN_IDS:
                extra = extra[: MAX_TEARDOWN_IDS - len(named)]
                named += extra
                records.update(instances_table.records_by_ids(extra))
                extra = teardown.replacements(named, records)
            listing = target.model_copy(update={"instance_ids": named})
            live = _live(records)
        deployment = managed_instances.deployment()
    allowed, refused = teardown.select(listing, records, live, deployment)
    if allowed:
        # One pending teardown per instance: what another one already asks about is refused, naming it.
        others = [i for i in approvals.all_items(pending_only=True) if i.get("execution_name") != request.request_id]
        waiting = answers.covering([i.instance_id for i in allowed], others, clock.now())
        allowed, refused = teardown.hold_for_pending(allowed, refused, waiting)
    result = teardown.found(
        request_id=request.request_id, target=target, requested_by=request.requested_by, allowed=allowed, refused=refused
    )
    if late is not None and not allowed:
        late_rounds.mark_answered(target.request_id, number=late)  # it asks nobody: the next may ask soon
    if request.trigger:
        # The spend guard asked: the approval says so, and when the request expired.
        expiries = sorted(r[LIFETIME_ATTRIBUTE] for r in records.values() if isinstance(r, dict) and r.get(LIFETIME_ATTRIBUTE))
        result = result.model_copy(update={"trigger": request.trigger, "expired_at": expiries[0] if expiries else None})
    logger.info(
        "teardown candidates",
        extra={"allowed": [i.instance_id for i in allowed], "refused": [r.model_dump() for r in refused]},
    )
    metrics.add_metric(name="TeardownRefusedInstances", unit="Count", value=len(refused))
    # Asking to end a request's instances ends its maintenance first: a reclaim during the
    # approval, or a refill waiting for capacity, launches no replacement the approval never saw.
    if teardown.gives_back_maintenance(allowed, refused):
        # Asking nobody, it ends here: its marks go as a rejection's do, through the same code, so
        # when the teardown it deferred to was answered meanwhile, this ending restarts the refills held.
        outcome = refill_restarts.give_back(sorted(marked), by=request.request_id,
                                            state_machine=executions.state_machine_of(step.execution_arn))
        if any(isinstance(runs, list) and runs for runs in outcome.values()):
            said = approval.maintenance_note(outcome)
            result = result.model_copy(update={"note": f"{result.note} {said}." if result.note else f"{said}."})
    else:
        for owner in teardown.maintenance_to_stop(target, allowed):
            run_store.end_maintenance(owner, by=request.request_id)
    if target.request_id is not None and run_store.mark_wait_stopped(target.request_id, by=request.request_id):
        # Asking to end a request's instances ends its wait for more, whatever the approval says.
        said = "The request was waiting for capacity: its wait ends at its next try, and nothing more is launched."
        result = result.model_copy(update={"note": f"{result.note} {said}" if result.note else said})
    return result.model_dump(mode="json")


def _live(records: dict[str, dict]) -> dict[str, LiveInstance]:
    """The recorded instances among the ids given, as EC2 sees them (ids without a record are refused unseen)."""
    by_region: dict[str, list[str]] = {}
    for instance_id, record in records.items():
        by_region.setdefault(record["region"], []).append(instance_id)
    live: dict[str, LiveInstance] = {}
    for region, ids in sorted(by_region.items()):
        live.update(managed_instances.by_ids(region, sorted(ids)))
    return live
