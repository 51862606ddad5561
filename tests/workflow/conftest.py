from contextlib import contextmanager

import pytest

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario


@pytest.fixture
def local_account():
    """A simulated account running gpufill against a market given as a dict."""

    @contextmanager
    def open_account(market: dict, **kwargs):
        with LocalEngine(MarketScenario.model_validate(market), **kwargs) as engine:
            yield engine

    return open_account


@pytest.fixture
def simulate(local_account):
    """Run one request against one market; returns the finished Execution."""

    def run(request: dict, market: dict, name: str = "test-run"):
        with local_account(market) as engine:
            return engine.run(request, name=name)

    return run


def stack_names(engine) -> tuple[str, str]:
    """The instance profile ARN and the startup bucket the CDK app deploys (and so the engine)."""
    from gpufill import constants

    app = engine.deployments[engine.env_names[0]].app
    return app.instance_profile.arn, app.home.functions["LaunchBatch"].environment[constants.ENV_STARTUP_BUCKET]


def tried(execution) -> list[tuple[str, int, int, str]]:
    """(zone, batch, launched, outcome) of every attempt, in order, from the result or the failure cause."""
    attempts = (execution.output or {}).get("attempts") or (execution.cause or {}).get("attempts") or []
    return [(a["availability_zone"], a["batch"], a["launched"], a["outcome"]) for a in attempts]
