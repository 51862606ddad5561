"""Following an execution on AWS: long waits are announced once, with the state and the time;
`connect` runs the port forward when the Session Manager plugin is there."""

from __future__ import annotations

import io
import json
import os
import stat
from datetime import UTC, datetime

from gpufill.cli import aws, connect
from gpufill.cli.render import Progress


class QuietExecution:
    """A Step Functions client whose execution sits in AwaitTeardownApproval for a few polls, then ends."""

    def __init__(self, polls_before_end: int):
        self.polls = polls_before_end
        self.entered = datetime(2026, 12, 2, 21, 0, tzinfo=UTC)

    def describe_execution(self, executionArn):
        self.polls -= 1
        status = "RUNNING" if self.polls > 0 else "SUCCEEDED"
        described = {"name": "t", "executionArn": executionArn, "status": status}
        if status == "SUCCEEDED":
            described["output"] = json.dumps({"status": "TERMINATED"})
        return described

    def get_execution_history(self, executionArn, maxResults, **kwargs):
        return {"events": [
            {"id": 1, "type": "TaskStateEntered", "timestamp": self.entered,
             "stateEnteredEventDetails": {"name": "AwaitTeardownApproval"}},
        ]}


def test_a_long_wait_is_announced_once_with_what_and_since_when():
    out = io.StringIO()
    progress = Progress(out)
    described, history = aws.wait_for_end(
        QuietExecution(polls_before_end=5), "arn:x", progress.event, poll=0.001,
        on_quiet=progress.waiting, quiet_after=0.0,
    )
    assert described["status"] == "SUCCEEDED" and len(history) == 1
    waits = [line for line in out.getvalue().splitlines() if "still waiting" in line]
    assert waits == ["    still waiting for an answer to the teardown approval (gpufill approve|reject), since 21:00:00 UTC"]


def test_connect_runs_the_port_forward_when_the_plugin_is_installed(tmp_path, monkeypatch, capsys):
    called = tmp_path / "called"
    for name in ("aws", connect.PLUGIN):
        tool = tmp_path / name
        tool.write_text(f'#!/bin/sh\necho "$@" >> {called}\n')
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(aws, "find", lambda args: None)
    monkeypatch.setattr(connect, "instance_region", lambda deployment, instance_id: "us-west-2")
    from gpufill.cli import main

    assert main(["connect", "i-0123456789abcdef0", "--port", "8001"]) == 0
    args = called.read_text()
    assert "ssm start-session --region us-west-2 --target i-0123456789abcdef0" in args
    assert '{"portNumber":["8001"],"localPortNumber":["8001"]}' in args
    assert "forwarding localhost:8001 to i-0123456789abcdef0 (us-west-2)" in capsys.readouterr().out
