"""The roles of the synthesized CDK app, as principals the local engine can judge calls by.

Synthesizes the app for the engine's deployment name and account, then resolves each role's
policy documents (the intrinsic functions CDK writes: Ref, Fn::GetAtt, Fn::Join, Fn::Sub) to the
names the local engine deploys. Only what the roles' policies use is resolved.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufill import constants
from gpufill.local.engine import (
    HOME_REGION,
    LOCAL_ACCOUNT,
    deployment_env,
    instance_profile_name,
)
from gpufill.local.iam.enforcement import (
    STATE_MACHINE_ACCESS_KEY,
    Principal,
    calling_access_key,
)

REPO = Path(__file__).resolve().parents[2]
PARTITION = "aws"


def synthesize(env: str, outdir: Path) -> dict:
    sys.path.insert(0, str(REPO / "cdk"))
    # jsii prints an end-of-life banner for an old Node unless told its major version is known.
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")
    from gpufill_stack.deployment import build_app, new_app

    app = new_app(context={"account": LOCAL_ACCOUNT, "region": HOME_REGION, "env": env}, outdir=str(outdir))
    stack = build_app(app)
    app.synth()
    return json.loads((outdir / f"{stack.artifact_id}.template.json").read_text())


class Resolver:
    def __init__(self, template: dict, env: str):
        self.resources = template["Resources"]
        self.env = env

    def role_name(self, logical: str) -> str:
        return f"{self.env}-{logical}"[:64]

    def ref(self, logical: str) -> str:
        pseudo = {"AWS::Partition": PARTITION, "AWS::Region": HOME_REGION, "AWS::AccountId": LOCAL_ACCOUNT,
                  "AWS::URLSuffix": "amazonaws.com"}
        if logical in pseudo:
            return pseudo[logical]
        resource = self.resources[logical]
        kind, props = resource["Type"], resource.get("Properties", {})
        if kind == "AWS::DynamoDB::Table":
            return props["TableName"]
        if kind == "AWS::SNS::Topic":
            return f"arn:{PARTITION}:sns:{HOME_REGION}:{LOCAL_ACCOUNT}:{props['TopicName']}"
        if kind == "AWS::SSM::Parameter":
            return props["Name"]
        if kind == "AWS::S3::Bucket":
            return deployment_env(self.env)[constants.ENV_STARTUP_BUCKET] if "Startup" in logical else f"{self.env}-{logical}".lower()
        if kind == "AWS::StepFunctions::StateMachine":
            return f"arn:{PARTITION}:states:{HOME_REGION}:{LOCAL_ACCOUNT}:stateMachine:{props['StateMachineName']}"
        if kind == "AWS::IAM::Role":
            return self.role_name(logical)
        if kind == "AWS::Lambda::Function":
            return props["FunctionName"]
        if kind == "AWS::IAM::InstanceProfile":
            return instance_profile_name(self.env)
        if kind == "AWS::Logs::LogGroup":
            return props.get("LogGroupName") or f"/aws/lambda/{logical}"
        raise KeyError(f"Ref to {kind} {logical}")

    def arn(self, logical: str) -> str:
        kind = self.resources[logical]["Type"]
        name = self.ref(logical)
        return {
            "AWS::DynamoDB::Table": f"arn:{PARTITION}:dynamodb:{HOME_REGION}:{LOCAL_ACCOUNT}:table/{name}",
            "AWS::IAM::Role": f"arn:{PARTITION}:iam::{LOCAL_ACCOUNT}:role/{name}",
            "AWS::Lambda::Function": f"arn:{PARTITION}:lambda:{HOME_REGION}:{LOCAL_ACCOUNT}:function:{name}",
            "AWS::S3::Bucket": f"arn:{PARTITION}:s3:::{name}",
            "AWS::SNS::Topic": name,
            "AWS::StepFunctions::StateMachine": name,
            "AWS::SSM::Parameter": f"arn:{PARTITION}:ssm:{HOME_REGION}:{LOCAL_ACCOUNT}:parameter/{name.lstrip('/')}",
            "AWS::IAM::InstanceProfile": f"arn:{PARTITION}:iam::{LOCAL_ACCOUNT}:instance-profile/{name}",
            "AWS::Logs::LogGroup": f"arn:{PARTITION}:logs:{HOME_REGION}:{LOCAL_ACCOUNT}:log-group:{name}:*",
        }[kind]

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.resolve(n) for n in node]
        if not isinstance(node, dict):
            return node
        if set(node) == {"Ref"}:
            return self.ref(node["Ref"])
        if set(node) == {"Fn::GetAtt"}:
            logical, attribute = node["Fn::GetAtt"]
            if attribute != "Arn":
                raise KeyError(f"GetAtt {logical}.{attribute}")
            return self.arn(logical)
        if set(node) == {"Fn::Join"}:
            separator, parts = node["Fn::Join"]
            return separator.join(str(self.resolve(p)) for p in parts)
        if set(node) == {"Fn::Sub"}:
            text, variables = (node["Fn::Sub"], {}) if isinstance(node["Fn::Sub"], str) else node["Fn::Sub"]

            def value(match: re.Match) -> str:
                name = match.group(1)
                if name in variables:
                    return str(self.resolve(variables[name]))
                if name.endswith(".Arn"):
                    return self.arn(name.removesuffix(".Arn"))
                return self.ref(name)

            return re.sub(r"\$\{([^!}][^}]*)\}", value, text)
        return {k: self.resolve(v) for k, v in node.items()}


@dataclass(frozen=True)
class Roles:
    """Every role of the app: by function name, the state machine's, the instances'."""

    by_function: dict[str, Principal]
    state_machine: Principal
    instance: Principal
    documents: dict[str, list[tuple[str, dict]]]  # role logical id -> (policy name, document)


def roles(template: dict, env: str) -> Roles:
    resolver = Resolver(template, env)
    resources = template["Resources"]
    documents: dict[str, list[tuple[str, dict]]] = {}
    for logical, resource in resources.items():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        document = resolver.resolve(resource["Properties"]["PolicyDocument"])
        for role in resource["Properties"]["Roles"]:
            documents.setdefault(role["Ref"], []).append((logical, document))

    def principal(role_logical: str, session: str) -> Principal:
        name = resolver.role_name(role_logical)
        return Principal(
            name=name,
            arn=f"arn:{PARTITION}:sts::{LOCAL_ACCOUNT}:assumed-role/{name}/{session}",
            policies=tuple(documents.get(role_logical, [])),
            role_arn=resolver.arn(role_logical),
            account=LOCAL_ACCOUNT,
        )

    by_function = {}
    for resource in resources.values():
        if resource["Type"] == "AWS::Lambda::Function" and "FunctionName" in resource["Properties"]:
            role = resource["Properties"]["Role"]["Fn::GetAtt"][0]
            name = resource["Properties"]["FunctionName"]
            by_function[name] = principal(role, name)
    machine = next(r for r in resources.values() if r["Type"] == "AWS::StepFunctions::StateMachine")
    machine_role = machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    profile = next(r for r in resources.values() if r["Type"] == "AWS::IAM::InstanceProfile")
    instance_role = profile["Properties"]["Roles"][0]["Ref"]
    return Roles(
        by_function=by_function,
        state_machine=principal(machine_role, "execution"),
        instance=principal(instance_role, "i-instance"),
        documents=documents,
    )


def engine_principals(engine, app_roles: Roles):
    """Who is calling in the engine: the Lambda task running on this thread, else the state
    machine when moto's interpreter signed the call, else the engine itself (not judged)."""

    def provider() -> Principal | None:
        task = getattr(engine._invocation, "task", None)
        if task:
            return app_roles.by_function[f"gpufill-{engine.env_names[0]}-{task}"]
        if calling_access_key() == STATE_MACHINE_ACCESS_KEY:
            return app_roles.state_machine
        return None

    return provider


def give_the_instance_profile_its_role(engine, app_roles: Roles) -> None:
    """The stack's instance profile holds the instance role; iam:PassRole is judged on it."""
    iam = engine.client("iam")
    name = app_roles.instance.name
    iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")
    iam.add_role_to_instance_profile(InstanceProfileName=instance_profile_name(engine.env_names[0]), RoleName=name)


def without_grant(app_roles: Roles, role_name_part: str, action: str, resource_part: str = "") -> Roles:
    """The app's roles with every statement of the matching role that grants `action` on a resource
    containing `resource_part` narrowed to its other actions and resources, as if the grant were removed."""
    from dataclasses import replace

    def narrowed(principal: Principal) -> Principal:
        if role_name_part not in principal.name:
            return principal
        policies = []
        for name, document in principal.policies:
            statements = []
            for statement in document["Statement"]:
                actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
                if action in actions and any(resource_part in r for r in resources):
                    kept = [r for r in resources if resource_part not in r]
                    if kept:
                        statements.append({**statement, "Resource": kept})
                    others = [a for a in actions if a != action]
                    if others:
                        statements.append({**statement, "Action": others})
                    continue
                statements.append(statement)
            policies.append((name, {**document, "Statement": statements}))
        return replace(principal, policies=tuple(policies))

    return Roles(
        by_function={k: narrowed(v) for k, v in app_roles.by_function.items()},
        state_machine=narrowed(app_roles.state_machine),
        instance=narrowed(app_roles.instance),
        documents=app_roles.documents,
    )
