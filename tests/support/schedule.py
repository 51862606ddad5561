"""The order `make test` hands test modules to its workers: the longest first.

pytest-xdist's `--dist loadscope` gives each idle worker the next whole module in collection
order. In path order the longest modules (the workflow and fault runs) come last, so one worker
could still be running one while the other has nothing left. Handed out longest first, the short
modules fill in at the end and both workers finish at about the same time.

A module's cost is what it took in a measured run (`tests/module_costs.json`, written by
`python -m tests.support.schedule LOG` from a run with `--durations=0`); a module not measured
yet counts as the median module of its folder.

xdist's own `loadscope` would undo that order: by default it sorts the modules by how many tests
each holds (`--loadscope-reorder`), so the single long runs at the maxima and the child-process
tests came last. `make_scheduler` keeps the order given here, and hands out a folder of SHARED
as one unit, so that its session fixture is built on one worker only.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

COSTS_FILE = Path(__file__).resolve().parents[1] / "module_costs.json"
# Folders whose modules share a session fixture too costly to build on every worker: tests/infra's
# synth of the CDK app with cdk-nag (about 35 s of CPU and a Node runtime a worker).
SHARED = ("tests/infra",)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(\S+?\.py)(?:::\S*)?")


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def scope_of(nodeid: str) -> str:
    """The unit a worker is handed: the test's module, or the whole folder of SHARED it is in."""
    module = module_of(nodeid)
    folder = module.rsplit("/", 1)[0]
    return folder if folder in SHARED else module


def costs_from_durations(text: str) -> dict[str, float]:
    """Seconds per test module (setup, call and teardown added up) from pytest's `--durations=0` lines."""
    costs: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        found = _DURATION.match(line)
        if found:
            costs[found.group(2)] += float(found.group(1))
    return {module: round(seconds, 1) for module, seconds in sorted(costs.items())}


def estimate(module: str, costs: dict[str, float]) -> float:
    """The measured cost, or the median of the measured modules of the same folder (of all, failing that)."""
    if module in costs:
        return costs[module]
    folder = module.rsplit("/", 1)[0]
    same = [seconds for known, seconds in costs.items() if known.rsplit("/", 1)[0] == folder]
    return statistics.median(same or list(costs.values()) or [0.0])


def longest_first(items: Sequence, costs: dict[str, float]) -> list:
    """`items` (anything with a `nodeid`) with whole scopes (`scope_of`) ordered by cost, the
    longest first; a scope's tests keep their order, and scopes of equal cost keep their
    collection order. A folder of SHARED costs what its modules add up to."""
    first: dict[str, int] = {}
    cost: dict[str, float] = defaultdict(float)
    modules: set[str] = set()
    for index, item in enumerate(items):
        scope, module = scope_of(item.nodeid), module_of(item.nodeid)
        first.setdefault(scope, index)
        if module not in modules:
            modules.add(module)
            cost[scope] += estimate(module, costs)
    # sorted() is stable: within a scope the tests keep their collection order.
    return sorted(items, key=lambda item: (-cost[scope_of(item.nodeid)], first[scope_of(item.nodeid)]))


def make_scheduler(config, log):
    """`--dist loadscope` as `make test` wants it: units by `scope_of`, handed out in collection
    order (which `longest_first` made), not re-sorted by their number of tests."""
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirstScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    config.option.loadscopereorder = False
    return LongestFirstScheduling(config, log)


def load_costs(path: Path = COSTS_FILE) -> dict[str, float]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.schedule LOG  (a pytest run's output with --durations=0)", file=sys.stderr)
        return 2
    costs = costs_from_durations(Path(argv[0]).read_text())
    if not costs:
        print(f"{argv[0]}: no --durations lines found; tests/module_costs.json unchanged", file=sys.stderr)
        return 1
    COSTS_FILE.write_text(json.dumps(costs, indent=1, sort_keys=True) + "\n")
    print(f"{len(costs)} modules, {sum(costs.values()):.0f} s in all, written to {COSTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
