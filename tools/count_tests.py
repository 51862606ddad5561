"""`make test-counts`: how many tests each folder of tests/ holds, counted by pytest's own
collection (`pytest --collect-only -q`), written into docs/testing.md between its markers.

    python tools/count_tests.py           # print the table
    python tools/count_tests.py --write   # and rewrite the block in docs/testing.md

A test is what pytest collects: each parametrized case counts once. Hypothesis properties and
tests marked `slow` (which `make test` leaves out) are counted too, per folder. Collecting the
whole suite imports every test module (about half a minute), so no test runs this; the docs test
only checks that the block it wrote adds up (tests/cli/test_docs.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "testing.md"
BEGIN = "<!-- test-counts: begin (make test-counts writes this block) -->"
END = "<!-- test-counts: end -->"
HEADER = ["| folder | tests | hypothesis properties | marked `slow` |", "| --- | ---: | ---: | ---: |"]

# Run inside the collecting pytest (`-p tools.count_tests`): one line per collected test,
# "COUNT <node id> <hypothesis 0|1> <slow 0|1>", after pytest's own `--collect-only -q` listing.
PREFIX = "COUNT "


def pytest_collection_finish(session) -> None:
    for item in session.items:
        prop = int(bool(getattr(getattr(item, "obj", None), "is_hypothesis_test", False)))
        slow = int(item.get_closest_marker("slow") is not None)
        print(f"{PREFIX}{item.nodeid} {prop} {slow}")


def collect() -> list[tuple[str, bool, bool]]:
    """(node id, is a hypothesis property, is marked slow) of every test pytest collects."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "tools.count_tests"],
        cwd=ROOT, capture_output=True, text=True,
    )
    if done.returncode != 0:
        sys.exit(f"pytest --collect-only failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    found = []
    for line in done.stdout.splitlines():
        if line.startswith(PREFIX):
            node, prop, slow = line.removeprefix(PREFIX).rsplit(" ", 2)
            found.append((node, prop == "1", slow == "1"))
    return found


def table(tests: list[tuple[str, bool, bool]]) -> list[str]:
    """The block's lines: a row per folder of tests/ (in name order), then the total."""
    folder = lambda node: "/".join(node.split("::", 1)[0].split("/")[:2])  # noqa: E731
    counts, props, slow = Counter(), Counter(), Counter()
    for node, is_prop, is_slow in tests:
        counts[folder(node)] += 1
        props[folder(node)] += is_prop
        slow[folder(node)] += is_slow
    rows = [f"| `{f}/` | {counts[f]} | {props[f]} | {slow[f]} |" for f in sorted(counts)]
    total = f"| all | {sum(counts.values())} | {sum(props.values())} | {sum(slow.values())} |"
    return [BEGIN, *HEADER, *rows, total, END]


def rewrite(text: str, block: list[str]) -> str:
    """`text` with the block between its markers replaced; the markers must be there once each."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"{DOC.relative_to(ROOT)}: the markers {BEGIN!r} and {END!r} must appear once each")
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return before + "\n".join(block) + after


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the block in docs/testing.md")
    args = parser.parse_args(argv)
    block = table(collect())
    print("\n".join(block[1:-1]))
    if args.write:
        DOC.write_text(rewrite(DOC.read_text(), block))
        print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
