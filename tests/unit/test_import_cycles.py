"""No module of gpufill, the CDK app, the benchmark or the mutation tools imports a module that imports it back, directly
or through others: every import counts, at the top, inside a function (a lazy import) or under
TYPE_CHECKING, so each module can be read, and moved, with what it needs and nothing that needs it."""

import ast
from pathlib import Path

from tests.support import ROOT

# Where each tree's modules are imported from: gpufill from functions/, the CDK app's package
# (gpufill_stack) from cdk/, the benchmark as `bench` from the repository root.
# The mutation tools import each other by file name from their own folder.
TREES = [(ROOT / "functions" / "gpufill", ROOT / "functions"), (ROOT / "cdk", ROOT / "cdk"), (ROOT / "bench", ROOT),
         (ROOT / "tools" / "mutation", ROOT / "tools" / "mutation")]


def modules() -> dict[str, Path]:
    found = {}
    for folder, base in TREES:
        for path in folder.rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of the tree that `name` imports anywhere in its file (`from p import m` imports
    module p.m when there is one, else p)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                module = f"{base}.{module}" if module else base
            for alias in node.names:
                if f"{module}.{alias.name}" in known:
                    found.add(f"{module}.{alias.name}")
                elif module in known:
                    found.add(module)
    found.discard(name)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per group of modules that import each other, as the path of imports that closes it."""
    found, done = [], set()
    for start in sorted(graph):
        if start in done:
            continue
        # The shortest way back to `start` (breadth first), if there is one.
        paths, seen = {start: [start]}, {start}
        frontier = [start]
        while frontier and start not in done:
            following = []
            for module in frontier:
                for target in sorted(graph[module]):
                    if target == start:
                        found.append(paths[module] + [start])
                        done.update(paths[module])
                        break
                    if target not in seen:
                        seen.add(target)
                        paths[target] = paths[module] + [target]
                        following.append(target)
                if start in done:
                    break
            frontier = following
    return found


def test_no_two_modules_import_each_other():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    found = cycles(graph)
    assert not found, "modules that import each other:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def test_a_cycle_is_named_by_its_imports():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
