"""`gpufill status` shows a Capacity Block purchase waiting for its approval, with the commands that
answer it, apart from the teardowns; `gpufill approve` answers it and the block is bought."""

from __future__ import annotations

import json

from gpufill.cli import main
from tests.support import EXAMPLES

MARKET = EXAMPLES / "markets/capacity-blocks.json"
REQUEST = str(EXAMPLES / "requests/provision-capacity-block.json")


def test_a_pending_purchase_is_shown_with_its_commands_and_approve_buys_it(deployment, endpoint, monkeypatch, capsys):
    assert main(["run", REQUEST, "--name", "cb-cli", "--yes", "--json", *deployment]) == 0
    capsys.readouterr()
    purchases: list[dict] = []
    for _ in range(400):  # until the run reaches AwaitPurchaseApproval
        assert main(["status", "--json", *deployment]) == 0
        document = json.loads(capsys.readouterr().out)
        purchases = document["pending_purchases"]
        if purchases:
            break
    [pending] = purchases
    assert document["pending_teardowns"] == []
    assert pending["purchase"]["upfront_fee"] == 1390.0 and pending["target"] == {"request_id": "cb-cli"}

    assert main(["status", *deployment]) == 0
    out = capsys.readouterr().out.split("Pending Capacity Block purchases: 1")[1]
    assert "asks to buy 2 x p5.48xlarge in us-east-2b" in out and "upfront $1,390.00" in out
    assert f"gpufill approve purchase:{pending['execution']} --env local" in out
    assert f"gpufill reject purchase:{pending['execution']}" in out

    # A principal of the account without the approver policy: AWS refuses the function URL (403)
    # before the function runs, and nothing is answered.
    mallory = endpoint.engine.add_person("mallory")
    with monkeypatch.context() as signed_as:
        signed_as.setenv("AWS_ACCESS_KEY_ID", mallory.access_key)
        signed_as.setenv("AWS_SECRET_ACCESS_KEY", mallory.secret_key)
        signed_as.delenv("AWS_SESSION_TOKEN", raising=False)
        assert main(["approve", pending["execution"], *deployment]) == 1
    err = capsys.readouterr().err
    assert "AWS refused" in err and "gpufill-local-approver" in err and "nothing changed" in err
    with endpoint.engine.as_deployment("local"):
        assert "answered_at" not in endpoint.engine.approval(pending["execution"])
    refused = [j for j in endpoint.engine.iam.refusals if j.principal == "mallory"]
    assert {j.action for j in refused} == {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}

    assert main(["approve", pending["execution"], "--reason", "planned", *deployment]) == 0
    operator = "arn:aws:iam::123456789012:user/local-operator"  # as AWS authenticated the caller
    assert f"approved the Capacity Block purchase of cb-cli as {operator}" in capsys.readouterr().out
    # Following the run shows the wait on a person: who is asked, until when, the exact commands.
    assert main(["watch", pending["execution"], *deployment]) == 0
    out = capsys.readouterr().out
    assert f"asked: the subscribers of gpufill-approvals-local; until {pending['deadline']}" in out
    assert f"approve: gpufill approve purchase:{pending['execution']} --env local --region us-east-1" in out
    instances = out.split("\nInstances\n")[1]  # in their block, not On-Demand; the fee once, on the block's line
    assert instances.count(" capacity-block in cr-") == 2 and "on-demand" not in instances
    assert instances.count("$1,390.00") == 1 and "$0.0000/h in all" in instances
    assert main(["watch", pending["execution"], "--json", *deployment]) == 0  # the same run, as one document
    output = json.loads(capsys.readouterr().out)["execution"]["output"]
    assert output["status"] == "FULFILLED"
    assert output["launched"] == 2 and all(i["capacity_reservation_id"].startswith("cr-") for i in output["instances"])
    assert output["capacity_block"]["approved_by"] == operator and output["capacity_block"]["approval_reason"] == "planned"
    assert main(["status", "cb-cli", "--json", *deployment]) == 0
    [answered] = json.loads(capsys.readouterr().out)["answered_approvals"]
    assert answered["answered_by"] == operator and answered["kind"] == "purchase" and answered["reason"] == "planned"

    # Its spend is the block's fee, once: not its instance-hours counted from before the block started.
    assert main(["status", "cb-cli", "--json", *deployment]) == 0
    [line] = json.loads(capsys.readouterr().out)["requests"]
    block = output["capacity_block"]["capacity_reservation_id"]
    assert line["spent"] == 1390.0 and line["hourly_cost"] == 0.0
    assert line["capacity_blocks"] == [{"capacity_reservation_id": block, "upfront_fee": 1390.0}]
    assert main(["status", "cb-cli", "--instances", *deployment]) == 0
    out = capsys.readouterr().out
    assert f"Capacity Block {block}: $1,390.00 paid upfront (non-refundable)" in out
    assert out.count(" capacity-block running ") == 2
    assert f"  Capacity Block {block}: $1,390.00 paid upfront for its 2 instance(s) shown" in out


def test_simulate_asks_how_the_purchase_approval_is_answered(capsys):
    """A request that may buy a block waits for a person: simulate needs --decision (exit 2 without)."""
    assert main(["simulate", REQUEST, "--market", str(MARKET)]) == 2
    assert "--decision approved|rejected|timeout" in capsys.readouterr().err
