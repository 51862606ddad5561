"""A cluster placement group inside an instant fleet: the fleet launches what the group holds
and lists the rest as EC2 does, the group counts what a fleet put in it, and a group EC2 does
not know is answered per override."""

from itertools import count

import pytest

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.engine.test_engine_fleet import WEST, fleet, launched, overrides, template
from tests.engine.test_engine_market import error_of, launch

GROUP_MARKET = {"regions": {WEST: {"zones": {
    # 8 spot in the AZ, but one cluster group there holds 2.
    f"{WEST}a": {"g6e.12xlarge": {"spot_price": 4.1, "spot": 8, "cluster": 2}},
    f"{WEST}b": {"g6e.12xlarge": {"spot_price": 4.2, "spot": 8}},
}}}}


NAMES = count()


@pytest.fixture(scope="module")
def fleet_engine():
    with LocalEngine(MarketScenario.model_validate(GROUP_MARKET)) as account:
        yield account


def group_fleet(engine, group: str, target: int, **spot):
    lt = template(engine, WEST, f"lt-{group}-{next(NAMES)}")
    sent = overrides(engine, WEST, "g6e.12xlarge", "a", Placement={"GroupName": group})
    return fleet(engine, WEST, lt, sent, target=target, spot=spot)


def test_a_fleet_into_a_cluster_group_launches_what_the_group_holds_and_lists_the_rest(fleet_engine):
    ec2 = fleet_engine.client("ec2", WEST)
    ec2.create_placement_group(GroupName="pg-fleet", Strategy="cluster")
    answer = group_fleet(fleet_engine, "pg-fleet", 4)
    assert launched(fleet_engine, WEST, answer) == {"a": 2}
    [error] = answer["Errors"]
    assert error["ErrorCode"] == "InsufficientInstanceCapacity" and "for placement group pg-fleet" in error["ErrorMessage"]
    assert len(fleet_engine.market.groups.members(WEST, "pg-fleet")) == 2
    # The group is full: a second fleet gets nothing, and RunInstances is refused the same way.
    assert launched(fleet_engine, WEST, group_fleet(fleet_engine, "pg-fleet", 1)) == {}
    assert error_of(lambda: launch(fleet_engine, InstanceType="g6e.12xlarge", InstanceMarketOptions={"MarketType": "spot"},
                                   Placement={"AvailabilityZone": f"{WEST}a", "GroupName": "pg-fleet"}))[0] == "InsufficientInstanceCapacity"


def test_a_gang_fleet_asking_all_or_nothing_of_a_small_group_launches_nothing(fleet_engine):
    fleet_engine.client("ec2", WEST).create_placement_group(GroupName="pg-gang", Strategy="cluster")
    answer = group_fleet(fleet_engine, "pg-gang", 4, SingleAvailabilityZone=True, MinTargetCapacity=4)
    assert not answer["Instances"] and {e["ErrorCode"] for e in answer["Errors"]} == {"InsufficientInstanceCapacity"}
    assert fleet_engine.market.groups.members(WEST, "pg-gang") == []


def test_a_fleet_into_a_group_that_does_not_exist_lists_it_unknown_per_override(fleet_engine):
    answer = group_fleet(fleet_engine, "pg-nowhere", 1)
    assert not answer["Instances"]
    assert [(e["ErrorCode"], e["ErrorMessage"]) for e in answer["Errors"]] == [
        ("InvalidPlacementGroup.Unknown", "The Placement Group 'pg-nowhere' is unknown.")]
