"""The equivalent mutants of tools/mutation/baseline.json, found by what they change, not by number.

mutmut numbers a function's mutants by their position in it, so a line added above a listed
mutant moves its number onto another mutant: a list kept by number can then excuse a real
survivor. Each entry here names the function and the change itself, as `mutmut show` prints it
(the lines taken out with "-", the lines put in with "+", each stripped of its indentation):

    {"function": "gpufill.adapters.aws._transient",
     "change": ["- code = error.response.get(\"Error\", {}).get(\"Code\", \"\")",
                "+ code = error.response.get(\"Error\", {}).get(\"Code\", None)"],
     "reason": "..."}

A mutant of a module-level rule (tools/mutation/module_level.py) is already named by its text:
{"mutant": "gpufill.policy.errors:: ... -> ...", "reason": "..."}.

An entry excuses the one mutant of its function that makes exactly its change. A function that
holds the same line twice gets the same change twice: such an entry says which of them it means
and of how many (`"occurrence": 2, "of": 2`, in the order of the lines in the function). An entry
whose change no mutant makes, whose mutant is killed, or whose change is made a number of times
other than its `of` (1 when absent) is stale and fails the run: the code or the tests changed
under it, and it must be looked at again.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

KILLED = ("killed", "timeout", "caught by type check")
UNTESTED = ("skipped", "not checked")
SEPARATOR = "ǁ"  # mutmut's separator between a class and its method in a mutant's name


@dataclass(frozen=True)
class Entry:
    function: str  # module and function (Class.method for a method), or the module-level mutant's name
    change: tuple[str, ...]  # empty for a module-level mutant
    reason: str
    occurrence: int = 1  # which of the mutants making this change, in their order in the function
    of: int = 1  # how many mutants of the function make this change

    @property
    def module(self) -> str:
        if not self.change:
            return self.function.split("::", 1)[0]
        return self.function.rsplit(".", 2 if self._is_method() else 1)[0]

    def _is_method(self) -> bool:
        # "gpufill.x.y.Class.method": a method's class is capitalised, a module never is.
        parts = self.function.split(".")
        return len(parts) > 2 and parts[-2][:1].isupper()

    def label(self) -> str:
        return self.function if not self.change else f"{self.function}: {' / '.join(self.change)}"


def load(raw: list[dict]) -> list[Entry]:
    entries = []
    for number, item in enumerate(raw):
        unknown = set(item) - {"function", "change", "reason", "occurrence", "of", "mutant"}
        if unknown or not item.get("reason") or ("mutant" in item) == ("function" in item):
            raise ValueError(f"baseline equivalent #{number} needs a reason and either a function and its change "
                             f"or a module-level mutant's name: {item}")
        if "mutant" in item:
            entries.append(Entry(item["mutant"], (), item["reason"]))
        else:
            change = tuple(item.get("change") or ())
            if not change or not all(line[:2] in ("- ", "+ ") for line in change):
                raise ValueError(f"baseline equivalent #{number}: change must be lines starting '- ' or '+ ': {item}")
            occurrence, of = int(item.get("occurrence", 1)), int(item.get("of", 1))
            if not 1 <= occurrence <= of:
                raise ValueError(f"baseline equivalent #{number}: occurrence must be between 1 and of: {item}")
            entries.append(Entry(item["function"], change, item["reason"], occurrence, of))
    seen = [(e.function, e.change, e.occurrence) for e in entries]
    if len(set(seen)) != len(seen):
        twice = sorted({key[0] for key in seen if seen.count(key) > 1})
        raise ValueError(f"baseline equivalents listed twice: {', '.join(twice)}")
    return entries


def dump(entries: Iterable[Entry]) -> list[dict]:
    out = []
    for entry in sorted(entries, key=lambda e: (e.function, e.change, e.occurrence)):
        if not entry.change:
            out.append({"mutant": entry.function, "reason": entry.reason})
            continue
        item: dict = {"function": entry.function, "change": list(entry.change), "reason": entry.reason}
        if entry.of != 1:
            item["occurrence"], item["of"] = entry.occurrence, entry.of
        out.append(item)
    return out


def function_of(mutant: str) -> str:
    """'gpufill.a.b.x_f__mutmut_3' -> 'gpufill.a.b.f'; 'gpufill.a.b.xǁCǁm__mutmut_3' -> 'gpufill.a.b.C.m'."""
    module, _, mangled = mutant.partition("__mutmut_")[0].rpartition(".")
    if mangled.startswith("x" + SEPARATOR):
        _, cls, method = mangled.split(SEPARATOR)
        return f"{module}.{cls}.{method}"
    return f"{module}.{mangled.removeprefix('x_')}"


def number(mutant: str) -> int:
    return int(mutant.rpartition("__mutmut_")[2])


def change_of(diff: str) -> tuple[str, ...]:
    """The lines a unified diff takes out and puts in, each stripped of its indentation."""
    lines = []
    for line in diff.splitlines():
        if line.startswith(("---", "+++", "@@")) or line[:1] not in ("-", "+"):
            continue
        lines.append(f"{line[0]} {line[1:].strip()}")
    return tuple(lines)


@contextmanager
def _inside(directory: Path):
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def mutmut_changes(staging: Path, mutants: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """{mutant: change} read from mutmut's mutated copies in staging/mutants (as `mutmut show` does)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant  # mutmut is only installed for this run

    found = {}
    with _inside(staging):
        for mutant in mutants:
            module = mutant.partition("__mutmut_")[0].rpartition(".")[0]
            path = "src/" + module.replace(".", "/") + ".py"
            found[mutant] = change_of(get_diff_for_mutant(mutant, path=path))
    return found


def match(entries: list[Entry], results: dict[str, dict[str, str]],
          changes: Callable[[Iterable[str]], dict[str, tuple[str, ...]]]) -> tuple[dict[str, Entry], list[str]]:
    """({mutant: the entry that excuses it}, [why each stale entry is stale]) over the modules in results.

    `changes` reads the change of each mutant asked about; only the mutants of functions an entry
    names are read (a survivor of another function is not excused by anything)."""
    reported = {mutant: status for statuses in results.values() for mutant, status in statuses.items()}
    in_run = [entry for entry in entries if entry.module in results]
    named = {entry.function for entry in in_run if entry.change}
    by_function: dict[str, list[str]] = defaultdict(list)
    for mutant in reported:
        if "__mutmut_" in mutant and function_of(mutant) in named:
            by_function[function_of(mutant)].append(mutant)
    read = changes([m for mutants in by_function.values() for m in mutants]) if by_function else {}
    excused: dict[str, Entry] = {}
    stale = []
    for entry in in_run:
        if not entry.change:
            hits = [entry.function] if entry.function in reported else []
        else:
            same = sorted((m for m in by_function.get(entry.function, []) if read[m] == entry.change), key=number)
            if same and len(same) != entry.of:
                stale.append(f"{entry.label()}: {len(same)} mutants make this change, the entry says {entry.of} "
                             f"({', '.join(same)})")
                continue
            hits = same[entry.occurrence - 1:entry.occurrence]
        if not hits:
            stale.append(f"{entry.label()}: no mutant makes this change any more")
        elif reported[hits[0]] in UNTESTED:
            continue  # not tested in this run (a run cut short): neither excused nor judged
        elif reported[hits[0]] in KILLED:
            stale.append(f"{entry.label()}: killed by the tests now ({hits[0]})")
        else:
            excused[hits[0]] = entry
    return excused, stale
