"""What each RunInstances asks for, and what the run reports once instances are up."""

import base64

import boto3

from gpufill.adapters import aws
from tests.conftest import zone

MARKET = {"regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.4, spot=4), "us-west-2b": zone(0.5, spot=4)}}}}


def test_run_instances_carries_the_hardened_launch_settings(local_account):
    sent = []
    with local_account(MARKET) as engine:
        aws.client("ec2", "us-west-2").meta.events.register(
            "provide-client-params.ec2.RunInstances", lambda params, **_: sent.append(dict(params))
        )
        execution = engine.run({"count": 2, "regions": ["us-west-2"], "root_volume_gib": 100,
                                "model_id": "Qwen/Qwen2.5-Coder-7B-Instruct"}, name="hardened")
        ec2 = boto3.client("ec2", region_name="us-west-2")
        groups = ec2.describe_security_groups(GroupIds=sent[0]["SecurityGroupIds"])["SecurityGroups"]
        subnet = ec2.describe_subnets(SubnetIds=[sent[0]["SubnetId"]])["Subnets"][0]
    params = sent[0]
    assert params["MetadataOptions"]["HttpTokens"] == "required"
    assert params["InstanceInitiatedShutdownBehavior"] == "terminate"
    assert params["BlockDeviceMappings"][0]["Ebs"] == {
        "VolumeSize": 100, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}
    assert params["InstanceMarketOptions"]["SpotOptions"] == {
        "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
    assert [g["GroupName"] for g in groups] == ["gpufill-instances"] and groups[0]["IpPermissions"] == []
    assert (subnet["AvailabilityZone"], subnet["DefaultForAz"]) == ("us-west-2a", True)
    user_data = base64.b64decode(params["UserData"]).decode()
    assert "s3://gpufill-startup-local/scripts/startup.sh" in user_data
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
