import json
import os
import warnings

import pytest

from tests.support import EXAMPLES
from tests.support.schedule import load_costs, longest_first

warnings.filterwarnings("ignore", message="No application metrics to publish")


def pytest_collection_modifyitems(config, items):
    # Under pytest-xdist only (each worker collects, in the same order): the longest modules are
    # handed out first so that no worker is left running one alone at the end (tests/support/schedule.py).
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = longest_first(items, load_costs())


@pytest.fixture
def example():
    def load(relative: str) -> dict:
        return json.loads((EXAMPLES / relative).read_text())

    return load
