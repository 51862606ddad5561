"""CreateFleet (instant) and launch templates in the simulated EC2 answer as a scarce market
does (its own simulated account: each test reads its own pools, by region and type)."""

import base64

import pytest

from gpufill.local.deploy.images import LOCAL_AMI
from gpufill.local.engine import LocalEngine
from gpufill.local.fleet_allocation import CAPACITY, QUOTA, Pool, allocate
from gpufill.local.scenario import MarketScenario
from tests.engine.test_engine_market import error_of

WEST, EAST, OHIO, IRELAND, TOKYO = "us-west-2", "us-east-1", "us-east-2", "eu-west-1", "ap-northeast-1"


def pool(spot=0, on_demand=0, price=0.4):
    return {"spot_price": price, "spot": spot, "on_demand": on_demand}


FLEET_MARKET = {
    "regions": {
        WEST: {
            "zones": {
                f"{WEST}a": {"g6.xlarge": pool(spot=2, price=0.40), "g5.xlarge": pool(spot=10, price=0.50),
                             "g6.2xlarge": pool(on_demand=3)},
                f"{WEST}b": {"g6.xlarge": pool(spot=1, price=0.45), "g5.xlarge": pool(spot=4, price=0.30),
                             "g6.2xlarge": pool(on_demand=3)},
                f"{WEST}c": {"g6.xlarge": pool(spot=0, price=0.30), "g5.xlarge": pool(spot=6, price=0.40),
                             "g6.2xlarge": pool(on_demand=3)},
            }
        },
        OHIO: {
            "quota": {"spot_vcpus": 16, "on_demand_vcpus": 8},
            "zones": {f"{OHIO}a": {"g6.xlarge": pool(spot=3, on_demand=5)}, f"{OHIO}b": {"g6.xlarge": pool(spot=3)}},
        },
        EAST: {
            "zones": {
                f"{EAST}a": {"g6.xlarge": pool(spot=2, price=0.30), "g6.2xlarge": pool(on_demand=1)},
                f"{EAST}b": {"g6.xlarge": pool(spot=3, price=0.50), "g5.xlarge": pool(spot=2, price=0.50),
                             "g6.2xlarge": pool(on_demand=6)},
                f"{EAST}c": {"g6.xlarge": pool(spot=4, price=0.60), "g6.2xlarge": pool(on_demand=2)},
            }
        },
        IRELAND: {"zones": {f"{IRELAND}{z}": {"g6.xlarge": pool(spot=2, on_demand=9)} for z in "ab"}},
        TOKYO: {"zones": {f"{TOKYO}{z}": {"g6.xlarge": pool(spot=20, on_demand=20)} for z in "ac"}},
    }
}


@pytest.fixture(scope="module")
def engine():
    with LocalEngine(MarketScenario.model_validate(FLEET_MARKET)) as account:
        yield account


def subnets(engine, region) -> dict[str, str]:
    reply = engine.client("ec2", region).describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])
    return {s["AvailabilityZone"]: s["SubnetId"] for s in reply["Subnets"]}


TEMPLATE_DATA = {
    "ImageId": LOCAL_AMI,
    "UserData": base64.b64encode(b"#!/bin/sh\necho gpufill").decode(),
    "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1},
    "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100, "VolumeType": "gp3"}}],
    "InstanceInitiatedShutdownBehavior": "terminate",
    "TagSpecifications": [
        {"ResourceType": "instance", "Tags": [{"Key": "gpufill:request", "Value": "r-1"}]},
        {"ResourceType": "volume", "Tags": [{"Key": "gpufill:request", "Value": "r-1"}]},
    ],
}


def template(engine, region, name, **data) -> tuple[str, str]:
    """(template id, version) of a new launch template with one version beyond the first."""
    ec2 = engine.client("ec2", region)
    created = ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={"ImageId": LOCAL_AMI})
    template_id = created["LaunchTemplate"]["LaunchTemplateId"]
    version = ec2.create_launch_template_version(LaunchTemplateId=template_id, LaunchTemplateData={**TEMPLATE_DATA, **data})
    return template_id, str(version["LaunchTemplateVersion"]["VersionNumber"])


def fleet(engine, region, lt, overrides, target, market="spot", strategy=None, token=None, spot=None, on_demand=None, tags=None):
    request = {
        "Type": "instant",
        "LaunchTemplateConfigs": [
            {"LaunchTemplateSpecification": {"LaunchTemplateId": lt[0], "Version": lt[1]}, "Overrides": overrides}
        ],
        "TargetCapacitySpecification": {"TotalTargetCapacity": target, "DefaultTargetCapacityType": market},
        "SpotOptions": {"AllocationStrategy": strategy or "price-capacity-optimized", "InstanceInterruptionBehavior": "terminate", **(spot or {})},
        "OnDemandOptions": {"AllocationStrategy": strategy or "lowest-price", **(on_demand or {})},
        "TagSpecifications": [{"ResourceType": "fleet", "Tags": [{"Key": "gpufill:request", "Value": "r-1"}]}, *(tags or [])],
    }
    if market == "spot":
        del request["OnDemandOptions"]
    else:
        del request["SpotOptions"]
    if token:
        request["ClientToken"] = token
    return engine.client("ec2", region).create_fleet(**request)


def overrides(engine, region, instance_type, zones, **extra):
    ids = subnets(engine, region)
    return [{"InstanceType": instance_type, "SubnetId": ids[f"{region}{z}"], **extra} for z in zones]


def launched(engine, region, answer) -> dict[str, int]:
    """Instances launched per zone."""
    zones = {v: k for k, v in subnets(engine, region).items()}
    found: dict[str, int] = {}
    for entry in answer["Instances"]:
        zone = zones[entry["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"]][-1]
        found[zone] = found.get(zone, 0) + len(entry["InstanceIds"])
    return found


def errors(engine, region, answer) -> dict[str, str]:
    """Error code per zone."""
    zones = {v: k for k, v in subnets(engine, region).items()}
    return {zones[e["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"]][-1]: e["ErrorCode"] for e in answer["Errors"]}


# --- allocation ---------------------------------------------------------------------------------


def test_a_fleet_launches_what_it_can_and_lists_every_empty_override(engine):
    lt = template(engine, WEST, "partial")
    answer = fleet(engine, WEST, lt, overrides(engine, WEST, "g6.xlarge", "abc"), target=5)
    assert launched(engine, WEST, answer) == {"a": 2, "b": 1}
    assert errors(engine, WEST, answer) == dict.fromkeys("abc", "InsufficientInstanceCapacity")
    assert all(e["Lifecycle"] == "spot" for e in answer["Instances"] + answer["Errors"])


def test_price_capacity_optimized_takes_the_cheapest_pool_that_holds_the_whole_target_else_the_deepest(engine):
    lt = template(engine, WEST, "pco")
    sent = overrides(engine, WEST, "g5.xlarge", "abc")  # a: 10 at 0.50, b: 4 at 0.30, c: 6 at 0.40
    cheapest_whole = fleet(engine, WEST, lt, sent, target=4)
    assert launched(engine, WEST, cheapest_whole) == {"b": 4} and cheapest_whole["Errors"] == []
    deepest_first = fleet(engine, WEST, lt, sent, target=12)  # no pool holds 12 now: a (10), then c
    assert launched(engine, WEST, deepest_first) == {"a": 10, "c": 2}
    assert errors(engine, WEST, deepest_first) == {"b": "InsufficientInstanceCapacity"}  # emptied by the first fleet


def test_prioritized_on_demand_follows_the_priorities_not_the_order_sent(engine):
    lt = template(engine, WEST, "prioritized")
    ids = subnets(engine, WEST)
    sent = [
        {"InstanceType": "g6.2xlarge", "SubnetId": ids[f"{WEST}{z}"], "Priority": p}
        for z, p in (("a", 1.0), ("b", 2.0), ("c", 0.0))
    ]
    answer = fleet(engine, WEST, lt, sent, target=5, market="on-demand", strategy="prioritized")
    assert launched(engine, WEST, answer) == {"c": 3, "a": 2}
    assert list(launched(engine, WEST, answer)) == ["c", "a"]
    assert answer["Instances"][0]["Lifecycle"] == "on-demand" and answer["Errors"] == []


def test_the_vcpu_quota_lets_an_override_launch_up_to_it_then_answers_the_quota_error(engine):
    lt = template(engine, OHIO, "quota")
    spot = fleet(engine, OHIO, lt, overrides(engine, OHIO, "g6.xlarge", "ab"), target=6)  # 16 vCPUs: 4 instances
    assert launched(engine, OHIO, spot) == {"a": 3, "b": 1}
    # b launched up to the quota and refused the rest; a, emptied by a fleet that fell short, says so too.
    assert errors(engine, OHIO, spot) == {"a": "InsufficientInstanceCapacity", "b": "MaxSpotInstanceCountExceeded"}
    on_demand = fleet(engine, OHIO, lt, overrides(engine, OHIO, "g6.xlarge", "a"), target=3, market="on-demand")
    assert launched(engine, OHIO, on_demand) == {"a": 2}  # 8 vCPUs
    assert errors(engine, OHIO, on_demand) == {"a": "VcpuLimitExceeded"}
    again = fleet(engine, OHIO, lt, overrides(engine, OHIO, "g6.xlarge", "a"), target=1, market="on-demand")
    assert launched(engine, OHIO, again) == {} and errors(engine, OHIO, again) == {"a": "VcpuLimitExceeded"}


def test_single_availability_zone_puts_the_fleet_in_the_zone_that_holds_the_most(engine):
    lt = template(engine, EAST, "single-az")
    ids = subnets(engine, EAST)
    sent = overrides(engine, EAST, "g6.xlarge", "abc") + [{"InstanceType": "g5.xlarge", "SubnetId": ids[f"{EAST}b"]}]
    # a: 2, b: 3 + 2 of g5, c: 4 -- only b holds 5; without the option the fleet would spread.
    answer = fleet(engine, EAST, lt, sent, target=5, spot={"SingleAvailabilityZone": True})
    assert launched(engine, EAST, answer) == {"b": 5}
    assert {e["InstanceType"] for e in answer["Instances"]} == {"g6.xlarge", "g5.xlarge"}


def test_min_target_capacity_launches_nothing_when_the_fleet_cannot_reach_it(engine):
    lt = template(engine, IRELAND, "min-target")
    sent = overrides(engine, IRELAND, "g6.xlarge", "ab")  # 2 spot in each zone
    single = {"SingleAvailabilityZone": True, "MinTargetCapacity": 3}
    short = fleet(engine, IRELAND, lt, sent, target=4, spot=single)
    assert short["Instances"] == []
    # EC2 tried the zone it picked; the other one it never tried answers UnfulfillableCapacity.
    assert errors(engine, IRELAND, short) == {"a": "InsufficientInstanceCapacity", "b": "UnfulfillableCapacity"}
    enough = fleet(engine, IRELAND, lt, sent, target=4, spot={**single, "MinTargetCapacity": 2})
    assert list(launched(engine, IRELAND, enough).values()) == [2]  # nothing was spent by the refused fleet
    code, _ = error_of(lambda: fleet(engine, IRELAND, lt, sent, target=4, spot={"MinTargetCapacity": 2}))
    assert code == "InvalidParameterCombination"


def test_allocation_strategies_order_the_pools_as_ec2_documents():
    pools = [Pool("deep", 8, price=0.5), Pool("cheap", 2, price=0.2), Pool("mid", 5, price=0.3, priority=0.0)]
    assert allocate(pools, 4, "capacity-optimized").counts == {"deep": 4}
    assert allocate(pools, 4, "lowest-price").counts == {"cheap": 2, "mid": 2}
    assert allocate(pools, 4, "price-capacity-optimized").counts == {"mid": 4}
    assert allocate(pools, 4, "prioritized").counts == {"mid": 4}
    quota = allocate(pools, 4, "capacity-optimized", quota_vcpus=8)  # two 4-vCPU instances
    assert quota.counts == {"deep": 2} and quota.errors == dict.fromkeys(("deep", "cheap", "mid"), QUOTA)
    short = allocate(pools, 20, "lowest-price")
    assert short.total == 15 and short.errors == dict.fromkeys(("deep", "cheap", "mid"), CAPACITY)


# --- idempotency ---------------------------------------------------------------------------------


def test_a_retried_fleet_answers_its_fleet_id_without_instances_and_launches_nothing(engine):
    lt = template(engine, TOKYO, "retry")
    sent = overrides(engine, TOKYO, "g6.xlarge", "ac")
    first = fleet(engine, TOKYO, lt, sent, target=3, token="fleet-token-1")
    again = fleet(engine, TOKYO, lt, sent, target=3, token="fleet-token-1")
    assert sum(launched(engine, TOKYO, first).values()) == 3
    # EC2 promises only that the retry "succeeds without performing any further actions".
    assert (again["FleetId"], again["Instances"], again["Errors"]) == (first["FleetId"], [], [])
    ec2 = engine.client("ec2", TOKYO)
    by_fleet = [{"Name": "tag:aws:ec2:fleet-id", "Values": [first["FleetId"]]}]
    for _ in range(engine.visibility_delay_calls + 1):
        reply = ec2.describe_instances(Filters=by_fleet)
    assert sum(len(r["Instances"]) for r in reply["Reservations"]) == 3
    code, _ = error_of(lambda: fleet(engine, TOKYO, lt, sent, target=4, token="fleet-token-1"))
    assert code == "IdempotentParameterMismatch"


def test_describe_fleets_tells_what_an_instant_fleet_launched_when_its_id_is_named(engine):
    lt = template(engine, TOKYO, "describe")
    answer = fleet(engine, TOKYO, lt, overrides(engine, TOKYO, "g6.xlarge", "a"), target=2, token="fleet-token-d")
    ec2 = engine.client("ec2", TOKYO)
    [described] = ec2.describe_fleets(FleetIds=[answer["FleetId"]])["Fleets"]
    assert (described["Type"], described["ClientToken"]) == ("instant", "fleet-token-d")
    assert [i["InstanceIds"] for i in described["Instances"]] == [i["InstanceIds"] for i in answer["Instances"]]
    assert described["Errors"] == answer["Errors"]
    # Without its id an instant fleet is not described.
    assert answer["FleetId"] not in {f["FleetId"] for f in ec2.describe_fleets()["Fleets"]}


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "InternalError", "InsufficientFreeAddressesInSubnet",
                                  "AuthFailure.ServiceLinkedRoleCreationNotPermitted", "UnauthorizedOperation"])
def test_a_fleet_may_succeed_with_an_error_for_overrides_it_did_not_try(engine, code):
    lt = template(engine, TOKYO, f"busy-{code}")
    sent = overrides(engine, TOKYO, "g6.xlarge", "ac")
    engine.faults.fleet_errors(code, region=TOKYO, overrides=1)
    answer = fleet(engine, TOKYO, lt, sent, target=2)
    assert errors(engine, TOKYO, answer) == {"a": code}
    assert launched(engine, TOKYO, answer) == {"c": 2}
    engine.faults.fleet_errors(code, region=TOKYO, unnamed=True)
    answer = fleet(engine, TOKYO, lt, sent, target=2)
    assert answer["Instances"] == [] and [(e.get("LaunchTemplateAndOverrides"), e["ErrorCode"]) for e in answer["Errors"]] == [(None, code)]


def test_a_single_zone_fleet_short_of_its_target_names_the_zones_it_did_not_try_unfulfillable(engine):
    lt = template(engine, IRELAND, "untried")
    answer = fleet(engine, IRELAND, lt, overrides(engine, IRELAND, "g6.xlarge", "ab"), target=50,
                   market="on-demand", on_demand={"SingleAvailabilityZone": True})
    [(zone, count)] = launched(engine, IRELAND, answer).items()
    other = "b" if zone == "a" else "a"
    assert errors(engine, IRELAND, answer)[other] == "UnfulfillableCapacity"


def test_launch_templates_and_versions_are_idempotent_by_client_token(engine):
    ec2 = engine.client("ec2", TOKYO)
    code, _ = error_of(lambda: ec2.describe_launch_templates(LaunchTemplateNames=["gpufill-idem"]))
    assert code == "InvalidLaunchTemplateName.NotFoundException"
    tags = [{"ResourceType": "launch-template", "Tags": [{"Key": "gpufill:env", "Value": "dev"}]}]
    create = lambda token, image=LOCAL_AMI: ec2.create_launch_template(  # noqa: E731
        LaunchTemplateName="gpufill-idem", ClientToken=token, LaunchTemplateData={"ImageId": image}, TagSpecifications=tags
    )
    first = create("lt-token")["LaunchTemplate"]
    assert create("lt-token")["LaunchTemplate"]["LaunchTemplateId"] == first["LaunchTemplateId"]
    assert error_of(lambda: create("lt-token", image="ami-0fedcba9876543210"))[0] == "IdempotentParameterMismatch"
    assert error_of(lambda: create("other-token"))[0] == "InvalidLaunchTemplateName.AlreadyExistsException"
    assert len(ec2.describe_launch_templates(LaunchTemplateNames=["gpufill-idem"])["LaunchTemplates"]) == 1

    version = lambda token, data=TEMPLATE_DATA: ec2.create_launch_template_version(  # noqa: E731
        LaunchTemplateId=first["LaunchTemplateId"], ClientToken=token, LaunchTemplateData=data
    )["LaunchTemplateVersion"]["VersionNumber"]
    assert version("v-token") == version("v-token") == 2
    assert error_of(lambda: version("v-token", {**TEMPLATE_DATA, "ImageId": "ami-0fedcba9876543210"}))[0] == "IdempotentParameterMismatch"
    assert version("v-token-2") == 3
    versions = ec2.describe_launch_template_versions(LaunchTemplateId=first["LaunchTemplateId"])["LaunchTemplateVersions"]
    assert sorted(v["VersionNumber"] for v in versions) == [1, 2, 3]


def test_deleted_versions_are_gone_for_good_and_the_default_version_stays(engine):
    ec2 = engine.client("ec2", TOKYO)
    template_id, _ = template(engine, TOKYO, "deleting")
    version = lambda token: ec2.create_launch_template_version(  # noqa: E731
        LaunchTemplateId=template_id, ClientToken=token, LaunchTemplateData=TEMPLATE_DATA
    )["LaunchTemplateVersion"]["VersionNumber"]
    third = version("third")
    answer = ec2.delete_launch_template_versions(LaunchTemplateId=template_id, Versions=["1", str(third), "99"])
    assert [v["VersionNumber"] for v in answer["SuccessfullyDeletedLaunchTemplateVersions"]] == [third]
    refused = {v["VersionNumber"]: v["ResponseError"]["Code"] for v in answer["UnsuccessfullyDeletedLaunchTemplateVersions"]}
    assert refused == {1: "unexpectedError", 99: "launchTemplateVersionDoesNotExist"}
    code, _ = error_of(lambda: ec2.describe_launch_template_versions(LaunchTemplateId=template_id, Versions=[str(third)]))
    assert code == "InvalidLaunchTemplateId.VersionNotFound"
    # Numbers are never reused; the token of a deleted version answers that version again.
    assert version("fourth") == third + 1
    assert version("third") == third
    listed = ec2.describe_launch_template_versions(LaunchTemplateId=template_id)["LaunchTemplateVersions"]
    assert sorted(v["VersionNumber"] for v in listed) == [1, 2, third + 1]
    code, _ = error_of(lambda: fleet(engine, TOKYO, (template_id, str(third)), overrides(engine, TOKYO, "g6.xlarge", "c"), target=1))
    assert code == "InvalidLaunchTemplateId.VersionNotFound"


def test_a_template_holds_at_most_its_quota_of_versions_deleted_ones_not_counted(engine, monkeypatch):
    from gpufill.local import limits

    monkeypatch.setattr(limits, "MAX_LAUNCH_TEMPLATE_VERSIONS", 3)
    ec2 = engine.client("ec2", TOKYO)
    template_id, second = template(engine, TOKYO, "quota")
    add = lambda: ec2.create_launch_template_version(LaunchTemplateId=template_id, LaunchTemplateData=TEMPLATE_DATA)  # noqa: E731
    add()
    code, message = error_of(add)
    assert code == "VersionLimitExceeded" and "(3)" in message
    ec2.delete_launch_template_versions(LaunchTemplateId=template_id, Versions=[second])
    assert add()["LaunchTemplateVersion"]["VersionNumber"] == 4


# --- the instances and the whole-call errors ------------------------------------------------------


def test_fleet_instances_carry_the_templates_settings_and_tags_and_are_seen_by_describe_instances(engine):
    profile = engine.client("iam").create_instance_profile(InstanceProfileName="gpufill-fleet-test")["InstanceProfile"]
    lt = template(engine, TOKYO, "tagged", IamInstanceProfile={"Arn": profile["Arn"]})
    instance_tags = [{"ResourceType": "instance", "Tags": [{"Key": "gpufill:fleet-run", "Value": "run-9"}]}]
    answer = fleet(engine, TOKYO, lt, overrides(engine, TOKYO, "g6.xlarge", "c"), target=2, tags=instance_tags)
    [entry] = answer["Instances"]
    ec2 = engine.client("ec2", TOKYO)
    code, _ = error_of(lambda: ec2.describe_instances(InstanceIds=entry["InstanceIds"]))
    assert code == "InvalidInstanceID.NotFound"  # EC2's view lags, as for RunInstances
    seen = [i for r in ec2.describe_instances(InstanceIds=entry["InstanceIds"])["Reservations"] for i in r["Instances"]]
    assert len(seen) == 2
    for instance in seen:
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags["aws:ec2:fleet-id"] == answer["FleetId"]
        assert tags["gpufill:request"] == "r-1" and tags["gpufill:fleet-run"] == "run-9"
        assert instance["Placement"]["AvailabilityZone"] == f"{TOKYO}c"
        assert instance["InstanceLifecycle"] == "spot" and instance["ImageId"] == LOCAL_AMI
        assert instance["IamInstanceProfile"]["Arn"] == profile["Arn"]
    ec2.terminate_instances(InstanceIds=entry["InstanceIds"])
    # EC2 takes CreateFleet's instance tags for instant fleets only.
    code, _ = error_of(lambda: ec2.create_fleet(
        Type="maintain", LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateId": lt[0], "Version": lt[1]}}],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"}, TagSpecifications=instance_tags))
    assert code == "InvalidParameterValue"


@pytest.mark.parametrize(
    "data, code",
    [
        ({"BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 40}}]}, "InvalidBlockDeviceMapping"),
        ({"UserData": base64.b64encode(b"x" * (16 * 1024 + 1)).decode()}, "InvalidParameterValue"),
        ({"TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": f"k{i}", "Value": "v"} for i in range(51)]}]}, "TagLimitExceeded"),
    ],
    ids=["small-root-volume", "user-data", "51-tags"],
)
def test_launch_parameters_ec2_refuses_answer_an_error_for_every_override(engine, data, code):
    lt = template(engine, TOKYO, f"refused-{code}", **data)
    answer = fleet(engine, TOKYO, lt, overrides(engine, TOKYO, "g6.xlarge", "ac"), target=1)
    assert answer["Instances"] == [] and errors(engine, TOKYO, answer) == dict.fromkeys("ac", code)


def test_whole_call_errors_of_create_fleet(engine):
    lt = template(engine, TOKYO, "whole-call")
    sent = overrides(engine, TOKYO, "g6.xlarge", "a")
    assert error_of(lambda: fleet(engine, TOKYO, (lt[0], "9"), sent, target=1))[0] == "InvalidLaunchTemplateId.VersionNotFound"
    assert error_of(lambda: fleet(engine, TOKYO, ("lt-0123456789abcdef0", "1"), sent, target=1))[0] == "InvalidLaunchTemplateId.NotFound"
    assert error_of(lambda: fleet(engine, TOKYO, lt, sent, target=0))[0] == "InvalidParameterValue"
    market_options = template(engine, TOKYO, "market-options", InstanceMarketOptions={"MarketType": "spot"})
    assert error_of(lambda: fleet(engine, TOKYO, market_options, sent, target=1))[0] == "InvalidFleetConfiguration"


def test_run_instances_without_a_subnet_lands_in_the_zone_with_the_most_left(engine):
    ec2 = engine.client("ec2", EAST)
    reply = ec2.run_instances(ImageId=LOCAL_AMI, InstanceType="g6.2xlarge", MinCount=1, MaxCount=10)
    assert {i["Placement"]["AvailabilityZone"] for i in reply["Instances"]} == {f"{EAST}b"}  # b: 6, c: 2, a: 1
    assert len(reply["Instances"]) == 6


def test_metrics_count_both_kinds_of_launch_call(engine):
    marker = engine.calls.mark()
    lt = template(engine, TOKYO, "metrics")
    fleet(engine, TOKYO, lt, overrides(engine, TOKYO, "g6.xlarge", "a"), target=1)
    engine.client("ec2", TOKYO).run_instances(ImageId=LOCAL_AMI, InstanceType="g6.xlarge", MinCount=1, MaxCount=1)
    metrics = engine.calls.metrics_since(marker, [])
    assert (metrics["run_instances_calls"], metrics["create_fleet_calls"], metrics["launch_calls"]) == (1, 1, 2)


def test_a_fleet_without_overrides_launches_the_templates_own_type_where_there_is_most_room(engine):
    lt = template(engine, IRELAND, "no-overrides", InstanceType="g6.xlarge")
    answer = fleet(engine, IRELAND, lt, [], target=2, market="on-demand")
    [entry] = answer["Instances"]
    assert len(entry["InstanceIds"]) == 2 and entry["InstanceType"] == "g6.xlarge" and answer["Errors"] == []
    bare = template(engine, IRELAND, "no-type")
    assert error_of(lambda: fleet(engine, IRELAND, bare, [], target=1))[0] == "InvalidFleetConfiguration"
