"""A run's execution as the command line reads it, wherever it ran: ExecutionView (the local engine's
or Step Functions' description of it) and the readers of its history every view shares."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ExecutionView:
    """What the summary needs of a finished execution, wherever it ran. `metrics` and
    `notifications` are known only on the local engine."""

    name: str
    arn: str
    status: str
    output: Any = None
    error: str | None = None
    cause: Any = None
    history: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    notifications: list[dict] = field(default_factory=list)

    @classmethod
    def from_aws(cls, described: dict, history: list[dict]) -> ExecutionView:
        return cls(
            name=described["name"],
            arn=described["executionArn"],
            status=described["status"],
            output=_json(described.get("output")),
            error=described.get("error"),
            cause=_json(described.get("cause")),
            history=history,
        )

    def summary(self) -> dict:
        """The --json document of `run --watch`, `watch` and `up`: simulate's shape without metrics."""
        execution: dict[str, Any] = {"name": self.name, "arn": self.arn, "status": self.status}
        if self.status == "SUCCEEDED":
            execution["output"] = self.output
        else:
            execution["error"], execution["cause"] = self.error, self.cause
        return {"execution": execution}


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def json_object(text: str | None) -> dict:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def event_details(event: dict, kind: str) -> dict:
    return event.get(kind) or {}


def state_output(event: dict) -> dict:
    try:
        return json.loads(event_details(event, "stateExitedEventDetails").get("output") or "{}")
    except json.JSONDecodeError:
        return {}


def step_attempts(run: dict) -> list[dict]:
    """The attempts one LaunchBatch step made: `step_attempts` when the run carries it, else the
    last of the run's `attempts` (the run state before step_attempts existed)."""
    if isinstance(run.get("step_attempts"), list):
        return run["step_attempts"]
    attempts = run.get("attempts")
    return attempts[-1:] if isinstance(attempts, list) else []


def plans_from(history: list[dict]) -> list[dict]:
    plans = []
    for event in history:
        if event["type"] == "TaskStateExited":
            name = event_details(event, "stateExitedEventDetails").get("name")
            if name in ("RankPools", "RankKnownPools", "RankOnDemandPools"):
                plans.append(state_output(event).get("plan") or {})
            elif name == "RankFromWarmFacts" and (state_output(event).get("warm") or {}).get("warm") is True:
                plans.append(state_output(event)["warm"].get("plan") or {})
    return plans


def tries_waited(history: list[dict]) -> int | None:
    """wait_for_capacity: the number of the try that ended the run (None if it never waited)."""
    tries = None
    for event in history:
        if event["type"] == "TaskStateExited" and event_details(event, "stateExitedEventDetails").get("name") == "StartNextTry":
            tries = ((state_output(event).get("run") or {}).get("wait") or {}).get("tries", tries)
    return tries
