"""ReportResult: the run's answer, built once at the end from the state and the attempt log."""

from __future__ import annotations

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from gpufill.adapters import clock, launch_calls, run_store
from gpufill.handlers.events import ReportEvent
from gpufill.constants import METRIC_RUNS_FINISHED, METRIC_TIME_TO_FILL
from gpufill.handlers.observability import count, logger, metrics, tracer, transient_aws_errors
from gpufill.policy.result import fill_result, time_to_fill


@logger.inject_lambda_context(correlation_id_path="request.request_id")
@tracer.capture_lambda_handler
@metrics.log_metrics
@transient_aws_errors
def handler(event: dict, context: LambdaContext) -> dict:
    step = parse(event=event, model=ReportEvent)
    launch_calls.retire(step.run)  # the run ends: its launch template versions are no longer needed
    attempts = run_store.load_attempts(step.request.request_id, step.run.attempts_total)
    count(METRIC_RUNS_FINISHED, 1, outcome=step.status)  # the dashboard's runs by outcome
    seconds = time_to_fill(step.run, clock.epoch())
    if seconds is not None:
        count(METRIC_TIME_TO_FILL, seconds, unit="Seconds")
    return fill_result(step.request, step.run, attempts, step.status)
