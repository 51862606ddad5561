"""A teardown of the maximum number of ids and a status over 5,000 records fit Step Functions'
256 KB per state (262,144 bytes), measured on every event of the execution history."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from gpufill import constants
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from gpufill.models.request import MAX_TEARDOWN_IDS
from tests.support import largest_state
from tests.workflow.planting import (
    DEPLOYMENT,
    EAST,
    LOCAL_AMI,
    WEST,
    ZONE,
    _until_visible,
    engine_table,
    states,
    terminated_ids,
)

MARKET = {
    "description": "room for thousands of planted instances",
    "regions": {
        region: {"zones": {zone: {"g6.xlarge": {"spot_price": 0.43, "spot": 6000, "on_demand": 6000}}}}
        for region, zone in ZONE.items()
    },
}


def request_name(n: int) -> str:
    """The longest request id there is (80 characters), so the sizes measured are the worst case."""
    return f"run-{n:04d}-".ljust(80, "x")


def plant_history(engine, region, count, request_of) -> None:
    """Records of instances a teardown ended long ago (terminated, expiring): gone from EC2."""
    with engine_table(engine).batch_writer() as table:
        for k in range(count):
            table.put_item(Item={
                "instance_id": f"i-{region.replace('-', '')[:6]}{k:011x}", "request_id": request_of(k), "region": region,
                "availability_zone": ZONE[region], "instance_type": "g6.xlarge", "market": "spot",
                "hourly_price": Decimal("0.43"), "state": "terminated", "launched_at": "2026-01-01T00:00:00+00:00",
                "terminated_at": "2026-01-02T00:00:00+00:00", constants.INSTANCES_TTL_ATTRIBUTE: 2_000_000_000,
            })


def plant(engine, region, count, request_of) -> list[str]:
    """`count` tagged, recorded instances of this deployment; request_of(k) names the k-th one's request."""
    ec2 = engine.client("ec2", region)
    ids: list[str] = []
    while len(ids) < count:
        batch = min(1000, count - len(ids))
        reply = ec2.run_instances(
            ImageId=LOCAL_AMI, InstanceType="g6.xlarge", MinCount=batch, MaxCount=batch,
            Placement={"AvailabilityZone": ZONE[region]},
            TagSpecifications=[{"ResourceType": "instance", "Tags": [
                {"Key": constants.TAG_MANAGED, "Value": "true"}, {"Key": constants.TAG_DEPLOYMENT, "Value": DEPLOYMENT}]}],
        )
        ids += [i["InstanceId"] for i in reply["Instances"]]
    _until_visible(engine, region, ids)
    by_request: dict[str, list[str]] = {}
    for k, instance_id in enumerate(ids):
        by_request.setdefault(request_of(k), []).append(instance_id)
    for request_id, group in by_request.items():
        ec2.create_tags(Resources=group, Tags=[{"Key": constants.TAG_REQUEST_ID, "Value": request_id}])
    with engine_table(engine).batch_writer() as table:
        for k, instance_id in enumerate(ids):
            table.put_item(Item={
                "instance_id": instance_id, "request_id": request_of(k), "region": region,
                "availability_zone": ZONE[region], "instance_type": "g6.xlarge", "market": "spot",
                "hourly_price": Decimal("0.43"), "state": "running", "launched_at": "2026-01-01T00:00:00+00:00",
            })
    return ids


@pytest.mark.slow
def test_a_teardown_of_the_maximum_number_of_ids_fits_every_state():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        half = MAX_TEARDOWN_IDS // 2
        # every instance of its own longest-named request: the largest batches a teardown can carry
        west = plant(account, WEST, half, lambda k: request_name(k))
        east = plant(account, EAST, MAX_TEARDOWN_IDS - half, lambda k: request_name(half + k))

        execution = account.run(
            {"action": "teardown", "instance_ids": west + east}, name="teardown-max", decision="approved", timeout=300
        )

        assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
        assert largest_state(execution) <= constants.STATE_SIZE_LIMIT_BYTES
        result = execution.output
        assert result["status"] == "TERMINATED" and result["instance_count"] == MAX_TEARDOWN_IDS
        assert terminated_ids(execution) == sorted(west + east)
        assert sum(r["terminated_count"] for r in result["terminated"]) == MAX_TEARDOWN_IDS
        assert len(result["instances"]) == constants.TEARDOWN_LISTED_INSTANCES and result["note"]
        assert set(states(account, WEST, west).values()) == {"terminated"}
        assert len(json.dumps(result)) <= constants.STATE_SIZE_LIMIT_BYTES
        [note] = execution.notifications
        assert f"{MAX_TEARDOWN_IDS} instance(s)" in note["subject"]
        item = execution.approval
        assert len(item["instance_ids"]) == MAX_TEARDOWN_IDS


@pytest.mark.slow
def test_an_unfiltered_status_over_5000_records_is_summarised_within_the_limit():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        # 20 full-size runs of 250, with the longest request ids: 4 still running (500 in each
        # region), 16 torn down earlier whose records have not expired yet.
        plant(account, WEST, 500, lambda k: request_name(k // 250))
        plant(account, EAST, 500, lambda k: request_name(2 + k // 250))
        plant_history(account, WEST, 2000, lambda k: request_name(4 + k // 250))
        plant_history(account, EAST, 2000, lambda k: request_name(12 + k // 250))

        execution = account.run({"action": "status"}, name="status-5000", timeout=600)

        assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
        assert largest_state(execution) <= constants.STATE_SIZE_LIMIT_BYTES
        report = execution.output
        assert (report["total"], report["running"]) == (5000, 1000)
        assert report["counts"] == {"running": 1000, "terminated": 4000}
        assert report["listed"] == len(report["instances"]) == constants.STATUS_LISTED_INSTANCES
        assert {i["state"] for i in report["instances"]} == {"running"}  # billed before history
        assert report["by_region"] == {EAST: {"running": 500, "terminated": 2000}, WEST: {"running": 500, "terminated": 2000}}
        assert len(report["by_request"]) == 20 and report["other_requests"] == 0
        assert '"request_id"' in report["note"]
        assert report["hourly_cost"] == round(1000 * 0.43, 4)
