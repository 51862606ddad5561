"""The order make test hands modules to its workers: the longest first, each module whole."""

import os
import subprocess
import sys
from types import SimpleNamespace

from tests.support import ROOT
from tests.support.schedule import costs_from_durations, estimate, longest_first, make_scheduler, scope_of


def items(*nodeids):
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_modules_are_handed_out_longest_first_each_whole_and_in_its_own_order():
    collected = items("tests/unit/test_a.py::one", "tests/unit/test_a.py::two", "tests/workflow/test_w.py::x",
                      "tests/workflow/test_w.py::y", "tests/cli/test_c.py::z", "tests/cli/test_d.py::q")
    costs = {"tests/unit/test_a.py": 1.0, "tests/workflow/test_w.py": 90.0, "tests/cli/test_c.py": 5.0,
             "tests/cli/test_d.py": 5.0}
    assert [i.nodeid for i in longest_first(collected, costs)] == [
        "tests/workflow/test_w.py::x", "tests/workflow/test_w.py::y",
        "tests/cli/test_c.py::z", "tests/cli/test_d.py::q",  # equal costs: collection order
        "tests/unit/test_a.py::one", "tests/unit/test_a.py::two"]


def test_a_module_not_measured_counts_as_the_median_of_its_folder_or_of_all():
    costs = {"tests/faults/test_a.py": 10.0, "tests/faults/test_b.py": 30.0, "tests/faults/test_c.py": 20.0,
             "tests/unit/test_u.py": 1.0}
    assert estimate("tests/faults/test_new.py", costs) == 20.0
    assert estimate("tests/newkind/test_n.py", costs) == 15.0
    assert estimate("tests/unit/test_u.py", costs) == 1.0
    assert estimate("tests/unit/test_u.py", {}) == 0.0
    assert [i.nodeid for i in longest_first(items("tests/unit/test_u.py::a", "tests/faults/test_new.py::b"), costs)] == [
        "tests/faults/test_new.py::b", "tests/unit/test_u.py::a"]


def test_a_modules_cost_adds_its_setup_call_and_teardown_from_the_durations_report():
    report = """
============================= slowest durations ==============================
12.43s call     tests/workflow/test_maintain.py::test_another[a-b]
8.83s setup    tests/workflow/test_bad_requests.py::test_bad[count0]
0.50s teardown tests/workflow/test_maintain.py::test_another[a-b]
1.00s call     tests/engine/test_e.py::TestThing::test_x
(2 durations < 0.005s hidden.  Use -vv to show these durations.)
"""
    assert costs_from_durations(report) == {"tests/engine/test_e.py": 1.0, "tests/workflow/test_bad_requests.py": 8.8,
                                            "tests/workflow/test_maintain.py": 12.9}


def test_the_infra_folder_is_one_unit_costing_what_its_modules_add_up_to():
    collected = items("tests/infra/test_a.py::one", "tests/workflow/test_w.py::x", "tests/infra/test_b.py::two",
                      "tests/unit/test_u.py::u")
    costs = {"tests/infra/test_a.py": 30.0, "tests/infra/test_b.py": 30.0, "tests/workflow/test_w.py": 50.0,
             "tests/unit/test_u.py": 1.0}
    assert [i.nodeid for i in longest_first(collected, costs)] == [
        "tests/infra/test_a.py::one", "tests/infra/test_b.py::two", "tests/workflow/test_w.py::x", "tests/unit/test_u.py::u"]
    assert scope_of("tests/infra/test_a.py::one") == "tests/infra"
    assert scope_of("tests/workflow/test_w.py::Case::x[1]") == "tests/workflow/test_w.py"


class Worker:
    """What xdist's scheduler asks of a worker: the tests it is sent."""

    def __init__(self, name):
        self.sent, self.shutting_down, self.gateway = [], False, SimpleNamespace(id=name)

    def send_runtest_some(self, indexes):
        self.sent.append(indexes)

    def shutdown(self):
        self.shutting_down = True


def test_the_workers_are_handed_units_in_the_order_given_not_by_their_number_of_tests():
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True), getvalue=lambda name: ["2*popen"])
    scheduler = make_scheduler(config, None)
    # The order longest_first gave: one long run first, the infra folder's modules together, a
    # module of many short tests last (xdist's reorder by number of tests would send it first).
    collection = ["tests/limits/test_m.py::big", "tests/infra/test_a.py::a", "tests/infra/test_b.py::b",
                  *(f"tests/unit/test_u.py::u{n}" for n in range(10))]
    workers = [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    assert workers[0].sent[0] == [0]  # the long run
    assert workers[1].sent[0] == [1, 2]  # both infra modules, one synth
    assert workers[0].sent[1] == list(range(3, 13))


def test_a_worker_that_only_collects_tests_infra_starts_no_node_runtime():
    """Every worker collects every module; only the one handed tests/infra should import the CDK
    (jsii's Node runtime) or cfn-lint: tests/infra imports them in its tests and fixtures."""
    code = ("import sys, pytest\n"
            "pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests/infra'])\n"
            "print(sorted(m for m in ('jsii', 'aws_cdk', 'constructs', 'cfnlint') if m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert "tests collected" in done.stdout, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
