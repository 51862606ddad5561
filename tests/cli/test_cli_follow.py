"""Following an execution on AWS: long waits are announced once, with the state and the time;
`connect` runs the port forward when the Session Manager plugin is there."""

from __future__ import annotations

import io
import json
import os
import stat
from datetime import UTC, datetime

from gpufill.cli import aws, connect
from gpufill.cli.render_progress import Progress


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


class Chain:
    """A Step Functions client with a waiting run that continued as new once, then filled."""

    def __init__(self):
        self.described = []

    def describe_execution(self, executionArn):
        self.described.append(executionArn.rsplit(":", 1)[-1])
        if executionArn.endswith(":r1"):
            output = {"request_id": "r1", "status": "CONTINUED", "continued_as": "r1-c1", "launched": 1, "requested": 4,
                      "tries": 3, "deadline": "2026-12-03T09:00:00Z"}
        else:
            output = {"request_id": "r1", "status": "FULFILLED", "launched": 4, "requested": 4, "instances": [],
                      "hourly_cost": 1.7764}
        return {"name": executionArn.rsplit(":", 1)[-1], "executionArn": executionArn, "status": "SUCCEEDED",
                "output": json.dumps(output)}

    def get_execution_history(self, executionArn, maxResults, **kwargs):
        return {"events": []}


def test_following_a_run_that_continued_as_new_follows_its_successor_to_the_end(capsys):
    from gpufill.cli import runs

    chain = Chain()

    class Deployment:
        state_machine_arn = "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-provisioner-dev"
        execution_arn = aws.Deployment.execution_arn

        def client(self, service):
            return chain

    view = runs.follow(Deployment(), f"{Deployment.state_machine_arn.replace('stateMachine', 'execution')}:r1",
                       header="gpufill watch r1", quiet=False)
    assert chain.described == ["r1", "r1-c1"]
    assert view.output["status"] == "FULFILLED"
    assert "  continued as r1-c1; following it" in capsys.readouterr().out


def test_only_a_succeeded_continuation_names_a_successor():
    from gpufill.cli.runs import continued_as

    done = {"status": "SUCCEEDED", "output": json.dumps({"status": "CONTINUED", "continued_as": "r1-c2"})}
    assert continued_as(done) == "r1-c2"
    assert continued_as({**done, "status": "FAILED"}) is None
    assert continued_as({"status": "SUCCEEDED", "output": json.dumps({"status": "FULFILLED", "continued_as": "x"})}) is None
    assert continued_as({"status": "SUCCEEDED", "output": "[1]"}) is None
