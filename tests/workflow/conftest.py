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
