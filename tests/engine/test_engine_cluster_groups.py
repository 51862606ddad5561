"""Cluster placement groups in the simulated EC2: named once per region, launched into only when
they exist, deleted only once empty, and holding no more than one cluster's room."""

from tests.engine.simulated_account import EAST, WEST
from tests.engine.test_engine_market import error_of, launch

def into(group: str) -> dict:
    return {"Placement": {"AvailabilityZone": f"{WEST}a", "GroupName": group}}


def test_a_group_name_is_taken_once_per_region(engine):
    ec2 = engine.client("ec2", WEST)
    ec2.create_placement_group(GroupName="pg-once", Strategy="cluster")
    assert error_of(lambda: ec2.create_placement_group(GroupName="pg-once", Strategy="cluster")) == (
        "InvalidPlacementGroup.Duplicate", "The Placement Group 'pg-once' already exists.")
    engine.client("ec2", EAST).create_placement_group(GroupName="pg-once", Strategy="cluster")


def test_a_launch_into_a_group_that_does_not_exist_is_refused(engine):
    assert error_of(lambda: launch(engine, **into("pg-missing"))) == (
        "InvalidPlacementGroup.Unknown", "The Placement Group 'pg-missing' is unknown.")


def test_a_group_is_deleted_only_once_its_instances_terminated(engine):
    ec2 = engine.client("ec2", WEST)
    ec2.create_placement_group(
        GroupName="pg-busy", Strategy="cluster",
        TagSpecifications=[{"ResourceType": "placement-group", "Tags": [{"Key": "gpufill:managed", "Value": "true"}]}],
    )
    ids = launch(engine, **into("pg-busy"))
    assert error_of(lambda: ec2.delete_placement_group(GroupName="pg-busy")) == (
        "InvalidPlacementGroup.InUse", "The placement group 'pg-busy' is in use and may not be deleted.")
    [found] = ec2.describe_placement_groups(Filters=[{"Name": "tag:gpufill:managed", "Values": ["true"]}])["PlacementGroups"]
    assert (found["GroupName"], found["Strategy"]) == ("pg-busy", "cluster")
    ec2.terminate_instances(InstanceIds=ids)
    ec2.delete_placement_group(GroupName="pg-busy")
    assert error_of(lambda: ec2.delete_placement_group(GroupName="pg-busy"))[0] == "InvalidPlacementGroup.Unknown"
