"""One simulated account per test module: starting one costs seconds, the checks cost milliseconds."""

import pytest

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.engine.simulated_account import MARKET


@pytest.fixture(scope="module")
def engine():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        yield account


@pytest.fixture(autouse=True)
def no_leftover_faults(request):
    yield
    if "engine" in request.fixturenames:
        request.getfixturevalue("engine").faults.clear()
