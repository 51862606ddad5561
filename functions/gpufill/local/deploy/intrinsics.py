"""CloudFormation's intrinsic functions, evaluated as a stack deploy would evaluate them in the
simulated account.

Physical names follow CloudFormation: a resource that names itself in the template keeps that
name; one that does not gets `<stack>-<logical id>` (lower case where the service wants it),
which is what CloudFormation generates minus its random suffix, so every ARN is the same on
every engine start and the engine's own resources are exactly the ones the policies name.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

PARTITION = "aws"
URL_SUFFIX = "amazonaws.com"

# What Ref answers for each type: the property that names the resource, and whether Ref gives
# the ARN (SNS topics, state machines, layers) rather than the name.
_NAME_PROPERTY = {
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::InstanceProfile": "InstanceProfileName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::IAM::Policy": "PolicyName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Lambda::LayerVersion": "LayerName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::SSM::Parameter": "Name",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Events::Rule": "Name",
    "AWS::Events::EventBus": "Name",
    "AWS::Scheduler::ScheduleGroup": "Name",
    "AWS::KMS::Key": None,
}
# Name length limits of the services, for generated names.
_MAX_NAME = {
    "AWS::IAM::Role": 64,
    "AWS::IAM::InstanceProfile": 128,
    "AWS::Lambda::Function": 64,
    "AWS::S3::Bucket": 63,
    "AWS::Events::Rule": 64,
    "AWS::StepFunctions::StateMachine": 80,
    "AWS::SNS::Topic": 256,
    "AWS::DynamoDB::Table": 255,
}
_LOWER_CASE = {"AWS::S3::Bucket"}
_SUB = re.compile(r"\$\{([^}]*)\}")


class UnresolvableIntrinsic(ValueError):
    """The template uses an intrinsic or attribute the local engine cannot evaluate; the message
    names the resource and what to add to gpufill/local/deploy/intrinsics.py."""


def generated_name(stack_name: str, logical_id: str, kind: str) -> str:
    """CloudFormation's `<stack>-<logical id>-<random>` without the random part, kept unique when
    the service's length limit cuts it (a short digest of the whole name replaces the tail)."""
    name = f"{stack_name}-{logical_id}"
    limit = _MAX_NAME.get(kind, 128)
    if len(name) > limit:
        name = f"{name[: limit - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return name.lower() if kind in _LOWER_CASE else name


class Resolver:
    """Evaluates one stack's intrinsics (Ref, Fn::GetAtt, Fn::Join, Fn::Sub, Fn::Select,
    Fn::Split, Fn::If, Fn::Base64, Fn::FindInMap, Fn::GetAZs, Fn::ImportValue, pseudo-parameters)
    for a given account and region."""

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        stack_name: str,
        account: str,
        region: str,
        imports: Callable[[str], str] | None = None,
    ) -> None:
        self.template = template
        self.resources: Mapping[str, Any] = template.get("Resources", {})
        self.stack_name = stack_name
        self.account = account
        self.region = region
        self._imports = imports
        self._conditions: dict[str, bool] = {}

    # --- names and attributes ---------------------------------------------------------------

    def physical_name(self, logical_id: str) -> str:
        resource = self._resource(logical_id)
        kind = resource["Type"]
        prop = _NAME_PROPERTY.get(kind)
        given = resource.get("Properties", {}).get(prop) if prop else None
        if given is not None:
            return self.resolve(given)
        if kind == "AWS::SSM::Parameter":
            return f"CFN-{logical_id}"
        return generated_name(self.stack_name, logical_id, kind)

    def ref(self, name: str) -> Any:
        pseudo = self._pseudo(name)
        if pseudo is not None:
            return pseudo
        parameters = self.template.get("Parameters", {})
        if name in parameters:
            if "Default" not in parameters[name]:
                raise UnresolvableIntrinsic(f"Ref {name}: a template parameter without a default")
            if str(parameters[name].get("Type", "")).startswith("AWS::SSM::Parameter::Value"):
                # CloudFormation reads the parameter's value at deploy time: left as a dynamic
                # reference for the deploy step, which reads it from the account's SSM.
                return "{{resolve:ssm:" + parameters[name]["Default"] + "}}"
            return parameters[name]["Default"]
        kind = self._resource(name)["Type"]
        if kind in ("AWS::SNS::Topic", "AWS::StepFunctions::StateMachine", "AWS::IAM::ManagedPolicy"):
            return self.arn(name)
        if kind == "AWS::Lambda::LayerVersion":
            return f"{self.arn(name)}:1"
        return self.physical_name(name)

    def arn(self, logical_id: str) -> str:
        """The ARN CloudFormation's `Fn::GetAtt [id, Arn]` gives (or the TopicArn of a topic)."""
        kind = self._resource(logical_id)["Type"]
        name = self.physical_name(logical_id)
        a, r, p = self.account, self.region, PARTITION
        arns = {
            "AWS::IAM::Role": f"arn:{p}:iam::{a}:role/{name}",
            "AWS::IAM::InstanceProfile": f"arn:{p}:iam::{a}:instance-profile/{name}",
            "AWS::IAM::ManagedPolicy": f"arn:{p}:iam::{a}:policy/{name}",
            "AWS::Lambda::Function": f"arn:{p}:lambda:{r}:{a}:function:{name}",
            "AWS::Lambda::LayerVersion": f"arn:{p}:lambda:{r}:{a}:layer:{name}",
            "AWS::DynamoDB::Table": f"arn:{p}:dynamodb:{r}:{a}:table/{name}",
            "AWS::S3::Bucket": f"arn:{p}:s3:::{name}",
            "AWS::SNS::Topic": f"arn:{p}:sns:{r}:{a}:{name}",
            "AWS::SSM::Parameter": f"arn:{p}:ssm:{r}:{a}:parameter/{name.lstrip('/')}",
            "AWS::StepFunctions::StateMachine": f"arn:{p}:states:{r}:{a}:stateMachine:{name}",
            "AWS::Logs::LogGroup": f"arn:{p}:logs:{r}:{a}:log-group:{name}:*",
            "AWS::Events::Rule": f"arn:{p}:events:{r}:{a}:rule/{name}",
            "AWS::Scheduler::ScheduleGroup": f"arn:{p}:scheduler:{r}:{a}:schedule-group/{name}",
            "AWS::Events::EventBus": f"arn:{p}:events:{r}:{a}:event-bus/{name}",
            # CloudFormation's key id is a generated UUID; the generated name stands in for it.
            "AWS::KMS::Key": f"arn:{p}:kms:{r}:{a}:key/{name}",
        }
        if kind not in arns:
            raise UnresolvableIntrinsic(f"{logical_id}: no ARN known for a {kind} (add it to Resolver.arn)")
        return arns[kind]

    def get_att(self, logical_id: str, attribute: str) -> Any:
        kind = self._resource(logical_id)["Type"]
        name = self.physical_name(logical_id)
        if kind == "AWS::Lambda::Url":  # AWS gives the URL a random 32-character id; this one is stable
            target = self.resolve(self._resource(logical_id)["Properties"]["TargetFunctionArn"])
            url_id = hashlib.sha256(str(target).encode()).hexdigest()[:32]
            urls = {"FunctionUrl": f"https://{url_id}.lambda-url.{self.region}.on.aws/", "FunctionArn": target}
            if attribute not in urls:
                raise UnresolvableIntrinsic(f"Fn::GetAtt {logical_id}.{attribute} of a {kind} (add it to Resolver.get_att)")
            return urls[attribute]
        if attribute in ("Arn", "TopicArn"):
            return self.arn(logical_id)
        attributes = {
            ("AWS::IAM::Role", "RoleId"): f"AROA{hashlib.sha256(name.encode()).hexdigest()[:17].upper()}",
            ("AWS::DynamoDB::Table", "StreamArn"): f"{self.arn(logical_id)}/stream/local",
            ("AWS::S3::Bucket", "DomainName"): f"{name}.s3.{URL_SUFFIX}",
            ("AWS::S3::Bucket", "RegionalDomainName"): f"{name}.s3.{self.region}.{URL_SUFFIX}",
            ("AWS::SNS::Topic", "TopicName"): name,
            ("AWS::StepFunctions::StateMachine", "Name"): name,
            ("AWS::SSM::Parameter", "Value"): self.resolve(self._resource(logical_id)["Properties"].get("Value")),
            ("AWS::SSM::Parameter", "Type"): self._resource(logical_id)["Properties"].get("Type"),
        }
        if (kind, attribute) not in attributes:
            raise UnresolvableIntrinsic(f"Fn::GetAtt {logical_id}.{attribute} of a {kind} (add it to Resolver.get_att)")
        return attributes[(kind, attribute)]

    # --- evaluation -------------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """`value` with every intrinsic evaluated; AWS::NoValue removes its key or list item."""
        if isinstance(value, list):
            return [v for v in (self.resolve(item) for item in value) if v is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, argument), = value.items()
            if key == "Ref" or key.startswith("Fn::") or key == "Condition":
                return self._intrinsic(key, argument)
        resolved = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    def _intrinsic(self, key: str, argument: Any) -> Any:
        if key == "Ref":
            return _NO_VALUE if argument == "AWS::NoValue" else self.ref(argument)
        if key == "Fn::GetAtt":
            logical_id, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
            return self.get_att(logical_id, self.resolve(attribute))
        if key == "Fn::Join":
            delimiter, items = argument
            return self.resolve(delimiter).join(str(item) for item in self.resolve(items))
        if key == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            return self._sub(text, self.resolve(variables))
        if key == "Fn::Select":
            index, items = self.resolve(argument)
            return items[int(index)]
        if key == "Fn::Split":
            delimiter, text = self.resolve(argument)
            return text.split(delimiter)
        if key == "Fn::If":
            condition, when_true, when_false = argument
            return self.resolve(when_true if self.condition(condition) else when_false)
        if key == "Fn::Base64":
            return base64.b64encode(str(self.resolve(argument)).encode()).decode()
        if key == "Fn::FindInMap":
            mapping, top, second = self.resolve(argument)
            return self.template["Mappings"][mapping][top][second]
        if key == "Fn::GetAZs":
            region = self.resolve(argument) or self.region
            return [f"{region}{zone}" for zone in "abc"]
        if key == "Fn::ImportValue":
            if self._imports is None:
                raise UnresolvableIntrinsic(f"Fn::ImportValue {argument!r}: no other stack exports values")
            return self._imports(self.resolve(argument))
        if key in ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Condition"):
            return self._condition_value(key, argument)
        raise UnresolvableIntrinsic(f"{key} is not evaluated by the local engine (add it to Resolver._intrinsic)")

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            self._conditions[name] = bool(self.resolve(self.template.get("Conditions", {})[name]))
        return self._conditions[name]

    def _condition_value(self, key: str, argument: Any) -> bool:
        if key == "Condition":
            return self.condition(argument)
        if key == "Fn::Equals":
            left, right = self.resolve(argument)
            return left == right
        values = [bool(self.resolve(a)) for a in argument]
        return {"Fn::Not": lambda: not values[0], "Fn::And": lambda: all(values), "Fn::Or": lambda: any(values)}[key]()

    def _sub(self, text: str, variables: Mapping[str, Any]) -> str:
        def replace(match: re.Match) -> str:
            name = match.group(1)
            if name.startswith("!"):  # ${!Literal} is the text ${Literal}
                return "${" + name[1:] + "}"
            if name in variables:
                return str(variables[name])
            if "." in name and self._pseudo(name) is None:
                logical_id, attribute = name.split(".", 1)
                return str(self.get_att(logical_id, attribute))
            return str(self.ref(name))

        return _SUB.sub(replace, text)

    def _pseudo(self, name: str) -> str | None:
        return {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": PARTITION,
            "AWS::URLSuffix": URL_SUFFIX,
            "AWS::StackName": self.stack_name,
            "AWS::StackId": f"arn:{PARTITION}:cloudformation:{self.region}:{self.account}:stack/{self.stack_name}/local",
        }.get(name)

    def _resource(self, logical_id: str) -> Mapping[str, Any]:
        try:
            return self.resources[logical_id]
        except KeyError:
            raise UnresolvableIntrinsic(f"{logical_id!r} is neither a resource nor a parameter of {self.stack_name}") from None


class _NoValue:
    def __repr__(self) -> str:
        return "AWS::NoValue"


_NO_VALUE = _NoValue()
