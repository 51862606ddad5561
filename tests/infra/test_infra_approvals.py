"""ApprovalAnswers (cdk/gpufill_stack/approval_answers.py): one function answers approvals, behind
a function URL AWS authenticates (AuthType AWS_IAM); its role is the only one that may send task
answers; the approver policy is the one docs/deploy.md documents; the settings reach the function."""

from __future__ import annotations

import json

import pytest
from gpufill import constants
from infra_aws_calls import reachable
from infra_helpers import ACCOUNT, REGION, actions, all_actions, role_of, statements_of_role

from tests.cli.test_operator_policy import documented_approver_policy


def _answer_function(synthesized) -> tuple[str, dict]:
    name = constants.function_name(synthesized.stack.node.try_get_context("env"), constants.ANSWER_APPROVAL_TASK)
    [(logical_id, function)] = [
        (i, r) for i, r in synthesized.resources("AWS::Lambda::Function").items() if r["Properties"].get("FunctionName") == name
    ]
    return logical_id, function


def test_the_answer_function_has_an_iam_authenticated_url_and_the_settings(synthesized):
    logical_id, function = _answer_function(synthesized)
    [url] = synthesized.resources("AWS::Lambda::Url").values()
    assert url["Properties"]["AuthType"] == "AWS_IAM"
    assert url["Properties"]["TargetFunctionArn"] == {"Fn::GetAtt": [logical_id, "Arn"]}
    variables = function["Properties"]["Environment"]["Variables"]
    assert json.loads(variables[constants.ENV_APPROVERS]) == [] and variables[constants.ENV_SEPARATE_APPROVER] == "false"
    assert function["Properties"]["Handler"] == constants.ANSWER_FUNCTIONS[constants.ANSWER_APPROVAL_TASK]
    outputs = synthesized.json["Outputs"]
    assert {constants.OUTPUT_ANSWER_APPROVAL_URL, constants.OUTPUT_APPROVER_POLICY_ARN} <= set(outputs)
    # No resource policy: a same-account caller needs its own identity grant (the approver policy).
    assert not [p for p in synthesized.resources("AWS::Lambda::Permission").values()
                if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [logical_id, "Arn"]}]


def test_only_the_answer_functions_role_may_send_task_answers(synthesized):
    _, function = _answer_function(synthesized)
    answering = function["Properties"]["Role"]["Fn::GetAtt"][0]
    senders = {
        role["Ref"]
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if {"states:SendTaskSuccess", "states:SendTaskFailure"} & set(actions(statement))
        for role in policy["Properties"].get("Roles", [])
    }
    assert senders == {answering}


def test_the_answer_function_holds_exactly_the_calls_its_handler_makes(synthesized):
    from test_infra_iam import PLATFORM_ACTIONS

    _, function = _answer_function(synthesized)
    statements = statements_of_role(synthesized.json, role_of(function))
    reach = reachable(constants.ANSWER_FUNCTIONS[constants.ANSWER_APPROVAL_TASK])
    assert not reach.unknown
    assert all_actions(statements) - PLATFORM_ACTIONS == reach.actions
    [claim] = [s for s in statements if "dynamodb:UpdateItem" in actions(s)]
    assert claim["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["approval#*"]}}


def test_the_deployed_approver_policy_is_the_documented_one(synthesized):
    from gpufill.local.deploy.intrinsics import Resolver

    env = synthesized.stack.node.try_get_context("env")
    [policy] = [p for p in synthesized.resources("AWS::IAM::ManagedPolicy").values()
                if p["Properties"]["ManagedPolicyName"] == constants.approver_policy_name(env)]
    resolver = Resolver(synthesized.json, stack_name=constants.stack_name(env), account=ACCOUNT, region=REGION)
    deployed = resolver.resolve(policy["Properties"]["PolicyDocument"])
    assert deployed == documented_approver_policy()
    assert not policy["Properties"].get("Roles") and not policy["Properties"].get("Users")


@pytest.mark.parametrize("context, says", [
    ({"approvers": "ana"}, "'ana' is not an IAM ARN pattern"),
    ({"separate_approver": "maybe"}, "context 'separate_approver' is 'maybe'"),
])
def test_bad_approval_settings_fail_synth_naming_the_key(context, says):
    from gpufill_stack.settings import DeploySettings, SettingsError

    class Node:
        def try_get_context(self, key):
            return {"regions": ["us-east-1"], **context}.get(key)

    with pytest.raises(SettingsError, match=says):
        DeploySettings.from_context(Node())


def test_approval_settings_are_read_from_context():
    from gpufill_stack.settings import DeploySettings

    role = f"arn:aws:iam::{ACCOUNT}:role/Approvers"

    class Node:
        def try_get_context(self, key):
            return {"regions": ["us-east-1"], "approvers": f'["{role}"]', "separate_approver": "true"}.get(key)

    settings = DeploySettings.from_context(Node())
    assert settings.approvers == (role,) and settings.separate_approver is True
