"""cdk-nag acknowledgments: each one names the finding and says why it cannot be fixed.

cdk-nag v3 runs as a policy-validation plugin; any finding left unacknowledged fails
`app.synth()`. Acknowledgments are made on the narrowest construct that carries the
finding, one finding at a time: a wildcard acknowledged for one policy says nothing
about any other policy.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """`rule` as cdk-nag reports it, e.g. `AwsSolutions-IAM4` or `AwsSolutions-IAM5[Resource::*]`."""
    if len(reason) < 40:
        raise ValueError(f"acknowledging {rule}: say specifically why ({reason!r} is too short to be a reason)")
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{PACK}::{rule}", reason=reason))


def acknowledge_wildcards(scope: IConstruct, wildcards: dict[str, str]) -> None:
    """Acknowledge AwsSolutions-IAM5 findings: `{"Resource::<rendered ARN>" | "Action::<action>": reason}`."""
    for finding, reason in wildcards.items():
        acknowledge(scope, f"AwsSolutions-IAM5[{finding}]", reason)


def wildcard_resource(scope: IConstruct, arn: str) -> str:
    """The IAM5 finding for a resource ARN, rendered as cdk-nag renders it.

    cdk-nag shows intrinsics in angle brackets: `{"Ref": "AWS::Partition"}` becomes
    `<AWS::Partition>`, `{"Fn::GetAtt": ["Table", "Arn"]}` becomes `<Table.Arn>`.
    """
    return "Resource::" + render(Stack.of(scope).resolve(arn))


def render(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag prints it."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (kind, arg), = value.items()
        if kind == "Ref":
            return f"<{arg}>"
        if kind == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if kind == "Fn::Join":
            separator, parts = arg
            return separator.join(render(part) for part in parts)
    raise ValueError(f"cannot render {value!r} as a cdk-nag finding")
