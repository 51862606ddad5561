import gc
import json
import os
import sys
import warnings

import pytest

from tests.support import EXAMPLES
from tests.support.schedule import load_costs, longest_first, make_scheduler

warnings.filterwarnings("ignore", message="No application metrics to publish")

# Python's cyclic collector walks every tracked object at each full collection, and an engine
# test's process holds millions that live as long as it (modules, botocore's service models,
# moto's and the interpreter's kept parse trees): a full collection cost about 0.25 s, and the
# collector a fifth of the CPU of tests/workflow. Once the first simulated account of the process
# has ended (its own objects freed first by a collection), what is left is frozen out of the
# collector's reach (gc.freeze), and collections run less often (gc.set_threshold): a run still
# frees its cycles, only in fewer, larger passes. Nothing a test checks depends on when.
GC_THRESHOLDS = (10000, 50, 50)
_frozen = False


def pytest_configure(config):
    gc.set_threshold(*GC_THRESHOLDS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    global _frozen
    # Once a simulated account has ended and none is open (a module-scoped one stays open between tests).
    engine = sys.modules.get("gpufill.local.engine")
    models = sys.modules.get("moto.core.models")
    ended = engine is not None and engine.LocalEngine.accounts_ended > 0
    if not _frozen and ended and models is not None and models.MockAWS._nested_count == 0:
        _frozen = True
        gc.collect()
        gc.freeze()


def pytest_collection_modifyitems(config, items):
    # Under pytest-xdist only (each worker collects, in the same order): the longest modules are
    # handed out first so that no worker is left running one alone at the end (tests/support/schedule.py).
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = longest_first(items, load_costs())


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    # The controller hands out the workers' order as it is, tests/infra as one unit (one synth).
    if config.getoption("dist") == "loadscope":
        return make_scheduler(config, log)
    return None


@pytest.fixture
def example():
    def load(relative: str) -> dict:
        return json.loads((EXAMPLES / relative).read_text())

    return load
