"""Approvals that cannot be mistaken, on the local engine through `gpufill.cli.main`: a request id
that names two pending approvals answers neither; a lost reply is reported from the execution; a
second answer says what the first did; a teardown never asks twice about one instance
(docs/teardown.md). An approval whose instances are all gone: tests/cli/test_cli_status_spend.py."""

from __future__ import annotations

import json

from gpufill.cli import main
from gpufill.local.server import LocalEndpoint
from tests.workflow.planting import MARKET, WEST, in_background, launch, states

P5, OHIO = "p5.48xlarge", "us-east-2"
BOTH = {
    "regions": {**MARKET["regions"], OHIO: {"zones": {f"{OHIO}a": {P5: {"spot": 0, "on_demand": 0}}}}},
    "capacity_blocks": [{"zone": f"{OHIO}a", "type": P5, "count": 2, "start_in_hours": 3, "duration_hours": 24,
                         "upfront_fee": 1500}],
}
BLOCK_RUN = {"instance_type": P5, "count": 2, "regions": [OHIO], "market": "capacity-block", "ready_timeout": "PT0S",
             "capacity_block": {"max_upfront_usd": 2000, "duration_hours": 24, "start_within": "P7D"}}
ARGS = ["--env", "local", "--region", "us-east-1"]


def test_a_request_id_naming_a_purchase_and_a_teardown_answers_neither_then_lost_replies_are_settled(local_account, capsys):
    # Answers go through the AnswerApproval function URL, served by the engine behind the endpoint:
    # the faults below hit the function's own SendTaskSuccess, which settles them.
    with local_account(BOTH) as engine, LocalEndpoint(engine) as endpoint:
        args = [*ARGS, "--endpoint-url", endpoint.url]
        mine = launch(engine, WEST, request_id="cb-both")
        with in_background(engine, BLOCK_RUN, "cb-both") as run, \
                in_background(engine, {"action": "teardown", "request_id": "cb-both"}, "td-both") as teardown:
            engine.wait_for_approval("cb-both")
            engine.wait_for_approval("td-both")

            # Both wait under the request id: listed with their own commands, neither answered (exit 2).
            assert main(["approve", "cb-both", *args]) == 2
            err = capsys.readouterr().err
            assert "'cb-both' matches 2 pending approvals; nothing changed" in err
            assert "gpufill approve purchase:cb-both --env local --region us-east-1" in err
            assert "gpufill approve teardown:td-both --env local --region us-east-1" in err
            assert "upfront $1,500.00" in err and "terminate 1 instance(s) of request cb-both" in err
            assert "answered_at" not in engine.approval("cb-both") and engine.market.blocks.purchases == []

            # A second teardown of the same instance is refused, naming the pending one and its command.
            again = engine.run({"action": "teardown", "request_id": "cb-both"}, name="td-again").output
            assert again["status"] == "NOTHING_TO_TERMINATE" and engine.approval("td-again") is None
            [held] = again["refused"]
            assert (held["instance_id"], held["reason"]) == (mine[0], "awaiting-approval")
            assert "teardown td-both already asks to end it" in held["detail"]
            assert "gpufill approve teardown:td-both" in held["detail"]

            # The purchase is taken but its reply lost (botocore's retry meets TaskTimedOut): reported as bought.
            engine.faults.aws("stepfunctions", "SendTaskSuccess", error="ReadTimeout", after=True)
            assert main(["approve", "purchase:cb-both", *args]) == 0
            out = capsys.readouterr().out
            assert "The reply to this answer was lost (TaskTimedOut)" in out
            assert "What it did: the Capacity Block was bought: 2 x p5.48xlarge in us-east-2a" in out
            assert "upfront $1,500.00" in out and len(engine.market.blocks.purchases) == 1

            # A second answer is refused and says what the first one did.
            assert main(["reject", "purchase:cb-both", *args]) == 1
            err = capsys.readouterr().err
            assert "purchase:cb-both was already approved by arn:aws:" in err and "the Capacity Block was bought" in err

            # Now one approval waits under the request id: answered, its reply lost outright.
            engine.faults.aws("stepfunctions", "SendTaskSuccess", error="TaskTimedOut", after=True)
            assert main(["approve", "cb-both", "--json", *args]) == 0
            answer = json.loads(capsys.readouterr().out)
            assert answer["approval_id"] == "teardown:td-both" and answer["settled_after"] == "TaskTimedOut"
            assert answer["terminated"] == mine and answer["effect"] == f"1 instance(s) terminated: {mine[0]}"
            assert teardown().output["status"] == "TERMINATED"
            assert run().status == "SUCCEEDED"
        assert states(engine, WEST, mine) == {mine[0]: "terminated"}
        assert engine.faults.injected, "the planned faults did not happen"

