"""Small readers over the synthesized template for tests/infra."""

from __future__ import annotations

from typing import Any

# The synth-only environment the tests pin (no credentials are read).
ACCOUNT = "123456789012"
REGION = "us-east-1"


def as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def get_att(logical_id: str, attribute: str = "Arn") -> dict:
    return {"Fn::GetAtt": [logical_id, attribute]}


def statements_of_role(template: dict, role_id: str) -> list[dict]:
    """Every statement of every AWS::IAM::Policy attached to the role (CDK writes no inline Policies)."""
    found = []
    for resource in template["Resources"].values():
        if resource["Type"] != "AWS::IAM::Policy":
            continue
        if {"Ref": role_id} in resource["Properties"].get("Roles", []):
            found.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    return found


def role_of(resource: dict, key: str = "Role") -> str:
    """The logical id of the role a function (Role) or state machine (RoleArn) runs as."""
    return resource["Properties"][key]["Fn::GetAtt"][0]


def actions(statement: dict) -> list[str]:
    return as_list(statement["Action"])


def resources(statement: dict) -> list:
    return as_list(statement["Resource"])


def statements_with(statements: list[dict], action: str) -> list[dict]:
    return [s for s in statements if action in actions(s)]


def all_actions(statements: list[dict]) -> set[str]:
    return {a for s in statements for a in actions(s)}
