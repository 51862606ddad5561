"""Capacity reservations under the deployed IAM policies: the grants that let a run find and
launch into them, and what each refusal does when the grant is missing."""

from __future__ import annotations

import pytest

from tests.support import zone

RESERVED = "cr-0a1b2c3d4e5f60718"
MARKET = {
    "regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.40, spot=4), "us-west-2b": zone(0.50, spot=4)}}},
    "capacity_reservations": [{"id": RESERVED, "zone": "us-west-2b", "type": "g6.xlarge", "count": 2}],
}


def request(**fields):
    return {"regions": ["us-west-2"], "scoring": "classic", "count": 2, **fields}


@pytest.mark.parametrize("mode", ["fleet", "partial"])
def test_a_launch_into_a_reservation_is_authorized_by_the_deployed_policies(judged_account, mode):
    with judged_account(MARKET) as (engine, judgements):
        execution = engine.run(request(launch_mode=mode), name=f"judged-reserved-{mode}")
    assert not judgements.refusals, judgements.refusals[:5]
    assert {i.get("capacity_reservation_id") for i in execution.output["instances"]} == {RESERVED}
    checked = {(j.action, j.resource.rsplit(":", 1)[-1]) for j in judgements.seen}
    assert ("ec2:RunInstances", f"capacity-reservation/{RESERVED}") in checked
    assert ("ec2:DescribeCapacityReservations", "*") in checked


@pytest.mark.parametrize(("mode", "action"), [("fleet", "ec2:CreateFleet"), ("partial", "ec2:RunInstances")])
def test_without_the_reservation_grant_the_launch_is_rejected_as_aws_rejects_it(judged_account, mode, action):
    with judged_account(MARKET, without=("LaunchBatch", action, "capacity-reservation/*")) as (engine, _):
        execution = engine.run(request(launch_mode=mode), name=f"no-reservation-grant-{mode}")
    assert execution.error == "LAUNCH_REJECTED", execution.cause
    assert execution.cause["code"] == "UnauthorizedOperation"
    # EC2 names the reservation in its refusal (the cause keeps the message's first 300 characters).
    assert f"{action} on resource: arn:aws:ec2:us-west-2:123456789012:capacity-reservation/cr-" in execution.cause["message"]
    assert execution.cause["launched"] == 0


def test_without_describe_the_run_finds_no_reservation_and_goes_on_with_spot(judged_account):
    with judged_account(MARKET, without=("RankPools", "ec2:DescribeCapacityReservations", "*")) as (engine, judgements):
        execution = engine.run(request(launch_mode="partial"), name="no-describe-grant")
    refused = [j for j in judgements.refusals if j.action == "ec2:DescribeCapacityReservations"]
    assert refused and all(j.principal.endswith("RankPools") or "RankPools" in j.role_arn for j in refused)
    assert execution.output["status"] == "FULFILLED"
    assert {i["market"] for i in execution.output["instances"]} == {"spot"}
