"""Runs at the largest valid sizes, on the local engine, with the size of every state measured."""

import json

import pytest

from gpufill import catalog
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario

TEN_TYPES = ["g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6.12xlarge", "g5.xlarge",
             "g5.2xlarge", "g5.4xlarge", "g5.12xlarge", "g6e.xlarge", "g6e.2xlarge"]


def every_region() -> list[str]:
    return sorted(catalog.known_regions())


def maxima_market(*, spot: int = 0, on_demand: int = 0, zones: str = "abcd") -> dict:
    """Every catalog region x ten types x four AZs: spot/on-demand instances per pool."""
    return {"regions": {
        region: {"zones": {
            f"{region}{z}": {t: {"spot_price": round(0.4 + 0.01 * n, 4), "spot": spot, "on_demand": on_demand}
                             for n, t in enumerate(TEN_TYPES)}
            for z in zones}}
        for region in every_region()}}


def largest_state(execution) -> int:
    sizes = [0]
    for event in execution.history:
        for details in event.values():
            if isinstance(details, dict):
                for field in ("input", "output"):
                    if isinstance(details.get(field), str):
                        sizes.append(len(details[field].encode()))
    return max(sizes)


@pytest.fixture
def run_at_maxima():
    def run(request: dict, market: dict, name: str):
        with LocalEngine(MarketScenario.model_validate(market)) as engine:
            execution = engine.run(request, name=name, timeout=1800)
        return execution, largest_state(execution), len(execution.history)

    return run


def dumps(value) -> str:
    return json.dumps(value)
