"""Counts what a local run did (API calls, Lambda invocations, transitions) and models how long it would take."""

from __future__ import annotations

import json
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

LATENCY_MODEL = json.loads((Path(__file__).parent / "latency_model.json").read_text())


@dataclass
class Invocation:
    handler: str
    calls: list[str] = field(default_factory=list)


class CallLog:
    def __init__(self) -> None:
        self.invocations: list[Invocation] = []
        self.calls: list[str] = []
        self.wait_seconds: list[float] = []
        self._current = threading.local()
        self._lock = threading.Lock()
        self.faults = None  # the engine's Faults, whose injections the metrics count

    def mark(self) -> tuple[int, int, int, int]:
        injected = self.faults.total if self.faults is not None else 0
        return len(self.invocations), len(self.calls), len(self.wait_seconds), injected

    def waited(self, seconds: float) -> None:
        with self._lock:
            self.wait_seconds.append(seconds)

    @contextmanager
    def invocation(self, handler: str):
        record = Invocation(handler)
        with self._lock:
            self.invocations.append(record)
        previous = getattr(self._current, "record", None)
        self._current.record = record
        try:
            yield record
        finally:
            self._current.record = previous

    @contextmanager
    def outside_runs(self):
        """Calls made here belong to no run (StartRefill answering EventBridge): a run's metrics leave them out."""
        self._current.outside = True
        try:
            yield
        finally:
            self._current.outside = False

    def patches(self):
        from moto.core.responses import BaseResponse

        original = BaseResponse.call_action
        log = self

        def call_action(response):
            service = response.service_name or "unknown"
            if service in ("ec2", "dynamodb", "ssm", "s3", "sns"):
                log._record(f"{service}:{response._get_action()}")
            return original(response)

        return mock.patch.object(BaseResponse, "call_action", call_action)

    def _record(self, api: str) -> None:
        if getattr(self._current, "outside", False):
            return
        with self._lock:
            self.calls.append(api)
        record = getattr(self._current, "record", None)
        if record is not None:
            record.calls.append(api)

    def metrics_since(self, marker: tuple[int, int, int, int], history: list[dict]) -> dict:
        invocations = self.invocations[marker[0] :]
        calls = self.calls[marker[1] :]
        ec2 = Counter(c.split(":", 1)[1] for c in calls if c.startswith("ec2:"))
        transitions = sum(1 for e in history if e["type"].endswith("StateEntered"))
        return {
            "state_transitions": transitions,
            "lambda_invocations": len(invocations),
            "ec2_calls": dict(sorted(ec2.items())),
            "run_instances_calls": ec2.get("RunInstances", 0),
            "create_fleet_calls": ec2.get("CreateFleet", 0),
            "launch_calls": ec2.get("RunInstances", 0) + ec2.get("CreateFleet", 0),
            "history_events": len(history),
            "largest_state_bytes": largest_state_bytes(history),
            "faults_injected": (self.faults.total if self.faults is not None else 0) - marker[3],
            "modelled_seconds": round(
                modelled_seconds(invocations, transitions) + sum(self.wait_seconds[marker[2] :]), 3
            ),
            "fill_seconds": fill_seconds(invocations, history),
        }


# Where a history event carries a state's data: its input or output (JSON text).
_DATA_FIELDS = (
    ("stateEnteredEventDetails", "input"),
    ("stateExitedEventDetails", "output"),
    ("lambdaFunctionScheduledEventDetails", "input"),
    ("lambdaFunctionSucceededEventDetails", "output"),
    ("taskScheduledEventDetails", "parameters"),
    ("taskSucceededEventDetails", "output"),
    ("executionStartedEventDetails", "input"),
    ("executionSucceededEventDetails", "output"),
)


def largest_state_bytes(history: list[dict]) -> int:
    """The largest input, output or task payload of the run, in UTF-8 bytes (Step Functions' unit)."""
    largest = 0
    for event in history:
        for details, key in _DATA_FIELDS:
            text = event.get(details, {}).get(key)
            if text:
                largest = max(largest, len(text.encode()))
    return largest


# The launch step: a run's instances are all launched once its last invocation ends.
LAUNCH_HANDLER, LAUNCH_STATE = "launch_batch", "LaunchBatch"


def fill_seconds(invocations: list[Invocation], history: list[dict]) -> float | None:
    """Modelled time from the start until the last launch step ended, Wait states left out:
    the time a run spent getting its capacity, without the boot and model-server checks after
    it (what the benchmark compares with strategies that only launch). None when nothing launched."""
    last = max((n for n, i in enumerate(invocations) if i.handler == LAUNCH_HANDLER), default=None)
    exits = [n for n, e in enumerate(history) if e["type"].endswith("StateExited")
             and e.get("stateExitedEventDetails", {}).get("name") == LAUNCH_STATE]
    if last is None or not exits:
        return None
    transitions = sum(1 for e in history[: exits[-1]] if e["type"].endswith("StateEntered"))
    return round(modelled_seconds(invocations[: last + 1], transitions), 3)


def modelled_seconds(invocations: list[Invocation], transitions: int) -> float:
    """Sequential steps add up; the branches of a parallel Map cost only the slowest one."""
    model = LATENCY_MODEL

    def cost(invocation: Invocation) -> float:
        api = model["api_seconds"]
        return model["lambda_invocation_seconds"] + sum(api.get(c, api["default"]) for c in invocation.calls)

    parallel = [i for i in invocations if i.handler in model["parallel_handlers"]]
    sequential = [i for i in invocations if i.handler not in model["parallel_handlers"]]
    total = transitions * model["transition_seconds"] + sum(cost(i) for i in sequential)
    if parallel:
        total += max(cost(i) for i in parallel) + model["spot_advisor_fetch_seconds"]
    return total
