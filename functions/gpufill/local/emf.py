"""Powertools' metrics from the in-process handlers: kept by the engine, never printed.

On Lambda a handler's stdout is its log stream, and CloudWatch reads the metrics (EMF
documents) out of it. In-process, stdout is the CLI's: a metrics document printed there would
break `--json`. Powertools prints one even with metrics disabled once a metric gathers 100
values, so the print itself is redirected, not the setting relied on.
"""

from __future__ import annotations

import json
import threading
from unittest import mock


class EmbeddedMetrics:
    def __init__(self) -> None:
        self.documents: list[dict] = []
        self._lock = threading.Lock()

    def patches(self):
        from contextlib import ExitStack

        from aws_lambda_powertools.metrics import base
        from aws_lambda_powertools.metrics.provider.cloudwatch_emf import cloudwatch

        # A handler's metrics (log_metrics) print from the provider; a one-off metric with its own
        # dimensions (single_metric) prints from the base module: both are kept, never on stdout.
        stack = ExitStack()
        stack.enter_context(mock.patch.object(cloudwatch, "print", self._keep, create=True))
        stack.enter_context(mock.patch.object(base, "print", self._keep, create=True))
        return stack

    def _keep(self, text: str = "", *args, **kwargs) -> None:
        try:
            document = json.loads(text)
        except (TypeError, ValueError):
            document = {"text": str(text)}
        with self._lock:
            self.documents.append(document)
