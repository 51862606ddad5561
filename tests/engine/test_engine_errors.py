"""EC2's errors with EC2's HTTP status: capacity and busy answers are server errors (5xx),
as the EC2 API reference lists them, whoever produces them (the market or an injected fault)."""

import pytest
from botocore.exceptions import ClientError

from gpufill.adapters import aws
from gpufill.local import ec2_errors
from gpufill.local.deploy.images import LOCAL_AMI

from tests.engine.simulated_account import WEST

def refused(call) -> dict:
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response


def test_a_sold_out_pool_is_a_server_error_as_on_ec2(engine):
    ec2 = engine.client("ec2", WEST)
    answer = refused(lambda: ec2.run_instances(ImageId=LOCAL_AMI, InstanceType="g6.xlarge", MinCount=10_000, MaxCount=10_000,
                                               Placement={"AvailabilityZone": f"{WEST}a"}))
    assert (answer["Error"]["Code"], answer["ResponseMetadata"]["HTTPStatusCode"]) == ("InsufficientInstanceCapacity", 500)
    # A client error stays a 400.
    answer = refused(lambda: ec2.describe_instances(InstanceIds=["i-0123456789abcdef0"]))
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 400


@pytest.mark.parametrize("code, status", [
    ("InsufficientInstanceCapacity", 500), ("InsufficientCapacity", 500), ("InsufficientHostCapacity", 500),
    ("InsufficientAddressCapacity", 500), ("InternalError", 500), ("Unavailable", 503), ("RequestLimitExceeded", 503),
    ("UnauthorizedOperation", 400),
])
def test_injected_ec2_errors_carry_ec2s_status(engine, code, status):
    assert ec2_errors.status(code) == status
    engine.faults.aws("ec2", "DescribeRegions", error=code, times=None)
    answer = refused(lambda: engine.client("ec2", WEST).describe_regions())
    engine.faults.clear()
    assert (answer["Error"]["Code"], answer["ResponseMetadata"]["HTTPStatusCode"]) == (code, status)


def test_gpufill_reads_capacity_as_an_answer_and_botocore_does_not_ask_again(engine):
    marker = engine.calls.mark()
    answer = refused(lambda: aws.client("ec2", WEST).run_instances(
        ImageId=LOCAL_AMI, InstanceType="g6.xlarge", MinCount=10_000, MaxCount=10_000, Placement={"AvailabilityZone": f"{WEST}a"}))
    assert answer["Error"]["Code"] == "InsufficientInstanceCapacity" and answer["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert engine.calls.metrics_since(marker, [])["run_instances_calls"] == 1
    # Busy answers are still botocore's to retry: six attempts in all.
    engine.faults.aws("ec2", "RunInstances", error="InternalError", times=None)
    marker = engine.calls.mark()
    answer = refused(lambda: aws.client("ec2", WEST).run_instances(
        ImageId=LOCAL_AMI, InstanceType="g6.xlarge", MinCount=1, MaxCount=1, Placement={"AvailabilityZone": f"{WEST}a"}))
    assert answer["ResponseMetadata"]["RetryAttempts"] == 5
    engine.faults.clear()


@pytest.mark.parametrize("code, transient", [
    ("InsufficientInstanceCapacity", False), ("InsufficientHostCapacity", False), ("InsufficientAddressCapacity", False),
    ("RequestLimitExceeded", True), ("InternalError", True), ("Unavailable", True), ("SomethingNewServerSide", True),
    ("UnauthorizedOperation", False),
])
def test_gpufill_classifies_by_code_never_by_status_alone(code, transient):
    error = ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": ec2_errors.status(code)
                                                                         if code != "SomethingNewServerSide" else 500}}, "RunInstances")
    assert aws.is_transient(error) is transient
