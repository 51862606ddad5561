"""The order make test hands modules to its workers: the longest first, each module whole."""

from types import SimpleNamespace

from tests.support.schedule import costs_from_durations, estimate, longest_first


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
