"""Role trust: every role a service assumes is judged against its trust policy, with the context
that service sends (local/iam/trust.py), and a refusal fails the path as it fails on AWS."""

from __future__ import annotations

from dataclasses import replace

import pytest
from botocore.exceptions import ClientError
from gpufill import constants
from gpufill.local.iam import trust
from gpufill.local.iam.trust import Trust

from tests.iam.test_iam_runs import ONE_REGION, request

ACCOUNT = "123456789012"
REGION = "us-east-1"


def group_arn(env: str) -> str:
    return trust.schedule_group_arn(REGION, ACCOUNT, constants.schedule_group_name(env))


def trusting(role, service: str, condition: dict | None = None):
    """The role with a trust policy that names only `service` (with `condition`, if any)."""
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    if condition:
        statement["Condition"] = condition
    return replace(role, trust_policy={"Version": "2012-10-17", "Statement": [statement]})


def old_scheduler_trust(role, env: str):
    """The spend guard's trust as it was: conditioned on schedule ARNs, which Scheduler never sends."""
    schedules = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/{constants.schedule_group_name(env)}/*"
    return trusting(role, trust.SCHEDULER, {"StringEquals": {"aws:SourceAccount": ACCOUNT},
                                            "ArnLike": {"aws:SourceArn": schedules}})


@pytest.fixture
def judged(evaluator):
    return Trust(ACCOUNT, judge=evaluator)


def test_a_scheduler_trust_on_schedule_arns_is_refused_naming_the_role_and_the_condition(judged, app):
    role = old_scheduler_trust(app.scheduler_role, app.env)
    refused = judged.refusal(role, trust.SCHEDULER, group_arn(app.env))
    assert refused is not None
    assert role.name in refused.message and role.arn in refused.message
    assert f"ArnLike aws:SourceArn arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/gpufill-{app.env}/*" in refused.message
    assert f"aws:SourceArn={group_arn(app.env)}" in refused.message
    assert judged.refusals == [refused]


def test_the_deployed_scheduler_trust_names_the_schedule_group_and_is_accepted(judged, app):
    role = app.scheduler_role
    assert judged.refusal(role, trust.SCHEDULER, group_arn(app.env)) is None
    # Only for this deployment's group and account (the confused-deputy guard still holds).
    assert judged.refusal(role, trust.SCHEDULER, group_arn("another")) is not None


def deployed_roles(app):
    """(service, the deployed role it assumes, the source it assumes it for)."""
    [forwarding] = app.rule_target_roles(["us-east-1", "us-west-2"]).values()
    return [
        (trust.LAMBDA, app.role_for_function("LaunchBatch"), None),
        (trust.STATES, app.state_machine_role, app.state_machine.arn),
        (trust.SCHEDULER, app.scheduler_role, group_arn(app.env)),
        (trust.EVENTS, forwarding, f"arn:aws:events:us-west-2:{ACCOUNT}:rule/gpufill-{app.env}-forward"),
        (trust.EC2, app.instance_role, None),
    ]


@pytest.mark.parametrize("service", [trust.LAMBDA, trust.STATES, trust.SCHEDULER, trust.EVENTS, trust.EC2])
def test_each_service_assumes_its_deployed_role_and_no_role_that_does_not_name_it(judged, app, service):
    [(_, role, source)] = [r for r in deployed_roles(app) if r[0] == service]
    assert judged.refusal(role, service, source) is None
    other = trust.LAMBDA if service != trust.LAMBDA else trust.STATES
    refused = judged.refusal(trusting(role, other), service, source)
    assert refused is not None and f"does not name {service}" in refused.message and role.name in refused.message


@pytest.mark.parametrize("service", [trust.LAMBDA, trust.EC2])
def test_lambda_and_ec2_send_no_source_keys_so_a_trust_conditioned_on_them_is_refused(judged, app, service):
    role = trusting(app.instance_role, service, {"StringEquals": {"aws:SourceAccount": ACCOUNT}})
    refused = judged.refusal(role, service)
    assert refused is not None and "sent no source keys" in refused.message


def test_a_state_machine_trust_for_another_state_machine_is_refused(judged, app):
    others = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:someone-else"
    role = trusting(app.state_machine_role, trust.STATES, {"ArnEquals": {"aws:SourceArn": others}})
    mine = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{constants.state_machine_name(app.env)}"
    assert judged.refusal(role, trust.STATES, mine) is not None


def test_a_decision_is_asked_once_per_role_service_and_source(judged, evaluator, app):
    role, source = app.scheduler_role, group_arn(app.env)
    judged.refusal(role, trust.SCHEDULER, source)
    asked = evaluator.asked
    for _ in range(50):
        judged.refusal(role, trust.SCHEDULER, source)
    assert evaluator.asked == asked


# --- the paths that fail as AWS fails them ----------------------------------------------------------


def test_a_scheduler_role_trusting_schedule_arns_never_starts_the_teardown(judged_account):
    from datetime import timedelta

    from gpufill.adapters import clock, schedules

    with judged_account(ONE_REGION) as (engine, _):
        deployment = engine.deployments["local"]
        role = old_scheduler_trust(deployment.app.scheduler_role, "local")
        with engine.as_deployment("local"):  # the lifetime schedule a launch makes for request "untrusted"
            expires = (clock.now() + timedelta(minutes=5)).isoformat()
            schedules.schedule_expiry("untrusted", expires, deployment.state_machine_arn)
        # Trust changed after the schedule was made (CreateSchedule itself refuses such a role):
        # each run is judged again.
        engine.roles[role.arn] = role
        engine.advance(600)
        executions = engine.executions()
        [run] = [r for r in engine.schedule_runs if r["schedule"] == "life-untrusted"]
        refusals = list(trust.engine_trust(engine).refusals)
    assert executions == []  # the teardown never starts
    assert run["refused"] and run["error"].startswith("AccessDenied: scheduler.amazonaws.com is not authorized")
    assert role.name in run["error"] and "schedule/gpufill-local/*" in run["error"]
    assert {r.service for r in refusals} == {trust.SCHEDULER}


def test_a_state_machine_whose_role_does_not_trust_step_functions_cannot_start(judged_account):
    with judged_account(ONE_REGION) as (engine, _):
        role = engine.deployments["local"].app.state_machine_role
        engine.roles[role.arn] = trusting(role, trust.LAMBDA)
        with pytest.raises(ClientError) as refused:
            engine.run(request(launch_mode="fleet"), name="never-started")
        executions = engine.executions()
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert "states.amazonaws.com" in str(refused.value) and role.name in str(refused.value)
    assert executions == []


def test_a_function_whose_role_does_not_trust_lambda_fails_the_run_naming_the_refusal(judged_account):
    with judged_account(ONE_REGION) as (engine, _):
        for name, function in list(engine.functions.items()):
            if function.task == "RankPools":
                engine.functions[name] = replace(function, role=trusting(function.role, trust.STATES))
                role = function.role
        execution = engine.run(request(launch_mode="fleet"), name="no-lambda-trust")
    # The handler never runs: the run ends on gpufill's own error, naming the refusal, nothing launched.
    assert execution.error == "PROVISIONING_FAILED", execution.cause
    assert execution.cause["failed_with"]["error"] == "Lambda.AccessDeniedException"
    assert role.name in execution.cause["failed_with"]["cause"] and "does not name lambda.amazonaws.com" in execution.cause["failed_with"]["cause"]
    assert "Nothing was launched" in execution.cause["message"]


# --- trust judged at creation, as each service validates the role it is given ---------------------


def _create(service: str, role_arn: str):
    import boto3

    if service == trust.LAMBDA:
        boto3.client("lambda", region_name=REGION).create_function(
            FunctionName="never-made", Runtime="python3.12", Role=role_arn, Handler="x.handler",
            Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18})
    elif service == trust.STATES:
        boto3.client("stepfunctions", region_name=REGION).create_state_machine(
            name="never-made", roleArn=role_arn,
            definition='{"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}')
    else:
        boto3.client("scheduler", region_name=REGION).create_schedule(
            Name="never-made", ScheduleExpression="at(2030-01-01T00:00:00)", FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:f", "RoleArn": role_arn})


@pytest.mark.parametrize(
    ("service", "code", "message"),
    [
        (trust.LAMBDA, "InvalidParameterValueException", trust.LAMBDA_CREATE_REFUSED),
        (trust.STATES, "AccessDeniedException", trust.STATES_CREATE_REFUSED),
        (trust.SCHEDULER, "ValidationException", trust.SCHEDULER_CREATE_REFUSED),
    ],
)
def test_a_creation_with_a_role_the_service_may_not_assume_is_refused(judged_account, service, code, message):
    import json

    import boto3

    other = trust.EC2
    document = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": other}, "Action": "sts:AssumeRole"}]}
    with judged_account(ONE_REGION) as (engine, _):
        iam = boto3.client("iam", region_name=REGION)
        role_arn = iam.create_role(RoleName="trusts-ec2-only", AssumeRolePolicyDocument=json.dumps(document))["Role"]["Arn"]
        with pytest.raises(ClientError) as refused:
            _create(service, role_arn)
        # The same role, trusting the service, is accepted.
        document["Statement"][0]["Principal"]["Service"] = service
        iam.update_assume_role_policy(RoleName="trusts-ec2-only", PolicyDocument=json.dumps(document))
        _create(service, role_arn)
    assert refused.value.response["Error"]["Code"] == code
    assert refused.value.response["Error"]["Message"].startswith(message)
