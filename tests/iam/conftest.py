from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace

import pytest
from gpufill.local.deploy import model as stack_model
from gpufill.local.deploy.model import Role
from gpufill.local.iam.evaluator import Evaluator


@pytest.fixture(scope="session")
def evaluator():
    judge = Evaluator()
    yield judge
    judge.close()


@pytest.fixture(scope="session")
def app():
    """The CDK app as the local engine deploys it for its default deployment (cached synth)."""
    from gpufill.local.engine import ENV_NAME

    return stack_model.load(ENV_NAME)


@pytest.fixture
def judged_account():
    """A simulated account (every call judged by the deployed IAM policies, as always); yields
    (engine, judgements). `without=(task, action, resource_part)` removes that grant from the
    task's deployed role first, as if the CDK app did not give it."""
    from gpufill.local.engine import LocalEngine
    from gpufill.local.scenario import MarketScenario

    @contextmanager
    def open_account(market: dict, without: tuple[str, str, str] | None = None, **kwargs):
        with LocalEngine(MarketScenario.model_validate(market), **kwargs) as engine:
            if without is not None:
                remove_grant(engine, *without)
            yield engine, engine.iam

    return open_account


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
