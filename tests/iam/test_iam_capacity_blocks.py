"""Capacity Blocks under the deployed IAM policies: the grants a purchase path uses, and what each
refusal does when a grant is missing (nothing is bought, the run ends with a documented error)."""

from __future__ import annotations

import json

from tests.support import EXAMPLES

MARKET = json.loads((EXAMPLES / "markets" / "capacity-blocks.json").read_text())
REQUEST = {
    "instance_types": ["p5.48xlarge"], "count": 2, "regions": ["us-east-2", "us-east-1"], "market": "capacity-block",
    "capacity_block": {"max_upfront_usd": 2000, "duration_hours": 24, "start_within": "P7D"}, "ready_timeout": "PT0S",
}


def test_a_purchase_and_the_launch_into_the_block_are_authorized_by_the_deployed_policies(judged_account):
    with judged_account(MARKET) as (engine, judgements):
        execution = engine.run(REQUEST, name="judged-block", decision="approved")
    assert not judgements.refusals, judgements.refusals[:5]
    assert execution.status == "SUCCEEDED", execution.cause
    checked = {(j.action, j.resource.rsplit(":", 1)[-1]) for j in judgements.seen}
    assert ("ec2:DescribeCapacityBlockOfferings", "*") in checked
    assert ("ec2:PurchaseCapacityBlock", "capacity-reservation/*") in checked
    assert ("ec2:CreateTags", "capacity-reservation/*") in checked
    # The launch into the block is judged as the capacity-block market, as the Reference lists the key.
    launches = [j for j in judgements.seen if j.action == "ec2:RunInstances" and j.resource.endswith(":instance/*")]
    assert launches and {j.context["ec2:InstanceMarketType"] for j in launches} == {"capacity-block"}


def test_without_the_purchase_grant_nothing_is_bought_and_the_run_ends_reported(judged_account):
    with judged_account(MARKET, without=("PurchaseCapacityBlock", "ec2:PurchaseCapacityBlock", "capacity-reservation/*")) as (
        engine,
        judgements,
    ):
        execution = engine.run(REQUEST, name="no-purchase-grant", decision="approved")
        bought = engine.market.blocks.purchases
    refused = [j for j in judgements.refusals if j.action == "ec2:PurchaseCapacityBlock"]
    assert refused and bought == []
    assert execution.error == "PROVISIONING_FAILED", execution.error


def test_without_the_offerings_grant_no_region_answers_and_the_run_ends_no_capacity_block(judged_account):
    with judged_account(MARKET, without=("DescribeCapacityBlockOfferings", "ec2:DescribeCapacityBlockOfferings", "*")) as (engine, _):
        execution = engine.run(REQUEST, name="no-offerings-grant", decision="approved")
    assert execution.error == "NO_CAPACITY_BLOCK"
    assert all("UnauthorizedOperation" in why for why in execution.cause["regions_not_answering"].values())
    assert set(execution.cause["regions_not_answering"]) == {"us-east-2", "us-east-1"}
