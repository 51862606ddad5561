"""A deployed role without one of its grants, as if the CDK app did not give it: how a test shows
the local engine refusing a call gpufill needs."""

from __future__ import annotations

from dataclasses import replace

from gpufill.local.deploy.model import Role


def remove_grant(engine, task: str, action: str, resource_part: str) -> None:
    """Narrow the deployed role of every function `task` of the engine: `action` no longer on
    resources containing `resource_part` (the statement keeps its other actions and resources)."""
    for name, function in list(engine.functions.items()):
        if function.task == task:
            engine.functions[name] = replace(function, role=without_grant(function.role, action, resource_part))


def without_grant(role: Role, action: str, resource_part: str = "") -> Role:
    def narrowed(document: dict) -> dict:
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
        return {**document, "Statement": statements}

    named = [(name, narrowed(document)) for name, document in role.named_policies]
    return replace(role, named_policies=named, policies=[document for _, document in named])


def with_grant(role: Role, statement: dict) -> Role:
    """The role with one more statement, as a test's own role for a call gpufill never makes."""
    named = [*role.named_policies, ("TestGrant", {"Version": "2012-10-17", "Statement": [statement]})]
    return replace(role, named_policies=named, policies=[document for _, document in named])
