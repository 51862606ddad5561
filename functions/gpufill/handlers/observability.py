"""Powertools instances shared by every handler in a container."""

from aws_lambda_powertools import Logger, Metrics, Tracer

from gpufill.constants import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)
