"""Deploys an AppModel into the simulated account, resource by resource, as CloudFormation would:
the roles with their policies, the instance profile, storage, the topic, the functions, the state
machine and the EventBridge rules (the home stack's, and the forwarding stack in every other region).

Only what a run meets is deployed: the topic's and buckets' policies are (the IAM judge reads
them); log groups, the topic's key and CDK's own deploy-time custom resources (BucketDeployment) are left out, since nothing in a run calls them.
What the engine owns stays the engine's: the regions parameter's value (the scenario's regions)
and each function's code (the handler runs in-process; the zip is a stub).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from gpufill import constants
from gpufill.local.deploy.model import AppModel, Function, Role, StackModel

Clients = Callable[..., Any]  # engine.client(service, region=HOME_REGION)


@dataclass
class Deployed:
    """What deploy_app made: the ARNs the engine hands to runs, and each function by name."""

    state_machine_arn: str
    approval_topic_arn: str
    # By the state machine's placeholder (LaunchBatchFunctionArn), or by task for the others (StartRefill).
    function_arns: dict[str, str]
    functions: dict[str, Function] = field(default_factory=dict)  # by function name
    roles: dict[str, Role] = field(default_factory=dict)  # every role created, by ARN


def deploy_app(
    client: Clients,
    app: AppModel,
    *,
    regions: list[str],
    regions_config: str,
    definition: str | None = None,
    schedules: Collection[str] = (),
) -> Deployed:
    """Deploy `app` (the home stack, and the forwarding stack in every other region of `regions`).
    `regions_config` is the value of the parameter the functions read their regions from;
    `definition`, if given, replaces the state machine's definition (with the same substitutions);
    `schedules`: the names of the template's own schedules (the sweep, the facts refresh) to make
    as well, which then run on the engine's modelled clock."""
    home = app.home
    roles = {role.arn: role for stack in app.stacks(regions) for role in _roles(client, stack)}
    for profile in home.instance_profiles:
        iam = client("iam")
        iam.create_instance_profile(InstanceProfileName=profile.name)
        for role_name in profile.properties.get("Roles", []):
            iam.add_role_to_instance_profile(InstanceProfileName=profile.name, RoleName=role_name)
    _storage(client, home, regions_config)
    for topic in home.topics:
        display = topic.properties.get("DisplayName")
        client("sns").create_topic(Name=topic.name, Attributes={"DisplayName": display} if display else {})
    # The topic's and buckets' own policies: the engine's IAM judge reads them as AWS would.
    for topics, document in home.topic_policies:
        for topic_arn in topics:
            client("sns").set_topic_attributes(TopicArn=topic_arn, AttributeName="Policy", AttributeValue=json.dumps(document))
    for group in home.schedule_groups:
        client("scheduler").create_schedule_group(Name=group.name)
    code = {"ZipFile": _stub_zip()}
    # A dynamic reference is resolved once per deployment, as CloudFormation does in one stack
    # operation: every function names the same Powertools layer parameter.
    resolved: dict[str, str] = {}

    def layer_arn(reference: str) -> str:
        if reference not in resolved:
            resolved[reference] = _dynamic(client, reference)
        return resolved[reference]

    for function in home.functions.values():
        client("lambda").create_function(
            FunctionName=function.name,
            Runtime=function.runtime,
            Role=function.role.arn,
            Handler=function.handler,
            Code=code,
            Architectures=function.architectures,
            MemorySize=function.memory_mb,
            Timeout=function.timeout_seconds,
            Environment={"Variables": function.environment},
            Layers=[layer_arn(layer) for layer in function.layers],
        )
    for function_name, alias, version in home.aliases:
        client("lambda").create_alias(FunctionName=function_name, Name=alias, FunctionVersion=version)
    for number, permission in enumerate(home.permissions):
        client("lambda").add_permission(
            FunctionName=permission.function_arn,
            StatementId=f"cfn-{number}",
            Action=permission.action,
            Principal=permission.principal,
            **({"SourceArn": permission.source_arn} if permission.source_arn else {}),
        )
    machine = app.state_machine
    state_machine_arn = client("stepfunctions").create_state_machine(
        name=machine.name,
        definition=render_definition(definition if definition is not None else machine.definition, machine.substitutions),
        roleArn=machine.role.arn,
        type=machine.type,
    )["stateMachineArn"]
    for stack in app.stacks(regions):
        _rules(client, stack)
    for schedule in [s for s in home.schedules if s["Name"] in schedules]:
        optional = {k: schedule[k] for k in ("Description", "ScheduleExpressionTimezone", "State") if k in schedule}
        client("scheduler").create_schedule(
            Name=schedule["Name"],
            GroupName=schedule.get("GroupName", "default"),
            ScheduleExpression=schedule["ScheduleExpression"],
            FlexibleTimeWindow=schedule["FlexibleTimeWindow"],
            Target=schedule["Target"],
            **optional,
        )
    arns = {(f.placeholder or f.task): f.arn for f in home.functions.values()}
    [topic] = home.topics
    return Deployed(state_machine_arn, topic.arn, arns, {f.name: f for f in home.functions.values()}, roles)


def _roles(client: Clients, stack: StackModel) -> list[Role]:
    """The roles something deployed here assumes: the functions', the state machine's, the
    instance profile's and the rule targets' (not the roles of CDK's deploy-time handlers)."""
    used = {f.role.arn for f in stack.functions.values()} | {m.role.arn for m in stack.state_machines}
    used |= {t.role.arn for rule in stack.rules for t in rule.targets if t.role is not None}
    # The role EventBridge Scheduler runs the functions' schedules with (named in their environment).
    used |= {r.arn for r in stack.roles.values() if "scheduler.amazonaws.com" in r.assumed_by}
    profiled = {name for p in stack.instance_profiles for name in p.properties.get("Roles", [])}
    deployed = [role for role in stack.roles.values() if role.arn in used or role.name in profiled]
    for role in deployed:
        _role(role, stack.account)
    return deployed


def _role(role: Role, account: str) -> None:
    """Made in moto's IAM backend rather than through its API: 60 calls a deployment cost 0.1-0.2 s
    through botocore and moto's dispatch, 3 ms here. The backend checks every policy document's
    grammar as IAM does (IAMPolicyDocumentValidator), so a malformed grant still fails the deploy."""
    from moto.iam.models import iam_backends

    iam = iam_backends[account]["global"]
    iam.create_role(
        role_name=role.name,
        assume_role_policy_document=json.dumps(role.trust_policy),
        path="/",
        permissions_boundary=None,
        description=role.description[:1000],
        tags=[],
        max_session_duration=None,
    )
    for name, document in role.named_policies:
        iam.put_role_policy(role.name, name, json.dumps(document))
    for arn in role.managed_policy_arns:  # an AWS-managed policy needs MOTO_IAM_LOAD_MANAGED_POLICIES=true
        iam.attach_role_policy(arn, role.name)


def _storage(client: Clients, stack: StackModel, regions_config: str) -> None:
    ddb = client("dynamodb")
    for table in stack.tables:
        indexes = {"GlobalSecondaryIndexes": table.global_secondary_indexes} if table.global_secondary_indexes else {}
        ddb.create_table(
            TableName=table.name,
            KeySchema=table.key_schema,
            AttributeDefinitions=table.attribute_definitions,
            BillingMode=table.billing_mode,
            **indexes,
        )
        if table.ttl_attribute:
            ddb.update_time_to_live(
                TableName=table.name, TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute}
            )
    for bucket in stack.buckets:
        client("s3").create_bucket(Bucket=bucket.name)
    for bucket_name, document in stack.bucket_policies:
        client("s3").put_bucket_policy(Bucket=bucket_name, Policy=json.dumps(document))
    # The functions say which parameter holds the regions config; its value is the engine's.
    regions_parameters = {f.environment.get(constants.ENV_REGIONS_PARAMETER) for f in stack.functions.values()}
    for parameter in stack.parameters:
        p = parameter.properties
        value = regions_config if parameter.name in regions_parameters else p["Value"]
        client("ssm").put_parameter(Name=parameter.name, Type=p.get("Type", "String"), Value=value, Tier=p.get("Tier", "Standard"))


def _rules(client: Clients, stack: StackModel) -> None:
    events = client("events", stack.region)
    for rule in stack.rules:
        events.put_rule(
            Name=rule.name, EventPattern=json.dumps(rule.event_pattern), State=rule.state, Description=rule.description
        )
        targets = []
        for target in rule.targets:
            entry: dict[str, Any] = {"Id": target.id, "Arn": target.arn}
            if target.role is not None:
                entry["RoleArn"] = target.role.arn
            if target.retry_policy:
                entry["RetryPolicy"] = target.retry_policy
            targets.append(entry)
        events.put_targets(Rule=rule.name, Targets=targets)


def render_definition(text: str, substitutions: dict[str, str]) -> str:
    """Fill `${Name}` placeholders exactly as CloudFormation's DefinitionSubstitutions does."""
    for key, value in substitutions.items():
        text = text.replace("${" + key + "}", value)
    if "${" in text:
        start = text.index("${")
        raise ValueError(f"placeholder without a substitution: {text[start:text.index('}', start) + 1]}")
    return text


def _stub_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "# the local engine runs gpufill's handlers in-process\n")
    return buffer.getvalue()


def _dynamic(client, value: str) -> str:
    """A CloudFormation dynamic reference {{resolve:ssm:NAME}} read from the account's SSM."""
    if value.startswith("{{resolve:ssm:") and value.endswith("}}"):
        return client("ssm").get_parameter(Name=value[len("{{resolve:ssm:"):-2])["Parameter"]["Value"]
    return value
