"""Powertools instances shared by every handler in a container."""

from aws_lambda_powertools import Logger, Metrics, Tracer

import os

from gpufill.constants import (
    ENV_DEPLOYMENT,
    METRIC_APPROVALS_NOT_PUBLISHED,
    METRIC_DIMENSION_DEPLOYMENT,
    METRICS_NAMESPACE,
    SERVICE_NAME,
)

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


def transient_aws_errors(handler):
    """Turn an AWS failure a later try may not meet (throttling, 5xx, timeouts) into TransientAwsError.

    The state machine retries that one name with backoff and jitter; any other error reaches
    the state's Catch and ends in a documented Fail state, never under a raw error name.
    """
    import functools

    from gpufill.adapters import probe
    from gpufill.adapters.aws import TransientAwsError, is_transient

    @functools.wraps(handler)
    def wrapped(event, context):
        tag_deployment()
        if probe.requested(event, context):
            # `gpufill doctor --probe`: the function's own calls with DryRun, never the handler.
            return probe.answer(event, context)
        try:
            return handler(event, context)
        except TransientAwsError:
            raise
        except Exception as error:
            if is_transient(error):
                raise TransientAwsError(f"{type(error).__name__}: {error}") from error
            raise

    return wrapped


def tag_deployment() -> None:
    """Every metric of this invocation carries the deployment: the alarms and the dashboard of one
    deployment read its own numbers only. Set per invocation, not at import: the local engine runs
    several deployments' functions in one process."""
    deployment = os.environ.get(ENV_DEPLOYMENT) or "unknown"
    if metrics.default_dimensions.get(METRIC_DIMENSION_DEPLOYMENT) != deployment:  # set again, Powertools warns
        metrics.set_default_dimensions(**{METRIC_DIMENSION_DEPLOYMENT: deployment})


def count(name: str, value: float, unit: str = "Count", **dimensions: str) -> None:
    """One metric with its own dimensions (a run's outcome, a pool's region and type), printed at
    once: the handler's other metrics keep only the deployment's dimension."""
    from aws_lambda_powertools.metrics import single_metric

    with single_metric(name=name, unit=unit, value=value, namespace=METRICS_NAMESPACE) as metric:
        metric.add_dimension(name="service", value=SERVICE_NAME)
        metric.add_dimension(name=METRIC_DIMENSION_DEPLOYMENT, value=os.environ.get(ENV_DEPLOYMENT) or "unknown")
        for key, text in dimensions.items():
            metric.add_dimension(name=key, value=text)


def approval_not_published(execution_name: str, why: str) -> None:
    """The approval topic refused an approval request: logged and counted (alarmed), and the run
    goes on waiting, so the approval stays answerable with gpufill approve|reject."""
    logger.error("approval request not published: the approval waits; gpufill status lists it, gpufill approve|reject answer it",
                 extra={"execution": execution_name, "error": why})
    metrics.add_metric(name=METRIC_APPROVALS_NOT_PUBLISHED, unit="Count", value=1)
