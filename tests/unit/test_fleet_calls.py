"""One CreateFleet, sent and read back (adapters/fleet_launch.py): what it asks for, which pool each
launched instance belongs to, a replay or a lost reply settled without launching twice, and the
run's launch template version made once per region and contents, reused, and retired. EC2 is answered in-process."""

import pytest
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

from aws_fakes import FakeEC2, client_error
from gpufill.adapters import aws, fleet_launch
from gpufill.adapters.aws import TransientAwsError
from gpufill.adapters.ec2 import LaunchSpec
from gpufill.models.run import Pool, TemplateVersion

REGION = "us-west-2"
A = Pool(region=REGION, availability_zone="us-west-2a", instance_type="g6.xlarge", market="spot", price=0.4)
B = Pool(region=REGION, availability_zone="us-west-2b", instance_type="g6.xlarge", market="spot", price=0.5)
C = Pool(region=REGION, availability_zone="us-west-2a", instance_type="g5.xlarge", market="spot", price=0.6)
SUBNETS = {"us-west-2a": "subnet-a", "us-west-2b": "subnet-b"}
SPEC = LaunchSpec(image_id="ami-1", request_id="req-1", deployment="prod", user_tags={"team": "ml"})
VERSION = {"LaunchTemplateVersion": {"LaunchTemplateId": "lt-1", "VersionNumber": 7, "DefaultVersion": False}}


def call(pools=((0, A), (1, B), (2, C)), target=4, **kwargs) -> fleet_launch.FleetCall:
    return fleet_launch.FleetCall(region=REGION, market=kwargs.pop("market", "spot"), pools=list(pools), target=target,
                           strategy=kwargs.pop("strategy", "price-capacity-optimized"), subnets=kwargs.pop("subnets", SUBNETS),
                           **kwargs)


def launched(itype: str, subnet: str, *ids: str) -> dict:
    return {"LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": itype, "SubnetId": subnet}}, "InstanceIds": list(ids)}


def refused(code: str, itype: str | None = None, subnet: str | None = None, message: str = "said") -> dict:
    overrides = {"InstanceType": itype, "SubnetId": subnet} if itype else {}
    return {"LaunchTemplateAndOverrides": {"Overrides": overrides}, "ErrorCode": code, "ErrorMessage": message}


@pytest.fixture
def ec2(monkeypatch):
    fake = FakeEC2(create_launch_template_version=VERSION)

    def client(service, region=None):
        assert (service, region) == ("ec2", REGION)
        return fake

    monkeypatch.setattr(fleet_launch, "client", client)
    return fake


def by_pool(answer) -> dict:
    return {a.index: (a.result.outcome, a.result.reason, [i.instance_id for i in a.result.instances]) for a in answer.answers}


# --- what is asked --------------------------------------------------------------------------------


def test_a_spot_fleet_asks_for_its_target_over_each_pool_with_a_subnet_tagged_with_the_token():
    params = fleet_launch.create_fleet_params(call(strategy="capacity-optimized-prioritized"), ("lt-1", "7"), SPEC, "tok")
    assert params["Type"] == "instant" and params["ClientToken"] == "tok"
    [config] = params["LaunchTemplateConfigs"]
    assert config["LaunchTemplateSpecification"] == {"LaunchTemplateId": "lt-1", "Version": "7"}
    assert config["Overrides"] == [{"InstanceType": "g6.xlarge", "SubnetId": "subnet-a"},
                                   {"InstanceType": "g6.xlarge", "SubnetId": "subnet-b"},
                                   {"InstanceType": "g5.xlarge", "SubnetId": "subnet-a"}]
    assert params["TargetCapacitySpecification"] == {"TotalTargetCapacity": 4, "DefaultTargetCapacityType": "spot"}
    assert params["SpotOptions"] == {"AllocationStrategy": "capacity-optimized-prioritized",
                                     "InstanceInterruptionBehavior": "terminate"}
    assert "OnDemandOptions" not in params
    instance_tags, fleet_tags = ({t["Key"]: t["Value"] for t in s["Tags"]} for s in params["TagSpecifications"])
    assert [s["ResourceType"] for s in params["TagSpecifications"]] == ["instance", "fleet"]
    assert instance_tags == {"team": "ml", "gpufill:request-id": "req-1", "gpufill:managed": "true",
                             "gpufill:deployment": "prod", "gpufill:launch-token": "tok"}
    assert fleet_tags == {"team": "ml", "gpufill:request-id": "req-1", "gpufill:managed": "true", "gpufill:deployment": "prod"}


def test_a_prioritized_on_demand_gang_in_one_zone_asks_all_or_nothing_in_its_placement_group():
    pools = [(3, A), (5, C), (6, B)]
    params = fleet_launch.create_fleet_params(
        call(pools, market="on-demand", strategy="prioritized", single_zone=True, min_target=4,
             placement_groups={"us-west-2a": "pg-a"}, subnets={"us-west-2a": "subnet-a"}),
        ("lt-1", "7"), SPEC, "tok")
    assert params["LaunchTemplateConfigs"][0]["Overrides"] == [
        {"InstanceType": "g6.xlarge", "SubnetId": "subnet-a", "Priority": 0.0, "Placement": {"GroupName": "pg-a"}},
        {"InstanceType": "g5.xlarge", "SubnetId": "subnet-a", "Priority": 1.0, "Placement": {"GroupName": "pg-a"}}]
    assert params["OnDemandOptions"] == {"AllocationStrategy": "prioritized", "SingleAvailabilityZone": True,
                                         "MinTargetCapacity": 4}
    assert params["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert "SpotOptions" not in params


def test_the_template_is_named_for_the_deployment_within_ec2s_limit():
    assert fleet_launch.template_name("prod") == "gpufill-prod"
    assert fleet_launch.template_name("") == "gpufill-default"
    assert fleet_launch.template_name("x" * 200) == ("gpufill-" + "x" * 200)[:128]


def version_of(number="7", token=None, default=False) -> TemplateVersion:
    token = token or fleet_launch.version_token(REGION, SPEC, "run-1")
    return TemplateVersion(region=REGION, token=token, template_id="lt-1", version=number, default=default)


def test_a_version_is_made_once_per_run_and_contents_and_names_what_every_instance_is_launched_with(ec2):
    assert fleet_launch.template_version(REGION, SPEC, "run-1") == version_of()
    fleet_launch.template_version(REGION, SPEC, "run-1")
    fleet_launch.template_version(REGION, SPEC, "run-2")
    fleet_launch.template_version(REGION, LaunchSpec(image_id="ami-2", request_id="req-1", deployment="prod"), "run-1")
    first, again, next_run, other_image = ec2.called("create_launch_template_version")
    assert first["LaunchTemplateName"] == "gpufill-prod"
    assert first["ClientToken"] == again["ClientToken"]  # a retried step is answered with its version
    assert len({first["ClientToken"], next_run["ClientToken"], other_image["ClientToken"]}) == 3
    assert first["ClientToken"].startswith("gpufill-lt-") and len(first["ClientToken"]) <= 128  # EC2: at most 128
    data = first["LaunchTemplateData"]
    assert data["ImageId"] == "ami-1" and data["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert [s["ResourceType"] for s in data["TagSpecifications"]] == ["instance", "volume"]
    # Nothing in the version differs per fleet: the launch token is CreateFleet's own instance tag.
    assert "gpufill:launch-token" not in str(data)
    assert ec2.called("create_launch_template") == []


def test_the_default_version_is_reported_as_such(ec2):
    ec2.answers["create_launch_template_version"] = [
        {"LaunchTemplateVersion": {"LaunchTemplateId": "lt-1", "VersionNumber": 1, "DefaultVersion": True}}]
    assert fleet_launch.template_version(REGION, SPEC, "run-1") == version_of("1", default=True)
    ec2.answers["create_launch_template_version"] = [{"LaunchTemplateVersion": {"LaunchTemplateId": "lt-1", "VersionNumber": 2}}]
    assert fleet_launch.template_version(REGION, SPEC, "run-1") == version_of("2")


@pytest.mark.parametrize("missing", sorted(fleet_launch.TEMPLATE_NOT_FOUND))
def test_a_missing_template_is_created_with_the_metadata_rule_then_the_version(ec2, missing):
    ec2.answers["create_launch_template_version"] = [client_error(missing), VERSION]
    ec2.answers["create_launch_template"] = [{}]
    assert fleet_launch.template_version(REGION, SPEC, "run-1") == version_of()
    [made] = ec2.called("create_launch_template")
    assert made["LaunchTemplateName"] == "gpufill-prod"
    assert made["LaunchTemplateData"] == {"MetadataOptions": {
        "HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1}}
    assert made["ClientToken"].startswith("gpufill-template-")
    assert made["TagSpecifications"] == [{"ResourceType": "launch-template", "Tags": [
        {"Key": "gpufill:managed", "Value": "true"}, {"Key": "gpufill:deployment", "Value": "prod"}]}]
    first, second = ec2.called("create_launch_template_version")
    assert first == second


def test_a_template_another_run_made_first_is_used_and_other_refusals_fail(ec2):
    ec2.answers["create_launch_template_version"] = [client_error("InvalidLaunchTemplateName.NotFoundException"), VERSION]
    ec2.answers["create_launch_template"] = [client_error("InvalidLaunchTemplateName.AlreadyExistsException")]
    assert fleet_launch.template_version(REGION, SPEC, "run-1") == version_of()
    ec2.answers["create_launch_template_version"] = [client_error("InvalidLaunchTemplateName.NotFoundException")]
    ec2.answers["create_launch_template"] = [client_error("UnauthorizedOperation")]
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        fleet_launch.template_version(REGION, SPEC, "run-1")
    ec2.answers["create_launch_template_version"] = [client_error("VersionLimitExceeded")]
    with pytest.raises(Exception, match="VersionLimitExceeded"):
        fleet_launch.template_version(REGION, SPEC, "run-1")


def test_retired_versions_are_deleted_in_one_call_per_template_and_a_failed_delete_never_fails_the_run(ec2):
    ec2.answers["delete_launch_template_versions"] = [{}]
    fleet_launch.retire_versions(REGION, [version_of("7"), version_of("9", token="other")])
    assert ec2.called("delete_launch_template_versions") == [{"LaunchTemplateId": "lt-1", "Versions": ["7", "9"]}]
    ec2.answers["delete_launch_template_versions"] = [
        {"UnsuccessfullyDeletedLaunchTemplateVersions": [{"ResponseError": {"Code": "x"}}]},
        client_error("UnauthorizedOperation"), ReadTimeoutError(endpoint_url="e")]
    for _ in range(3):
        fleet_launch.retire_versions(REGION, [version_of("7")])


# --- what is answered -----------------------------------------------------------------------------


def test_each_instance_is_given_to_the_pool_it_launched_in(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [
        launched("g6.xlarge", "subnet-b", "i-1", "i-2"), launched("g5.xlarge", "subnet-a", "i-3"),
        launched("g6.xlarge", "subnet-b", "i-4")], "Errors": []}]
    answer = fleet_launch.launch(call(target=4), SPEC, "tok", run_id="run-1")
    assert by_pool(answer) == {1: ("launched", None, ["i-1", "i-2", "i-4"]), 2: ("launched", None, ["i-3"])}
    assert answer.template_version == version_of() and answer.failure is None
    got = {i.instance_id: (i.region, i.availability_zone, i.instance_type, i.market, i.hourly_price)
           for a in answer.answers for i in a.result.instances}
    assert got["i-3"] == (REGION, "us-west-2a", "g5.xlarge", "spot", 0.6)
    assert got["i-1"] == (REGION, "us-west-2b", "g6.xlarge", "spot", 0.5)
    assert [a.result.note for a in answer.answers] == [None, None]


def test_a_fleet_short_of_its_target_says_what_each_pool_answered(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [launched("g6.xlarge", "subnet-b", "i-1")], "Errors": [
        refused("InsufficientInstanceCapacity", "g6.xlarge", "subnet-a", "no capacity in a"),
        refused("InsufficientInstanceCapacity", "g6.xlarge", "subnet-a", "said twice"),
        refused("InsufficientInstanceCapacity", "g6.xlarge", "subnet-b")]}]
    answer = fleet_launch.launch(call(target=3), SPEC, "tok", run_id="run-1")
    assert by_pool(answer) == {0: ("capacity", "InsufficientInstanceCapacity", []), 1: ("launched", None, ["i-1"]),
                               2: ("throttled", "NotAnswered", [])}
    results = {a.index: a.result for a in answer.answers}
    assert results[0].message == "no capacity in a"
    assert results[1].note == "the fleet also answered InsufficientInstanceCapacity here"
    assert results[2].message == "EC2 named no answer for this pool"


def test_a_fleet_that_met_its_target_invents_no_answer_for_the_other_pools(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [launched("g6.xlarge", "subnet-a", "i-1", "i-2")]}]
    assert by_pool(fleet_launch.launch(call(target=2), SPEC, "tok", run_id="run-1")) == {0: ("launched", None, ["i-1", "i-2"])}


def test_an_error_for_the_whole_fleet_answers_the_pools_it_named_no_answer_for(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [], "Errors": [
        refused("UnfulfillableCapacity", message="cannot"), refused("Other")]}]
    answer = fleet_launch.launch(call(target=2), SPEC, "tok", run_id="run-1")
    assert by_pool(answer) == {i: ("error", "UnfulfillableCapacity", []) for i in (0, 1, 2)}
    assert {a.result.message for a in answer.answers} == {"cannot"}
    # A capacity code for the whole fleet names no pool EC2 looked at: not remembered as sold out.
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Errors": [refused("InsufficientInstanceCapacity")]}]
    assert by_pool(fleet_launch.launch(call(target=2), SPEC, "tok", run_id="run-1"))[0] == ("error", "InsufficientInstanceCapacity", [])
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Errors": [refused("VcpuLimitExceeded")]}]
    assert by_pool(fleet_launch.launch(call(target=2), SPEC, "tok", run_id="run-1"))[0] == ("quota", "VcpuLimitExceeded", [])


def test_an_error_without_a_code_or_naming_a_pool_outside_the_call_is_read_safely(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [launched("p5.48xlarge", "subnet-a", "i-9")],
                                    "Errors": [{"LaunchTemplateAndOverrides": {"Overrides": {
                                        "InstanceType": "g6.xlarge", "SubnetId": "subnet-a"}}},
                                               refused("InsufficientInstanceCapacity", "p5.48xlarge", "subnet-a")]}]
    answer = fleet_launch.launch(call(target=1), SPEC, "tok", run_id="run-1")
    results = {a.index: a.result for a in answer.answers}
    assert (results[0].outcome, results[0].reason, results[0].message) == ("error", "Unknown", "")
    assert (results[1].outcome, results[1].reason) == ("throttled", "NotAnswered")


def test_an_instance_named_only_by_type_is_matched_on_its_type():
    key = fleet_launch._override_key({"InstanceType": "g6.xlarge"})
    assert key == ("g6.xlarge", None)
    assert fleet_launch._override_key({"LaunchTemplateAndOverrides": None}) == (None, None)


def test_a_pool_without_a_subnet_is_answered_so_and_left_out_of_the_call(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [launched("g6.xlarge", "subnet-a", "i-1")]}]
    answer = fleet_launch.launch(call(target=1, subnets={"us-west-2a": "subnet-a"}), SPEC, "tok", run_id="run-1")
    assert by_pool(answer) == {1: ("error", "NoSubnet", []), 0: ("launched", None, ["i-1"])}
    assert answer.answers[0].result.message == "no subnet to launch into in us-west-2b"
    overrides = ec2.called("create_fleet")[0]["LaunchTemplateConfigs"][0]["Overrides"]
    assert [o["SubnetId"] for o in overrides] == ["subnet-a", "subnet-a"]


def test_a_region_without_any_subnet_makes_no_call_at_all(ec2):
    answer = fleet_launch.launch(call(subnets={}), SPEC, "tok", run_id="run-1")
    assert by_pool(answer) == {i: ("error", "NoSubnet", []) for i in (0, 1, 2)}
    assert ec2.calls == [] and answer.template_version is None


def test_the_default_version_is_marked_so_it_is_never_retired(ec2):
    ec2.answers["create_launch_template_version"] = [
        {"LaunchTemplateVersion": {"LaunchTemplateId": "lt-1", "VersionNumber": 1, "DefaultVersion": True}}]
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [launched("g6.xlarge", "subnet-a", "i-1")]}]
    assert fleet_launch.launch(call(target=1), SPEC, "tok", run_id="run-1").template_version.default


# --- a template that cannot be prepared -----------------------------------------------------------


@pytest.mark.parametrize("error", [EndpointConnectionError(endpoint_url="e"), ConnectTimeoutError(endpoint_url="e")])
def test_a_region_out_of_reach_is_an_error_answer_with_nothing_launched(ec2, error):
    ec2.answers["create_launch_template_version"] = [error]
    answer = fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert (answer.failure.outcome, answer.failure.reason) == ("error", type(error).__name__)
    assert answer.answers == [] and ec2.called("create_fleet") == []


def test_a_throttled_template_is_tried_again_and_a_refused_one_is_the_answer(ec2):
    ec2.answers["create_launch_template_version"] = [client_error("RequestLimitExceeded")]
    with pytest.raises(TransientAwsError, match="launch template in us-west-2 could not be prepared"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    ec2.answers["create_launch_template_version"] = [client_error("VersionLimitExceeded", message="10000 versions")]
    answer = fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert (answer.failure.outcome, answer.failure.reason, answer.failure.message) == (
        "error", "VersionLimitExceeded", "10000 versions")
    assert ec2.called("create_fleet") == []


# --- a fleet call that failed ---------------------------------------------------------------------


def test_a_refused_fleet_is_the_answer_for_the_whole_call(ec2):
    ec2.answers["create_fleet"] = [client_error("VcpuLimitExceeded", message="vCPU limit")]
    answer = fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert (answer.failure.outcome, answer.failure.reason, answer.failure.message) == ("quota", "VcpuLimitExceeded", "vCPU limit")
    assert len(ec2.called("create_fleet")) == 1 and ec2.called("describe_instances") == []


def test_an_unreachable_region_launched_nothing_when_no_try_reached_it(ec2):
    ec2.answers["create_fleet"] = [EndpointConnectionError(endpoint_url="e")]
    answer = fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert (answer.failure.outcome, answer.failure.reason) == ("error", "EndpointConnectionError")
    assert ec2.called("describe_instances") == []


def reached_then(error):
    def create_fleet(params):
        aws._attempts.get().extend(["reached", "unreached"])
        raise error
    return create_fleet


@pytest.mark.parametrize("error", [EndpointConnectionError(endpoint_url="e"), ConnectTimeoutError(endpoint_url="e")])
def test_an_unreachable_region_after_a_try_that_arrived_is_settled_by_the_token_tag(ec2, error):
    ec2.answers["create_fleet"] = [reached_then(error)]
    ec2.answers["describe_instances"] = [[{"Reservations": [{"Instances": [
        {"InstanceId": "i-1", "InstanceType": "g6.xlarge", "SubnetId": "subnet-a"}]}]}]]
    answer = fleet_launch.launch(call(target=1), SPEC, "tok", run_id="run-1")
    assert by_pool(answer) == {0: ("launched", None, ["i-1"])}
    assert answer.answers[0].result.note == (
        f"the launch answered {type(error).__name__}; its instances were found by the token tag")
    assert ec2.called("describe_instances") == [{"Filters": [{"Name": "tag:gpufill:launch-token", "Values": ["tok"]}]}]


def test_a_token_used_before_with_other_settings_is_answered_by_what_carries_it(ec2):
    ec2.answers["create_fleet"] = [client_error("IdempotentParameterMismatch")]
    ec2.answers["describe_instances"] = [[
        {"Reservations": [{"Instances": [{"InstanceId": "i-1", "InstanceType": "g6.xlarge", "SubnetId": "subnet-a"},
                                         {"InstanceId": "i-2", "InstanceType": "g6.xlarge", "SubnetId": "subnet-b"}]}]},
        {"Reservations": [{"Instances": [{"InstanceId": "i-3", "InstanceType": "g6.xlarge", "SubnetId": "subnet-a"}]}]}]]
    answer = fleet_launch.launch(call(target=3), SPEC, "tok-3", run_id="run-1")
    assert by_pool(answer) == {0: ("launched", None, ["i-1", "i-3"]), 1: ("launched", None, ["i-2"])}
    assert len(ec2.called("create_fleet")) == 1
    assert ec2.called("describe_instances") == [{"Filters": [{"Name": "tag:gpufill:launch-token", "Values": ["tok-3"]}]}]


def test_a_token_ec2_holds_for_a_call_that_launched_nothing_sends_the_pools_on_to_a_fresh_token(ec2, monkeypatch):
    """Looked for over the short pauses of a resource created a moment ago, then believed: the
    pools were never asked, so they come back throttled (never a capacity answer) for a new token."""
    paused = []
    monkeypatch.setattr(fleet_launch.clock, "pause", paused.append)
    ec2.answers["create_fleet"] = [client_error("IdempotentParameterMismatch", message="token reused")]
    ec2.answers["describe_instances"] = [{"Reservations": []}] * 5
    answer = fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert {outcome for outcome, _, _ in by_pool(answer).values()} == {"throttled"}
    assert len(ec2.called("describe_instances")) == 5 and sum(paused) == 7.5
    assert "a new call is made with a new token" in answer.answers[0].result.message


@pytest.mark.parametrize("lookup", [client_error("RequestLimitExceeded"), ReadTimeoutError(endpoint_url="e")])
def test_a_token_that_shows_nothing_yet_leaves_the_call_to_be_sent_again(ec2, lookup):
    ec2.answers["create_fleet"] = [client_error("IdempotentParameterMismatch")]
    ec2.answers["describe_instances"] = [lookup]
    with pytest.raises(TransientAwsError, match="CreateFleet in us-west-2 ended unsettled"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")


@pytest.mark.parametrize("error", [client_error("InternalError", 500), ReadTimeoutError(endpoint_url="e")])
def test_a_lost_answer_is_asked_again_with_the_same_call_and_its_replay_read_back(ec2, error):
    ec2.answers["create_fleet"] = [error, {"FleetId": "fleet-1", "Instances": [], "Errors": []}]
    ec2.answers["describe_fleets"] = [{"Fleets": [{"Instances": [launched("g6.xlarge", "subnet-a", "i-1")],
                                                   "Errors": [refused("InsufficientInstanceCapacity", "g6.xlarge", "subnet-b")]}]}]
    answer = fleet_launch.launch(call(target=1), SPEC, "tok", run_id="run-1")
    first, again = ec2.called("create_fleet")
    assert first == again
    assert ec2.called("describe_fleets") == [{"FleetIds": ["fleet-1"]}]
    assert by_pool(answer) == {0: ("launched", None, ["i-1"]), 1: ("capacity", "InsufficientInstanceCapacity", [])}


def test_a_replay_whose_fleet_is_not_described_yet_or_unreadable_is_tried_again(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1"}]
    ec2.answers["describe_fleets"] = [{"Fleets": []}]
    with pytest.raises(TransientAwsError, match="fleet fleet-1 in us-west-2 is not described yet"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    ec2.answers["describe_fleets"] = [client_error("RequestLimitExceeded")]
    with pytest.raises(TransientAwsError, match="could not be read back"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    ec2.answers["describe_fleets"] = [ReadTimeoutError(endpoint_url="e")]
    with pytest.raises(TransientAwsError, match="could not be read back"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    ec2.answers["describe_fleets"] = [{"Fleets": [{}]}]
    assert by_pool(fleet_launch.launch(call(target=1), SPEC, "tok", run_id="run-1")) == {i: ("throttled", "NotAnswered", []) for i in (0, 1, 2)}


def test_an_answer_with_instances_or_errors_is_not_read_back():
    assert not fleet_launch._may_be_replay({"FleetId": "f", "Instances": [launched("g6.xlarge", "subnet-a", "i-1")]})
    assert not fleet_launch._may_be_replay({"FleetId": "f", "Errors": [refused("X")]})
    assert not fleet_launch._may_be_replay({"Instances": []})
    assert fleet_launch._may_be_replay({"FleetId": "f", "Instances": [], "Errors": []})


def test_a_second_try_that_fails_too_leaves_the_call_unsettled_naming_both(ec2):
    ec2.answers["create_fleet"] = [ReadTimeoutError(endpoint_url="first"), client_error("InternalError", 500, message="again")]
    with pytest.raises(TransientAwsError, match=r"ended unsettled \(.*first.*; then .*again"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    ec2.answers["create_fleet"] = [client_error("InternalError", 500, message="first"), ReadTimeoutError(endpoint_url="again")]
    with pytest.raises(TransientAwsError, match=r"ended unsettled \(.*first; then .*again"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")


@pytest.mark.parametrize("first", [client_error("InternalError", 500), ReadTimeoutError(endpoint_url="e")])
def test_a_second_try_answered_with_a_mismatch_is_settled_by_the_token(ec2, first):
    ec2.answers["create_fleet"] = [first, client_error("IdempotentParameterMismatch")]
    ec2.answers["describe_instances"] = [{"Reservations": [{"Instances": [
        {"InstanceId": "i-1", "InstanceType": "g6.xlarge", "SubnetId": "subnet-a"}]}]}]
    answer = fleet_launch.launch(call(target=1), SPEC, "tok-9", run_id="run-1")
    assert by_pool(answer) == {0: ("launched", None, ["i-1"])}
    assert ec2.called("describe_instances") == [{"Filters": [{"Name": "tag:gpufill:launch-token", "Values": ["tok-9"]}]}]
    assert answer.answers[0].result.note == "the launch answered ClientError; its instances were found by the token tag"


def test_an_unsettled_call_names_the_answer_that_left_it_open_and_the_failed_lookup(ec2):
    ec2.answers["create_fleet"] = [client_error("IdempotentParameterMismatch", message="token reused")]
    ec2.answers["describe_instances"] = [client_error("RequestLimitExceeded", message="slow down")]
    with pytest.raises(TransientAwsError, match=r"unsettled \(.*token reused; then .*slow down\)"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")


def test_the_call_carries_the_steps_token_and_tags_every_instance_with_it(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [launched("g6.xlarge", "subnet-a", "i-1")]}]
    fleet_launch.launch(call(target=1), SPEC, "tok-4", run_id="run-1")
    [sent] = ec2.called("create_fleet")
    assert sent["ClientToken"] == "tok-4"
    assert {"Key": "gpufill:launch-token", "Value": "tok-4"} in sent["TagSpecifications"][0]["Tags"]
    assert sent["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"] == {"LaunchTemplateId": "lt-1", "Version": "7"}


def test_a_version_token_names_the_deployment_the_request_and_the_run(ec2):
    tokens = set()
    for spec, fleet_token in [(SPEC, "tok"), (LaunchSpec(image_id="ami-1", request_id="req-2", deployment="prod",
                                                         user_tags={"team": "ml"}), "tok"),
                              (LaunchSpec(image_id="ami-1", request_id="req-1", deployment="dev", user_tags={"team": "ml"}), "tok")]:
        fleet_launch.template_version(REGION, spec, fleet_token)
        tokens.add(ec2.called("create_launch_template_version")[-1]["ClientToken"])
    fleet_launch.template_version(REGION, SPEC, "other-run")
    tokens.add(ec2.called("create_launch_template_version")[-1]["ClientToken"])
    assert len(tokens) == 4


@pytest.mark.parametrize("error", [EndpointConnectionError(endpoint_url="https://ec2.us-west-2.amazonaws.com"),
                                   ConnectTimeoutError(endpoint_url="https://ec2.us-west-2.amazonaws.com")])
def test_an_unreachable_region_is_reported_with_the_endpoint_it_could_not_reach(ec2, error):
    ec2.answers["create_fleet"] = [error]
    assert "https://ec2.us-west-2.amazonaws.com" in fleet_launch.launch(call(), SPEC, "tok", run_id="run-1").failure.message
    ec2.answers["create_launch_template_version"] = [error]
    assert "https://ec2.us-west-2.amazonaws.com" in fleet_launch.launch(call(), SPEC, "tok", run_id="run-1").failure.message


def test_a_refused_template_is_classified_by_its_code(ec2):
    ec2.answers["create_launch_template_version"] = [client_error("VcpuLimitExceeded")]
    assert fleet_launch.launch(call(), SPEC, "tok", run_id="run-1").failure.outcome == "quota"


def test_a_failed_delete_is_logged_naming_the_template_version_and_error(ec2, caplog):
    caplog.set_level("WARNING")
    ec2.answers["delete_launch_template_versions"] = [client_error("UnauthorizedOperation", message="not allowed")]
    fleet_launch.retire_versions(REGION, [version_of("7")])
    ec2.answers["delete_launch_template_versions"] = [{"UnsuccessfullyDeletedLaunchTemplateVersions": [
        {"LaunchTemplateId": "lt-1", "VersionNumber": 8, "ResponseError": {"Code": "launchTemplateVersionDoesNotExist"}}]}]
    fleet_launch.retire_versions(REGION, [version_of("8")])
    logged = [r for r in caplog.records if r.getMessage() == "launch template version not deleted"]
    assert [(r.levelname, r.region, r.template, r.version) for r in logged] == [
        ("WARNING", REGION, "lt-1", "7"), ("WARNING", REGION, "lt-1", "8")]
    assert "not allowed" in logged[0].error and "launchTemplateVersionDoesNotExist" in str(logged[1].error)


def test_every_fleet_of_a_run_in_the_region_launches_from_the_version_it_made_first(ec2):
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [launched("g6.xlarge", "subnet-a", "i-1")]}]
    first = fleet_launch.launch(call(target=1), SPEC, "tok-1", run_id="run-1").template_version
    second = fleet_launch.launch(call(target=1), SPEC, "tok-2", run_id="run-1", versions=[first])
    assert second.template_version == first and len(ec2.called("create_launch_template_version")) == 1
    versions = [c["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["Version"] for c in ec2.called("create_fleet")]
    assert versions == ["7", "7"]
    # Other contents (an On-Demand fleet kept out of reservations) or another run: a version of its own.
    off = LaunchSpec(**{**SPEC.__dict__, "reservations_off": True})
    fleet_launch.launch(call(target=1), off, "tok-3", run_id="run-1", versions=[first])
    fleet_launch.launch(call(target=1), SPEC, "tok-4", run_id="run-2", versions=[first])
    assert len(ec2.called("create_launch_template_version")) == 3


# --- what is asked and recorded, more closely -----------------------------------------------------


def test_a_fleet_from_a_reservation_asks_for_reserved_capacity_in_that_reservation_only():
    reserved = A.model_copy(update={"market": "on-demand", "capacity_reservation_id": "cr-1"})
    params = fleet_launch.create_fleet_params(call([(0, reserved)], target=2, market="on-demand", strategy="lowest-price",
                                                    capacity_reservation_id="cr-1"), ("lt-1", "7"), SPEC, "tok")
    assert params["TargetCapacitySpecification"] == {"TotalTargetCapacity": 2, "DefaultTargetCapacityType": "reserved-capacity"}
    assert params["ReservedCapacityOptions"] == {"ReservationTypes": ["on-demand-capacity-reservation"],
                                                 "CapacityReservationTarget": {"CapacityReservationIds": ["cr-1"]}}
    assert "OnDemandOptions" not in params and "SpotOptions" not in params


def test_instances_launched_from_a_reservation_are_recorded_in_it(ec2):
    reserved = A.model_copy(update={"market": "on-demand", "capacity_reservation_id": "cr-1"})
    ec2.answers["create_fleet"] = [{"FleetId": "fleet-1", "Instances": [launched("g6.xlarge", "subnet-a", "i-1")]}]
    answer = fleet_launch.launch(call([(0, reserved)], target=1, market="on-demand", capacity_reservation_id="cr-1"),
                                 SPEC, "tok", run_id="run-1")
    [instance] = answer.answers[0].result.instances
    assert (instance.instance_id, instance.market, instance.capacity_reservation_id) == ("i-1", "on-demand", "cr-1")


def test_a_version_for_a_request_kept_out_of_reservations_says_so_to_ec2():
    off = LaunchSpec(**{**SPEC.__dict__, "reservations_off": True})
    assert fleet_launch.version_data(off)["CapacityReservationSpecification"] == {"CapacityReservationPreference": "none"}
    assert "CapacityReservationSpecification" not in fleet_launch.version_data(SPEC)


def test_a_version_token_differs_per_region():
    assert fleet_launch.version_token("us-east-1", SPEC, "run-1") != fleet_launch.version_token(REGION, SPEC, "run-1")


def test_a_template_version_still_unknown_after_the_pauses_says_which_call_in_which_region(ec2, monkeypatch):
    monkeypatch.setattr(fleet_launch.clock, "pause", lambda seconds: None)
    missing = "InvalidLaunchTemplateName.NotFoundException"
    ec2.answers["create_launch_template_version"] = [client_error(missing)] * 6
    ec2.answers["create_launch_template"] = [{}]
    with pytest.raises(Exception) as raised:
        fleet_launch.template_version(REGION, SPEC, "run-1")
    assert "CreateLaunchTemplateVersion in us-west-2: still unknown after 5 tries" in raised.value.response["Error"]["Message"]


def test_a_fleet_whose_template_stays_unknown_says_which_call_in_which_region(ec2, monkeypatch):
    monkeypatch.setattr(fleet_launch.clock, "pause", lambda seconds: None)
    ec2.answers["create_fleet"] = [client_error("InvalidLaunchTemplateId.VersionNotFound")] * 5
    answer = fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert answer.failure.reason == "InvalidLaunchTemplateId.VersionNotFound"
    assert "CreateFleet in us-west-2: still unknown after 5 tries" in answer.failure.message


def test_a_token_spent_on_nothing_is_answered_with_ec2s_code(ec2, monkeypatch):
    monkeypatch.setattr(fleet_launch.clock, "pause", lambda seconds: None)
    ec2.answers["create_fleet"] = [client_error("IdempotentParameterMismatch", message="token reused")]
    ec2.answers["describe_instances"] = [{"Reservations": []}] * 5
    answer = fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert {reason for _, reason, _ in by_pool(answer).values()} == {"IdempotentParameterMismatch"}


def test_a_token_that_launched_nothing_is_logged_once_for_its_region(ec2, monkeypatch, caplog):
    caplog.set_level("INFO")
    monkeypatch.setattr(fleet_launch.clock, "pause", lambda seconds: None)
    ec2.answers["create_fleet"] = [client_error("IdempotentParameterMismatch")]
    ec2.answers["describe_instances"] = [{"Reservations": []}] * 5
    fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    [record] = [r for r in caplog.records if r.getMessage() == "the earlier call with this token launched nothing"]
    assert record.region == REGION


def test_a_token_with_no_time_left_to_look_again_leaves_the_step_to_be_retried(ec2, monkeypatch):
    paused = []
    monkeypatch.setattr(fleet_launch.clock, "pause", paused.append)
    monkeypatch.setattr(fleet_launch, "visibility_time_left", lambda: 0.1)
    ec2.answers["create_fleet"] = [client_error("IdempotentParameterMismatch")]
    ec2.answers["describe_instances"] = [{"Reservations": []}] * 5
    with pytest.raises(TransientAwsError, match="ended unsettled"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert paused == [] and len(ec2.called("describe_instances")) == 1


def test_a_token_with_just_the_time_for_a_pause_looks_again_once(ec2, monkeypatch):
    paused = []
    monkeypatch.setattr(fleet_launch.clock, "pause", paused.append)
    monkeypatch.setattr(fleet_launch, "visibility_time_left", lambda: fleet_launch.PAUSES[0])
    ec2.answers["create_fleet"] = [client_error("IdempotentParameterMismatch")]
    ec2.answers["describe_instances"] = [{"Reservations": []}] * 5
    with pytest.raises(TransientAwsError, match="ended unsettled"):
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert paused == [fleet_launch.PAUSES[0]] and len(ec2.called("describe_instances")) == 2


@pytest.mark.parametrize("error", [EndpointConnectionError(endpoint_url="e"), ConnectTimeoutError(endpoint_url="e")])
def test_a_lost_reply_whose_token_shows_nothing_yet_is_unsettled_naming_the_failure_only(ec2, error):
    ec2.answers["create_fleet"] = [reached_then(error)]
    ec2.answers["describe_instances"] = [{"Reservations": []}]
    with pytest.raises(TransientAwsError) as raised:
        fleet_launch.launch(call(), SPEC, "tok", run_id="run-1")
    assert str(raised.value) == (
        f"CreateFleet in us-west-2 ended unsettled ({error}); the same call will be sent again")


def test_a_failed_delete_of_several_versions_names_them_all_and_other_templates_are_still_retired(ec2, caplog):
    caplog.set_level("WARNING")
    other = TemplateVersion(region=REGION, token="t", template_id="lt-2", version="3", default=False)
    ec2.answers["delete_launch_template_versions"] = [client_error("UnauthorizedOperation"), {}]
    fleet_launch.retire_versions(REGION, [version_of("7"), version_of("9", token="other"), other])
    assert [c["LaunchTemplateId"] for c in ec2.called("delete_launch_template_versions")] == ["lt-1", "lt-2"]
    [logged] = [r for r in caplog.records if r.getMessage() == "launch template version not deleted"]
    assert logged.version == "7,9"
