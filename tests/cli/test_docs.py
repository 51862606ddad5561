"""The README copy-pastes on a fresh clone: every file it names is in the repository, every
command uses a gpufill that exists after `make demo` (.venv/bin/gpufill), every page it links exists."""

import re

import pytest

from tests.support import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Named in backticks or commands: a repository path ends in one of these.
REPO_PATH = re.compile(r"(?<![\w/.:-])((?:examples|statemachine|startup|bench|functions|cdk|tests|docs)/[\w./-]+\.(?:json|py|sh|md|png|svg|tmpl))")
# Pages other topics add next to these (the README's "read on" list links them).
WRITTEN_ELSEWHERE = {"request-validation.md", "operations.md", "failures.md", "local-engine.md", "testing.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_file_a_page_names_exists(page):
    named = set(REPO_PATH.findall(page.read_text()))
    missing = sorted(m for m in named if not (ROOT / m).exists() and m.rsplit("/", 1)[-1] not in WRITTEN_ELSEWHERE)
    assert not missing, f"{page.name} names files that are not in the repository: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_a_page_links_exists(page):
    links = re.findall(r"\]\(([^)#]+\.md)\)", page.read_text())
    missing = [
        link for link in links
        if not (page.parent / link).resolve().exists() and link.rsplit("/", 1)[-1] not in WRITTEN_ELSEWHERE
    ]
    assert not missing, f"{page.name} links pages that do not exist: {missing}"


def test_readme_commands_run_the_gpufill_that_make_demo_installs():
    text = (ROOT / "README.md").read_text()
    shell_blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", text, flags=re.S)
    bare = [line for block in shell_blocks for line in block.splitlines() if re.match(r"\s*gpufill\s", line)]
    assert not bare, f"commands that need gpufill on PATH: {bare}"
    assert len(text.splitlines()) < 300, "the README is the first read; the reference belongs in docs/"


def test_the_test_counts_in_testing_md_add_up_and_name_every_folder():
    """The block `make test-counts` writes (tools/count_tests.py): one row per folder of tests/
    that holds tests, and a total that is their sum. Collecting the suite to check the figures
    themselves would cost make test half a minute; the make target is how they are kept current."""
    from tools.count_tests import BEGIN, END, rewrite, table

    text = (ROOT / "docs" / "testing.md").read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.strip().splitlines()[2:]]
    *folders, total = rows
    kinds = sorted(f"`tests/{p.name}/`" for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert [r[0] for r in folders] == kinds
    assert total[0] == "all" and [int(t) for t in total[1:]] == [sum(int(r[i]) for r in folders) for i in (1, 2, 3)]
    # The tool's own arithmetic, on a made-up collection.
    made_up = [("tests/unit/test_a.py::test_x[1]", False, False), ("tests/unit/test_a.py::test_y", True, False),
               ("tests/faults/test_b.py::test_z", False, True)]
    assert table(made_up)[3:-1] == ["| `tests/faults/` | 1 | 0 | 1 |", "| `tests/unit/` | 2 | 1 | 0 |", "| all | 3 | 1 | 1 |"]
    assert rewrite(f"a\n{BEGIN}\nold\n{END}\nb", table(made_up)) == "a\n" + "\n".join(table(made_up)) + "\nb"


def test_every_error_a_run_ends_on_is_explained_in_the_failures_page_or_the_request_rules():
    from tests.support.workflow_ends import fail_errors

    explained = (ROOT / "docs" / "failures.md").read_text() + (ROOT / "docs" / "request-validation.md").read_text()
    ends = fail_errors()
    assert {"ALL_SPOT_EXHAUSTED", "NO_CAPACITY_BLOCK", "PURCHASE_FAILED", "InvalidRequest"} <= ends
    assert sorted(e for e in ends if f"`{e}`" not in explained) == []
