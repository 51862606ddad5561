"""EC2's eventual consistency after create, played where a test asks: a resource just created is
unknown to the next calls that name it (each with its kind's NotFound code), then found."""

import pytest

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.engine.test_engine_fleet import FLEET_MARKET, WEST, fleet, launched, overrides, template
from tests.engine.test_engine_market import error_of, launch


@pytest.fixture(scope="module")
def engine():
    with LocalEngine(MarketScenario.model_validate(FLEET_MARKET)) as account:
        yield account


def test_a_new_version_is_unknown_to_the_next_fleets_then_launches_them_once(engine):
    engine.faults.not_visible("launch-template-version", calls=2)
    lt = template(engine, WEST, "lagging-version")
    send = lambda: fleet(engine, WEST, lt, overrides(engine, WEST, "g5.xlarge", "a"), target=1, token="lag-1")  # noqa: E731
    for _ in range(2):
        assert error_of(send) == (
            "InvalidLaunchTemplateId.VersionNotFound", f"Could not find launch template version {lt[1]} for template {lt[0]}.")
    answer = send()
    assert launched(engine, WEST, answer) == {"a": 1}
    # The refused calls spent no token: the same token now answers the fleet that launched.
    assert send()["FleetId"] == answer["FleetId"] and not send()["Instances"]
    assert engine.faults.injected["visibility:launch-template-version"] == 2


def test_a_new_template_is_unknown_to_a_version_named_by_it(engine):
    engine.faults.not_visible("launch-template", calls=1)
    ec2 = engine.client("ec2", WEST)
    ec2.create_launch_template(LaunchTemplateName="lagging-template", LaunchTemplateData={"ImageId": "ami-x"})
    again = lambda: ec2.create_launch_template_version(LaunchTemplateName="lagging-template", LaunchTemplateData={})  # noqa: E731
    assert error_of(again)[0] == "InvalidLaunchTemplateName.NotFoundException"
    assert again()["LaunchTemplateVersion"]["VersionNumber"] == 2


def test_a_new_placement_group_is_unknown_to_the_next_launch(engine):
    engine.faults.not_visible("placement-group", calls=1, region=WEST)
    ec2 = engine.client("ec2", WEST)
    ec2.create_placement_group(GroupName="pg-lagging", Strategy="cluster")
    into = {"Placement": {"AvailabilityZone": f"{WEST}a", "GroupName": "pg-lagging"}, "InstanceType": "g6.2xlarge"}
    assert error_of(lambda: launch(engine, **into)) == ("InvalidPlacementGroup.Unknown", "The Placement Group 'pg-lagging' is unknown.")
    assert len(launch(engine, **into)) == 1


def test_a_new_security_group_is_unknown_to_a_fleet_override_then_found(engine):
    engine.faults.not_visible("security-group", calls=1)
    ec2 = engine.client("ec2", WEST)
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]["VpcId"]
    group = ec2.create_security_group(GroupName="sg-lagging", Description="new", VpcId=vpc)["GroupId"]
    lt = template(engine, WEST, "lagging-group", SecurityGroupIds=[group])
    first = fleet(engine, WEST, lt, overrides(engine, WEST, "g5.xlarge", "ab"), target=1)
    # EC2 lists the unknown group per override in a fleet that succeeded and launched nothing.
    assert not first["Instances"]
    assert {(e["ErrorCode"], e["ErrorMessage"]) for e in first["Errors"]} == {
        ("InvalidGroup.NotFound", f"The security group '{group}' does not exist")}
    assert sum(launched(engine, WEST, fleet(engine, WEST, lt, overrides(engine, WEST, "g5.xlarge", "ab"), target=1)).values()) == 1


def test_without_a_rule_everything_created_is_seen_at_once(engine):
    before = engine.faults.total
    ec2 = engine.client("ec2", WEST)
    ec2.create_placement_group(GroupName="pg-seen", Strategy="cluster")
    into = {"Placement": {"AvailabilityZone": f"{WEST}a", "GroupName": "pg-seen"}, "InstanceType": "g6.2xlarge"}
    assert len(launch(engine, **into)) == 1
    assert engine.faults.total == before
