"""ValidateRequest: the first state. A bad request ends here, before any EC2 call."""

from __future__ import annotations

import json
import os
from datetime import datetime

from aws_lambda_powertools.utilities.parser import ValidationError, parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock, regions_config
from gpufill.constants import LOCAL_HOME_REGION
from gpufill.handlers.events import ValidateEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.request import ResolvedRequest, Request, describe_problems, normalise, not_an_object
from gpufill.models.run import Run
from gpufill.policy import execution_names, fill, lifetime, waiting


@logger.inject_lambda_context(correlation_id_path="request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=ValidateEvent)
    if isinstance(step.input, dict) and CONTINUATION in step.input:
        return _continued(step.request_id, step.input[CONTINUATION])
    if not isinstance(step.input, dict):
        return _invalid(step.request_id, not_an_object(step.input), changes="launched")
    # A bad teardown or status would have changed nothing, not launched nothing: say so.
    changes = "changed" if step.input.get("action") in ("teardown", "status") else "launched"
    # Kept for the executions gpufill starts itself (a continued wait, a lifetime's teardown, a refill).
    problem = execution_names.reserved_problem(step.request_id, step.input)
    if problem is not None:
        return _invalid(step.request_id, [{"field": "(execution name)", "problem": problem}], changes=changes)
    try:
        request = parse(event=step.input, model=Request)
    except ValidationError as error:
        return _invalid(step.request_id, describe_problems(error), changes=changes)
    default_regions = regions_config.load().regions if request.regions is None else []
    home = os.environ.get("AWS_REGION", LOCAL_HOME_REGION)
    normalised = normalise(request, request_id=step.request_id, default_regions=default_regions, home_region=home)
    if normalised.max_lifetime_seconds is not None:
        # Fixed here, once: the schedule, every record, the result and status all show this moment.
        expiry = lifetime.expires_at(clock.now(), normalised.max_lifetime_seconds)
        normalised = normalised.model_copy(update={"expires_at": expiry})
    logger.info("request accepted", extra={"request": normalised.model_dump()})
    run = fill.start(normalised).model_copy(update={"started_at": clock.epoch()})
    if normalised.wait_for_capacity_seconds is not None:
        # The deadline is fixed here, once: every later try and every continued execution keeps it.
        # So is the backoff: the request's, else this deployment's.
        first, cap = waiting.backoff(
            normalised.wait_first_delay_seconds, normalised.wait_max_delay_seconds, waiting.deployment_backoff(os.environ)
        )
        run = run.model_copy(
            update={"wait": waiting.begin(normalised.wait_for_capacity_seconds, clock.epoch(), first_delay=first, max_delay=cap)}
        )
    return {
        "valid": True,
        "request": normalised.model_dump(mode="json"),
        "run": run.model_dump(mode="json", exclude_none=True),
    }


# The input of a continued execution `<request>-c<n>` (ContinueAsNew): the accepted request and
# the run as its predecessor left it. Whoever may start executions could write one by hand, so
# the request passes the same checks again and the name must be the one its run hands over to.
CONTINUATION = waiting.CONTINUATION


def _continued(execution_name: str, carried: object) -> dict:
    problem = "must be the request and run a waiting execution hands over to its successor"
    try:
        request = ResolvedRequest.model_validate(carried["request"])  # type: ignore[index]
        run = Run.model_validate(carried["run"]).model_copy(update={"next": "prepare"})  # type: ignore[index]
    except (TypeError, KeyError, ValidationError):
        return _invalid(execution_name, [{"field": CONTINUATION, "problem": problem}], changes="launched")
    try:
        parse(event=user_fields(request), model=Request)
    except ValidationError as error:
        return _invalid(execution_name, describe_problems(error), changes="launched")
    expected = waiting.successor_name(request.request_id, run.wait.generation) if run.wait else None
    if execution_name != expected:
        return _invalid(
            execution_name,
            [{"field": CONTINUATION, "problem": f"{problem}; this execution's name should be {expected!r}"}],
            changes="launched",
        )
    logger.info("continued", extra={"request_id": request.request_id, "tries": run.wait.tries if run.wait else None})
    carried_on = {"valid": True, "request": request.model_dump(mode="json"), "run": run.model_dump(mode="json", exclude_none=True)}
    if run.capacity_block:
        # A Capacity Block bought before the hand-over: the successor launches into it (WhichAction),
        # never looks for or buys another.
        carried_on["block"] = held_block(run.capacity_block)
    return carried_on


def held_block(held: dict) -> dict:
    """The block a run holds, as PlanBlockLaunch reads it after a purchase: the reservation, and
    the offering's hours and minutes (the hourly price shown spreads its fee over them)."""
    lasts = _moment(held["end"]) - _moment(held["start"])
    hours, minutes = divmod(int(lasts.total_seconds() // 60), 60)
    return {"reservation": held, "offering": {"duration_hours": hours, "duration_minutes": minutes}}


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def user_fields(request: ResolvedRequest) -> dict:
    """The request as a user would have written it, for the same checks again."""
    fields = request.model_dump(
        include={
            "action", "instance_types", "count", "batch_max", "launch_mode", "market", "on_demand_strategy",
            "origin_region", "regions", "tags", "model_id", "image", "root_volume_gib", "scoring", "facts",
        }
    )
    if request.max_lifetime_seconds is not None:
        fields["max_lifetime"] = f"PT{request.max_lifetime_seconds}S"
    if request.wait_for_capacity_seconds is not None:
        fields["wait_for_capacity"] = {"deadline": f"PT{request.wait_for_capacity_seconds}S"}
        for seconds, field in ((request.wait_first_delay_seconds, "first_delay"), (request.wait_max_delay_seconds, "max_delay")):
            if seconds is not None:
                fields["wait_for_capacity"][field] = f"PT{seconds}S"
    if request.capacity_block is not None:
        block = request.capacity_block
        fields["capacity_block"] = {
            "max_upfront_usd": block.max_upfront_usd, "duration_hours": block.duration_hours,
            "start_within": f"PT{block.start_within_seconds}S",
        }
    return fields


def _invalid(request_id: str, problems: list[dict[str, str]], *, changes: str) -> dict:
    fields = ", ".join(p["field"] for p in problems)
    cause = {
        "error": "InvalidRequest",
        "message": f"The request has {len(problems)} problem(s): {fields}. Nothing was {changes}.",
        "request_id": request_id,
        "fields": problems,
    }
    logger.warning("request rejected", extra={"fields": problems})
    metrics.add_metric(name="InvalidRequests", unit="Count", value=1)
    return {"valid": False, "cause": json.dumps(cause)}
