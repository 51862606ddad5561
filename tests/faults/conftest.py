"""The fault catalogue's simulated account; its checks are in tests/support/audit.py."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.support.audit import MARKET


@pytest.fixture
def account():
    @contextmanager
    def open_account(market: dict = MARKET, **kwargs):
        with LocalEngine(MarketScenario.model_validate(market), **kwargs) as engine:
            yield engine

    return open_account
