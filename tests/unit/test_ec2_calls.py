"""What gpufill sends EC2 and how it reads the answers (adapters/ec2.py): the settings every
instance is launched with, the tags teardown finds it by, a launch settled by its token, and
the states a status run reads. EC2 is answered in-process (tests/unit/aws_fakes.py)."""

import base64

import pytest
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

from aws_fakes import FakeEC2, client_error
from gpufill.adapters import ec2
from gpufill.adapters.aws import TransientAwsError
from gpufill.models.run import Pool

SPOT = Pool(region="us-west-2", availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot", price=0.4)
ON_DEMAND = Pool(region="us-east-1", availability_zone="us-east-1b", instance_type="g5.xlarge", market="on-demand", price=1.0)
SPEC = ec2.LaunchSpec(image_id="ami-1", request_id="req-1", deployment="prod", user_tags={"team": "ml"})


@pytest.fixture
def account(monkeypatch):
    """Each region's fake EC2, made on first use."""
    regions: dict[str, FakeEC2] = {}

    def client(service, region=None):
        assert service == "ec2"
        return regions.setdefault(region, FakeEC2())

    monkeypatch.setattr(ec2, "client", client)
    return lambda region: regions.setdefault(region, FakeEC2())


def tags_of(specification: dict) -> dict:
    return {t["Key"]: t["Value"] for t in specification["Tags"]}


def test_every_instance_gets_an_encrypted_gp3_root_that_ends_with_it_and_imdsv2_only():
    settings = ec2.instance_settings(ec2.LaunchSpec(image_id="ami-9", request_id="r", root_volume_gib=321))
    assert settings == {
        "ImageId": "ami-9",
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1},
        "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {
            "VolumeSize": 321, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}}],
    }


def test_optional_settings_are_sent_only_when_set():
    spec = ec2.LaunchSpec(image_id="ami-9", request_id="r", kms_key_id="arn:kms:key", security_group_ids=("sg-1", "sg-2"),
                          instance_profile_arn="arn:profile", user_data="#!/bin/bash\necho hi")
    settings = ec2.instance_settings(spec)
    assert settings["BlockDeviceMappings"][0]["Ebs"]["KmsKeyId"] == "arn:kms:key"
    assert settings["SecurityGroupIds"] == ["sg-1", "sg-2"]
    assert settings["IamInstanceProfile"] == {"Arn": "arn:profile"}
    assert base64.b64decode(settings["UserData"]).decode() == "#!/bin/bash\necho hi"


def test_an_instance_is_tagged_with_its_request_deployment_and_pool_and_the_users_tags():
    assert ec2.launch_tags(SPEC, SPOT) == {
        "team": "ml", "gpufill:request-id": "req-1", "gpufill:managed": "true",
        "gpufill:pool": "spot/us-west-2/us-west-2a/g6.xlarge", "gpufill:deployment": "prod"}
    # A user tag cannot take over gpufill's own (the request model refuses them; the order makes sure).
    spoofed = ec2.LaunchSpec(image_id="a", request_id="req-1", user_tags={"gpufill:request-id": "other"})
    assert ec2.launch_tags(spoofed)["gpufill:request-id"] == "req-1"
    assert "gpufill:pool" not in ec2.launch_tags(SPEC)
    assert ec2.tag_specifications({"a": "1"}) == [
        {"ResourceType": "instance", "Tags": [{"Key": "a", "Value": "1"}]},
        {"ResourceType": "volume", "Tags": [{"Key": "a", "Value": "1"}]}]


def test_a_spot_launch_goes_to_its_subnet_as_one_time_spot_ended_on_interruption(account):
    reply = {"Instances": [{"InstanceId": "i-1", "Placement": {"AvailabilityZone": "us-west-2a"}},
                           {"InstanceId": "i-2"}]}
    account("us-west-2").answers["run_instances"] = [reply]
    spec = ec2.LaunchSpec(image_id="ami-1", request_id="req-1", subnet_id="subnet-a", placement_group="pg-1")
    result = ec2.launch(SPOT, min_count=1, max_count=3, client_token="tok", spec=spec)
    [sent] = account("us-west-2").called("run_instances")
    assert (sent["InstanceType"], sent["MinCount"], sent["MaxCount"], sent["ClientToken"]) == ("g6.xlarge", 1, 3, "tok")
    assert sent["SubnetId"] == "subnet-a" and sent["Placement"] == {"GroupName": "pg-1"}
    assert sent["InstanceMarketOptions"] == {"MarketType": "spot", "SpotOptions": {
        "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
    assert [tags_of(s)["gpufill:pool"] for s in sent["TagSpecifications"]] == [SPOT.key, SPOT.key]
    assert sent["ImageId"] == "ami-1"
    assert result.outcome == "launched"
    assert [(i.instance_id, i.region, i.availability_zone, i.instance_type, i.market, i.hourly_price)
            for i in result.instances] == [("i-1", "us-west-2", "us-west-2a", "g6.xlarge", "spot", 0.4),
                                           ("i-2", "us-west-2", "us-west-2a", "g6.xlarge", "spot", 0.4)]


def test_an_instance_launched_into_a_capacity_block_carries_the_blocks_fee_and_no_other_does(account):
    block = ON_DEMAND.model_copy(update={"capacity_reservation_id": "cr-1", "reserved": 2, "capacity_block": True,
                                         "upfront_fee": 1390.0})
    account("us-east-1").answers["run_instances"] = [{"Instances": [{"InstanceId": "i-3"}]}]
    [launched] = ec2.launch(block, min_count=1, max_count=1, client_token="tok", spec=SPEC).instances
    assert (launched.capacity_reservation_id, launched.capacity_block_fee, launched.market) == ("cr-1", 1390.0, "capacity-block")
    # An On-Demand Capacity Reservation is paid by the hour: no fee, even if its pool carried one.
    odcr = block.model_copy(update={"capacity_block": False})
    [launched] = ec2.launch(odcr, min_count=1, max_count=1, client_token="tok", spec=SPEC).instances
    assert (launched.capacity_reservation_id, launched.capacity_block_fee, launched.market) == ("cr-1", None, "on-demand")
    # An On-Demand launch EC2 put into an open reservation it did not name: EC2 says which.
    account("us-east-1").answers["run_instances"] = [{"Instances": [{"InstanceId": "i-4", "CapacityReservationId": "cr-open"}]}]
    [launched] = ec2.launch(ON_DEMAND, min_count=1, max_count=1, client_token="tok", spec=SPEC).instances
    assert launched.capacity_reservation_id == "cr-open"


def test_a_capacity_block_launch_says_so_and_names_its_block(account):
    block = ON_DEMAND.model_copy(update={"capacity_reservation_id": "cr-1", "capacity_block": True, "upfront_fee": 1390.0})
    account("us-east-1").answers["run_instances"] = [{"Instances": [{"InstanceId": "i-3"}]}]
    ec2.launch(block, min_count=1, max_count=1, client_token="tok", spec=SPEC)
    [sent] = account("us-east-1").called("run_instances")
    assert sent["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert sent["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": "cr-1"}}


def test_an_on_demand_reservation_is_targeted_by_id_without_market_options_even_with_reservations_off(account):
    odcr = ON_DEMAND.model_copy(update={"capacity_reservation_id": "cr-2", "reserved": 2})
    account("us-east-1").answers["run_instances"] = [{"Instances": [{"InstanceId": "i-3"}]}]
    spec = ec2.LaunchSpec(image_id="ami-1", request_id="req-1", reservations_off=True)
    ec2.launch(odcr, min_count=1, max_count=1, client_token="tok", spec=spec)
    [sent] = account("us-east-1").called("run_instances")
    assert "InstanceMarketOptions" not in sent
    assert sent["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": "cr-2"}}


def test_reservations_off_keeps_an_on_demand_launch_out_of_open_reservations_and_only_then(account):
    account("us-east-1").answers["run_instances"] = [{"Instances": [{"InstanceId": "i-3"}]}]
    off = ec2.LaunchSpec(image_id="ami-1", request_id="req-1", reservations_off=True)
    ec2.launch(ON_DEMAND, min_count=1, max_count=1, client_token="tok", spec=off)
    ec2.launch(ON_DEMAND, min_count=1, max_count=1, client_token="tok", spec=SPEC)
    [kept_out, default] = account("us-east-1").called("run_instances")
    assert kept_out["CapacityReservationSpecification"] == {"CapacityReservationPreference": "none"}
    assert "CapacityReservationSpecification" not in default and "InstanceMarketOptions" not in default
    # A spot launch never has a reservation preference: spot does not use reservations.
    account("us-west-2").answers["run_instances"] = [{"Instances": [{"InstanceId": "i-1"}]}]
    ec2.launch(SPOT, min_count=1, max_count=1, client_token="tok", spec=off)
    assert "CapacityReservationSpecification" not in account("us-west-2").called("run_instances")[0]


def test_an_on_demand_launch_without_a_subnet_names_its_zone_and_no_spot_options(account):
    account("us-east-1").answers["run_instances"] = [{"Instances": [{"InstanceId": "i-3"}]}]
    spec = ec2.LaunchSpec(image_id="ami-1", request_id="req-1", placement_group="pg-2")
    ec2.launch(ON_DEMAND, min_count=2, max_count=2, client_token="tok", spec=spec)
    [sent] = account("us-east-1").called("run_instances")
    assert "SubnetId" not in sent and "InstanceMarketOptions" not in sent
    assert sent["Placement"] == {"AvailabilityZone": "us-east-1b", "GroupName": "pg-2"}
    account("us-east-1").calls.clear()
    ec2.launch(ON_DEMAND, min_count=2, max_count=2, client_token="tok", spec=SPEC)
    assert account("us-east-1").called("run_instances")[0]["Placement"] == {"AvailabilityZone": "us-east-1b"}


def test_a_refusal_is_classified_and_keeps_aws_words(account):
    account("us-west-2").answers["run_instances"] = [client_error("VcpuLimitExceeded", message="You have requested more vCPU")]
    result = ec2.launch(SPOT, min_count=1, max_count=1, client_token="tok", spec=SPEC)
    assert (result.outcome, result.reason, result.message) == ("quota", "VcpuLimitExceeded", "You have requested more vCPU")
    assert account("us-west-2").called("describe_instances") == []


def test_a_placement_group_ec2_never_shows_is_asked_for_again_then_reported_naming_the_launch(account, monkeypatch):
    from gpufill.adapters import clock
    waited: list[float] = []
    monkeypatch.setattr(clock, "_sleep", waited.append)
    account("us-west-2").answers["run_instances"] = [client_error("InvalidPlacementGroup.Unknown", message="pg-1 is unknown")]
    result = ec2.launch(SPOT, min_count=1, max_count=1, client_token="tok", spec=SPEC)
    assert len(account("us-west-2").called("run_instances")) == 5 and waited == [0.5, 1.0, 2.0, 4.0]
    assert (result.outcome, result.reason) == ("throttled", "InvalidPlacementGroup.Unknown")
    assert result.message.startswith("pg-1 is unknown (RunInstances in us-west-2: still unknown after 5 tries over 7.5 s")


def test_an_unsettled_launch_is_found_by_its_token(account):
    here = account("us-west-2")
    here.answers["run_instances"] = [client_error("IdempotentParameterMismatch")]
    here.answers["describe_instances"] = [[{"Reservations": [{"Instances": [{"InstanceId": "i-a"}]}]},
                                           {"Reservations": [{"Instances": [{"InstanceId": "i-b"}]}]}]]
    result = ec2.launch(SPOT, min_count=1, max_count=2, client_token="tok", spec=SPEC)
    assert here.called("describe_instances") == [{"Filters": [{"Name": "client-token", "Values": ["tok"]}]}]
    assert [i.instance_id for i in result.instances] == ["i-a", "i-b"] and result.outcome == "launched"
    assert result.note == "the launch answered ClientError; its instances were found by ClientToken"


@pytest.mark.parametrize("error", [ReadTimeoutError(endpoint_url="e"), client_error("InternalError", 500)])
def test_a_lost_reply_that_left_nothing_is_sent_again_later_never_read_as_an_answer(account, error):
    here = account("us-west-2")
    here.answers["run_instances"] = [error]
    here.answers["describe_instances"] = [{"Reservations": []}]
    with pytest.raises(TransientAwsError, match="RunInstances in us-west-2 ended unsettled"):
        ec2.launch(SPOT, min_count=1, max_count=2, client_token="tok", spec=SPEC)


def test_a_token_lookup_that_fails_too_leaves_the_launch_to_be_sent_again(account):
    here = account("us-west-2")
    here.answers["run_instances"] = [ReadTimeoutError(endpoint_url="e")]
    here.answers["describe_instances"] = [client_error("RequestLimitExceeded")]
    with pytest.raises(TransientAwsError):
        ec2.launch(SPOT, min_count=1, max_count=2, client_token="tok", spec=SPEC)
    here.answers["describe_instances"] = [EndpointConnectionError(endpoint_url="e")]
    with pytest.raises(TransientAwsError):
        ec2.launch(SPOT, min_count=1, max_count=2, client_token="tok", spec=SPEC)


def test_an_unreachable_endpoint_after_a_reached_try_is_settled_by_token(account, monkeypatch):
    def run_instances(pool, **_):
        from gpufill.adapters import aws
        aws._attempts.get().extend(["reached", "unreached"])
        raise ConnectTimeoutError(endpoint_url="e")

    monkeypatch.setattr(ec2, "run_instances", run_instances)
    account("us-west-2").answers["describe_instances"] = [{"Reservations": [{"Instances": [{"InstanceId": "i-x"}]}]}]
    result = ec2.launch(SPOT, min_count=1, max_count=1, client_token="tok", spec=SPEC)
    assert [i.instance_id for i in result.instances] == ["i-x"]


def test_zones_offering_lists_each_type_sorted_even_with_no_zone(account):
    account("us-west-2").answers["describe_instance_type_offerings"] = [[
        {"InstanceTypeOfferings": [{"InstanceType": "g6.xlarge", "Location": "us-west-2c"}]},
        {"InstanceTypeOfferings": [{"InstanceType": "g6.xlarge", "Location": "us-west-2a"}]}]]
    assert ec2.zones_offering("us-west-2", ["g6.xlarge", "p5.48xlarge"]) == {
        "g6.xlarge": ["us-west-2a", "us-west-2c"], "p5.48xlarge": []}
    [asked] = account("us-west-2").called("describe_instance_type_offerings")
    assert asked == {"LocationType": "availability-zone",
                     "Filters": [{"Name": "instance-type", "Values": ["g6.xlarge", "p5.48xlarge"]}]}


def test_spot_prices_keep_the_lowest_price_per_type_and_zone(account):
    account("us-west-2").answers["describe_spot_price_history"] = [[{"SpotPriceHistory": [
        {"InstanceType": "g6.xlarge", "AvailabilityZone": "us-west-2a", "SpotPrice": "0.50"},
        {"InstanceType": "g6.xlarge", "AvailabilityZone": "us-west-2a", "SpotPrice": "0.40"},
        {"InstanceType": "g6.xlarge", "AvailabilityZone": "us-west-2a", "SpotPrice": "0.45"},
        {"InstanceType": "g6.xlarge", "AvailabilityZone": "us-west-2b", "SpotPrice": "0.70"}]}]]
    assert ec2.spot_prices("us-west-2", ["g6.xlarge"]) == {("g6.xlarge", "us-west-2a"): 0.40, ("g6.xlarge", "us-west-2b"): 0.70}
    [asked] = account("us-west-2").called("describe_spot_price_history")
    assert asked["InstanceTypes"] == ["g6.xlarge"] and asked["ProductDescriptions"] == ["Linux/UNIX"]
    assert "StartTime" in asked


def test_the_root_snapshot_size_is_read_from_the_images_root_device(account):
    here = account("us-west-2")
    here.answers["describe_images"] = [{"Images": [{"RootDeviceName": "/dev/xvda", "BlockDeviceMappings": [
        {"DeviceName": "/dev/sdb", "Ebs": {"VolumeSize": 900}}, {"DeviceName": "/dev/xvda", "Ebs": {"VolumeSize": 75}}]}]}]
    assert ec2.root_snapshot_gib("us-west-2", "ami-1") == 75
    assert here.called("describe_images") == [{"ImageIds": ["ami-1"]}]
    here.answers["describe_images"] = [{"Images": [{"BlockDeviceMappings": [
        {"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 60}}]}]}]
    assert ec2.root_snapshot_gib("us-west-2", "ami-1") == 60  # no RootDeviceName: the DLAMI's
    here.answers["describe_images"] = [{"Images": [{"BlockDeviceMappings": [{"DeviceName": "/dev/sda1"}]}]}]
    assert ec2.root_snapshot_gib("us-west-2", "ami-1") is None
    here.answers["describe_images"] = [{"Images": []}]
    assert ec2.root_snapshot_gib("us-west-2", "ami-1") is None


def test_an_unknown_image_leaves_the_size_to_the_launch_and_other_errors_fail(account):
    here = account("us-west-2")
    here.answers["describe_images"] = [client_error("InvalidAMIID.NotFound")]
    assert ec2.root_snapshot_gib("us-west-2", "ami-gone") is None
    here.answers["describe_images"] = [client_error("UnauthorizedOperation")]
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        ec2.root_snapshot_gib("us-west-2", "ami-1")


def test_instance_states_read_state_ip_and_startup_step(account):
    account("us-west-2").answers["describe_instances"] = [{"Reservations": [{"Instances": [
        {"InstanceId": "i-1", "State": {"Name": "running"}, "PrivateIpAddress": "10.0.0.5",
         "Tags": [{"Key": "team", "Value": "ml"}, {"Key": "gpufill:startup-step", "Value": "pulling image"}]},
        {"InstanceId": "i-2", "State": {"Name": "pending"}}]}]}, {"Reservations": []}]
    assert ec2.instance_states("us-west-2", ["i-1", "i-2", "i-3"]) == {
        "i-1": {"state": "running", "private_ip": "10.0.0.5", "startup_step": "pulling image"},
        "i-2": {"state": "pending", "private_ip": None, "startup_step": None},
        "i-3": {"state": "not-visible", "private_ip": None, "startup_step": None}}
    assert account("us-west-2").called("describe_instances") == [
        {"Filters": [{"Name": "instance-id", "Values": ["i-1", "i-2", "i-3"]}]},
        {"Filters": [{"Name": "instance-id", "Values": ["i-3"]}]}]


def test_instances_ec2_does_not_describe_yet_are_asked_once_more_and_every_page_is_read(account):
    ids = [f"i-{n}" for n in range(201)]
    hidden = {"i-7"}

    def describe(params):
        # A filtered answer may come a page short (here: empty) with a NextToken.
        asked = params["Filters"][0]["Values"]
        if "NextToken" not in params and asked[0] == "i-0":
            return {"Reservations": [], "NextToken": "more"}
        return {"Reservations": [{"Instances": [{"InstanceId": i, "State": {"Name": "running"}} for i in asked if i not in hidden]}]}

    account("us-west-2").answers["describe_instances"] = [describe] * 4
    states = ec2.instance_states("us-west-2", ids)
    # i-7 is not described by the first pass nor by the one more ask: not visible, for the next round.
    assert states["i-7"]["state"] == "not-visible" and states["i-200"]["state"] == "running"
    assert sum(s["state"] == "running" for s in states.values()) == 200
    calls = account("us-west-2").called("describe_instances")
    assert [c["Filters"][0]["Values"] for c in calls][2:] == [["i-200"], ["i-7"]]
    assert [len(c["Filters"][0]["Values"]) for c in calls][:2] == [200, 200] and calls[1]["NextToken"] == "more"


def test_an_instance_described_a_moment_later_is_found_by_the_one_more_ask(account):
    answers = iter([{"Reservations": [{"Instances": [{"InstanceId": "i-1", "State": {"Name": "pending"}}]}]},
                    {"Reservations": [{"Instances": [{"InstanceId": "i-new", "State": {"Name": "pending"}}]}]}])
    account("us-west-2").answers["describe_instances"] = [lambda params: next(answers)] * 2
    assert ec2.instance_states("us-west-2", ["i-1", "i-new"]) == {
        "i-1": {"state": "pending", "private_ip": None, "startup_step": None},
        "i-new": {"state": "pending", "private_ip": None, "startup_step": None}}
    assert [c["Filters"][0]["Values"] for c in account("us-west-2").called("describe_instances")] == [["i-1", "i-new"], ["i-new"]]
    account("us-west-2").answers["describe_instances"] = [client_error("UnauthorizedOperation")]
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        ec2.instance_states("us-west-2", ["i-1"])
    account("us-west-2").answers["describe_instances"] = [{"Reservations": [{"Instances": [{"InstanceId": "i-1", "State": {"Name": "running"}}]}]}]
    assert ec2.instance_states("us-west-2", ["i-1"])["i-1"]["state"] == "running"
    assert len(account("us-west-2").called("describe_instances")) == 2 + 1 + 1  # nothing missing: no second ask


def test_zone_ids_map_names_to_ids_of_real_zones_only(account):
    account("us-west-2").answers["describe_availability_zones"] = [{"AvailabilityZones": [
        {"ZoneName": "us-west-2a", "ZoneId": "usw2-az2"}, {"ZoneName": "us-west-2b", "ZoneId": "usw2-az1"}]}]
    assert ec2.zone_ids("us-west-2") == {"us-west-2a": "usw2-az2", "us-west-2b": "usw2-az1"}
    assert account("us-west-2").called("describe_availability_zones") == [
        {"Filters": [{"Name": "zone-type", "Values": ["availability-zone"]}]}]


def test_an_error_without_code_or_message_is_unknown_and_silent():
    from botocore.exceptions import ClientError
    bare = ClientError({}, "RunInstances")
    assert (ec2.code_of(bare), ec2.message_of(bare)) == ("Unknown", "")


def test_an_instance_is_recorded_in_the_zone_ec2_placed_it(account):
    account("us-west-2").answers["run_instances"] = [{"Instances": [
        {"InstanceId": "i-1", "Placement": {"AvailabilityZone": "us-west-2c"}}, {"InstanceId": "i-2", "Placement": {}}]}]
    result = ec2.launch(SPOT, min_count=1, max_count=2, client_token="tok", spec=SPEC)
    assert [i.availability_zone for i in result.instances] == ["us-west-2c", "us-west-2a"]


@pytest.mark.parametrize("lost", [ReadTimeoutError(endpoint_url="e"), ConnectTimeoutError(endpoint_url="e")])
def test_a_launch_whose_reply_was_lost_is_looked_up_by_its_own_token_and_says_so(account, monkeypatch, lost):
    def run_instances(pool, **_):
        from gpufill.adapters import aws
        aws._attempts.get().append("reached")
        raise lost

    monkeypatch.setattr(ec2, "run_instances", run_instances)
    account("us-west-2").answers["describe_instances"] = [{"Reservations": [{"Instances": [{"InstanceId": "i-x"}]}]}]
    result = ec2.launch(SPOT, min_count=1, max_count=1, client_token="tok-7", spec=SPEC)
    assert account("us-west-2").called("describe_instances") == [{"Filters": [{"Name": "client-token", "Values": ["tok-7"]}]}]
    assert result.note == f"the launch answered {type(lost).__name__}; its instances were found by ClientToken"


def test_an_unreachable_region_is_reported_with_the_endpoint_it_could_not_reach(account):
    account("us-west-2").answers["run_instances"] = [EndpointConnectionError(endpoint_url="https://ec2.us-west-2.amazonaws.com")]
    result = ec2.launch(SPOT, min_count=1, max_count=1, client_token="tok", spec=SPEC)
    assert "https://ec2.us-west-2.amazonaws.com" in result.message
    assert account("us-west-2").called("describe_instances") == []


def test_an_image_without_block_devices_has_no_root_snapshot_size(account):
    account("us-west-2").answers["describe_images"] = [{"Images": [{"RootDeviceName": "/dev/sda1"}]}]
    assert ec2.root_snapshot_gib("us-west-2", "ami-1") is None


def test_spot_prices_are_asked_as_of_now(account, monkeypatch):
    from datetime import UTC, datetime

    from gpufill.adapters import clock
    moment = datetime(2027, 1, 1, tzinfo=UTC)
    monkeypatch.setattr(clock, "now", lambda: moment)
    account("us-west-2").answers["describe_spot_price_history"] = [{"SpotPriceHistory": []}]
    assert ec2.spot_prices("us-west-2", ["g6.xlarge"]) == {}
    assert account("us-west-2").called("describe_spot_price_history")[0]["StartTime"] == moment
