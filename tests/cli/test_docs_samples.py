"""Every gpufill command shown in README.md and docs/*.md runs against the local engine, and its
output matches the sample the page shows, so the pages cannot drift from what the commands print.

The convention (docs/testing.md, "The docs' commands"): each fenced block that shows a gpufill
command has, in the prose just before it (after the previous block), one HTML comment that says
how it runs; a reader never sees it:

- `<!-- docs-test: run -->`: the block's commands run as they are (`simulate` brings its own
  engine). In a transcript (`$ ` lines), what follows a command up to the next `$ ` is its sample
  output; `(exit N)` there is its exit code.
- `<!-- docs-test: endpoint=examples/markets/plenty.json -->`: the same, against a `gpufill local serve`
  of that market, one per page and market (shared by the page's blocks, in order); any
  `http://127.0.0.1:PORT` in the block is that endpoint.
- `<!-- docs-test: output-of=COMMAND -->` (with run or endpoint=): the block is COMMAND's output.
- `<!-- docs-test: skip: REASON -->`: not run (a synopsis, or a command that needs AWS), for REASON.
- `setup="COMMAND; COMMAND"` (with run or endpoint=): commands run first, their output unchecked.
- `money` after run/endpoint: dollar amounts may differ (spend grows with the modelled clock).

Ids (i-…, cr-…, timestamps in names), times, ports and the modelled time never have to match (a
command that pastes a name printed earlier gets the name the engine gave); `…`
or `...` alone on a line (or followed by a note in parentheses) stands for lines left out, and `…`
inside a line for text left out.
"""

from __future__ import annotations

import io
import re
import shlex
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.S | re.M)
MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->", flags=re.S)
COMMAND = re.compile(r"^\s*(?:\$ )?(?:[A-Z_]+=\S+ )*(?:\.venv/bin/)?gpufill\s", flags=re.M)
# What `make test` runs (one cheap block); the rest run with -m slow (docs/testing.md).
FAST = {"teardown.md:616"}


@dataclass
class Block:
    page: Path
    line: int
    text: str
    marker: str | None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks that show a gpufill command, each with the marker before it."""
    text = page.read_text()
    found, previous_end = [], 0
    for fence in FENCE.finditer(text):
        markers = MARKER.findall(text[previous_end : fence.start()])
        previous_end = fence.end()
        body = fence.group(2)
        if not COMMAND.search(body) and not (markers and "output-of=" in markers[-1]):
            continue
        marker = markers[-1] if markers else None
        found.append(Block(page, text[: fence.start()].count("\n") + 2, body, marker, _options(marker or "")))
    return found


def _options(marker: str) -> dict[str, str]:
    if marker.startswith("skip"):
        return {"skip": marker.partition(":")[2].strip()}
    options = {}
    for part in shlex.split(marker):
        key, _, value = part.partition("=")
        options[key] = value
    return options


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]


def test_every_block_with_a_gpufill_command_says_how_it_runs():
    unmarked = [b.where for b in ALL_BLOCKS if b.marker is None]
    assert not unmarked, f"blocks with a gpufill command and no <!-- docs-test: ... --> before them: {unmarked}"
    bad = [b.where for b in ALL_BLOCKS if not ({"skip", "run", "endpoint"} & set(b.options))]
    assert not bad, f"a docs-test marker says run, endpoint=MARKET or skip: REASON: {bad}"
    silent = [b.where for b in ALL_BLOCKS if "skip" in b.options and not b.options["skip"]]
    assert not silent, f"a skipped block says why: {silent}"
    for b in ALL_BLOCKS:
        if b.options.get("endpoint"):
            assert (ROOT / b.options["endpoint"]).is_file(), b.where


# --- running them -----------------------------------------------------------------------------


@dataclass
class Step:
    argv: list[str]
    env: dict[str, str]
    expected: list[str]
    exit_code: int | None


def steps(block: Block) -> list[Step]:
    """The block's commands, each with the output lines the page shows for it."""
    lines = block.text.replace("\\\n", " ").splitlines()
    if "output-of" in block.options:
        return [_step(block.options["output-of"], [line for line in lines])]
    transcript = any(line.startswith("$ ") for line in lines)
    found: list[tuple[str, list[str]]] = []
    for line in lines:
        if transcript and line.startswith("$ "):
            found.append((line[2:], []))
        elif not transcript and COMMAND.match(line):
            found.append((line, []))
        elif transcript and found:
            found[-1][1].append(line)
    return [_step(command, expected) for command, expected in found]


def _step(command: str, expected: list[str]) -> Step:
    said = re.search(r"#.*\bexit (\d+)", command)  # `cmd   # ALL_SPOT_EXHAUSTED, exit 1`
    if said:
        expected = [*expected, f"(exit {said.group(1)})"]
    words = shlex.split(command, comments=True)
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    assert words and words[0].endswith("gpufill"), command
    code = None
    kept = []
    for line in expected:
        exited = re.fullmatch(r"\(exit (\d+)\)", line.strip())
        if exited:
            code = int(exited.group(1))
        else:
            kept.append(line)
    return Step(words[1:], env, kept, code)


NORMAL = [
    (re.compile(r"\bi-[0-9a-f]{17}\b"), "i-ID"),
    (re.compile(r"\bcr-[0-9a-f]{17}\b"), "cr-ID"),
    (re.compile(r"\d{8}T\d{9}"), "STAMP"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "UUID"),  # moto's task tokens
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?"), "TIME"),
    (re.compile(r"http://127\.0\.0\.1:\d+"), "URL"),
    (re.compile(r"\.venv/bin/gpufill\b"), "gpufill"),  # the program as typed: `gpufill` when run in-process
    (re.compile(r"modelled time [\d.]+ s"), "modelled time N s"),
    (re.compile(r"[\d.]+ h since the engine started"), "N h since the engine started"),
]
ELIDED = re.compile(r"(?:…|\.\.\.)(?: \(.*\))?")  # lines left out, perhaps saying which: `… (as in make demo)`
MONEY = re.compile(r"\$?[\d,]+\.\d{2,4}\b")


def normal(line: str, money: bool) -> str:
    for pattern, placeholder in NORMAL:
        line = pattern.sub(placeholder, line)
    if money:
        line = MONEY.sub("N", line)
    return " ".join(line.split())


def matches_in_order(expected: list[str], actual: list[str], money: bool) -> str | None:
    """None when every expected line (… and ... lines aside) is an actual line, in order; else the first
    line not found."""
    actual = [normal(a, money) for a in actual]
    at = 0
    for line in expected:
        if not line.strip() or ELIDED.fullmatch(line.strip()):
            continue
        wanted = re.compile(".*".join(re.escape(p) for p in normal(line, money).split("…")))
        while at < len(actual) and not wanted.fullmatch(actual[at]):
            at += 1
        if at == len(actual):
            return line
        at += 1
    return None


INSTANCE = re.compile(r"\bi-[0-9a-f]{17}\b")
STAMPED = re.compile(r"\b([A-Za-z0-9_-]+?-)(\d{8}T\d{9})\b")


class _Typed(io.StringIO):
    """stdin as a person at a terminal types it: each answer read is echoed, as the terminal shows it."""

    def __init__(self, answers: list[str]):
        super().__init__("".join(f"{a}\n" for a in answers))

    def readline(self, *args) -> str:
        import sys

        line = super().readline(*args)
        sys.stdout.write(line)
        return line


def _instance_pasted(arg: str, seen: list[str]) -> str:
    return INSTANCE.sub(lambda m: m.group(0) if m.group(0) in seen or not seen else seen[0], arg)


def run_block(block: Block, url: str | None, capsys, monkeypatch, names: dict) -> list[str]:
    """Runs the block's setup, then its commands; the problems found. `names`: each generated name's
    stem -> the name the engine gave it, so a command that pastes a printed name gets the real one
    (and under "" the instance ids printed so far, in order)."""
    from gpufill.cli import aws, main

    monkeypatch.setattr(aws, "POLL_SECONDS", 0.05)
    problems = []
    seen: list[str] = names.setdefault("", [])  # type: ignore[assignment] -- the instance ids printed so far
    setup = [_step(c, []) for c in block.options.get("setup", "").split(";") if c.strip()]
    for step in [*setup, *steps(block)]:
        argv = [re.sub(r"http://127\.0\.0\.1:\d+", url, a) if url else a for a in step.argv]
        argv = [STAMPED.sub(lambda m: names.get(m.group(1), m.group(0)), a) for a in argv]
        # An instance id the page shows is one of its run's: the engine's first one stands for it.
        argv = [_instance_pasted(a, seen) for a in argv]
        with monkeypatch.context() as env:
            for key, value in step.env.items():
                env.setenv(key, value)
            # A transcript that answers the [y/N] question (`Start it? [y/N] y`) types that answer.
            answers = [m.group(1) for line in step.expected for m in [re.search(r"\[y/N\] (\S+)$", line)] if m]
            env.setattr("sys.stdin", _Typed(answers))
            code = main(argv)
        out, err = capsys.readouterr()
        names.update((m.group(1), m.group(0)) for m in STAMPED.finditer(out + err))
        seen.extend(i for i in dict.fromkeys(INSTANCE.findall(out + err)) if i not in seen)
        if step in setup:
            if code != 0:
                problems.append(f"{block.where}: its setup gpufill {shlex.join(step.argv)} exited {code}: {err.strip()[-300:]}")
            continue
        wanted_code = step.exit_code if step.exit_code is not None else code
        if code != wanted_code or (step.exit_code is None and code not in (0,) and not step.expected):
            problems.append(f"{block.where}: gpufill {shlex.join(step.argv)} exited {code}: {err.strip()[-300:]}")
            continue
        missing = matches_in_order(step.expected, (out + err).splitlines(), "money" in block.options)
        if missing is not None:
            problems.append(f"{block.where}: gpufill {shlex.join(step.argv)} did not print {missing!r}; it printed:\n{out}{err}")
    return problems


def groups() -> list[tuple[str, list[Block]]]:
    """What one test runs: each page's blocks against one served market together (in page order),
    and every other block alone."""
    found: dict[str, list[Block]] = {}
    for block in ALL_BLOCKS:
        if "skip" in block.options:
            continue
        market = block.options.get("endpoint")
        key = f"{block.page.name}@{Path(market).name}" if market else block.where
        found.setdefault(key, []).append(block)
    return list(found.items())


def _param(key: str, group: list[Block]):
    return pytest.param(group, marks=[] if key in FAST else [pytest.mark.slow], id=key)


@pytest.mark.parametrize("group", [_param(k, g) for k, g in groups()])
def test_the_commands_a_page_shows_print_what_it_shows(group, capsys, monkeypatch, tmp_path):
    from tests.cli.endpoint import served

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GPUFILL_ENV", "local")
    market = group[0].options.get("endpoint")
    # Who asks a teardown, as the pages show it: ana at a served deployment; `simulate` answers as root.
    monkeypatch.setenv("LOGNAME", "ana" if market else "root")
    # `connect` as the pages show it: the AWS CLI installed, the Session Manager plugin not (with it,
    # connect would start a port forward and wait for Ctrl-C).
    from gpufill.cli import connect

    monkeypatch.setattr(connect.shutil, "which", lambda tool: None if tool == connect.PLUGIN else f"/usr/bin/{tool}")
    problems: list[str] = []
    names: dict = {}
    with served(ROOT / market, tmp_path / "lambda.log") if market else nullcontext() as endpoint:
        for block in group:
            problems += run_block(block, endpoint.url if endpoint else None, capsys, monkeypatch, names)
    assert not problems, "\n\n".join(problems)


def test_a_sample_matches_with_ids_times_and_elisions_left_out():
    shown = ["  i-0123456789abcdef0  us-west-2b  spot  $0.4500/h", "…", "Expires at 2026-12-05T05:41:26+00:00: its …"]
    printed = ["header", "  i-deec0b2ee24d6d7e8  us-west-2b    spot  $0.4500/h", "more",
               "Expires at 2026-12-09T01:00:00+00:00: its teardown then asks"]
    assert matches_in_order(shown, printed, money=False) is None
    assert matches_in_order(["  i-0123456789abcdef0  us-west-2a"], printed, money=False) == "  i-0123456789abcdef0  us-west-2a"
    assert matches_in_order(["spent $4.3293"], ["spent $7.9453"], money=True) is None
    assert matches_in_order(["$ .venv/bin/gpufill watch x"], ["$ gpufill watch x"], money=False) is None
