"""Powertools instances shared by every handler in a container."""

from aws_lambda_powertools import Logger, Metrics, Tracer

from gpufill.constants import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


def transient_aws_errors(handler):
    """Turn an AWS failure a later try may not meet (throttling, 5xx, timeouts) into TransientAwsError.

    The state machine retries that one name with backoff and jitter; any other error reaches
    the state's Catch and ends in a documented Fail state, never under a raw error name.
    """
    import functools

    from gpufill.adapters.aws import TransientAwsError, is_transient

    @functools.wraps(handler)
    def wrapped(event, context):
        try:
            return handler(event, context)
        except TransientAwsError:
            raise
        except Exception as error:
            if is_transient(error):
                raise TransientAwsError(f"{type(error).__name__}: {error}") from error
            raise

    return wrapped
