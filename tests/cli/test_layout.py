"""docs/layout.md maps the tree as it is: every folder named, every "where is X" answered by one
file that exists; the make targets per kind follow the folders of tests/; no test imports a conftest."""

import ast
import re
import subprocess

import pytest

from tests.support import ROOT

LAYOUT = (ROOT / "docs" / "layout.md").read_text()
PACKAGE = ROOT / "functions" / "gpufill"
# The questions a newcomer asked of the tree; each row of the table answers one.
QUESTIONS = ("halved", "LaunchBatch step makes next", "launch call is made", "fleet request", "approval",
             "spot to On-Demand", "ClientToken", "capacity cache", "readiness verdict", "refill run")


def where_is_table() -> list[tuple[str, str]]:
    section = LAYOUT.split("## Where is X", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith(("| question", "| ---"))]
    return [tuple(cell.strip() for cell in row.strip("|").split("|")) for row in rows]


def tracked_files() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked tree is unknown")
    return listed.splitlines()


def test_each_question_is_answered_by_one_file_that_exists():
    rows = where_is_table()
    assert [next(q for q in QUESTIONS if q in question) for question, _ in rows] == list(QUESTIONS)
    for question, answer in rows:
        paths = re.findall(r"`([^`]+)`", answer)
        assert len(paths) == 1 and answer == f"`{paths[0]}`", f"{question!r}: one path, nothing else"
        assert (ROOT / paths[0]).is_file(), f"{question!r} points at {paths[0]}, which is not a file"


def test_every_top_level_folder_is_named():
    folders = {path.split("/", 1)[0] for path in tracked_files() if "/" in path}
    missing = sorted(f for f in folders if f"`{f}/`" not in LAYOUT)
    assert not missing, f"docs/layout.md does not name {missing}"


def test_every_folder_of_the_package_and_of_the_tests_is_named():
    folders = [p for root in (PACKAGE, ROOT / "tests") for p in root.rglob("*")
               if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))]
    missing = sorted(str(p.relative_to(ROOT)) for p in folders if f"`{p.relative_to(ROOT).as_posix()}/`" not in LAYOUT)
    assert not missing, f"docs/layout.md does not name {missing}"


def test_there_is_a_make_target_for_every_kind_of_test():
    kinds = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    declared = re.search(r"^TEST_KINDS := (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    assert sorted(declared) == kinds


@pytest.mark.parametrize("path", sorted((ROOT / "tests").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_imports_a_conftest(path):
    """pytest imports each conftest under its own name: importing it again runs a second copy
    (fixtures and module state twice). Shared helpers live in tests/support/."""
    modules = {n.module for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in modules if m.split(".")[-1] == "conftest"}


# Code under functions/gpufill/ (not data: the catalog's JSON) has at most this many lines a file:
# past it, a file holds more than one job and is split along a seam (docs/layout.md says where).
MAX_LINES = 600


def test_no_file_of_the_package_grows_past_600_lines():
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*")
             if p.is_file() and p.suffix in (".py", ".mjs", ".sh") and "__pycache__" not in p.parts}  # code, not data
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines (split along a seam): {over}"


def test_every_file_of_the_local_engine_is_on_its_map():
    """docs/local-engine.md maps functions/gpufill/local/: one line per file, `path`: what it holds."""
    local = PACKAGE / "local"
    doc = (ROOT / "docs" / "local-engine.md").read_text()
    section = doc.split("## A map of `functions/gpufill/local/`", 1)[1].split("\n## ", 1)[0]
    mapped = re.findall(r"^- `([^`]+)`: \S", section, re.M)
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert sorted(set(files) - set(mapped)) == [], "files of local/ the map does not name"
    assert sorted(set(mapped) - set(files)) == [], "the map names files local/ does not hold"
    assert len(mapped) == len(set(mapped)), "a file is mapped twice"
