"""PlanNextTry and StartNextTry: the wait_for_capacity loop around an exhausted market.

"plan" runs when a try ended short: give up past the deadline (CAPACITY_WAIT_EXPIRED, listing
every instance kept), or say how long to wait and whether the next try belongs to a new
execution. "start" runs after the Wait state: a teardown asked meanwhile ends the wait there,
before anything more is launched; otherwise it says whether the try reads the regions' facts
again or ranks by the ones the run holds (policy/waiting.next_try_route). Both keep the request's wait item current for `gpufill status`.
"""

from __future__ import annotations

import os

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock, executions, launch_calls, run_store
from gpufill.constants import DEFAULT_TRIES_PER_EXECUTION, ENV_TRIES_PER_EXECUTION
from gpufill.handlers.events import WaitEvent
from gpufill.handlers.observability import logger, metrics, tracer, transient_aws_errors
from gpufill.models.run import Run
from gpufill.policy import waiting


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=WaitEvent)
    if step.phase == "settle":
        return settle(step)
    run = plan(step) if step.phase == "plan" else start(step)
    return run.model_dump(mode="json", exclude_none=True)


def plan(step: WaitEvent) -> Run:
    request, run = step.request, step.run
    assert run.wait is not None
    move, wait = waiting.next_try(
        run.wait,
        now=clock.epoch(),
        spread=waiting.jitter(request.request_id, run.wait.tries),
        tries_per_execution=int(os.environ.get(ENV_TRIES_PER_EXECUTION, DEFAULT_TRIES_PER_EXECUTION)),
        regions=len(request.regions),
        attempts_total=run.attempts_total,
        markets=2 if request.market == "spot-then-on-demand" else 1,
    )
    run = run.model_copy(update={"wait": wait, "next": move, "cause": None})
    if move == "expired":
        attempts = run_store.load_attempts(request.request_id, run.attempts_total)
        run = run.model_copy(update={"cause": waiting.expired_cause(run, request, attempts)})
        metrics.add_metric(name="CapacityWaitsExpired", unit="Count", value=1)
        run = launch_calls.retire(run)  # CAPACITY_WAIT_EXPIRED ends the run: its versions go now
    _show(request.request_id, step.execution, run, "expired" if move == "expired" else "waiting")
    logger.info("capacity wait", extra={"move": move, "tries": wait.tries, "delay": wait.delay_seconds})
    return run


def start(step: WaitEvent) -> Run:
    request, run = step.request, step.run
    assert run.wait is not None
    view = run_store.load_wait(request.request_id) or {}
    if request.refill is not None and not view.get("stopped_by"):
        # A refill waits under its own name; a teardown of the request it refills ends it too.
        stopped = run_store.maintenance_stopped_by(request.owner_id)
        if stopped:
            view = {**view, "stopped_by": stopped}
            run_store.mark_wait_stopped(request.request_id, by=stopped)
    if view.get("stopped_by"):
        run = launch_calls.retire(run.model_copy(update={"next": "stopped"}))  # the run ends here
        _show(request.request_id, step.execution, run, "stopped")
        logger.info("capacity wait ended by a teardown", extra={"teardown": view["stopped_by"]})
        return run
    handover = run.next == "handover"
    wait = waiting.begin_try(run.wait, handover=handover, attempts_total=run.attempts_total)
    route, wait = waiting.next_try_route(wait, now=clock.epoch(), handover=handover)
    # A try that reads the facts again fixes each region's launch parameters again too.
    run = run.model_copy(update={"wait": wait, "next": route, **({} if route == "rank" else {"prepared": []})})
    if handover:
        successor = waiting.successor_name(request.request_id, wait.generation)
        run = run.model_copy(update={"wait": wait.model_copy(update={"successor": successor})})
        _show(request.request_id, successor, run, "trying")
    else:
        _show(request.request_id, step.execution, run, "trying")
    return run


def settle(step: WaitEvent) -> dict:
    """The successor's StartExecution failed: is it running this request anyway?"""
    run = step.run
    assert run.wait is not None and run.wait.successor is not None
    successor = run.wait.successor
    found = executions.describe(step.state_machine, successor)
    outcome = waiting.handover(step.carried or {}, (found or {}).get("input"), exists=found is not None)
    logger.info("hand-over settled", extra={"successor": successor, "outcome": outcome, "error": (step.failure or {}).get("Error")})
    if outcome == "continued":
        return {"next": "continued"}
    metrics.add_metric(name="HandOversFailed", unit="Count", value=1)
    return {"next": "handover_failed", "failure": waiting.handover_failure(outcome, successor, step.failure, (found or {}).get("started"))}


def _show(request_id: str, execution: str, run: Run, phase: str) -> None:
    wait = run.wait
    assert wait is not None
    run_store.save_wait(
        request_id,
        {
            "phase": phase,
            "deadline": wait.deadline,
            "next_try_at": wait.next_try_at if phase == "waiting" else None,
            "tries": wait.tries,
            "execution": execution,
            "launched": run.launched,
            "updated_at": clock.iso_now(),
        },
    )
