"""launch_mode "fleet" end to end on the local engine: one CreateFleet per region, records, teardown, exactly once."""

import base64

import boto3

from gpufill.adapters import aws
from tests.support import stack_names, tried, zone

TWO_REGIONS = {
    "regions": {
        "us-west-2": {"zones": {"us-west-2a": zone(0.40, spot=0), "us-west-2b": zone(0.50, spot=3)}},
        "us-east-1": {"zones": {"us-east-1a": zone(0.45, spot=4), "us-east-1b": zone(0.45, spot=0)}},
    }
}


def fleet_request(**fields):
    return {"launch_mode": "fleet", "regions": ["us-west-2", "us-east-1"], "scoring": "classic", **fields}


def test_one_fleet_per_region_fills_what_the_region_has_then_moves_on(local_account):
    with local_account(TWO_REGIONS) as engine:
        execution = engine.run(fleet_request(count=5), name="fleet-fill")
        table = boto3.resource("dynamodb", region_name="us-east-1").Table("GpuProvisioningInstances-local")
        records = {item["instance_id"]: item for item in table.scan()["Items"] if "kind" not in item}
        calls = execution.metrics["ec2_calls"]
    result = execution.output
    assert result["status"] == "FULFILLED" and result["launched"] == 5
    assert calls.get("CreateFleet") == 2 and not calls.get("RunInstances")
    regions = [i["region"] for i in result["instances"]]
    assert regions.count("us-west-2") == 3 and regions.count("us-east-1") == 2
    zones = sorted({i["availability_zone"] for i in result["instances"]})
    assert zones == ["us-east-1a", "us-west-2b"]
    # Each pool EC2 answered for is an attempt: the empty ones as capacity, the others with what landed.
    attempts = tried(execution)
    assert ("us-west-2a", 5, 0, "capacity") in attempts and ("us-west-2b", 5, 3, "launched") in attempts
    assert ("us-east-1a", 2, 2, "launched") in attempts
    # Every instance is recorded, under its own pool, with the fleet call's token.
    assert sorted(records) == sorted(i["instance_id"] for i in result["instances"])
    assert {r["availability_zone"] for r in records.values()} == {"us-west-2b", "us-east-1a"}


def test_the_fleet_launches_from_a_template_version_holding_the_hardened_settings(local_account):
    sent, made = [], []
    with local_account(TWO_REGIONS) as engine:
        events = aws.client("ec2", "us-west-2").meta.events
        events.register("provide-client-params.ec2.CreateFleet", lambda params, **_: sent.append(dict(params)))
        # The version is deleted once the fleet answered: what EC2 held is its creation's answer.
        events.register("after-call.ec2.CreateLaunchTemplateVersion", lambda parsed, **_: made.append(parsed))
        execution = engine.run(fleet_request(count=2, regions=["us-west-2"], root_volume_gib=100), name="fleet-settings")
        # what the stack deploys: its instance profile, and the startup bucket the functions are told of
        profile, bucket = stack_names(engine)
        ec2 = boto3.client("ec2", region_name="us-west-2")
        spec = sent[0]["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
        version = next(m["LaunchTemplateVersion"] for m in made if "LaunchTemplateVersion" in m)
        assert (version["LaunchTemplateId"], str(version["VersionNumber"])) == (spec["LaunchTemplateId"], spec["Version"])
        template = ec2.describe_launch_templates(LaunchTemplateIds=[spec["LaunchTemplateId"]])["LaunchTemplates"][0]
        described = ec2.describe_instances(InstanceIds=[i["instance_id"] for i in execution.output["instances"]])
    params = sent[0]
    assert params["Type"] == "instant"
    assert params["SpotOptions"]["AllocationStrategy"] == "price-capacity-optimized"
    assert params["TargetCapacitySpecification"] == {"TotalTargetCapacity": 2, "DefaultTargetCapacityType": "spot"}
    assert sorted(o["InstanceType"] for o in params["LaunchTemplateConfigs"][0]["Overrides"]) == ["g6.xlarge", "g6.xlarge"]
    assert template["LaunchTemplateName"] == "gpufill-local"
    data = version["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1 and data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["IamInstanceProfile"] == {"Arn": profile}
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 100
    assert f"s3://{bucket}/scripts/startup.sh" in base64.b64decode(data["UserData"]).decode()
    # Teardown and status find fleet instances by the same tags as any other.
    for reservation in described["Reservations"]:
        for instance in reservation["Instances"]:
            tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
            assert tags["gpufill:request-id"] == "fleet-settings" and tags["gpufill:deployment"] == "local"
            assert tags["gpufill:managed"] == "true"
    assert execution.output["status"] == "FULFILLED"


def test_a_second_run_reuses_the_template_and_adds_a_version_of_its_own_for_its_time(local_account):
    with local_account(TWO_REGIONS) as engine:
        engine.run(fleet_request(count=1, regions=["us-west-2"]), name="first")
        engine.run(fleet_request(count=1, regions=["us-west-2"]), name="second")
        ec2 = boto3.client("ec2", region_name="us-west-2")
        templates = ec2.describe_launch_templates()["LaunchTemplates"]
        versions = ec2.describe_launch_template_versions(LaunchTemplateName="gpufill-local")["LaunchTemplateVersions"]
    assert [t["LaunchTemplateName"] for t in templates] == ["gpufill-local"]
    # Each run's version is deleted when the run ends: the base version alone stays.
    assert [(v["VersionNumber"], v["DefaultVersion"]) for v in versions] == [(1, True)]
    assert templates[0]["DefaultVersionNumber"] == 1


def test_an_exhausted_fleet_names_every_pool_it_found_empty(local_account):
    empty = {"regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.4, spot=0), "us-west-2b": zone(0.5, spot=0)}}}}
    with local_account(empty) as engine:
        execution = engine.run(fleet_request(count=2, regions=["us-west-2"]), name="fleet-empty")
    assert execution.error == "ALL_SPOT_EXHAUSTED"
    assert sorted(tried(execution)) == [("us-west-2a", 2, 0, "capacity"), ("us-west-2b", 2, 0, "capacity")]




def test_a_same_az_gang_is_placed_whole_by_one_fleet_with_no_rollback(local_account):
    # Oregon has 5 in all but no AZ with 4; Virginia's 1a holds all 4.
    market = {"regions": {
        "us-west-2": {"zones": {"us-west-2a": zone(0.40, spot=3), "us-west-2b": zone(0.41, spot=2)}},
        "us-east-1": {"zones": {"us-east-1a": zone(0.45, spot=4), "us-east-1b": zone(0.44, spot=1)}},
    }}
    sent = []
    with local_account(market) as engine:
        for region in ("us-west-2", "us-east-1"):
            aws.client("ec2", region).meta.events.register(
                "provide-client-params.ec2.CreateFleet", lambda params, **_: sent.append(dict(params)))
        execution = engine.run(fleet_request(count=4, placement="same-az", all_or_nothing=True), name="fleet-gang")
    assert execution.output["status"] == "FULFILLED"
    assert {i["availability_zone"] for i in execution.output["instances"]} == {"us-east-1a"}
    assert "RollBackGang" not in execution.entered()
    # EC2 is asked for one AZ and all four or nothing: Oregon launches nothing.
    assert [(p["SpotOptions"]["SingleAvailabilityZone"], p["SpotOptions"]["MinTargetCapacity"]) for p in sent] == [
        (True, 4), (True, 4)]
    assert [a[3] for a in tried(execution)].count("launched") == 1


def test_a_template_at_its_version_quota_ends_the_run_saying_how_to_clear_it(local_account, monkeypatch):
    from gpufill.local import limits

    monkeypatch.setattr(limits, "MAX_LAUNCH_TEMPLATE_VERSIONS", 2)  # EC2's is 10,000
    with local_account(TWO_REGIONS) as engine:
        first = engine.run(fleet_request(count=1, regions=["us-west-2"]), name="fits")
        ec2 = boto3.client("ec2", region_name="us-west-2")
        # A version left behind (its deletion failed) fills the template.
        ec2.create_launch_template_version(LaunchTemplateName="gpufill-local", LaunchTemplateData={"ImageId": "ami-1"})
        execution = engine.run(fleet_request(count=1, regions=["us-west-2"]), name="full")
    assert first.output["status"] == "FULFILLED"  # its own version was deleted, so it never counted
    assert execution.error == "LAUNCH_REJECTED"
    assert execution.cause["code"] == "VersionLimitExceeded" and execution.cause["launched"] == 0
    assert "10,000 versions" in execution.cause["what_to_change"]
    assert "delete-launch-template-versions" in execution.cause["what_to_change"]
