"""Runs at the largest valid sizes, on the local engine, with the size of every state measured."""

import pytest

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.support import largest_state


@pytest.fixture
def run_at_maxima():
    def run(request: dict, market: dict, name: str):
        with LocalEngine(MarketScenario.model_validate(market)) as engine:
            execution = engine.run(request, name=name, timeout=1800)
        return execution, largest_state(execution), len(execution.history)

    return run
