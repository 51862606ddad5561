"""The simulated EC2 answers as EC2 does where gpufill's correctness depends on it."""

import base64

import pytest
from botocore.exceptions import ClientError

from gpufill.local.deploy.images import LOCAL_AMI, LOCAL_AMI_ROOT_SNAPSHOT_GIB

from tests.engine.simulated_account import EAST, IRELAND, WEST


def launch(engine, region=WEST, zone="a", token=None, **overrides):
    params = {
        "ImageId": LOCAL_AMI,
        "InstanceType": "g6.xlarge",
        "MinCount": 1,
        "MaxCount": 1,
        "Placement": {"AvailabilityZone": f"{region}{zone}"},
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}],
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "team", "Value": "ml"}]}],
    }
    if token:
        params["ClientToken"] = token
    params.update(overrides)
    return [i["InstanceId"] for i in engine.client("ec2", region).run_instances(**params)["Instances"]]


def error_of(call) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response["Error"]["Code"], caught.value.response["Error"]["Message"]


def test_a_reused_client_token_returns_the_first_launch_even_in_another_zone(engine):
    first = launch(engine, token="same-token-1")
    assert launch(engine, zone="b", token="same-token-1") == first


@pytest.mark.parametrize(
    "change",
    [
        {"ImageId": "ami-0fedcba9876543210"},
        {"UserData": base64.b64encode(b"#!/bin/sh\necho other").decode()},
        {"TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "team", "Value": "other"}]}]},
        {"MaxCount": 2},
        {"BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 200}}]},
        {"MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}},
        {"InstanceMarketOptions": {"MarketType": "spot"}},
    ],
    ids=["image", "user-data", "tags", "count", "block-devices", "metadata", "market"],
)
def test_a_reused_client_token_with_another_parameter_is_a_mismatch(engine, change):
    token = f"mismatch-{sorted(change)[0]}"
    launch(engine, token=token)
    code, _ = error_of(lambda: launch(engine, token=token, **change))
    assert code == "IdempotentParameterMismatch"


def test_the_same_client_token_in_another_region_launches_anew(engine):
    west = launch(engine, WEST, token="regional-token")
    east = launch(engine, EAST, token="regional-token")
    assert west and east and set(west).isdisjoint(east)


def test_describe_instances_finds_a_launch_by_client_token(engine):
    ids = launch(engine, token="find-me-by-token")
    ec2 = engine.client("ec2", WEST)
    for _ in range(engine.visibility_delay_calls):  # let EC2's view catch up
        ec2.describe_instances(Filters=[{"Name": "client-token", "Values": ["find-me-by-token"]}])
    reply = ec2.describe_instances(Filters=[{"Name": "client-token", "Values": ["find-me-by-token"]}])
    assert [i["InstanceId"] for r in reply["Reservations"] for i in r["Instances"]] == ids
    nothing = ec2.describe_instances(Filters=[{"Name": "client-token", "Values": ["never-used"]}])
    assert nothing["Reservations"] == []


def test_a_brand_new_instance_is_not_yet_visible_to_describe_instances(engine):
    ec2 = engine.client("ec2", EAST)
    [instance_id] = launch(engine, EAST, zone="c")
    code, message = error_of(lambda: ec2.describe_instances(InstanceIds=[instance_id]))
    assert code == "InvalidInstanceID.NotFound" and instance_id in message
    reply = ec2.describe_instances(InstanceIds=[instance_id])
    assert reply["Reservations"][0]["Instances"][0]["InstanceId"] == instance_id


def test_a_brand_new_instance_is_absent_from_a_filtered_describe(engine):
    ec2 = engine.client("ec2", EAST)
    [instance_id] = launch(engine, EAST, zone="d")
    seen = lambda: {i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}  # noqa: E731
    assert instance_id not in seen()
    assert instance_id in seen()


def test_the_public_ami_reports_its_root_snapshot_and_a_smaller_root_volume_is_refused(engine):
    [image] = engine.client("ec2", WEST).describe_images(ImageIds=[LOCAL_AMI])["Images"]
    assert image["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == LOCAL_AMI_ROOT_SNAPSHOT_GIB
    small = [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 40}}]
    code, message = error_of(lambda: launch(engine, BlockDeviceMappings=small))
    assert code == "InvalidBlockDeviceMapping"
    assert message.startswith("Volume of size 40GB is smaller than snapshot 'snap-")
    assert message.endswith(f"expect size >= {LOCAL_AMI_ROOT_SNAPSHOT_GIB}GB")


def tags(n, key="k", value="v"):
    return [{"ResourceType": "instance", "Tags": [{"Key": f"{key}{i}", "Value": value} for i in range(n)]}]


@pytest.mark.parametrize(
    "specs, code",
    [
        (tags(51), "TagLimitExceeded"),
        (tags(1, key="k" * 129), "InvalidParameterValue"),
        (tags(1, value="v" * 257), "InvalidParameterValue"),
        (tags(1, key="aws:owner"), "InvalidParameterValue"),
    ],
    ids=["51-tags", "long-key", "long-value", "aws-prefix"],
)
def test_run_instances_enforces_ec2_tag_limits(engine, specs, code):
    assert error_of(lambda: launch(engine, TagSpecifications=specs))[0] == code


def test_run_instances_accepts_the_most_tags_ec2_allows(engine):
    assert launch(engine, TagSpecifications=tags(50, key="k" * 120, value="v" * 256))


def test_user_data_over_16_kb_is_refused(engine):
    assert launch(engine, UserData="x" * 16384)
    code, _ = error_of(lambda: launch(engine, UserData="x" * 16385))
    assert code == "InvalidParameterValue"


def scores(engine, types, regions=(WEST, EAST), capacity=1):
    reply = engine.client("ec2", EAST).get_spot_placement_scores(
        InstanceTypes=list(types), TargetCapacity=capacity, SingleAvailabilityZone=True, RegionNames=list(regions)
    )
    return reply["SpotPlacementScores"]


def test_placement_scores_for_one_or_two_types_are_always_low(engine):
    assert {s["Score"] for s in scores(engine, ["g6.xlarge"])} == {3}
    assert {s["Score"] for s in scores(engine, ["g6.xlarge", "g5.xlarge"])} == {3}


def test_placement_scores_for_three_types_keep_the_markets_scores_top_10_best_first(engine):
    # 12 zones are scored (Ireland's 3 lowest, asked for first): AWS answers the 10 best.
    found = scores(engine, ["g6.xlarge", "g5.xlarge", "g6.2xlarge"], regions=(IRELAND, WEST, EAST))
    assert [s["Score"] for s in found] == [9, 9, 9, 8, 8, 8, 8, 8, 8, 7]


def test_region_level_placement_scores_name_regions_not_zones_with_the_same_caps(engine):
    """SingleAvailabilityZone=false (AWS's default): one score per region, for a fleet free to use every AZ."""

    def region_scores(types, regions):
        return engine.client("ec2", EAST).get_spot_placement_scores(
            InstanceTypes=list(types), TargetCapacity=1, SingleAvailabilityZone=False, RegionNames=list(regions)
        )["SpotPlacementScores"]

    three = region_scores(["g6.xlarge", "g5.xlarge", "g6.2xlarge"], (IRELAND, WEST, EAST))
    assert [(s["Region"], s["Score"]) for s in three] == [(WEST, 9), (EAST, 8), (IRELAND, 7)]
    assert all("AvailabilityZoneId" not in s for s in three)
    assert {s["Score"] for s in region_scores(["g6.xlarge"], (WEST, EAST))} == {3}


def test_more_than_10_placement_score_regions_are_refused_as_ec2_does(engine):
    eleven = [WEST, EAST, IRELAND] + [f"ap-south-{n}" for n in range(8)]
    configurations = len(engine.market._placement_configurations)
    code, message = error_of(lambda: scores(engine, ["g6.xlarge", "g5.xlarge", "g6.2xlarge"], regions=eleven))
    assert code == "InvalidParameterValue" and "RegionNames" in message and "10" in message
    assert len(engine.market._placement_configurations) == configurations  # a refused call is no configuration


def test_distinct_placement_configurations_are_limited_per_day(engine):
    engine.market.placement_configurations_per_day = len(engine.market._placement_configurations) + 1
    try:
        scores(engine, ["g6.xlarge"], capacity=7)
        scores(engine, ["g6.xlarge"], capacity=7)  # the same configuration again is allowed
        code, message = error_of(lambda: scores(engine, ["g6.xlarge"], capacity=8))
        assert code == "MaxConfigLimitExceeded" and "24 hours" in message
    finally:
        engine.market.placement_configurations_per_day = 10_000


@pytest.mark.parametrize(("call", "params", "name"), [
    # The filter the placement scores' AZ ids are read with: moto alone ignores a misspelt one.
    ("describe_availability_zones", {}, "zone_type"),
    # moto alone answers a misspelt one with no offerings at all, as if the region had no GPUs.
    ("describe_instance_type_offerings", {"LocationType": "availability-zone"}, "instance_type"),
    ("describe_instances", {}, "instance-state"),
    ("describe_spot_price_history", {}, "product_description"),
])
def test_a_filter_name_ec2_does_not_know_is_refused_as_ec2_does(engine, call, params, name):
    ec2 = engine.client("ec2", WEST)
    code, message = error_of(lambda: getattr(ec2, call)(Filters=[{"Name": name, "Values": ["x"]}], **params))
    assert (code, message) == ("InvalidParameterValue", f"The filter '{name}' is invalid")


def test_the_filters_gpufill_uses_are_accepted(engine):
    ec2 = engine.client("ec2", WEST)
    zones = ec2.describe_availability_zones(Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}])
    assert zones["AvailabilityZones"]
    offers = ec2.describe_instance_type_offerings(LocationType="availability-zone",
                                                  Filters=[{"Name": "instance-type", "Values": ["g6.xlarge"]}])
    assert offers["InstanceTypeOfferings"]
    ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["running"]},
                                    {"Name": "tag:gpufill:managed", "Values": ["true"]},
                                    {"Name": "client-token", "Values": ["none"]}])


def test_a_terminated_instance_frees_its_capacity_in_its_pool_once(engine):
    left = engine.market.left(WEST, f"{WEST}a", "g6.xlarge", "on-demand")
    [instance] = launch(engine)
    assert engine.market.left(WEST, f"{WEST}a", "g6.xlarge", "on-demand") == left - 1
    ec2 = engine.client("ec2", WEST)
    ec2.describe_instances()  # EC2 shows a new instance after a lag (one call here)
    ec2.terminate_instances(InstanceIds=[instance])
    assert engine.market.left(WEST, f"{WEST}a", "g6.xlarge", "on-demand") == left
    ec2.terminate_instances(InstanceIds=[instance])  # already ending: nothing more is freed
    assert engine.market.left(WEST, f"{WEST}a", "g6.xlarge", "on-demand") == left
