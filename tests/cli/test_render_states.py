"""Every state the command line names is a state of the workflow it watches: a renamed or removed
state would otherwise go quiet (or loud) in `simulate`, `watch` and `teardown` without a test noticing."""

import ast
import json
from pathlib import Path

import pytest

from gpufill.cli import render_progress

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "functions" / "gpufill" / "cli"
ASL = ROOT / "statemachine" / "provisioner.asl.json"
# Where the CLI holds a state's name: a module constant, a name or state it compares, a state it enters.
STATE_HOLDERS = {"name", "state", "entered"}


def workflow_states() -> dict[str, str]:
    """Every state of the workflow, Map iterators included, with its type."""
    states: dict[str, str] = {}

    def walk(machine: dict) -> None:
        for name, state in machine["States"].items():
            states[name] = state["Type"]
            for inner in state.get("Branches", []) + [state[k] for k in ("Iterator", "ItemProcessor") if k in state]:
                walk(inner)

    walk(json.loads(ASL.read_text()))
    return states


def strings_in(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def holds_a_state(node: ast.AST) -> bool:
    """`name`, `state`, `self.entered`, `x.get("name")` or `_entered(event)`: what the CLI reads a state's name into."""
    if isinstance(node, ast.Name):
        return node.id in STATE_HOLDERS
    if isinstance(node, ast.Attribute):
        return node.attr in STATE_HOLDERS
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "get":
            return any(isinstance(a, ast.Constant) and a.value == "name" for a in node.args)
        return isinstance(func, ast.Name) and func.id == "_entered"
    return False


def state_names_in(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id.endswith(("_STATES", "_STEPS", "_EXIT", "_APPROVAL")) for t in targets):
                names |= strings_in(node.value)
        elif isinstance(node, ast.Compare) and (holds_a_state(node.left) or any(map(holds_a_state, node.comparators))):
            names |= {s for c in [node.left, *node.comparators] if not holds_a_state(c) for s in strings_in(c)}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and isinstance(node.func.value, ast.Dict) and node.args and holds_a_state(node.args[0])):
            names |= strings_in(ast.Tuple(elts=[k for k in node.func.value.keys if k is not None]))
    return names


NAMED = {path.name: state_names_in(path.read_text()) for path in sorted(CLI.glob("*.py"))}


def test_the_scan_finds_the_states_the_progress_lines_are_known_to_name():
    assert {"AwaitTeardownApproval", "LaunchBatch", "RankPools", "CheckServing", "PauseForCapacity",
            "FindTeardownInstances", "PlanNextTry", "RollBackGang"} <= NAMED["render_progress.py"]
    assert {"AwaitTeardownApproval", "FindTeardownInstances"} <= NAMED["teardown.py"]


@pytest.mark.parametrize("module", [m for m, names in NAMED.items() if names])
def test_every_state_the_cli_names_is_in_the_workflow(module):
    assert NAMED[module] - set(workflow_states()) == set(), f"cli/{module} names states the workflow does not have"


def test_every_choice_is_quiet_in_the_progress_lines():
    """A Choice only routes on a value a step already reported: a line for it would say nothing new."""
    choices = {name for name, kind in workflow_states().items() if kind == "Choice"}
    assert choices - render_progress.QUIET_STATES == set()
