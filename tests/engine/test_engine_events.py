"""EC2's events and EventBridge in the simulated account: the rules the engine deploys match as
EventBridge's patterns do, a forwarded event keeps its envelope (its region), a spot instance is
warned two minutes before EC2 ends it with Server.SpotInstanceTermination, and starting the
same execution twice is as idempotent as Step Functions makes it."""

from __future__ import annotations

import json

import pytest

from gpufill import constants
from gpufill.adapters import executions
from gpufill.local import interruptions
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario

EAST, WEST = "us-east-1", "us-west-2"
MARKET = {
    "regions": {
        EAST: {"zones": {"us-east-1a": {"g6.xlarge": {"spot_price": 0.5, "spot": 4, "on_demand": 4}}}},
        WEST: {"zones": {"us-west-2a": {"g6.xlarge": {"spot_price": 0.4, "spot": 4, "on_demand": 4}}}},
    },
}


@pytest.fixture(scope="module")
def account():
    scenario = MarketScenario.model_validate(MARKET)
    with LocalEngine(scenario, regions_config={"regions": [EAST, WEST]}, visibility_delay_calls=0) as engine:
        yield engine


def _launch(account: LocalEngine, region: str, spot: bool = True) -> str:
    options = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    reply = account.client("ec2", region).run_instances(
        ImageId="ami-0abcdef1234567890", InstanceType="g6.xlarge", MinCount=1, MaxCount=1,
        Placement={"AvailabilityZone": f"{region}a"}, **options,
    )
    return reply["Instances"][0]["InstanceId"]


def _delivered(account: LocalEngine, instance_id: str) -> list[dict]:
    account.settle()
    return [d["event"] for d in account.event_deliveries if d["event"]["detail"].get("instance-id") == instance_id]


def test_the_rules_are_deployed_in_every_region_as_the_cdk_app_does(account):
    for region in (EAST, WEST):
        events = account.client("events", region)
        rules = {r["Name"]: r for r in events.list_rules()["Rules"]}
        for kind, pattern in constants.INTERRUPTION_EVENT_PATTERNS.items():
            name = constants.interruption_rule_name("local", kind)
            assert json.loads(rules[name]["EventPattern"]) == pattern
            [target] = events.list_targets_by_rule(Rule=name)["Targets"]
            if region == EAST:
                assert target["Arn"] == account.deployments["local"].function_arns["StartRefill"]
            else:
                assert target["Arn"] == f"arn:aws:events:{EAST}:{account.account}:event-bus/default"
                # the forwarding stack's own role in that region, deployed with its policy
                role = account.deployments["local"].app.rule_target_roles([EAST, WEST])[region]
                assert target["RoleArn"] == role.arn
                [policy] = account.client("iam").list_role_policies(RoleName=role.name)["PolicyNames"]
                document = account.client("iam").get_role_policy(RoleName=role.name, PolicyName=policy)["PolicyDocument"]
                [statement] = document["Statement"]
                assert (statement["Action"], statement["Resource"]) == ("events:PutEvents", target["Arn"])


def test_a_terminate_call_emits_both_state_changes_and_a_forwarded_event_keeps_its_region(account):
    instance_id = _launch(account, WEST)
    account.client("ec2", WEST).terminate_instances(InstanceIds=[instance_id])
    delivered = _delivered(account, instance_id)
    assert [e["detail"]["state"] for e in delivered] in (["shutting-down", "terminated"], ["terminated", "shutting-down"])
    assert {e["region"] for e in delivered} == {WEST}
    assert {e["source"] for e in delivered} == {"aws.ec2"}
    assert delivered[0]["resources"] == [f"arn:aws:ec2:{WEST}:{account.account}:instance/{instance_id}"]
    # nothing of ours: StartRefill says so
    answers = {d["answer"]["reason"] for d in account.event_deliveries if d["event"]["detail"]["instance-id"] == instance_id}
    assert answers == {"not-ours"}
    # terminating again emits nothing more (it was already terminated)
    account.client("ec2", WEST).terminate_instances(InstanceIds=[instance_id])
    assert len(_delivered(account, instance_id)) == 2


def test_a_state_change_the_patterns_do_not_name_is_not_delivered(account):
    instance_id = _launch(account, EAST)
    interruptions.put_ec2_event(account, EAST, constants.INSTANCE_STATE_CHANGE, {"instance-id": instance_id, "state": "stopped"}, instance_id)
    interruptions.put_ec2_event(account, EAST, "EC2 Instance Rebalance Recommendation", {"instance-id": instance_id}, instance_id)
    assert _delivered(account, instance_id) == []
    assert [e["detail-type"] for e in account.events_sent if e["detail"]["instance-id"] == instance_id] == [
        constants.INSTANCE_STATE_CHANGE, "EC2 Instance Rebalance Recommendation"
    ]


def test_power_off_shows_the_instance_initiated_reason(account):
    instance_id = _launch(account, EAST)
    interruptions.power_off(account, EAST, instance_id)
    described = account.client("ec2", EAST).describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert described["State"]["Name"] == "terminated"
    assert described["StateReason"]["Code"] == "Client.InstanceInitiatedShutdown"
    assert sorted(e["detail"]["state"] for e in _delivered(account, instance_id)) == ["shutting-down", "terminated"]


def test_starting_the_same_execution_again_is_the_same_start_and_another_input_is_refused(account):
    with account.as_deployment("local"):
        import os

        os.environ[constants.ENV_STATE_MACHINE_ARN] = account.state_machine_arn
        try:
            body = {"action": "plan", "instance_type": "g6.xlarge", "regions": [EAST]}
            arn = executions.start("twice", body)
            account.follow("twice")  # closed now: Step Functions answers ExecutionAlreadyExists
            assert executions.start("twice", body) == arn
            with pytest.raises(executions.ExecutionNameTaken, match="execution twice already exists with another input"):
                executions.start("twice", {**body, "count": 2})
        finally:
            os.environ.pop(constants.ENV_STATE_MACHINE_ARN, None)
    assert account.executions().count("twice") == 1


def test_two_starts_of_one_name_at_once_start_one_execution(account):
    import threading
    import time
    from unittest import mock

    from moto.stepfunctions.models import StateMachine

    sfn = account.client("stepfunctions")
    check = StateMachine._handle_name_input_idempotency

    def slow_check(machine, name, execution_input):  # widens the window between the check and the registration
        found = check(machine, name, execution_input)
        time.sleep(0.2)
        return found

    body = json.dumps({"action": "plan", "instance_type": "g6.xlarge", "regions": [EAST]})
    arns, refused, barrier = [], [], threading.Barrier(4)

    def start():
        barrier.wait()
        try:
            arns.append(sfn.start_execution(stateMachineArn=account.state_machine_arn, name="at-once", input=body)["executionArn"])
        except sfn.exceptions.ExecutionAlreadyExists:
            refused.append("closed")  # the first had already ended: what Step Functions answers then

    threads = [threading.Thread(target=start) for _ in range(4)]
    with mock.patch.object(StateMachine, "_handle_name_input_idempotency", slow_check):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    account.follow("at-once")
    assert len(set(arns)) == 1 and len(arns) + len(refused) == 4
    assert account.executions().count("at-once") == 1


def test_eventbridge_delivers_only_as_the_deployed_permissions_and_roles_allow(account):
    """A Lambda target needs its resource policy (AWS::Lambda::Permission for the rule); a bus in
    another region needs the forwarding role's events:PutEvents. Without either, nothing arrives."""
    from dataclasses import replace

    from tests.support.grants import without_grant

    deployment = account.deployments["local"]
    permissions = deployment.app.home.permissions
    home = replace(deployment.app.home, permissions=[])
    account.deployments["local"] = replace(deployment, app=replace(deployment.app, home=home))
    try:
        east = _launch(account, EAST)
        account.client("ec2", EAST).terminate_instances(InstanceIds=[east])
        account.settle()
        refused = [d for d in account.event_deliveries if d["event"]["detail"].get("instance-id") == east]
        assert refused and all(d["failed"] and "AccessDenied" in d["answer"]["error"] for d in refused)
    finally:
        account.deployments["local"] = deployment
    assert permissions  # the stack gives StartRefill's rules their permissions

    [forwarding] = [arn for arn, role in account.roles.items() if role.name == constants.forwarding_role_name("local", WEST)]
    assert "events:PutEvents" in json.dumps(account.roles[forwarding].policies)
    saved = account.roles[forwarding]
    account.roles[forwarding] = without_grant(saved, "events:PutEvents", "event-bus")
    try:
        west = _launch(account, WEST)
        account.client("ec2", WEST).terminate_instances(InstanceIds=[west])
        assert _delivered(account, west) == []
        assert any(j.action == "events:PutEvents" and j.role_arn == forwarding for j in account.iam.refusals)
    finally:
        account.roles[forwarding] = saved
