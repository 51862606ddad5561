"""What the command line shows of ready_timeout: a CheckServing line when the startup steps change,
the verdict per instance, a serving server as the connect example, and a minute's quiet explained."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from types import SimpleNamespace

from gpufill.cli.render_progress import Progress
from gpufill.cli.render_summary import render_summary


def exited(run: dict) -> dict:
    return {"type": "TaskStateExited",
            "stateExitedEventDetails": {"name": "CheckServing", "output": json.dumps({"run": run})}}


def check(rounds: int, *steps: str | None, done: bool = False, serving: tuple = ()) -> dict:
    instances = [{"instance_id": f"i-{n}", "startup_step": s} for n, s in enumerate(steps)]
    for n, instance in enumerate(instances):
        if done:
            instance["serving"] = n in serving
    return exited({"next": "ready" if done else "wait", "ready_rounds": rounds, "instances": instances})


def test_a_check_is_printed_only_when_the_steps_changed_and_the_last_gives_the_count():
    out = io.StringIO()
    progress = Progress(out)
    for event in (
        {"type": "TaskStateEntered", "stateEnteredEventDetails": {"name": "CheckServing"}},
        check(1, None, None),
        check(2, "syncing model", "syncing model"),
        check(3, "syncing model", "syncing model"),
        check(4, "serving", "loading model"),
        {"type": "WaitStateEntered", "stateEnteredEventDetails": {"name": "PauseForServing"}},
        check(5, "serving", "loading model", done=True, serving=(0,)),
    ):
        progress.event(event)
    assert out.getvalue().splitlines() == [
        "  > CheckServing   check 1: 2 no step reported yet",
        "  > CheckServing   check 2: 2 syncing model",
        "  > CheckServing   check 4: 1 serving, 1 loading model",
        "  > CheckServing   1 of 2 model server(s) serving after 5 check(s)",
    ]


def test_a_quiet_minute_between_checks_says_it_waits_for_the_model_servers():
    out = io.StringIO()
    Progress(out).waiting("PauseForServing", datetime(2026, 12, 3, 4, 0, tzinfo=UTC))
    assert out.getvalue() == (
        "    still waiting for the model servers to answer (ready_timeout; checked once a minute), since 04:00:00 UTC\n")


def instance(n: int, **fields) -> dict:
    return {"instance_id": f"i-{n}", "region": "us-west-2", "availability_zone": "us-west-2a",
            "instance_type": "g6.xlarge", "market": "spot", "hourly_price": 0.5, "connect": f"connect i-{n}", **fields}


def summary(result: dict) -> list[str]:
    execution = SimpleNamespace(status="SUCCEEDED", output=result, history=[], cause=None, metrics=None)
    return render_summary(execution).splitlines()


def test_the_summary_gives_each_verdict_and_a_serving_server_as_the_example():
    result = {"status": "FULFILLED", "launched": 2, "requested": 2, "hourly_cost": 1.0, "instances_serving": 1,
              "instances": [instance(1, serving=False, serving_reason="still at startup step 'syncing model'"),
                            instance(2, serving=True)]}
    lines = summary(result)
    assert lines[2:4] == [
        "  i-1  us-west-2a       g6.xlarge     spot      $0.5000/h  not serving: still at startup step 'syncing model'",
        "  i-2  us-west-2a       g6.xlarge     spot      $0.5000/h  serving",
    ]
    assert lines[4:6] == ["Reach the model server (port 8000) through SSM, e.g. i-2:", "  connect i-2"]
    assert lines[-1] == "FULFILLED: 2 of 2 launched, $1.0000/h in all, 1 serving"


def test_a_summary_without_a_readiness_check_says_nothing_of_serving():
    result = {"status": "FULFILLED", "launched": 1, "requested": 1, "hourly_cost": 0.5, "instances": [instance(1)]}
    lines = summary(result)
    assert lines[2] == "  i-1  us-west-2a       g6.xlarge     spot      $0.5000/h"
    assert lines[-1] == "FULFILLED: 1 of 1 launched, $0.5000/h in all"
