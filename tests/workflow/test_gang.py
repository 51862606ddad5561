"""Gang placement on the local engine: same-az and same-region gangs, all_or_nothing rollbacks,
and a rollback whose TerminateInstances fails."""

from __future__ import annotations

import boto3
import pytest

from gpufill import constants
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.support import tried, zone

WEST, EAST = "us-west-2", "us-east-1"
# Oregon ranks first (best advisor tier, lowest price); its AZs hold 2 + 1 + 4 spot g6.xlarge,
# Virginia's 2 + 2.
MARKET = {
    "regions": {
        WEST: {
            "advisor_tier": {"g6.xlarge": 0},
            "zones": {"us-west-2a": zone(0.40, spot=2), "us-west-2b": zone(0.41, spot=1), "us-west-2c": zone(0.42, spot=4)},
        },
        EAST: {
            "advisor_tier": {"g6.xlarge": 2},
            "zones": {"us-east-1a": zone(0.50, spot=2), "us-east-1b": zone(0.51, spot=2)},
        },
    }
}


def gang(count=4, **fields):
    """A gang launched pool by pool with RunInstances (fleet gangs: test_fleet_launch.py)."""
    return {"instance_types": ["g6.xlarge"], "regions": [WEST, EAST], "scoring": "classic", "count": count,
            "launch_mode": "partial", **fields}


def run(request: dict, market: dict = MARKET, name: str = "gang-run", faults=None):
    with LocalEngine(MarketScenario.model_validate(market)) as engine:
        if faults:
            faults(engine)
        execution = engine.run(request, name=name)
        return execution, live_instances(engine, name), records(name), engine.faults.injected


def live_instances(engine, request_id: str) -> list[dict]:
    """Every instance of this request EC2 still shows as not terminated, in every region."""
    found = []
    for region in (WEST, EAST):
        ask = {"Filters": [{"Name": f"tag:{constants.TAG_REQUEST_ID}", "Values": [request_id]}]}
        # EC2 is eventually consistent (and so is the engine): a new instance misses the first look.
        engine.client("ec2", region).describe_instances(**ask)
        reply = engine.client("ec2", region).describe_instances(**ask)
        found += [i for r in reply["Reservations"] for i in r["Instances"] if i["State"]["Name"] not in ("terminated", "shutting-down")]
    return found


def records(request_id: str) -> dict[str, dict]:
    table = boto3.resource("dynamodb", region_name=EAST).Table(constants.instances_table_name("local"))
    items = table.scan()["Items"]
    return {i["instance_id"]: i for i in items if i.get("request_id") == request_id and i["instance_id"].startswith("i-")}


def test_without_a_gang_the_fill_spreads_over_zones():
    execution, live, _, _ = run(gang())
    assert execution.output["status"] == "FULFILLED"
    assert tried(execution) == [("us-west-2a", 4, 2, "launched"), ("us-west-2b", 2, 1, "launched"), ("us-west-2c", 1, 1, "launched")]
    assert len({i["Placement"]["AvailabilityZone"] for i in live}) == 3


def test_a_same_az_gang_lands_in_the_one_zone_that_holds_it_whole():
    # 2a and 2b together hold 3 and rank first; only 2c holds 4 in one AZ.
    execution, live, recorded, _ = run(gang(placement="same-az", all_or_nothing=True))
    assert execution.status == "SUCCEEDED", execution.cause
    assert execution.output["status"] == "FULFILLED"
    assert {i["availability_zone"] for i in execution.output["instances"]} == {"us-west-2c"}
    assert tried(execution) == [
        # A short answer means the pool is empty (partial mode); its AZ has no other pool.
        ("us-west-2a", 4, 2, "launched"),  # rolled back
        ("us-west-2b", 4, 1, "launched"),  # rolled back
        ("us-west-2c", 4, 4, "launched"),
    ]
    assert execution.entered().count("RollBackGang") == 2
    assert sorted(i["Placement"]["AvailabilityZone"] for i in live) == ["us-west-2c"] * 4
    rolled = sorted(r["availability_zone"] for r in recorded.values() if r.get("rolled_back"))
    assert rolled == ["us-west-2a", "us-west-2a", "us-west-2b"]
    assert all(r["state"] == "terminated" for r in recorded.values() if r.get("rolled_back"))


def test_a_same_az_gang_without_all_or_nothing_keeps_what_landed_together():
    execution, live, recorded, _ = run(gang(placement="same-az"))
    assert execution.output["status"] == "PARTIAL"
    assert tried(execution) == [("us-west-2a", 4, 2, "launched")]
    assert sorted(i["Placement"]["AvailabilityZone"] for i in live) == ["us-west-2a", "us-west-2a"]
    assert not any(r.get("rolled_back") for r in recorded.values())


def test_a_same_region_gang_keeps_to_the_region_it_landed_in():
    # Oregon holds 7 in all: a gang of 6 fills there, never reaching Virginia's better-placed 4.
    execution, live, _, _ = run(gang(count=6, placement="same-region"))
    assert execution.output["status"] == "FULFILLED"
    assert {i["Placement"]["AvailabilityZone"][:-1] for i in live} == {WEST}
    # A gang of 8 cannot fit Oregon (7): without all_or_nothing it keeps Oregon's 7, never Virginia's.
    execution, live, _, _ = run(gang(count=8, placement="same-region"), name="gang-8")
    assert (execution.output["status"], execution.output["launched"]) == ("PARTIAL", 7)
    assert {i["region"] for i in execution.output["instances"]} == {WEST}


def test_a_same_region_all_or_nothing_gang_moves_whole_to_the_next_region():
    market = {"regions": {**MARKET["regions"], EAST: {**MARKET["regions"][EAST], "zones": {
        "us-east-1a": zone(0.50, spot=4), "us-east-1b": zone(0.51, spot=4)}}}}
    execution, live, recorded, _ = run(gang(count=8, placement="same-region", all_or_nothing=True), market)
    assert execution.output["status"] == "FULFILLED"
    assert {i["region"] for i in execution.output["instances"]} == {EAST}
    assert len(live) == 8 and {i["Placement"]["AvailabilityZone"][:-1] for i in live} == {EAST}
    assert sum(1 for r in recorded.values() if r.get("rolled_back")) == 7


def test_a_gang_that_cannot_be_placed_rolls_back_to_nothing_running():
    execution, live, recorded, _ = run(gang(count=5, placement="same-az", all_or_nothing=True))
    assert execution.status == "FAILED"
    assert execution.error == "GANG_NOT_PLACED"
    assert live == []
    cause = execution.cause
    assert cause["requested"] == 5 and cause["placement"] == "same-az"
    assert [(p["pool"], p["launched"]) for p in cause["pools_tried"]] == [
        ("us-west-2/us-west-2a/g6.xlarge", 2), ("us-west-2/us-west-2b/g6.xlarge", 1), ("us-west-2/us-west-2c/g6.xlarge", 4),
        ("us-east-1/us-east-1a/g6.xlarge", 2), ("us-east-1/us-east-1b/g6.xlarge", 2),
    ]
    assert cause["places_tried"] == [
        "spot:us-west-2/us-west-2a", "spot:us-west-2/us-west-2b", "spot:us-west-2/us-west-2c",
        "spot:us-east-1/us-east-1a", "spot:us-east-1/us-east-1b",
    ]
    assert cause["rolled_back_count"] == 11 == len(recorded)
    assert sorted(i["instance_id"] for i in cause["rolled_back"]) == sorted(recorded)
    assert all(r["rolled_back"] is True and r["state"] == "terminated" for r in recorded.values())
    assert "nothing keeps running" in cause["message"]


def test_an_all_or_nothing_fill_that_comes_up_short_anywhere_rolls_back():
    execution, live, recorded, _ = run(gang(count=12, all_or_nothing=True))
    assert execution.error == "GANG_NOT_PLACED"
    assert live == []
    assert execution.cause["rolled_back_count"] == 11
    assert execution.cause["places_tried"] == []
    assert execution.entered()[-4:] == ["WhatAfterThisMarket", "RollBackGang", "WhereNext", "GANG_NOT_PLACED"]


def test_a_throttled_rollback_is_retried_until_nothing_runs():
    def throttle(engine):
        engine.faults.aws("ec2", "TerminateInstances", error="RequestLimitExceeded", region=WEST, times=8)

    execution, live, recorded, injected = run(gang(count=5, placement="same-az", all_or_nothing=True), faults=throttle)
    assert sum(injected.values()) == 8
    assert execution.error == "GANG_NOT_PLACED"
    assert live == []
    assert execution.cause["rolled_back_count"] == 11
    failures = [d.get("error") for e in execution.history for k, d in e.items() if k == "lambdaFunctionFailedEventDetails"]
    assert failures and set(failures) == {"TransientAwsError"}


@pytest.mark.parametrize("code", ["UnauthorizedOperation", "RequestLimitExceeded"])
def test_a_rollback_that_keeps_failing_ends_provisioning_failed_naming_what_is_left(code):
    def refuse(engine):
        engine.faults.aws("ec2", "TerminateInstances", error=code, region=EAST, times=None)

    # The Oregon gangs roll back; the first Virginia gang (2 in us-east-1a) cannot be terminated.
    execution, live, recorded, _ = run(gang(count=5, placement="same-az", all_or_nothing=True), faults=refuse)
    assert execution.error == "PROVISIONING_FAILED"
    cause = execution.cause
    left = sorted(i["InstanceId"] for i in live)
    assert len(left) == 2 and {i["Placement"]["AvailabilityZone"] for i in live} == {"us-east-1a"}
    assert sorted(i["instance_id"] for i in cause["instances"]) == left
    assert cause["teardown"] == {"action": "teardown", "request_id": "gang-run"}
    assert cause["launched"] == 2
    assert sum(1 for r in recorded.values() if r.get("rolled_back")) == 7
    assert execution.entered()[-2:] == ["ReportFailure", "PROVISIONING_FAILED"]


# --- cluster placement groups (EFA types) --------------------------------------------------------

EFA_MARKET = {
    "regions": {
        WEST: {
            "advisor_tier": {"g6e.12xlarge": 1},
            "zones": {
                # 8 in the AZ, but one cluster group there holds only 3 (one network segment's free slots).
                "us-west-2a": {"g6e.12xlarge": {"spot_price": 4.10, "spot": 8, "cluster": 3}},
                "us-west-2b": {"g6e.12xlarge": {"spot_price": 4.20, "spot": 4}},
            },
        }
    }
}


def test_a_same_az_gang_of_efa_types_launches_into_a_cluster_group_and_moves_when_the_group_is_full():
    request = gang(instance_types=["g6e.12xlarge"], regions=[WEST], placement="same-az", all_or_nothing=True)
    with LocalEngine(MarketScenario.model_validate(EFA_MARKET)) as engine:
        execution = engine.run(request, name="efa-gang")
        assert execution.output["status"] == "FULFILLED", execution.cause
        assert tried(execution) == [("us-west-2a", 4, 3, "launched"), ("us-west-2b", 4, 4, "launched")]
        groups = engine.market.groups
        # The 2a group was emptied by the rollback and deleted; the gang's group holds exactly the gang.
        assert groups.names(WEST) == ["gpufill-local-efa-gang-us-west-2b"]
        assert groups.members(WEST, "gpufill-local-efa-gang-us-west-2b") == sorted(
            i["instance_id"] for i in execution.output["instances"]
        )
        tags = engine.client("ec2", WEST).describe_placement_groups(GroupNames=["gpufill-local-efa-gang-us-west-2b"])
        [group] = tags["PlacementGroups"]
        assert group["Strategy"] == "cluster"
        assert {t["Key"]: t["Value"] for t in group["Tags"]} == {
            constants.TAG_MANAGED: "true", constants.TAG_DEPLOYMENT: "local", constants.TAG_REQUEST_ID: "efa-gang",
        }

        teardown = engine.run({"action": "teardown", "request_id": "efa-gang"}, name="efa-gang-down", decision="approved")
        assert teardown.output["status"] == "TERMINATED"
        assert groups.names(WEST) == []


def test_a_gang_that_needs_no_cluster_group_makes_none():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        execution = engine.run(gang(placement="same-az", all_or_nothing=True), name="plain-gang")
        assert execution.output["status"] == "FULFILLED"
        assert engine.market.groups.names(WEST) == [] and execution.metrics["ec2_calls"].get("CreatePlacementGroup") is None
    with LocalEngine(MarketScenario.model_validate(EFA_MARKET)) as engine:
        execution = engine.run(gang(instance_types=["g6e.12xlarge"], regions=[WEST], placement="same-region"), name="region-gang")
        assert execution.output["launched"] == 4
        assert engine.market.groups.names(WEST) == []


def test_a_gang_member_reclaimed_before_it_ran_rolls_the_whole_gang_back():
    market = {"regions": {WEST: {"advisor_tier": {"g6.xlarge": 0}, "zones": {
        "us-west-2a": {"g6.xlarge": {"spot_price": 0.40, "spot": 4, "reclaimed_at_launch": 1}}}}}}
    execution, live, recorded, _ = run(gang(regions=[WEST], placement="same-az", all_or_nothing=True), market)
    assert execution.error == "GANG_NOT_PLACED"
    assert live == []
    assert execution.entered()[-6:] == ["AreInstancesRunning", "ShouldCheckServing", "IsFulfilled", "RollBackGang", "WhereNext", "GANG_NOT_PLACED"]
    assert sorted(r["state"] for r in recorded.values()) == ["terminated"] * 4
    # EC2 ended one (recorded lost); the run rolled back the other three.
    assert sorted((bool(r.get("rolled_back")), "lost_reason" in r) for r in recorded.values()) == [
        (False, True), (True, False), (True, False), (True, False)]
    assert execution.cause["rolled_back_count"] == 3


def test_after_every_spot_place_failed_the_on_demand_path_places_the_gang_whole():
    regions = {**MARKET["regions"], WEST: {**MARKET["regions"][WEST], "zones": {
        **MARKET["regions"][WEST]["zones"], "us-west-2b": zone(0.41, spot=1, on_demand=5)}}}
    execution, live, recorded, _ = run(
        gang(count=5, placement="same-az", all_or_nothing=True, market="spot-then-on-demand"), {"regions": regions})
    assert execution.output["status"] == "FULFILLED", execution.cause
    assert {(i["market"], i["availability_zone"]) for i in execution.output["instances"]} == {("on-demand", "us-west-2b")}
    assert sorted(i["Placement"]["AvailabilityZone"] for i in live) == ["us-west-2b"] * 5
    # Every spot gang (2 + 1 + 4 in Oregon, 2 + 2 in Virginia) was rolled back first.
    assert sum(1 for r in recorded.values() if r.get("rolled_back")) == 11
    assert execution.entered().count("RankOnDemandPools") == 1
