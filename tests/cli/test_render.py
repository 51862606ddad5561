"""The progress lines read a launch step's own attempts, whichever run shape the state carries."""

import io
import json

from gpufill.cli.render import ExecutionView, Progress, render_summary


def attempt(zone, outcome, launched, batch=4, reason=None):
    return {"region": "us-west-2", "availability_zone": zone, "instance_type": "g6.xlarge", "market": "spot",
            "batch": batch, "launched": launched, "outcome": outcome, "reason": reason}


def exited(name, state, kind="TaskStateExited"):
    return {"type": kind, "id": 1, "stateExitedEventDetails": {"name": name, "output": json.dumps(state)}}


def lines(*events):
    out = io.StringIO()
    progress = Progress(out)
    for event in events:
        progress.event(event)
    return out.getvalue().splitlines()


def test_a_launch_step_prints_every_attempt_it_made():
    step = [attempt("us-west-2a", "capacity", 0, reason="InsufficientInstanceCapacity"), attempt("us-west-2b", "launched", 4)]
    earlier = [attempt("us-west-1a", "launched", 1)]
    printed = lines(exited("LaunchBatch", {"run": {"step_attempts": step, "attempts": earlier + step}}))
    assert len(printed) == 2
    assert "us-west-2a" in printed[0] and "capacity (InsufficientInstanceCapacity)" in printed[0]
    assert "us-west-2b" in printed[1] and "launched 4" in printed[1]


def test_without_step_attempts_the_last_attempt_is_the_step():
    run = {"attempts": [attempt("us-west-2a", "capacity", 0, reason="x"), attempt("us-west-2c", "launched", 2)]}
    printed = lines(exited("LaunchBatch", {"run": run}))
    assert len(printed) == 1 and "us-west-2c" in printed[0] and "launched 2" in printed[0]


def test_a_summary_from_aws_history_has_no_local_metrics():
    view = ExecutionView.from_aws(
        {"name": "r1", "executionArn": "arn:aws:states:us-east-1:1:execution:m:r1", "status": "FAILED",
         "error": "ALL_SPOT_EXHAUSTED", "cause": json.dumps({"message": "every spot pool is sold out", "hint": "try on-demand"})},
        [],
    )
    text = render_summary(view)
    assert "FAILED with ALL_SPOT_EXHAUSTED" in text and "hint: try on-demand" in text
    assert "Metrics:" not in text
    assert view.summary()["execution"]["cause"]["hint"] == "try on-demand"


def test_each_gang_rollback_says_what_it_ended_and_where_the_gang_goes():
    first = {"run": {"next": "launch", "gang": {"rolled_back": 2, "excluded": ["spot:us-west-2/us-west-2a"]}}}
    second = {"run": {"next": "prepare", "gang": {"rolled_back": 3, "excluded": ["spot:us-west-2/us-west-2a", "spot:us-east-1"]}}}
    last = {"run": {"next": "not_placed", "gang": {"rolled_back": 3, "excluded": ["spot:us-east-1"]}}}
    assert lines(exited("RollBackGang", first), exited("RollBackGang", second), exited("RollBackGang", last)) == [
        "  > RollBackGang   terminated 2 instance(s) of this run; the gang could not complete in us-west-2/us-west-2a, trying elsewhere",
        "  > RollBackGang   terminated 1 instance(s) of this run; the gang could not complete in us-east-1, trying elsewhere",
        "  > RollBackGang   nothing to terminate; no place is left for the whole gang",
    ]


def test_a_gang_not_placed_summary_lists_pools_with_what_they_launched_and_the_rollback():
    cause = {"message": "The gang of 4 could not be placed", "rolled_back_count": 3, "hint": "h",
             "pools_tried": [{"pool": "us-west-2/us-west-2a/g6.xlarge", "launched": 3, "outcome": "capacity"},
                             {"pool": "us-west-2/us-west-2b/g6.xlarge", "launched": 0, "outcome": "capacity"}]}
    view = ExecutionView.from_aws(
        {"name": "g", "executionArn": "arn:aws:states:us-east-1:1:execution:m:g", "status": "FAILED",
         "error": "GANG_NOT_PLACED", "cause": json.dumps(cause)}, [])
    text = render_summary(view).splitlines()
    assert text[-4:] == [
        "  The gang of 4 could not be placed",
        "  pools tried: us-west-2/us-west-2a/g6.xlarge (launched 3), us-west-2/us-west-2b/g6.xlarge (capacity)",
        "  rolled back: 3 instance(s), nothing left running",
        "  hint: h",
    ]
