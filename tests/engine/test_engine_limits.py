"""Step Functions and SNS limits, enforced as AWS enforces them, and the run timeout."""

import json

import pytest
from botocore.exceptions import ClientError

from gpufill import constants
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario

from tests.engine.simulated_account import MARKET

TOPIC = "arn:aws:sns:us-east-1:123456789012:gpufill-approvals-local"
LIMITS_MACHINE = {
    "StartAt": "Route",
    "States": {
        "Route": {
            "Type": "Choice",
            "Choices": [
                {"Variable": "$.case", "StringEquals": "big-parameters", "Next": "BigParameters"},
                {"Variable": "$.case", "StringEquals": "big-output", "Next": "BigOutput"},
                {"Variable": "$.case", "StringEquals": "token", "Next": "WaitForAnswer"},
                {"Variable": "$.case", "StringEquals": "loop", "Next": "Loop"},
            ],
            "Default": "Done",
        },
        # A Lambda task whose payload, after Parameters, is over 256 KB.
        "BigParameters": {
            "Type": "Task",
            "Resource": "${ValidateRequestFunctionArn}",
            "Parameters": {"a.$": "$.big", "b.$": "$.big"},
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Done"}],
            "End": True,
        },
        "BigOutput": {"Type": "Pass", "Parameters": {"a.$": "$.big", "b.$": "$.big"}, "End": True},
        "WaitForAnswer": {
            "Type": "Task",
            "Resource": "arn:aws:states:::sns:publish.waitForTaskToken",
            "Parameters": {"TopicArn": TOPIC, "Subject": "answer me", "Message.$": "$$.Task.Token"},
            "End": True,
        },
        "Loop": {"Type": "Pass", "Next": "Loop"},
        "Done": {"Type": "Succeed"},
    },
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    definition = tmp_path_factory.mktemp("asl") / "limits.asl.json"
    definition.write_text(json.dumps(LIMITS_MACHINE))
    # A machine of the engine's own: its role is the provisioner's, which publishes to no topic itself.
    with LocalEngine(MarketScenario.model_validate(MARKET), definition=definition, judge_iam=False) as account:
        yield account


BIG = "x" * 140_000  # two copies are over 256 KB; one is not


@pytest.mark.parametrize("name", ["n" * 81, "has space", "semi;colon", "ünïcode"])
def test_execution_names_are_refused_at_start_as_aws_refuses_them(engine, name):
    with pytest.raises(ClientError) as caught:
        engine.run({"case": "none"}, name=name)
    assert caught.value.response["Error"]["Code"] == "InvalidName"


def test_the_longest_valid_execution_name_runs(engine):
    assert engine.run({"case": "none"}, name="A-z_0" * 16).status == "SUCCEEDED"


def test_a_task_payload_over_256_kb_fails_the_run_and_states_all_cannot_catch_it(engine):
    execution = engine.run({"case": "big-parameters", "big": BIG}, name="big-parameters")
    assert (execution.status, execution.error) == ("FAILED", "States.DataLimitExceeded")
    assert execution.metrics["lambda_invocations"] == 0


def test_a_state_output_over_256_kb_fails_the_run(engine):
    execution = engine.run({"case": "big-output", "big": BIG}, name="big-output")
    assert (execution.status, execution.error) == ("FAILED", "States.DataLimitExceeded")
    assert 140_000 < execution.metrics["largest_state_bytes"] < constants.STATE_SIZE_LIMIT_BYTES


def test_the_run_reports_its_largest_state_and_history_size(engine):
    execution = engine.run({"case": "none", "pad": "y" * 1000}, name="metrics")
    assert 1000 < execution.metrics["largest_state_bytes"] < 1200
    assert execution.metrics["history_events"] == len(execution.history)


def test_an_execution_fails_when_its_history_reaches_the_limit(engine, monkeypatch):
    monkeypatch.setattr(constants, "HISTORY_EVENTS_LIMIT", 60)  # AWS's 25,000 would take minutes locally
    execution = engine.run({"case": "loop"}, name="endless", timeout=30)
    assert (execution.status, execution.error) == ("FAILED", "States.Runtime")
    assert "maximum number of history events" in execution.cause
    assert 60 <= execution.metrics["history_events"] <= 62


def test_a_task_token_answers_once_then_is_closed(engine):
    import threading

    result = {}
    worker = threading.Thread(target=lambda: result.update(e=engine.run({"case": "token"}, name="token")))
    worker.start()
    sfn = engine.client("stepfunctions")
    token = None
    for _ in range(500):
        published = engine.approval_messages()
        if published:
            token = published[-1]["message"]
            break
        threading.Event().wait(0.01)
    assert token
    sfn.send_task_success(taskToken=token, output="{}")
    worker.join(timeout=30)
    assert result["e"].status == "SUCCEEDED"
    for answer in (lambda: sfn.send_task_success(taskToken=token, output="{}"), lambda: sfn.send_task_failure(taskToken=token)):
        with pytest.raises(ClientError) as caught:
            answer()
        assert caught.value.response["Error"]["Code"] == "TaskTimedOut"
    with pytest.raises(ClientError) as caught:
        sfn.send_task_success(taskToken="never-issued", output="{}")
    assert caught.value.response["Error"]["Code"] == "InvalidToken"


def test_a_run_that_outlives_its_timeout_says_so(engine):
    execution = engine.run({"case": "token"}, name="never-answered", timeout=0.3)
    assert (execution.status, execution.error) == ("FAILED", "LocalTimeout")
    assert execution.cause == "still running after 0.3 s; raise it with --timeout"


@pytest.mark.parametrize("subject, ok", [("s" * 99, True), ("s" * 100, False), ("two\nlines", False), ("café", False)])
def test_sns_subjects_follow_aws_rules(engine, subject, ok):
    publish = lambda: engine.client("sns").publish(TopicArn=TOPIC, Message="m", Subject=subject)  # noqa: E731
    if ok:
        publish()
    else:
        with pytest.raises(ClientError) as caught:
            publish()
        assert caught.value.response["Error"]["Code"] == "InvalidParameter"


def test_a_dry_run_launch_is_answered_as_ec2_answers_it_and_launches_nothing(engine):
    """moto answers DryRun for some operations only (not DescribeSpotPriceHistory, nor the engine's
    own PurchaseCapacityBlock, which would buy): the engine answers every EC2 DryRun itself, here
    unjudged, as an allowed one."""
    from gpufill.local.deploy.images import LOCAL_AMI
    from tests.engine.simulated_account import WEST

    ec2 = engine.client("ec2", WEST)
    for call in (lambda: ec2.run_instances(ImageId=LOCAL_AMI, InstanceType="g6.xlarge", MinCount=1, MaxCount=1, DryRun=True),
                 lambda: ec2.describe_spot_price_history(DryRun=True)):
        with pytest.raises(ClientError) as caught:
            call()
        assert caught.value.response["Error"]["Code"] == "DryRunOperation"
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert ec2.describe_instances()["Reservations"] == []
