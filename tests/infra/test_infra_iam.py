"""Least privilege, read from the template: each role holds the calls its handler makes and no more."""

from __future__ import annotations

import json

from gpufill import constants

from infra_aws_calls import reachable
from infra_helpers import (
    actions,
    all_actions,
    as_list,
    get_att,
    resources,
    role_of,
    statements_of_role,
    statements_with,
)

MANAGED = f"aws:ResourceTag/{constants.TAG_MANAGED}"
DEPLOYMENT = f"aws:ResourceTag/{constants.TAG_DEPLOYMENT}"


def _statements(synthesized, task_functions, placeholder):
    _, function = task_functions[placeholder]
    return statements_of_role(synthesized.json, role_of(function))


def _all_function_statements(synthesized, task_functions):
    return {p: _statements(synthesized, task_functions, p) for p in task_functions}


def _env(synthesized):
    return synthesized.stack.node.try_get_context("env")


def test_terminate_only_this_deployments_managed_instances(synthesized, task_functions):
    by_task = _all_function_statements(synthesized, task_functions)
    holders = {p for p, statements in by_task.items() if statements_with(statements, "ec2:TerminateInstances")}
    # The approved teardown, an all_or_nothing run ending its own gang, and a refill ending its own
    # new instance when its request's teardown was asked while it ran.
    assert holders == {"TerminateRegionInstancesFunctionArn", "RollBackGangFunctionArn", "LaunchBatchFunctionArn"}
    for statement in [s for task in sorted(holders) for s in statements_with(by_task[task], "ec2:TerminateInstances")]:
        assert statement["Condition"] == {
            "StringEquals": {MANAGED: constants.TAG_MANAGED_VALUE, DEPLOYMENT: _env(synthesized)}
        }
        assert actions(statement) == ["ec2:TerminateInstances"]


def test_run_instances_requires_the_managed_and_deployment_tags_and_tags_only_on_create(synthesized, task_functions):
    statements = _statements(synthesized, task_functions, "LaunchBatchFunctionArn")
    run = statements_with(statements, "ec2:RunInstances")
    on_instances = [s for s in run if any("instance/*" in str(r) for r in resources(s))]
    assert on_instances, "RunInstances must be granted on instances"
    for statement in on_instances:
        assert statement["Condition"] == {
            "StringEquals": {
                f"aws:RequestTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
                f"aws:RequestTag/{constants.TAG_DEPLOYMENT}": _env(synthesized),
            }
        }
    creators = {"RunInstances", "CreateSecurityGroup", "CreatePlacementGroup", "CreateFleet", "CreateLaunchTemplate"}
    for statement in statements_with(statements, "ec2:CreateTags"):
        allowed = statement["Condition"]["StringEquals"]["ec2:CreateAction"]
        assert set([allowed] if isinstance(allowed, str) else allowed) <= creators
    by_task = _all_function_statements(synthesized, task_functions)
    assert {p for p, s in by_task.items() if statements_with(s, "ec2:RunInstances")} == {"LaunchBatchFunctionArn"}


def test_fleet_templates_are_created_tagged_for_the_deployment_and_only_those_get_versions(synthesized, task_functions):
    statements = _statements(synthesized, task_functions, "LaunchBatchFunctionArn")
    (create,) = statements_with(statements, "ec2:CreateLaunchTemplate")
    assert create["Condition"] == {
        "StringEquals": {
            f"aws:RequestTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE,
            f"aws:RequestTag/{constants.TAG_DEPLOYMENT}": _env(synthesized),
        }
    }
    (version,) = statements_with(statements, "ec2:CreateLaunchTemplateVersion")
    assert version["Condition"] == {"StringEquals": {f"aws:ResourceTag/{constants.TAG_DEPLOYMENT}": _env(synthesized)}}
    by_task = _all_function_statements(synthesized, task_functions)
    assert {p for p, s in by_task.items() if statements_with(s, "ec2:CreateFleet")} == {"LaunchBatchFunctionArn"}


def _role_trusting(synthesized, service: str) -> str:
    (role_id,) = [
        k for k, r in synthesized.resources("AWS::IAM::Role").items()
        if r["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": service}
    ]
    return role_id


def test_pass_role_only_for_the_instance_role_to_ec2_and_the_scheduler_role_to_scheduler(synthesized, task_functions):
    instance_role, scheduler_role = _role_trusting(synthesized, "ec2.amazonaws.com"), _role_trusting(synthesized, "scheduler.amazonaws.com")
    by_task = _all_function_statements(synthesized, task_functions)
    passing = {p for p, s in by_task.items() if statements_with(s, "iam:PassRole")}
    # PlanBlockLaunch moves a request's lifetime schedule to its Capacity Block's end.
    # RecordApprovalDecision moves a late round forward (UpdateSchedule passes the role again).
    assert passing == {"LaunchBatchFunctionArn", "AwaitTeardownApprovalFunctionArn", "PlanBlockLaunchFunctionArn",
                       "RecordApprovalDecisionFunctionArn"}
    to_ec2, to_scheduler = sorted(
        statements_with(by_task["LaunchBatchFunctionArn"], "iam:PassRole"), key=lambda s: json.dumps(s["Condition"])
    )
    assert resources(to_ec2) == [get_att(instance_role)]
    assert to_ec2["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    for statement in (to_scheduler, *statements_with(by_task["AwaitTeardownApprovalFunctionArn"], "iam:PassRole"),
                      *statements_with(by_task["PlanBlockLaunchFunctionArn"], "iam:PassRole"),
                      *statements_with(by_task["RecordApprovalDecisionFunctionArn"], "iam:PassRole")):
        assert resources(statement) == [get_att(scheduler_role)]
        assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}


def test_schedules_are_made_and_ended_only_in_this_deployments_group(synthesized, task_functions):
    by_task = _all_function_statements(synthesized, task_functions)
    makers = {p for p, s in by_task.items() if statements_with(s, "scheduler:CreateSchedule")}
    enders = {p for p, s in by_task.items() if statements_with(s, "scheduler:DeleteSchedule")}
    movers = {p for p, s in by_task.items() if statements_with(s, "scheduler:UpdateSchedule")}
    assert makers == {"LaunchBatchFunctionArn", "AwaitTeardownApprovalFunctionArn"}
    assert enders == {"RecordApprovalDecisionFunctionArn"}
    assert movers == {"PlanBlockLaunchFunctionArn", "RecordApprovalDecisionFunctionArn"}
    group = constants.schedule_group_name(_env(synthesized))
    for task in makers | enders | movers:
        for statement in (statements_with(by_task[task], "scheduler:CreateSchedule") + statements_with(by_task[task], "scheduler:DeleteSchedule")
                          + statements_with(by_task[task], "scheduler:UpdateSchedule")):
            for resource in resources(statement):
                assert f":schedule/{group}/" in json.dumps(resource), resource


def test_the_scheduler_role_may_only_start_this_state_machine_and_run_the_sweep_the_refresh_and_the_reminders(synthesized):
    role_id = _role_trusting(synthesized, "scheduler.amazonaws.com")
    trust = synthesized.resources("AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]
    policies = [p for p in synthesized.resources("AWS::IAM::Policy").values() if {"Ref": role_id} in p["Properties"]["Roles"]]
    actions = sorted(a for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
    # The reminders are published by RemindApprovers, which reads the approval first: never by Scheduler itself.
    assert actions == ["lambda:InvokeFunction", "lambda:InvokeFunction", "lambda:InvokeFunction", "states:StartExecution"]


def test_dynamodb_actions_are_scoped_to_the_table_and_its_index(synthesized, task_functions):
    tables = synthesized.resources("AWS::DynamoDB::Table")
    assert len(tables) == 2  # instances, capacity signals
    allowed = [get_att(t) for t in tables] + [
        {"Fn::Join": ["", [get_att(t), f"/index/{constants.INSTANCES_BY_REQUEST_INDEX}"]]} for t in tables
    ]
    seen = 0
    for statements in _all_function_statements(synthesized, task_functions).values():
        for statement in statements:
            if any(a.startswith("dynamodb:") for a in actions(statement)):
                seen += 1
                assert all(a.startswith("dynamodb:") and "*" not in a for a in actions(statement))
                assert all(r in allowed for r in resources(statement)), resources(statement)
    assert seen


def test_ssm_reads_only_the_regions_parameter_and_public_ami_parameters(synthesized, task_functions):
    (parameter_id,) = synthesized.resources("AWS::SSM::Parameter")
    for statements in _all_function_statements(synthesized, task_functions).values():
        for statement in statements:
            if any(a.startswith("ssm:") for a in actions(statement)):
                assert actions(statement) == ["ssm:GetParameter"]
                for resource in resources(statement):
                    text = str(resource)
                    assert parameter_id in text or ":ssm:*::parameter/aws/service/deeplearning/*" in text, text


def test_the_result_task_only_reads_the_attempt_log_and_deletes_the_runs_template_versions(synthesized, task_functions):
    held = all_actions(_statements(synthesized, task_functions, "ReportResultFunctionArn"))
    assert held - {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"} == {
        "dynamodb:BatchGetItem", "ec2:DeleteLaunchTemplateVersions"
    }


def test_only_the_approval_tasks_publish(synthesized, task_functions):
    """The approval requests (a teardown's with its reminders, a Capacity Block purchase's), and the
    notice that a teardown's expired unanswered."""
    by_task = _all_function_statements(synthesized, task_functions)
    publishers = {p for p, s in by_task.items() if statements_with(s, "sns:Publish")}
    assert publishers == {
        "AwaitTeardownApprovalFunctionArn", "RecordApprovalDecisionFunctionArn", "AwaitPurchaseApprovalFunctionArn"
    }


def test_function_roles_hold_no_wildcard_actions_and_no_managed_policies(synthesized, task_functions):
    roles = synthesized.resources("AWS::IAM::Role")
    for placeholder, (_, function) in task_functions.items():
        role_id = role_of(function)
        assert "ManagedPolicyArns" not in roles[role_id]["Properties"], placeholder
        for action in all_actions(statements_of_role(synthesized.json, role_id)):
            assert "*" not in action, (placeholder, action)


def test_step_functions_may_invoke_exactly_the_workflow_lambdas(synthesized, task_functions):
    (machine,) = synthesized.resources("AWS::StepFunctions::StateMachine").values()
    statements = statements_of_role(synthesized.json, role_of(machine, "RoleArn"))
    invoke = [s for s in statements if any(a.startswith("lambda:") for a in actions(s))]
    assert len(invoke) == 1 and actions(invoke[0]) == ["lambda:InvokeFunction"]
    used = set(machine["Properties"]["DefinitionSubstitutions"])
    expected = [get_att(task_functions[p][0]) for p in used]
    granted = as_list(invoke[0]["Resource"])
    assert sorted(map(str, granted)) == sorted(map(str, expected))


def test_step_functions_may_start_only_its_own_state_machine_to_continue_a_wait(synthesized):
    (machine,) = synthesized.resources("AWS::StepFunctions::StateMachine").values()
    statements = statements_of_role(synthesized.json, role_of(machine, "RoleArn"))
    states = [s for s in statements if any(a.startswith("states:") for a in actions(s))]
    assert len(states) == 1 and actions(states[0]) == ["states:StartExecution"]
    [arn] = as_list(states[0]["Resource"])
    text = json.dumps(arn)
    # Its own name, spelt out (no wildcard, no other state machine, no reference back to itself).
    assert f":stateMachine:{machine['Properties']['StateMachineName']}" in text and "*" not in text
    assert "Ref" not in text.replace('"Ref": "AWS::', "")


# Granted by CDK to every function for its own logs and for X-Ray; not calls the handler makes.
PLATFORM_ACTIONS = {"logs:CreateLogStream", "logs:PutLogEvents", "xray:PutTraceSegments", "xray:PutTelemetryRecords"}


def test_each_role_holds_exactly_the_calls_its_handler_makes(synthesized, task_functions):
    """Read from the source: the boto3 calls each handler can reach, as IAM actions.

    A handler that starts calling something new fails here until its row in
    cdk/gpufill_stack/task_permissions.py grants it; a grant nothing calls fails too.
    """
    problems = []
    for placeholder, handler in constants.LAMBDA_TASKS.items():
        reach = reachable(handler)
        if reach.unknown:
            problems.append(f"{placeholder}: teach tests/infra/infra_aws_calls.py ACTIONS these calls: {sorted(reach.unknown)}")
        granted = all_actions(_statements(synthesized, task_functions, placeholder)) - PLATFORM_ACTIONS
        if reach.actions - granted:
            problems.append(f"{placeholder} calls but may not: {sorted(reach.actions - granted)}")
        if granted - reach.actions:
            problems.append(f"{placeholder} may but never calls: {sorted(granted - reach.actions)}")
    assert not problems, "\n".join(problems)


def test_cluster_groups_are_created_and_deleted_only_with_this_deployments_tags(synthesized, task_functions):
    by_task = _all_function_statements(synthesized, task_functions)
    creators = {p for p, statements in by_task.items() if statements_with(statements, "ec2:CreatePlacementGroup")}
    deleters = {p for p, statements in by_task.items() if statements_with(statements, "ec2:DeletePlacementGroup")}
    assert creators == {"LaunchBatchFunctionArn"}
    # LaunchBatch: the empty groups of a region it leaves; the others: after their terminations.
    assert deleters == {"LaunchBatchFunctionArn", "RollBackGangFunctionArn", "TerminateRegionInstancesFunctionArn"}
    env = _env(synthesized)
    for statement in statements_with(by_task["LaunchBatchFunctionArn"], "ec2:CreatePlacementGroup"):
        assert statement["Condition"] == {"StringEquals": {
            f"aws:RequestTag/{constants.TAG_MANAGED}": constants.TAG_MANAGED_VALUE, f"aws:RequestTag/{constants.TAG_DEPLOYMENT}": env}}
    for task in sorted(deleters):
        for statement in statements_with(by_task[task], "ec2:DeletePlacementGroup"):
            assert statement["Condition"] == {"StringEquals": {MANAGED: constants.TAG_MANAGED_VALUE, DEPLOYMENT: env}}
            assert actions(statement) == ["ec2:DeletePlacementGroup"]
