"""maintain's infrastructure: the interruption rules in the home region invoke StartRefill, every
other deployed region forwards to the home region's default bus with a role that can do nothing
else, and StartRefill holds exactly the calls its handler makes."""

from __future__ import annotations

import json

import pytest
from gpufill import constants

from infra_aws_calls import reachable
from infra_helpers import ACCOUNT, REGION, actions, all_actions, get_att, resources, role_of, statements_of_role

PLATFORM_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}
PATTERNS = {
    "spot-warnings": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    "instances-ending": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance State-change Notification"],
        "detail": {"state": ["shutting-down", "terminated"]},
    },
}
HOME_BUS = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"


def _env(synthesized) -> str:
    return synthesized.stack.node.try_get_context("env")


def _deployed_regions(synthesized) -> list[str]:
    return list(synthesized.stack.node.try_get_context("regions"))


@pytest.fixture(scope="module")
def forwarding(synthesized) -> dict[str, tuple[object, dict]]:
    """region -> (stack, template) of every event-forwarding stack of the app."""
    from gpufill_stack.event_forwarding import EventForwardingStack

    app = synthesized.stack.node.root
    found = {}
    for child in app.node.children:
        if isinstance(child, EventForwardingStack):
            template = json.loads((synthesized.outdir / f"{child.artifact_id}.template.json").read_text())
            found[child.region] = (child, template)
    return found


def _rules(template: dict) -> dict[str, dict]:
    return {r["Properties"]["Name"]: r for r in template["Resources"].values() if r["Type"] == "AWS::Events::Rule"}


def _start_refill(synthesized) -> tuple[str, dict]:
    name = constants.function_name(_env(synthesized), "StartRefill")
    [(logical_id, function)] = [
        (k, r) for k, r in synthesized.resources("AWS::Lambda::Function").items() if r["Properties"].get("FunctionName") == name
    ]
    return logical_id, function


def test_every_other_deployed_region_has_one_forwarding_stack_and_the_home_region_none(synthesized, forwarding):
    expected = sorted(r for r in _deployed_regions(synthesized) if r != REGION)
    assert sorted(forwarding) == expected
    for region, (stack, _) in forwarding.items():
        assert stack.stack_name == f"gpufill-{_env(synthesized)}-events-{region}"
        assert stack.account == ACCOUNT


def test_the_home_region_rules_invoke_start_refill_with_the_two_patterns(synthesized):
    logical_id, function = _start_refill(synthesized)
    assert function["Properties"]["Handler"] == "gpufill.handlers.start_refill.handler"
    assert function["Properties"]["Architectures"] == ["arm64"]
    # The Powertools layer, resolved at deploy from AWS's public parameter for the pinned release.
    [layer] = function["Properties"]["Layers"]
    assert synthesized.json["Parameters"][layer["Ref"]]["Default"] == constants.powertools_layer_parameter()
    rules = _rules(synthesized.json)
    env = _env(synthesized)
    assert set(rules) == {f"gpufill-{env}-{kind}" for kind in PATTERNS}
    permissions = [r["Properties"] for r in synthesized.resources("AWS::Lambda::Permission").values()]
    for kind, pattern in PATTERNS.items():
        rule = rules[f"gpufill-{env}-{kind}"]["Properties"]
        assert rule["EventPattern"] == pattern
        assert rule["State"] == "ENABLED"
        [target] = rule["Targets"]
        assert target["Arn"] == get_att(logical_id)
        assert target["RetryPolicy"]["MaximumRetryAttempts"] == 8
        rule_id = next(k for k, r in synthesized.json["Resources"].items() if r["Properties"] is rule)
        # EventBridge may invoke StartRefill, from this rule only
        assert any(
            p["Principal"] == "events.amazonaws.com" and p["SourceArn"] == get_att(rule_id) and p["FunctionName"] == get_att(logical_id)
            for p in permissions
        )


def test_start_refill_knows_the_state_machine_it_starts(synthesized):
    _, function = _start_refill(synthesized)
    variables = function["Properties"]["Environment"]["Variables"]
    [(machine_id, _)] = synthesized.resources("AWS::StepFunctions::StateMachine").items()
    assert variables[constants.ENV_STATE_MACHINE_ARN] == {"Ref": machine_id}
    assert variables[constants.ENV_DEPLOYMENT] == _env(synthesized)


def test_start_refill_holds_exactly_the_calls_its_handler_makes_and_starts_only_this_state_machine(synthesized):
    _, function = _start_refill(synthesized)
    statements = statements_of_role(synthesized.json, role_of(function))
    reach = reachable(constants.EVENT_FUNCTIONS["StartRefill"])
    assert not reach.unknown
    assert all_actions(statements) - PLATFORM_ACTIONS == reach.actions
    [machine_id] = synthesized.resources("AWS::StepFunctions::StateMachine")
    [start] = [s for s in statements if "states:StartExecution" in actions(s)]
    assert actions(start) == ["states:StartExecution"] and resources(start) == [{"Ref": machine_id}]
    [describe] = [s for s in statements if "states:DescribeExecution" in actions(s)]
    executions = json.dumps(resources(describe))
    assert f":execution:gpufill-provisioner-{_env(synthesized)}:*" in executions
    assert not [s for s in statements if "ec2:TerminateInstances" in actions(s) or "ec2:RunInstances" in actions(s)]


def test_each_region_forwards_both_patterns_to_the_home_bus_with_a_role_that_can_only_put_there(synthesized, forwarding):
    env = _env(synthesized)
    for region, (_, template) in forwarding.items():
        rules = _rules(template)
        assert set(rules) == {f"gpufill-{env}-{kind}" for kind in PATTERNS}, region
        roles = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
        [(role_id, role)] = roles.items()
        [trust] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "events.amazonaws.com"}
        [grant] = statements_of_role(template, role_id)
        assert actions(grant) == ["events:PutEvents"]
        assert _joined(grant["Resource"]) == HOME_BUS
        for kind, pattern in PATTERNS.items():
            rule = rules[f"gpufill-{env}-{kind}"]["Properties"]
            assert rule["EventPattern"] == pattern
            [target] = rule["Targets"]
            assert _joined(target["Arn"]) == HOME_BUS
            assert target["RoleArn"] == get_att(role_id)


def _joined(value) -> str:
    """An ARN CDK wrote as Fn::Join with the partition, read back as text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        [value] = value
        return _joined(value)
    separator, parts = value["Fn::Join"]
    return separator.join("aws" if p == {"Ref": "AWS::Partition"} else p for p in parts)


def test_cfn_lint_reports_no_errors_in_the_forwarding_stacks(synthesized, forwarding):
    from cfnlint.api import ManualArgs, lint_file

    for region, (stack, _) in forwarding.items():
        path = synthesized.outdir / f"{stack.artifact_id}.template.json"
        errors = [m for m in lint_file(path, ManualArgs(regions=[region])) if m.rule.id.startswith("E")]
        assert not errors, (region, [f"{m.rule.id} {m.message}" for m in errors])
