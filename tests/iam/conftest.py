from __future__ import annotations

from contextlib import contextmanager

import pytest
from gpufill.local.deploy import model as stack_model
from gpufill.local.iam.evaluator import Evaluator
from tests.support.grants import remove_grant


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
