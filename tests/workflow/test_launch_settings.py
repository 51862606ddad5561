"""What each RunInstances asks for, and what the run reports once instances are up."""

import base64

import boto3
import pytest

from gpufill.adapters import aws
from tests.support import stack_names, zone

MARKET = {"regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.4, spot=4), "us-west-2b": zone(0.5, spot=4)}}}}


def test_run_instances_carries_the_hardened_launch_settings(local_account):
    sent = []
    with local_account(MARKET) as engine:
        aws.client("ec2", "us-west-2").meta.events.register(
            "provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(dict(params))
        )
        execution = engine.run({"count": 2, "regions": ["us-west-2"], "root_volume_gib": 100, "launch_mode": "partial",
                                "model_id": "Qwen/Qwen2.5-Coder-7B-Instruct"}, name="hardened")
        # what the stack deploys: its instance profile, and the startup bucket the functions are told of
        profile, bucket = stack_names(engine)
        ec2 = boto3.client("ec2", region_name="us-west-2")
        groups = ec2.describe_security_groups(GroupIds=sent[0]["SecurityGroupIds"])["SecurityGroups"]
        subnet = ec2.describe_subnets(SubnetIds=[sent[0]["SubnetId"]])["Subnets"][0]
    params = sent[0]
    # The instance profile (SSM core access, the startup bucket) goes with every launch.
    assert params["IamInstanceProfile"] == {"Arn": profile}
    # IMDSv2 only, and one hop: the serving container has no route to the instance's credentials.
    assert params["MetadataOptions"] == {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1}
    tags = {t["Key"]: t["Value"] for t in params["TagSpecifications"][0]["Tags"]}
    assert tags["gpufill:deployment"] == "local" and tags["gpufill:request-id"] == "hardened"
    assert params["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert params["BlockDeviceMappings"][0]["Ebs"] == {
        "VolumeSize": 100, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}
    assert params["InstanceMarketOptions"]["SpotOptions"] == {
        "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
    assert [g["GroupName"] for g in groups] == ["gpufill-instances"] and groups[0]["IpPermissions"] == []
    assert (subnet["AvailabilityZone"], subnet["DefaultForAz"]) == ("us-west-2a", True)
    user_data = base64.b64decode(params["UserData"]).decode()
    assert f"s3://{bucket}/scripts/startup.sh" in user_data
    assert "Qwen/Qwen2.5-Coder-7B-Instruct" in user_data and len(params["UserData"]) < 16 * 1024
    assert execution.output["status"] == "FULFILLED"


def test_result_says_how_to_reach_each_instance(simulate):
    execution = simulate({"count": 2, "regions": ["us-west-2"]}, MARKET)
    for instance in execution.output["instances"]:
        assert instance["state"] == "running" and instance["private_ip"]
        assert instance["connect"] == (
            f"aws ssm start-session --region us-west-2 --target {instance['instance_id']} "
            "--document-name AWS-StartPortForwardingSession "
            """--parameters '{"portNumber":["8000"],"localPortNumber":["8000"]}'"""
        )
    assert "WaitUntilRunning" in execution.entered()


def test_instances_reclaimed_at_launch_are_reported_and_do_not_count(local_account):
    market = {"regions": {"us-west-2": {"zones": {
        "us-west-2a": {"g6.xlarge": {"spot_price": 0.4, "spot": 4, "reclaimed_at_launch": 1}}}}}}
    with local_account(market) as engine:
        execution = engine.run({"count": 3, "regions": ["us-west-2"]}, name="reclaimed")
        table = boto3.resource("dynamodb", region_name="us-east-1").Table("GpuProvisioningInstances-local")
        records = {r["instance_id"]: r for r in table.scan()["Items"] if "kind" not in r}
    result = execution.output
    assert (result["status"], result["launched"], len(result["lost"])) == ("PARTIAL", 2, 1)
    lost = result["lost"][0]["instance_id"]
    assert records[lost]["state"] == "terminated" and "reclaimed" in records[lost]["lost_reason"]
    assert {records[i["instance_id"]]["state"] for i in result["instances"]} == {"running"}
    assert result["hourly_cost"] == 0.8


def test_a_root_volume_below_the_images_snapshot_is_raised_to_it(local_account):
    """EC2 refuses a root volume smaller than the AMI's root snapshot (InvalidBlockDeviceMapping)."""
    from gpufill.local.deploy.images import LOCAL_AMI_ROOT_SNAPSHOT_GIB

    sent = []
    with local_account(MARKET) as engine:
        aws.client("ec2", "us-west-2").meta.events.register(
            "provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(dict(params))
        )
        execution = engine.run({"count": 1, "regions": ["us-west-2"], "root_volume_gib": 40, "launch_mode": "partial"},
                               name="small-root")
    assert execution.output["status"] == "FULFILLED"
    assert sent[0]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == LOCAL_AMI_ROOT_SNAPSHOT_GIB > 40


def test_instances_ec2_does_not_describe_yet_are_pending_not_lost(local_account):
    """EC2 is eventually consistent: the first check right after launch does not see them."""
    with local_account(MARKET) as engine:
        engine.market.visibility_delay_calls = 4  # a slow few seconds: several checks see nothing
        execution = engine.run({"count": 2, "regions": ["us-west-2"]}, name="fresh")
    assert execution.output["status"] == "FULFILLED" and execution.output["lost"] == []
    assert {i["state"] for i in execution.output["instances"]} == {"running"}
    assert execution.entered().count("WaitUntilRunning") >= 2  # the first round saw nothing yet


@pytest.mark.parametrize("mode, call", [("partial", "RunInstances"), ("fleet", "CreateFleet")])
def test_ec2_refusing_the_launch_itself_ends_launch_rejected_after_one_call(local_account, mode, call):
    with local_account(MARKET) as engine:
        engine.faults.aws("ec2", call, error="UnauthorizedOperation", times=None)
        execution = engine.run({"count": 2, "regions": ["us-west-2"], "launch_mode": mode}, name="refused")
        refused_calls = engine.faults.total
    assert (execution.status, execution.error) == ("FAILED", "LAUNCH_REJECTED")
    assert refused_calls == 1  # one call, not one per pool
    assert execution.cause["code"] == "UnauthorizedOperation" and "IAM" in execution.cause["what_to_change"]
