"""A LaunchBatch that is retried after RunInstances succeeded reuses its ClientToken and launches nothing twice."""

from unittest import mock

import boto3
import pytest
from botocore.exceptions import ClientError

from gpufill.adapters import instances_table
from tests.support import zone

MARKET = {"regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.4, spot=10)}}}}


@pytest.mark.parametrize("mode, call", [("partial", "RunInstances"), ("fleet", "CreateFleet")])
def test_retried_launch_step_launches_nothing_twice(local_account, mode, call):
    real_record = instances_table.record_launched
    failures = []

    def flaky_record(instances, **kwargs):
        if not failures:  # the first write fails after EC2 has already launched the batch
            failures.append([i.instance_id for i in instances])
            raise instances_table.InstanceRecordError("table unavailable")
        return real_record(instances, **kwargs)

    with local_account(MARKET) as engine, mock.patch.object(instances_table, "record_launched", flaky_record):
        execution = engine.run({"count": 3, "regions": ["us-west-2"], "launch_mode": mode}, name="retried")
        described = boto3.client("ec2", region_name="us-west-2").describe_instances()["Reservations"]
        records = boto3.resource("dynamodb", region_name="us-east-1").Table("GpuProvisioningInstances-local").scan()
    running = sorted(i["InstanceId"] for r in described for i in r["Instances"])
    assert execution.output["launched"] == 3
    assert len(running) == 3  # not 6
    assert sorted(failures[0]) == running  # the retry got back the very instances of the first call
    assert sorted(item["instance_id"] for item in records["Items"] if "kind" not in item) == running
    assert execution.metrics["ec2_calls"][call] == 2  # the same call again, answered with the same instances
    assert engine.market.left("us-west-2", "us-west-2a", "g6.xlarge", "spot") == 7


def test_same_token_with_other_parameters_is_refused(local_account):
    with local_account(MARKET) as engine:
        ec2 = boto3.client("ec2", region_name="us-west-2")
        first = dict(ImageId="ami-0abcdef1234567890", InstanceType="g6.xlarge", MinCount=1, MaxCount=2,
                     ClientToken="token-1", Placement={"AvailabilityZone": "us-west-2a"},
                     InstanceMarketOptions={"MarketType": "spot"})
        launched = ec2.run_instances(**first)["Instances"]
        again = ec2.run_instances(**first)["Instances"]
        try:
            ec2.run_instances(**{**first, "MaxCount": 3})
        except ClientError as error:
            code = error.response["Error"]["Code"]
        else:
            code = None
    assert [i["InstanceId"] for i in again] == [i["InstanceId"] for i in launched]
    assert code == "IdempotentParameterMismatch"
    assert engine.market.left("us-west-2", "us-west-2a", "g6.xlarge", "spot") == 8
