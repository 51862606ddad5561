"""The progress lines read a launch step's own attempts, whichever run shape the state carries."""

import io
import json

from gpufill.cli.execution import ExecutionView
from gpufill.cli.render_progress import Progress
from gpufill.cli.render_summary import render_summary


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


WAIT = {"deadline": "2026-12-03T09:00:00Z", "deadline_epoch": 0, "tries": 3, "delay_seconds": 195,
        "next_try_at": "2026-12-03T03:27:27Z"}


def test_the_wait_loop_says_how_long_it_waits_until_when_and_what_comes_next():
    printed = lines(
        {"type": "ChoiceStateEntered", "stateEnteredEventDetails": {"name": "ShouldWaitAgain"}},
        exited("PlanNextTry", {"run": {"next": "retry", "launched": 1, "wait": WAIT}}),
        exited("PlanNextTry", {"run": {"next": "handover", "launched": 1, "wait": WAIT}}),
        exited("StartNextTry", {"run": {"next": "prepare", "wait": {**WAIT, "tries": 4}}}),
        exited("StartNextTry", {"run": {"next": "rank", "wait": {**WAIT, "tries": 4}}}),
        exited("StartNextTry", {"run": {"next": "handover", "wait": {**WAIT, "tries": 4, "successor": "r-c1"}}}),
        exited("StartNextTry", {"run": {"next": "stopped", "wait": WAIT}}),
        exited("PlanNextTry", {"run": {"next": "expired", "wait": WAIT}}),
        exited("PlanNextTry", {"run": {"next": "retry", "launched": 0, "gang": {"rolled_back": 3}, "wait": WAIT}}),
    )
    assert printed == [
        "  > PlanNextTry    try 3 came up short (1 launched so far); waiting 195 s until 2026-12-03T03:27:27Z "
        "(deadline 2026-12-03T09:00:00Z)",
        "  > PlanNextTry    try 3 came up short (1 launched so far); waiting 195 s until 2026-12-03T03:27:27Z "
        "(deadline 2026-12-03T09:00:00Z); then continues as a new execution",
        "  > StartNextTry   try 4: scoring and ranking again",
        "  > StartNextTry   try 4: ranking again by the facts it read, pools found full moments ago left out",
        "  > StartNextTry   try 4 goes on in execution r-c1",
        "  > StartNextTry   a teardown of this request was asked: the wait ends, nothing more is launched",
        "  > PlanNextTry    try 3 came up short; the deadline 2026-12-03T09:00:00Z has passed",
        "  > PlanNextTry    try 3 came up short (3 handed back so far, 0 held); waiting 195 s until 2026-12-03T03:27:27Z "
        "(deadline 2026-12-03T09:00:00Z)",
    ]


def test_an_expired_wait_lists_what_it_kept_and_the_teardown():
    cause = {"message": "Waited for capacity until T over 9 tries; 1 of 4 launched.",
             "instances": [{"instance_id": "i-0123456789abcdef0", "pool": "spot/us-west-2/us-west-2a/g6.xlarge"}],
             "pools_tried": [{"pools": "spot/us-east-1/g6.xlarge", "zones_tried": 2}],
             "hint": "End the kept instances with `gpufill teardown r1` (asks for approval)"}
    view = ExecutionView.from_aws(
        {"name": "r1", "executionArn": "arn", "status": "FAILED", "error": "CAPACITY_WAIT_EXPIRED", "cause": json.dumps(cause)}, []
    )
    text = render_summary(view).splitlines()
    assert text[1:6] == [
        "FAILED with CAPACITY_WAIT_EXPIRED",
        "  Waited for capacity until T over 9 tries; 1 of 4 launched.",
        "  kept (1 running):",
        "    i-0123456789abcdef0  spot/us-west-2/us-west-2a/g6.xlarge",
        "  pools tried: spot/us-east-1/g6.xlarge (2 AZs)",
    ]


def test_a_continued_execution_names_its_successor():
    view = ExecutionView.from_aws(
        {"name": "r1", "executionArn": "arn", "status": "SUCCEEDED",
         "output": json.dumps({"status": "CONTINUED", "continued_as": "r1-c1", "launched": 1, "requested": 4,
                               "tries": 40, "deadline": "2026-12-09T00:00:00Z"})},
        [],
    )
    assert "CONTINUED as r1-c1: 1 of 4 launched so far, 40 tries, waiting until 2026-12-09T00:00:00Z" in render_summary(view)


def test_the_status_of_a_waiting_request_says_so():
    from gpufill.cli.render_status import render_status

    result = {"filter": {"request_id": "r1"}, "regions": ["us-west-2"], "instances": [], "counts": {"running": 1},
              "running": 1, "hourly_cost": 0.4264,
              "waiting": "waiting for capacity until T; next try at T2; 3 tries so far"}
    printed = render_status(result)
    assert printed[2:5] == ["", "Waiting: waiting for capacity until T; next try at T2; 3 tries so far", ""]
    assert not any(line.startswith("Waiting:") for line in render_status({**result, "waiting": None}))


def test_both_status_views_name_what_ec2_and_the_records_disagree_on():
    from gpufill.cli.render_status import render_requests, render_status

    result = {"regions": ["us-west-2"], "instances": [], "counts": {}, "running": 0, "hourly_cost": 0,
              "reconciled": ["i-1"], "unrecorded": ["i-2"], "gone": ["i-3", "i-4"]}
    disagreements = ["Reconciled (found in EC2 without a record, recorded now): i-1",
                     "Unrecorded (tagged for this deployment, no request-id tag): i-2",
                     "Gone (recorded, no longer in EC2): i-3, i-4"]
    assert render_status(result)[-3:] == disagreements
    assert render_requests({**result, "waiting": "w"}, [], 0)[-4:] == ["Waiting: w", *disagreements]
    agreed = {**result, "reconciled": [], "unrecorded": [], "gone": []}
    assert not any(line.startswith(("Reconciled", "Unrecorded", "Gone")) for line in render_status(agreed) + render_requests(agreed, [], 0))

def test_a_failed_block_payment_names_the_block():
    from gpufill.policy.capacity_blocks import purchase_failed_cause

    held = {"capacity_reservation_id": "cr-0123456789abcdef0", "instance_count": 2, "instance_type": "p5.48xlarge",
            "availability_zone": "us-east-2a", "start": "2026-12-06T11:30:00Z", "end": "2026-12-07T11:30:00Z",
            "upfront_fee": 1390.0}
    view = ExecutionView.from_aws({"name": "r1", "executionArn": "arn", "status": "FAILED", "error": "PURCHASE_FAILED",
                                   "cause": purchase_failed_cause(held, request_id="r1", kept=[])}, [])
    text = render_summary(view).splitlines()
    assert text[1] == "FAILED with PURCHASE_FAILED"
    assert text[3] == "  block: cr-0123456789abcdef0 in us-east-2a, 2026-12-06T11:30:00Z to 2026-12-07T11:30:00Z, $1,390.00, payment failed"


def test_no_capacity_block_lists_each_offering_with_why_and_the_regions_that_did_not_answer():
    from datetime import UTC, datetime, timedelta

    from gpufill.policy import capacity_blocks as policy

    start = datetime(2026, 12, 6, 11, 30, tzinfo=UTC)
    ask = policy.Ask(("p5.48xlarge",), ("us-east-2",), 2, 24, start - timedelta(days=1), start + timedelta(days=7), 1000.0)
    offers = [policy.Offering(f"cbr-{n:02d}", "us-east-2", "us-east-2a", "p5.48xlarge", 2, start + timedelta(days=n % 7),
                              start + timedelta(days=n % 7, hours=24), 24, 1390.0 + n) for n in range(13)]
    cause = policy.no_capacity_block_cause(policy.choose(offers, ask), ask, request_id="r1",
                                          regions_failed={"us-west-2": "UnauthorizedOperation"})
    view = ExecutionView.from_aws({"name": "r1", "executionArn": "arn", "status": "FAILED", "error": "NO_CAPACITY_BLOCK",
                                   "cause": cause}, [])
    text = render_summary(view).splitlines()
    assert text[1] == "FAILED with NO_CAPACITY_BLOCK" and "each one's reason is listed" in text[2]
    listed = [line for line in text if line.startswith("  - ")]
    assert len(listed) == 10
    assert listed[0] == ("  -   $1,390.00  2 x p5.48xlarge in us-east-2a, 2026-12-06T11:30:00Z to 2026-12-07T11:30:00Z: "
                         "upfront fee $1,390.00 is above max_upfront_usd $1,000.00")
    assert "  ... and 3 more (see --json)" in text
    assert "  regions that did not answer (their offerings are not counted): us-west-2 (UnauthorizedOperation)" in text
    assert text.index("  ... and 3 more (see --json)") < next(i for i, line in enumerate(text) if line.startswith("  hint:"))


BLOCK_INSTANCE = {"instance_id": "i-0123456789abcdef0", "region": "us-east-2", "availability_zone": "us-east-2b",
                  "instance_type": "p5.48xlarge", "market": "on-demand", "hourly_price": 20.9127, "state": "running",
                  "capacity_reservation_id": "cr-0123456789abcdef0", "capacity_block_fee": 1390.0}


def test_capacity_block_instances_show_their_market_and_block_and_the_fee_once():
    from gpufill.cli.render_status import render_status

    second = {**BLOCK_INSTANCE, "instance_id": "i-0123456789abcdef1"}
    attempt = {"number": 1, "region": "us-east-2", "availability_zone": "us-east-2b", "instance_type": "p5.48xlarge",
               "market": "on-demand", "batch": 2, "launched": 2, "outcome": "launched",
               "capacity_reservation_id": "cr-0123456789abcdef0"}
    block = {"capacity_reservation_id": "cr-0123456789abcdef0", "availability_zone": "us-east-2b", "start": "S", "end": "E",
             "upfront_fee": 1390.0}
    output = {"status": "FULFILLED", "launched": 2, "requested": 2, "hourly_cost": 0.0, "instances": [BLOCK_INSTANCE, second],
              "attempts": [attempt], "capacity_block": block}
    text = render_summary(ExecutionView.from_aws({"name": "r1", "executionArn": "arn", "status": "SUCCEEDED",
                                                  "output": json.dumps(output)}, []))
    assert "    1  capacity-block us-east-2b       p5.48xlarge       2    2  launched" in text
    assert "  i-0123456789abcdef0  us-east-2b       p5.48xlarge   capacity-block in cr-0123456789abcdef0" in text
    assert "on-demand" not in text and text.count("$1,390.00") == 1

    rows = render_status({"instances": [{**i, "request_id": "r1", "finding": "ok"} for i in (BLOCK_INSTANCE, second)],
                          "regions": ["us-east-2"]})
    assert sum("capacity-block running          block" in line for line in rows) == 2
    assert [line for line in rows if "$1,390.00" in line] == [
        "  Capacity Block cr-0123456789abcdef0: $1,390.00 paid upfront for its 2 instance(s) shown (non-refundable; $/h 0 while it lasts)"]
