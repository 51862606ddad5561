"""`gpufill doctor --probe`'s pure parts: the answer classes, the decoded reason, the rows and
table, the routing of a probe event, and the engine's encoded authorization failure message."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufill import constants
from gpufill.adapters import probe as calls
from gpufill.cli.probe import render
from gpufill.policy import probe

REFUSAL = ("You are not authorized to perform this operation. User: arn:aws:sts::123456789012:assumed-role/r/s is not "
           "authorized to perform: ec2:CreateFleet on resource: arn:aws:ec2:us-west-2:123456789012:fleet/* because no "
           "identity-based policy allows the ec2:CreateFleet action. Encoded authorization failure message: gpf1.abc-DEF_0")


@pytest.mark.parametrize(("code", "result"), [
    ("DryRunOperation", probe.GRANTED),
    ("UnauthorizedOperation", probe.REFUSED),
    ("AccessDeniedException", probe.REFUSED),
    ("InvalidInstanceID.NotFound", probe.UNPROVEN),
    ("InvalidLaunchTemplateName.NotFoundException", probe.UNPROVEN),
    (None, probe.UNPROVEN),
])
def test_each_answer_to_a_dry_run_has_its_class(code, result):
    assert probe.classify(code, REFUSAL if result == probe.REFUSED else "")[0] == result


def test_a_refusal_keeps_the_readable_reason_and_the_encoded_message_apart():
    result, detail = probe.classify("UnauthorizedOperation", REFUSAL)
    assert result == probe.REFUSED and "Encoded" not in detail and detail.endswith("allows the ec2:CreateFleet action")
    assert probe.encoded_message(REFUSAL) == "gpf1.abc-DEF_0"
    assert probe.encoded_message("You are not authorized to perform this operation.") is None


@given(st.text())
def test_any_message_classifies_without_failing(message):
    for code in ("DryRunOperation", "UnauthorizedOperation", "Throttling", None):
        assert probe.classify(code, message)[0] in probe.RESULTS


def test_the_engine_encodes_what_sts_decodes_and_the_reason_reads_it():
    from gpufill.local.iam.enforcement import Principal, decoded_failure, encoded_failure
    from gpufill.local.iam.evaluator import Authorization, Decision

    who = Principal("r", "arn:aws:sts::123456789012:assumed-role/r/s", ())
    asked = Authorization("ec2:CreateFleet", "arn:aws:ec2:us-west-2:123456789012:fleet/*",
                          {"aws:RequestTag/gpufill:deployment": "dev", "aws:PrincipalArn": "arn:aws:iam::1:role/r"})
    decision = Decision(asked, "implicitDeny")
    document = decoded_failure(encoded_failure(who, decision))
    assert document["allowed"] is False and document["explicitDeny"] is False
    assert probe.decoded_reason(document) == (
        "ec2:CreateFleet on arn:aws:ec2:us-west-2:123456789012:fleet/*: no statement allows it "
        "(context aws:RequestTag/gpufill:deployment=dev)")
    with pytest.raises(ValueError):
        decoded_failure("AQoDYXdzEJr...")  # AWS's own: only STS reads it


def test_every_ec2_call_a_function_makes_has_its_probe():
    needs = json.loads(calls.NEEDS.read_text())["principals"]
    tasks = {p.removesuffix("FunctionArn") for p in constants.LAMBDA_TASKS}
    missing = {a for t in tasks for c in needs.get(t, []) if probe.dry_runnable(a := c["action"]) and a.split(":")[1] not in calls.PARAMS}
    assert not missing


def test_a_probe_event_runs_only_through_the_alias_and_the_alias_runs_only_probes():
    alias = SimpleNamespace(invoked_function_arn=f"arn:aws:lambda:us-east-1:1:function:gpufill-dev-LaunchBatch:{constants.PROBE_ALIAS}",
                            function_name="gpufill-dev-LaunchBatch")
    plain = SimpleNamespace(invoked_function_arn="arn:aws:lambda:us-east-1:1:function:gpufill-dev-LaunchBatch",
                            function_name="gpufill-dev-LaunchBatch")
    event = {constants.PROBE_EVENT_KEY: {"regions": {"us-west-2": {}}}}
    assert calls.requested(event, plain) and calls.requested({"request": {}}, alias)
    assert not calls.requested({"request": {}}, plain)  # a run's event goes to the handler
    with pytest.raises(calls.ProbeRefused, match="only through the 'probe' alias"):
        calls.answer(event, plain)
    with pytest.raises(calls.ProbeRefused, match="answers only"):
        calls.answer({"request": {}, **event}, alias)
    with pytest.raises(calls.ProbeRefused, match="gpufill_probe.regions"):
        calls.answer({constants.PROBE_EVENT_KEY: {"regions": ["us-west-2"]}}, alias)


def test_the_table_and_its_summary():
    rows = [
        {"function": "LaunchBatch", "region": "us-west-2", "call": "ec2:CreateFleet", "result": probe.REFUSED,
         "detail": "UnauthorizedOperation: …", "decoded": "ec2:CreateFleet on …: no statement allows it"},
        {"function": "LaunchBatch", "region": "us-west-2", "call": "ec2:RunInstances", "result": probe.GRANTED, "detail": "DryRunOperation"},
        {"function": "ReportResult", "region": "*", "call": "dynamodb:BatchGetItem", "result": probe.NOT_PROBEABLE, "detail": "DynamoDB has no DryRun"},
    ]
    text = render(rows).splitlines()
    assert text[0].split() == ["function", "region", "call", "result", "detail"]
    assert text[2].strip() == "why: ec2:CreateFleet on …: no statement allows it"
    assert text[-1] == "3 calls: 1 granted, 1 refused, 1 not probeable"
    assert probe.failing(rows) == rows[:1]


def test_a_function_that_cannot_be_asked_fails_the_probe_saying_why():
    import io

    from botocore.exceptions import ClientError

    from gpufill.cli.probe import _invoke

    class Lambda:
        def __init__(self, answer):
            self.answer, self.asked = answer, []

        def invoke(self, **call):
            self.asked.append(call)
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    older = Lambda(ClientError({"Error": {"Code": "ResourceNotFoundException", "Message": "Function not found"}}, "Invoke"))
    [row] = _invoke(older, "dev", "LaunchBatchFunctionArn", {"us-west-2": {"image_id": "ami-1"}})
    assert row["result"] == probe.FAILED and row["detail"].endswith("(a deployment older than the probe alias: npx cdk deploy --all)")
    assert older.asked[0]["FunctionName"] == "gpufill-dev-LaunchBatch" and older.asked[0]["Qualifier"] == constants.PROBE_ALIAS
    assert json.loads(older.asked[0]["Payload"]) == {constants.PROBE_EVENT_KEY: {"regions": {"us-west-2": {"image_id": "ami-1"}}}}
    failing = Lambda({"FunctionError": "Unhandled", "Payload": io.BytesIO(b'{"errorMessage": "boom"}')})
    [row] = _invoke(failing, "dev", "LaunchBatchFunctionArn", {})
    assert row["result"] == probe.FAILED and row["detail"] == "gpufill-dev-LaunchBatch:probe failed: boom"


def test_why_a_call_is_not_probeable_is_named_per_service():
    assert [probe.dry_runnable(a) for a in ("ec2:RunInstances", "ec2:CreateTags", "dynamodb:PutItem", "xec2:RunInstances")] == [
        True, False, False, False]
    assert probe.not_probeable("dynamodb:PutItem") == "DynamoDB has no DryRun"
    assert probe.not_probeable("states:StartExecution") == "Step Functions has no DryRun"
    assert probe.not_probeable("ec2:CreateTags") == "tags given at creation: judged with the call that creates"
    assert probe.not_probeable("iam:PassRole") == "checked by the launch calls that pass the role"
    assert probe.not_probeable("kms:Decrypt") == "kms has no DryRun"
    assert probe.not_probeable("kms") == "kms has no DryRun"  # a name without its action still names the service


def test_the_reason_read_from_a_refusal_and_its_decoded_document():
    assert probe.plain_reason("  No. Encoded authorization failure message: x ") == "No"
    assert probe.plain_reason("Not authorized for role MAX.") == "Not authorized for role MAX"  # no encoded part
    assert probe.encoded_message("… Encoded authorization failure message:   ") is None
    assert probe.encoded_message("… Encoded authorization failure message: abc def") == "abc"
    document = {"allowed": False, "explicitDeny": True, "context": {
        "action": "ec2:TerminateInstances", "resource": "arn:aws:ec2:us-west-2:1:instance/i-1",
        "conditions": {"items": [
            {"key": "aws:PrincipalArn", "values": {"items": [{"value": "arn:aws:iam::1:role/r"}]}},
            {"key": "aws:TagKeys", "values": {"items": [{"value": "a"}, {"value": "b"}]}},
            {"key": "ec2:Region", "values": {"items": [{"value": "us-west-2"}]}},
        ]}}}
    assert probe.decoded_reason(document) == (
        "ec2:TerminateInstances on arn:aws:ec2:us-west-2:1:instance/i-1: an explicit deny (context aws:TagKeys=a,b; ec2:Region=us-west-2)")
    assert probe.decoded_reason({"context": {}}) == "? on ?: no statement allows it"
    odd = {"context": {"action": "a", "resource": "r", "conditions": {"items": [
        {"key": "k", "values": {}}, {"key": "v", "values": {"items": [{}]}}]}}}
    assert probe.decoded_reason(odd) == "a on r: no statement allows it (context k=; v=)"
    assert probe.classify(None) == (probe.UNPROVEN, "EC2 answered as if DryRun were not set")
    assert probe.classify("Throttling", "slow down") == (probe.UNPROVEN, "Throttling: slow down")
    assert probe.classify("InvalidAMIID.NotFound") == (probe.UNPROVEN, "InvalidAMIID.NotFound")
