"""Executions of a deployment's state machine on the local engine: started and followed to their
end (run, follow), their result (Execution), and every running one stopped when the engine closes."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

DEFAULT_TIMEOUT_SECONDS = 600.0


@dataclass
class Execution:
    name: str
    arn: str
    status: str
    output: Any = None
    error: str | None = None
    cause: Any = None
    history: list[dict] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)
    # A teardown's approval item as the run left it, and what the run published to the approval topic.
    approval: dict | None = None
    notifications: list[dict] = field(default_factory=list)
    # wait_for_capacity: the executions this one continues (`<request>-c<n>`), oldest first.
    continued_from: list[Execution] = field(default_factory=list)

    def summary(self) -> dict:
        execution: dict[str, Any] = {"status": self.status}
        if self.status == "SUCCEEDED":
            execution["output"] = self.output
        else:
            execution["error"], execution["cause"] = self.error, self.cause
        summary = {"execution": execution, "metrics": self.metrics}
        if self.approval:  # a teardown asked a person: what was asked and how it was answered
            keys = ("status", "requested_by", "deadline", "decision", "approver", "decided_reason", "decided_at")
            summary["approval"] = {k: self.approval[k] for k in keys if self.approval.get(k) is not None}
            summary["approval"]["published"] = [n["subject"] for n in self.notifications]
        return summary

    def entered(self) -> list[str]:
        """State names in the order they were entered."""
        return [e["stateEnteredEventDetails"]["name"] for e in self.history if "stateEnteredEventDetails" in e]


class Executions:
    """The engine's part that runs and follows executions (a part of LocalEngine: it answers a
    teardown's approval through the engine's approvals)."""

    def _end_executions(self) -> None:
        """As the engine closes: deliveries settled, every running execution stopped, every thread it started joined."""
        self.settle()  # a delivery still running could start an execution after the sweep below
        self._stop_deliveries()
        sfn = self.client("stepfunctions")
        for deployment in self.deployments.values():
            for page in sfn.get_paginator("list_executions").paginate(
                stateMachineArn=deployment.state_machine_arn, statusFilter="RUNNING"
            ):
                for e in page["executions"]:
                    _stop_execution(sfn, e["executionArn"], error="LocalEngineClosed")
        self._release_task_token_waits()
        join_all(set(threading.enumerate()) - self._threads_before, timeout=10)

    def run(
        self,
        request: dict | str,
        *,
        name: str,
        on_event: Callable[[dict], None] | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        decision: str | None = None,
        env: str | None = None,
    ) -> Execution:
        """Run one execution of deployment `env` (default: the first) to its end. A teardown's
        approval is answered with `decision` (approved | rejected | timeout) as soon as it is
        pending; without one it waits, and another thread may answer it with answer_approval()
        or expire_approval(). After `timeout` seconds of wall time the execution is stopped and
        reported FAILED with error "LocalTimeout"."""
        env = env or self.env_names[0]
        deployment = self.deployments[env]
        sfn = self.client("stepfunctions")
        body = request if isinstance(request, str) else json.dumps(request)
        marker = self.calls.mark()
        published = len(self.approval_messages(env))
        arn = sfn.start_execution(stateMachineArn=deployment.state_machine_arn, name=name, input=body)["executionArn"]
        chain: list[Execution] = []
        while True:
            execution = self._follow(
                name, arn, env=env, marker=marker, published=published, on_event=on_event, timeout=timeout, decision=decision
            )
            successor = (execution.output or {}).get("continued_as") if execution.status == "SUCCEEDED" else None
            if not isinstance(successor, str):
                break
            # wait_for_capacity continued as a new execution: the request goes on there.
            chain.append(execution)
            name = successor
            arn = deployment.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{successor}"
        execution.continued_from = chain
        return execution

    def follow(self, name: str, *, env: str | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS,
               on_event: Callable[[dict], None] | None = None, decision: str | None = None) -> Execution:
        """Wait for execution `name` of deployment `env`, started by something else (a refill run
        StartRefill started, the teardown a max_lifetime started), to end; its metrics count from
        the moment it is followed. A teardown's approval is answered with `decision`, as run() does."""
        env = env or self.env_names[0]
        arn = f"{self.deployments[env].state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"
        return self._follow(name, arn, env=env, marker=self.calls.mark(), published=len(self.approval_messages(env)),
                            on_event=on_event, timeout=timeout, decision=decision)

    def executions(self, env: str | None = None) -> list[str]:
        """The names of every execution of deployment `env`, oldest first."""
        sfn = self.client("stepfunctions")
        found = []
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=self.deployments[env or self.env_names[0]].state_machine_arn):
            found.extend(page["executions"])
        return [e["name"] for e in sorted(found, key=lambda e: e["startDate"])]

    def _follow(self, name: str, arn: str, *, env: str, marker, published: int,
                on_event: Callable[[dict], None] | None, timeout: float, decision: str | None) -> Execution:
        sfn = self.client("stepfunctions")
        # Waiting reads moto's own record of the execution (its status and how many events it has),
        # which costs nothing; every answer the run gets (status, output, history) still comes
        # through the Step Functions API once the execution has ended.
        record = _execution_record(arn)
        answered = timed_out = False
        seen = read_at_events = 0
        next_read = 0.0  # watching: the history is read again no sooner than this
        deadline = time.monotonic() + timeout
        pause = 0.001  # short at first: most steps end in a few milliseconds
        while True:
            status = _record_status(record) if record is not None else sfn.describe_execution(executionArn=arn)["status"]
            if on_event and status == "RUNNING" and time.monotonic() >= next_read:
                # The history is only read while running when someone is watching, when it has
                # grown, and at most a fifth of the time (each read serialises the whole history).
                events = _record_events(record)
                if events is None or events != read_at_events:
                    began = time.monotonic()
                    history = _history(sfn, arn)
                    for event in history[seen:]:
                        on_event(event)
                    seen, read_at_events = len(history), events
                    next_read = time.monotonic() + max(0.05, 4 * (time.monotonic() - began))
            if status != "RUNNING":
                break
            if decision is not None and not answered:
                with self.as_deployment(env):
                    answered = self._answer_when_pending(name, decision)
            if time.monotonic() > deadline:
                if timed_out:  # stopped, and still not ended after a grace period: report it anyway
                    break
                timed_out = True
                _stop_execution(sfn, arn, error="LocalTimeout", cause=f"still running after {timeout:g} s; raise it with --timeout")
                self._release_task_token_waits()  # a task waiting for a token would not notice the stop
                deadline = time.monotonic() + 5
                continue
            time.sleep(pause)
            pause = min(pause * 2, 0.005)
        described = sfn.describe_execution(executionArn=arn)
        # The interpreter flips the status a moment before it stores the output: wait for it.
        settle_until = time.monotonic() + 5
        while described["status"] == "SUCCEEDED" and "output" not in described and time.monotonic() < settle_until:
            time.sleep(0.002)
            described = sfn.describe_execution(executionArn=arn)
        history = _history(sfn, arn)
        for event in history[seen:]:
            if on_event:
                on_event(event)
        status, error, cause = described["status"], described.get("error"), _json(described.get("cause"))
        if timed_out:  # AWS would say ABORTED for a stop; a local timeout is a failure of the run
            status, error, cause = "FAILED", "LocalTimeout", f"still running after {timeout:g} s; raise it with --timeout"
        with self.as_deployment(env):
            approval = self.approval(name)
        return Execution(
            name=name,
            arn=arn,
            status=status,
            output=_json(described.get("output")),
            error=error,
            cause=cause,
            history=history,
            metrics=self.calls.metrics_since(marker, history),
            approval=approval,
            notifications=self.approval_messages(env)[published:],
        )

def join_all(threads, *, timeout: float) -> None:
    """Join every thread, each within `timeout` seconds. threading.enumerate() lists a thread from
    the moment start() is called, before it has started: joining it then raises "cannot join
    thread before it is started". Such a thread is waited for until it has started (or the time
    is up, when it is left alone: nothing of this engine can be running in it yet)."""
    for thread in threads:
        if thread is threading.current_thread():
            continue
        deadline = time.monotonic() + timeout
        while True:
            try:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
                break
            except RuntimeError:  # registered, not yet started
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.001)


def _execution_record(arn: str):
    """moto's record of execution `arn` (what DescribeExecution answers from), or None."""
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    _, _, _, region, account, *_ = arn.split(":")
    try:
        return stepfunctions_parser_backends[account][region].describe_execution(arn)
    except Exception:  # noqa: BLE001 (not there: the engine falls back to asking the API each time)
        return None


def _stop_execution(sfn, arn: str, *, error: str, cause: str = "") -> None:
    """StopExecution, as AWS takes it at any moment of a run. moto's interpreter can only stop
    an execution whose worker has started its program; one started a moment ago has not yet,
    so wait (briefly) for that before asking."""
    record = _execution_record(arn)
    started_by = time.monotonic() + 5
    while record is not None and getattr(record.exec_worker, "env", None) is None and time.monotonic() < started_by:
        time.sleep(0.001)
    sfn.stop_execution(executionArn=arn, error=error, cause=cause)


def _record_status(record) -> str:
    return record.exec_status.value if record.exec_status is not None else "RUNNING"


def _record_events(record) -> int | None:
    """How many history events execution `record` has so far; None when it cannot tell."""
    try:
        return len(record.exec_worker.env.event_manager._history_event_list)
    except AttributeError:
        return None


def _history(sfn, arn: str) -> list[dict]:
    events, kwargs = [], {}
    while True:
        page = sfn.get_execution_history(executionArn=arn, maxResults=1000, **kwargs)
        events.extend(page["events"])
        if not page.get("nextToken"):
            return events
        kwargs["nextToken"] = page["nextToken"]


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text

