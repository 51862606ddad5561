"""Faults injected where they happen on AWS: at the API (seen by botocore's retries), at the
Lambda invoke, and inside a handler; and the simulated account's deployments and AMIs."""

import json
import time

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from gpufill.adapters import ami, aws
from gpufill.local.deploy.images import LOCAL_AMI

from tests.engine.simulated_account import EAST, WEST


def launch(region=WEST, token=None):
    params = dict(
        ImageId=LOCAL_AMI,
        InstanceType="g6.xlarge",
        MinCount=1,
        MaxCount=1,
        Placement={"AvailabilityZone": f"{region}a"},
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}],
    )
    if token:
        params["ClientToken"] = token
    # gpufill's own client: standard retry mode, as the handlers use it
    return [i["InstanceId"] for i in aws.client("ec2", region).run_instances(**params)["Instances"]]


def test_throttling_is_absorbed_by_botocore_retries_without_real_sleeping(engine):
    engine.faults.aws("ec2", "RunInstances", error="RequestLimitExceeded", times=2)
    before = engine.faults.total
    started = time.monotonic()
    assert len(launch()) == 1
    assert time.monotonic() - started < 2  # the standard mode's backoff would sleep seconds
    assert engine.faults.total - before == 2


def test_throttling_on_every_attempt_reaches_the_caller_with_the_aws_code(engine):
    engine.faults.aws("ec2", "RunInstances", error="RequestLimitExceeded", region=WEST, times=None)
    with pytest.raises(ClientError) as caught:
        launch(WEST)
    assert caught.value.response["Error"]["Code"] == "RequestLimitExceeded"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    # gpufill's clients: max_attempts=5 retries after the first try (botocore's meaning of the key)
    assert caught.value.response["ResponseMetadata"]["RetryAttempts"] == 5
    assert aws.is_transient(caught.value)
    assert len(launch(EAST)) == 1  # the rule names one region


def test_a_client_error_that_is_not_throttling_is_not_retried(engine):
    engine.faults.aws("ec2", "RunInstances", error="UnauthorizedOperation", times=None)
    with pytest.raises(ClientError) as caught:
        launch()
    assert caught.value.response["Error"]["Code"] == "UnauthorizedOperation"
    assert caught.value.response["ResponseMetadata"]["RetryAttempts"] == 0
    assert not aws.is_transient(caught.value)


def test_a_lost_reply_means_the_launch_happened(engine):
    engine.faults.aws("ec2", "RunInstances", error="InternalError", after=True, times=None)
    with pytest.raises(ClientError) as caught:
        launch(token="lost-reply")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    engine.faults.clear()
    ec2 = engine.client("ec2", WEST)
    by_token = {"Filters": [{"Name": "client-token", "Values": ["lost-reply"]}]}
    ec2.describe_instances(**by_token)  # EC2's view lags the launch by one call
    found = [i for r in ec2.describe_instances(**by_token)["Reservations"] for i in r["Instances"]]
    assert len(found) == 1  # every retried attempt reused the token: one instance, not five
    assert launch(token="lost-reply") == [found[0]["InstanceId"]]


@pytest.mark.parametrize("error, raised", [("ReadTimeout", ReadTimeoutError), ("EndpointConnectionError", EndpointConnectionError)])
def test_transport_failures_reach_the_caller_as_botocore_raises_them(engine, error, raised):
    engine.faults.aws("dynamodb", "DescribeTable", error=error, times=None)
    before = engine.faults.total
    with pytest.raises(raised) as caught:
        aws.client("dynamodb", EAST).describe_table(TableName="GpuProvisioningInstances-local")
    assert aws.is_transient(caught.value)
    assert engine.faults.total - before == 6  # the first try and 5 retries


def test_a_transport_failure_once_is_retried_by_botocore(engine):
    engine.faults.aws("dynamodb", "DescribeTable", error="ReadTimeout")
    aws.client("dynamodb", EAST).describe_table(TableName="GpuProvisioningInstances-local")


def invoke(engine, task, payload):
    reply = engine.client("lambda").invoke(FunctionName=f"gpufill-local-{task}", Payload=json.dumps(payload))
    return reply.get("FunctionError"), json.loads(reply["Payload"].read())


SCORE = {"request_id": "faults", "region": WEST, "instance_types": ["g6.xlarge"]}


def handler_ran(engine, before: int) -> bool:
    return any(i.handler == "score_region" for i in engine.calls.invocations[before:])


@pytest.mark.parametrize("error", ["Sandbox.Timedout", "Lambda.Unknown", "Lambda.ServiceException"])
def test_an_invoke_failing_before_the_handler_never_runs_it(engine, error):
    engine.faults.lambda_invoke("ScoreRegion", error=error)
    before = len(engine.calls.invocations)
    function_error, payload = invoke(engine, "ScoreRegion", SCORE)
    assert function_error and payload["errorType"] == error
    assert not handler_ran(engine, before)


def test_an_invoke_failing_after_the_handler_did_its_work(engine):
    engine.faults.lambda_invoke("ScoreRegion", error="Sandbox.Timedout", after_handler=True)
    before, calls_before = len(engine.calls.invocations), len(engine.calls.calls)
    function_error, payload = invoke(engine, "ScoreRegion", SCORE)
    assert function_error and payload["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after" in payload["errorMessage"]
    assert handler_ran(engine, before) and "ec2:DescribeSpotPriceHistory" in engine.calls.calls[calls_before:]


def test_a_killed_invocation_stops_before_the_aws_call(engine):
    engine.faults.kill_at("ec2", "DescribeSpotPriceHistory", task="ScoreRegion")
    calls_before = len(engine.calls.calls)
    function_error, payload = invoke(engine, "ScoreRegion", SCORE)
    assert function_error and payload["errorType"] == "Sandbox.Timedout"
    assert "ec2:DescribeSpotPriceHistory" not in engine.calls.calls[calls_before:]
    assert invoke(engine, "ScoreRegion", SCORE)[0] is None  # times=1: the next container lives


def test_kill_at_another_task_spares_this_one(engine):
    engine.faults.kill_at("ec2", "DescribeSpotPriceHistory", task="LaunchBatch")
    assert invoke(engine, "ScoreRegion", SCORE)[0] is None


def test_the_state_machine_sees_exactly_the_lambda_error_name(engine):
    engine.faults.lambda_invoke("ValidateRequest", error="Lambda.Unknown", times=None)
    execution = engine.run({"count": 1, "regions": [WEST]}, name="lambda-unknown")
    failed = [e for e in execution.history if e["type"] == "LambdaFunctionFailed"]
    assert failed and {e["lambdaFunctionFailedEventDetails"]["error"] for e in failed} == {"Lambda.Unknown"}
    # Once the retries run out the run ends under a documented name, never the raw one.
    assert (execution.status, execution.error) == ("FAILED", "PROVISIONING_FAILED")
    assert execution.metrics["faults_injected"] >= 2  # the first try and the state's retries
    # The faulted handler never ran; only ReportFailure did, to say how the run ended.
    assert execution.metrics["lambda_invocations"] == 1
    assert [e["stateEnteredEventDetails"]["name"] for e in execution.history
            if e["type"] == "TaskStateEntered"][-1] == "ReportFailure"


def test_bad_fault_arguments_name_the_field(engine):
    with pytest.raises(ValueError, match="error"):
        engine.faults.lambda_invoke("LaunchBatch", error="Lambda.Whatever")
    with pytest.raises(ValueError, match="times"):
        engine.faults.aws("ec2", "RunInstances", error="InternalError", times=0)
    with pytest.raises(ValueError, match="after"):
        engine.faults.aws("ec2", "RunInstances", error="ConnectTimeout", after=True)


def test_a_newer_public_ami_reaches_only_containers_that_resolve_again(engine):
    assert ami.image_for(EAST) == LOCAL_AMI  # resolved from the public parameter, as on AWS
    newer = engine.publish_newer_ami(EAST)
    assert newer != LOCAL_AMI
    assert ami.image_for(EAST) == LOCAL_AMI  # a warm container keeps what it resolved
    engine.cold_start()
    assert ami.image_for(EAST) == newer
    [image] = engine.client("ec2", EAST).describe_images(ImageIds=[newer])["Images"]
    assert image["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] >= 75
