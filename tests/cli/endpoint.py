"""`gpufill local serve`'s endpoint for the tests of tests/cli, as the command runs it."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from gpufill.cli.common import lambda_logs
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from gpufill.local.server import LocalEndpoint


@contextmanager
def served(market: Path, log: Path):
    """The simulated account of `market` on 127.0.0.1, the handlers' log lines kept off stdout."""
    with lambda_logs(verbose=False, log_file=log), LocalEngine(MarketScenario.load(market)) as engine:
        with LocalEndpoint(engine) as endpoint:
            yield endpoint
