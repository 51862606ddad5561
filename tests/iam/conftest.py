from __future__ import annotations

import pytest
from gpufill.local.iam.evaluator import Evaluator


@pytest.fixture(scope="session")
def evaluator():
    judge = Evaluator()
    yield judge
    judge.close()


@pytest.fixture(scope="session")
def app_roles(tmp_path_factory):
    """The CDK app's roles, synthesized for the local engine's default deployment."""
    from gpufill.local.engine import ENV_NAME

    from tests.iam.template_roles import roles, synthesize

    return roles(synthesize(ENV_NAME, tmp_path_factory.mktemp("cdk.out")), ENV_NAME)


@pytest.fixture
def judged_account(app_roles):
    """A simulated account in which every call of gpufill's functions and state machine is
    judged by the app's IAM policies; yields (engine, judgements)."""
    from contextlib import contextmanager

    from gpufill.local.engine import LocalEngine
    from gpufill.local.iam.enforcement import judged_calls
    from gpufill.local.iam.world import engine_world
    from gpufill.local.scenario import MarketScenario

    from tests.iam.template_roles import (
        engine_principals,
        give_the_instance_profile_its_role,
    )

    @contextmanager
    def open_account(market: dict, roles=None, **kwargs):
        chosen = roles or app_roles
        with LocalEngine(MarketScenario.model_validate(market), **kwargs) as engine:
            give_the_instance_profile_its_role(engine, chosen)
            with judged_calls(engine_principals(engine, chosen), engine_world(engine), account=engine.account) as judgements:
                yield engine, judgements

    return open_account
