"""The operator's IAM policy in docs/deploy.md, judged as AWS judges it (the local engine's
evaluator): every call gpufill's verbs make is allowed, and what the policy leaves out is not."""

from __future__ import annotations

import json
import re

import pytest

from gpufill.local.iam.evaluator import Authorization, Evaluator
from tests.support import ROOT

ACCOUNT, REGION = "123456789012", "us-east-1"
OPERATOR = f"arn:aws:iam::{ACCOUNT}:user/ana"
TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/GpuProvisioningInstances-dev"
MACHINE = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:gpufill-provisioner-dev"
EXECUTION = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:gpufill-provisioner-dev:my-run"
ANSWER_FUNCTION = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:gpufill-dev-AnswerApproval"
INSTANCE = f"arn:aws:ec2:us-west-2:{ACCOUNT}:instance/i-0123456789abcdef0"


def documented_policy() -> dict:
    text = (ROOT / "docs/deploy.md").read_text().split("## The operator's permissions", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)```", text, flags=re.S).group(1))


def documented_approver_policy() -> dict:
    """The second policy of the section: the stack's approver policy, as documented."""
    text = (ROOT / "docs/deploy.md").read_text().split("## The operator's permissions", 1)[1]
    return json.loads(re.findall(r"```json\n(.*?)```", text, flags=re.S)[1])


@pytest.fixture(scope="module")
def evaluator():
    judge = Evaluator()
    yield judge
    judge.close()


def check(action: str, resource: str, **context) -> Authorization:
    return Authorization(action, resource, {"aws:RequestedRegion": resource.split(":")[3] or REGION, **context})


def approval(key: str) -> dict:
    return {"dynamodb:LeadingKeys": (key,)}


CLI_CALLS = [
    check("cloudformation:DescribeStacks", f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/gpufill-dev/0a1b2c3d"),
    check("states:StartExecution", MACHINE),
    check("states:ListExecutions", MACHINE),  # an id given by its start
    check("states:DescribeExecution", EXECUTION),
    check("states:GetExecutionHistory", EXECUTION),
    check("dynamodb:Query", f"{TABLE}/index/by-request"),
    check("dynamodb:Scan", TABLE),
    check("dynamodb:GetItem", TABLE, **approval("approval#teardown-my-run-20261202T210841450")),
    check("dynamodb:GetItem", TABLE, **approval("i-0123456789abcdef0")),  # connect: the instance's record
    check("sns:ListSubscriptionsByTopic", f"arn:aws:sns:{REGION}:{ACCOUNT}:gpufill-approvals-dev"),
    check("ssm:StartSession", INSTANCE, **{"aws:ResourceTag/gpufill:deployment": "dev"}),
    check("ssm:StartSession", "arn:aws:ssm:us-west-2::document/AWS-StartPortForwardingSession"),
]


# gpufill approve|reject: the AnswerApproval function URL, as AWS checks a call to it.
URL_CALLS = [
    check("lambda:InvokeFunctionUrl", ANSWER_FUNCTION, **{"lambda:FunctionUrlAuthType": "AWS_IAM"}),
    check("lambda:InvokeFunction", ANSWER_FUNCTION, **{"lambda:InvokedViaFunctionUrl": "true"}),
]
CLI_CALLS += URL_CALLS
# gpufill doctor --probe: the functions through their probe alias only, and the reason of a refusal.
PROBE_CALLS = [
    check("lambda:InvokeFunction", ANSWER_FUNCTION.replace("AnswerApproval", "LaunchBatch:probe")),
    Authorization("sts:DecodeAuthorizationMessage", "*", {"aws:RequestedRegion": REGION}),
]
CLI_CALLS += PROBE_CALLS


@pytest.mark.parametrize("call", CLI_CALLS, ids=lambda c: f"{c.action}:{c.resource.rsplit(':', 1)[-1]}")
def test_the_documented_policy_allows_every_call_the_verbs_make(evaluator, call):
    decision = evaluator.judge(OPERATOR, ACCOUNT, [("operator", documented_policy())], call)
    assert decision.allowed, decision


@pytest.mark.parametrize("call", [
    # The claim on a record that is not an approval item: the operator changes no instance record.
    check("dynamodb:UpdateItem", TABLE, **approval("i-0123456789abcdef0")),
    check("ssm:StartSession", INSTANCE, **{"aws:ResourceTag/gpufill:deployment": "prod"}),
    check("states:StartExecution", f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:gpufill-provisioner-prod"),
    check("dynamodb:DeleteItem", TABLE, **approval("approval#teardown-my-run-20261202T210841450")),
    # Answers go through the AnswerApproval URL only: no task answer, no claim of one's own.
    Authorization("states:SendTaskSuccess", "*", {"aws:RequestedRegion": REGION}),
    Authorization("states:SendTaskFailure", "*", {"aws:RequestedRegion": REGION}),
    check("dynamodb:UpdateItem", TABLE, **approval("approval#teardown-my-run-20261202T210841450")),
    # The function only through its URL, and no other function.
    check("lambda:InvokeFunction", ANSWER_FUNCTION),
    check("lambda:InvokeFunctionUrl", ANSWER_FUNCTION, **{"lambda:FunctionUrlAuthType": "NONE"}),
    check("lambda:InvokeFunction", ANSWER_FUNCTION.replace("AnswerApproval", "LaunchBatch"), **{"lambda:InvokedViaFunctionUrl": "true"}),
    # A function itself (its handler), or another deployment's probe: never.
    check("lambda:InvokeFunction", ANSWER_FUNCTION.replace("AnswerApproval", "TerminateRegionInstances")),
    check("lambda:InvokeFunction", ANSWER_FUNCTION.replace("AnswerApproval", "TerminateRegionInstances:live")),
    check("lambda:InvokeFunction", ANSWER_FUNCTION.replace("gpufill-dev-AnswerApproval", "gpufill-prod-LaunchBatch:probe")),
], ids=["update-a-record", "another-deployments-instance", "another-deployments-machine", "delete",
        "send-task-success", "send-task-failure", "claim-an-approval", "invoke-directly", "url-without-iam-auth",
        "another-function", "a-handler-unqualified", "another-alias", "another-deployments-probe"])
def test_the_documented_policy_refuses_what_it_leaves_out(evaluator, call):
    assert not evaluator.judge(OPERATOR, ACCOUNT, [("operator", documented_policy())], call).allowed


@pytest.mark.parametrize("call", URL_CALLS, ids=lambda c: c.action)
def test_the_documented_approver_policy_allows_the_url_calls(evaluator, call):
    assert evaluator.judge(OPERATOR, ACCOUNT, [("approver", documented_approver_policy())], call).allowed


def test_the_approver_policy_is_the_operator_policys_url_statements(evaluator):
    """The operator answers as any approver does; neither policy answers a task token directly."""
    operator = {s["Action"]: s for s in documented_policy()["Statement"]
                if str(s["Action"]).startswith("lambda:") and s["Sid"] != "ProbeThroughTheProbeAlias"}
    approver = {s["Action"]: s for s in documented_approver_policy()["Statement"]}
    assert {a: (s["Resource"], s["Condition"]) for a, s in operator.items()} == {
        a: (s["Resource"], s["Condition"]) for a, s in approver.items()}
    send = Authorization("states:SendTaskSuccess", "*", {"aws:RequestedRegion": REGION})
    assert not evaluator.judge(OPERATOR, ACCOUNT, [("approver", documented_approver_policy())], send).allowed


def test_without_scan_status_and_approve_by_request_id_are_refused(evaluator):
    policy = documented_policy()
    for statement in policy["Statement"]:
        if statement["Sid"] == "ReadRecords":
            statement["Action"] = [a for a in statement["Action"] if a != "dynamodb:Scan"]
    assert not evaluator.judge(OPERATOR, ACCOUNT, [("operator", policy)], check("dynamodb:Scan", TABLE)).allowed


def test_send_task_success_scoped_to_the_state_machine_answers_nothing(evaluator):
    """Why AnswerApproval's role (and a break-glass administrator) hold it on "*": a task token names no
    resource, so a grant on the state machine never matches."""
    scoped = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": "states:SendTaskSuccess", "Resource": MACHINE}]}
    call = Authorization("states:SendTaskSuccess", "*", {"aws:RequestedRegion": REGION})
    assert not evaluator.judge(OPERATOR, ACCOUNT, [("scoped", scoped)], call).allowed
