"""The mutation baseline's equivalents are found by what they change, so renumbering cannot move
one onto a real survivor, and an entry that no longer holds fails the run (docs/testing.md);
pydantic validators and properties are staged so that mutmut mutates their bodies."""

import json
import sys

import pytest

from tests.support import ROOT

sys.path.insert(0, str(ROOT / "tools" / "mutation"))
from equivalents import Entry, change_of, dump, function_of, load, match  # noqa: E402
from run import BASELINE, unwrap_methods  # noqa: E402

DIFF = """--- src/gpufill/adapters/aws.py
+++ src/gpufill/adapters/aws.py
@@ -5,7 +5,7 @@
     if isinstance(error, ClientError):
-        code = error.response.get("Error", {}).get("Code", "")
+        code = error.response.get("Error", {}).get("Code", None)
         if code in TRANSIENT_CODES:"""
OLD = '- code = error.response.get("Error", {}).get("Code", "")'
NEW = '+ code = error.response.get("Error", {}).get("Code", None)'


def test_a_change_is_the_lines_taken_out_and_put_in_without_indentation_or_headers():
    assert change_of(DIFF) == (OLD, NEW)


def test_a_mutant_names_its_function_or_its_method():
    assert function_of("gpufill.adapters.aws.x__transient__mutmut_4") == "gpufill.adapters.aws._transient"
    assert function_of("gpufill.adapters.instances_table.xǁHoldingsǁadd__mutmut_25") == "gpufill.adapters.instances_table.Holdings.add"
    assert Entry("gpufill.adapters.instances_table.Holdings.add", (OLD,), "r").module == "gpufill.adapters.instances_table"
    assert Entry("gpufill.adapters.aws._transient", (OLD,), "r").module == "gpufill.adapters.aws"


def _results(**statuses):
    return {"gpufill.adapters.aws": {f"gpufill.adapters.aws.x__transient__mutmut_{n}": s for n, s in statuses.items()}}


def _changes(by_number):
    return lambda mutants: {m: by_number[int(m.rpartition("_")[2])] for m in mutants}


def test_an_entry_excuses_the_mutant_making_its_change_whatever_its_number():
    entry = Entry("gpufill.adapters.aws._transient", (OLD, NEW), "None and '' are both no code")
    for number in (4, 9):  # a line added above the mutated one renumbers it
        changes = {4: ("- a", "+ b"), 9: ("- a", "+ c")}
        changes[number] = (OLD, NEW)
        excused, stale = match([entry], _results(**{"4": "survived", "9": "survived"}), _changes(changes))
        assert excused == {f"gpufill.adapters.aws.x__transient__mutmut_{number}": entry} and stale == []


def test_a_stale_entry_fails_loudly_and_excuses_nothing():
    entry = Entry("gpufill.adapters.aws._transient", (OLD, NEW), "r")
    # The change is gone: the entry's survivor can no longer hide behind it, and it is named.
    excused, stale = match([entry], _results(**{"4": "survived"}), _changes({4: ("- a", "+ b")}))
    assert excused == {} and stale == [f"gpufill.adapters.aws._transient: {OLD} / {NEW}: no mutant makes this change any more"]
    # The tests kill it now.
    excused, stale = match([entry], _results(**{"4": "killed"}), _changes({4: (OLD, NEW)}))
    assert excused == {} and "killed by the tests now (gpufill.adapters.aws.x__transient__mutmut_4)" in stale[0]
    # The same change is made twice now (a line was copied): which one is meant must be said.
    excused, stale = match([entry], _results(**{"4": "survived", "7": "survived"}), _changes({4: (OLD, NEW), 7: (OLD, NEW)}))
    assert excused == {} and "2 mutants make this change, the entry says 1" in stale[0]


def test_of_two_identical_changes_an_entry_excuses_the_one_it_names_in_line_order():
    second = Entry("gpufill.adapters.aws._transient", (OLD, NEW), "r", occurrence=2, of=2)
    results = _results(**{"12": "survived", "30": "killed"})
    excused, stale = match([second], results, _changes({12: (OLD, NEW), 30: (OLD, NEW)}))
    assert excused == {} and "killed by the tests now (gpufill.adapters.aws.x__transient__mutmut_30)" in stale[0]
    first = Entry("gpufill.adapters.aws._transient", (OLD, NEW), "r", occurrence=1, of=2)
    excused, stale = match([first], results, _changes({12: (OLD, NEW), 30: (OLD, NEW)}))
    assert list(excused) == ["gpufill.adapters.aws.x__transient__mutmut_12"] and stale == []


def test_an_entry_whose_mutant_was_not_tested_in_this_run_is_neither_used_nor_judged():
    entry = Entry("gpufill.adapters.aws._transient", (OLD, NEW), "r")
    assert match([entry], _results(**{"4": "not checked"}), _changes({4: (OLD, NEW)})) == ({}, [])


def test_entries_of_modules_not_in_the_run_are_not_judged():
    entry = Entry("gpufill.policy.fill.halve", (OLD, NEW), "r")
    assert match([entry], _results(**{"4": "survived"}), _changes({4: ("- a", "+ b")})) == ({}, [])


def test_a_module_level_entry_is_named_by_its_text():
    name = 'gpufill.policy.errors:: "Unsupported" -> ""'
    entry = load([{"mutant": name, "reason": "r"}])[0]
    results = {"gpufill.policy.errors": {name: "survived"}}
    assert match([entry], results, _changes({})) == ({name: entry}, [])
    results = {"gpufill.policy.errors": {name: "killed"}}
    assert "killed by the tests now" in match([entry], results, _changes({}))[1][0]


def test_a_malformed_entry_is_refused_naming_what_is_wrong():
    with pytest.raises(ValueError, match="needs a reason"):
        load([{"function": "gpufill.a.f", "change": [OLD]}])
    with pytest.raises(ValueError, match="lines starting"):
        load([{"function": "gpufill.a.f", "change": ["code = 1"], "reason": "r"}])
    with pytest.raises(ValueError, match="occurrence must be between 1 and of"):
        load([{"function": "gpufill.a.f", "change": [OLD], "reason": "r", "occurrence": 3, "of": 2}])
    with pytest.raises(ValueError, match="listed twice: gpufill.a.f"):
        load([{"function": "gpufill.a.f", "change": [OLD], "reason": "r"}] * 2)


def test_the_committed_baseline_loads_and_writes_back_unchanged():
    raw = json.loads(BASELINE.read_text())
    assert dump(load(raw["equivalent"])) == raw["equivalent"]


def test_a_validator_and_a_property_are_staged_as_plain_functions_the_methods_call():
    source = '''from __future__ import annotations

from pydantic import BaseModel, ValidationInfo, field_validator


class Ask(BaseModel):
    count: int
    size: int = 1

    @field_validator("count")
    @classmethod
    def _positive(cls, value: int, info: ValidationInfo) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @classmethod
    def plain(cls) -> int:
        return 2

    @property
    def total(self) -> int:
        """count times size"""
        return self.count * self.size
'''
    staged = unwrap_methods(source)
    assert "        return _Ask_positive(cls, value, info)\n" in staged
    assert "\ndef _Ask_positive(cls, value: int, info: ValidationInfo) -> int:\n    if value < 1:\n" in staged
    assert "        return _Ask_total(self)\n" in staged and '\ndef _Ask_total(self) -> int:\n    """count' in staged
    assert "    def plain(cls) -> int:\n        return 2\n" in staged  # mutmut mutates a lone @classmethod itself
    namespace: dict = {}
    exec(compile(staged, "staged", "exec"), namespace)
    ask = namespace["Ask"]
    assert ask(count=3, size=2).total == 6
    with pytest.raises(ValueError, match="must be at least 1"):
        ask(count=0)


def test_no_tests_for_a_function_the_statistics_never_saw_asks_for_them_again(tmp_path, monkeypatch):
    import run

    (tmp_path / "mutants").mkdir()
    (tmp_path / "mutants" / "mutmut-stats.json").write_text(json.dumps({"function_hashes": {"gpufill.a.x_old": "h"}}))
    monkeypatch.setattr(run, "STAGING", tmp_path)
    monkeypatch.setattr(run, "mutmut_results", lambda: {"gpufill.a": {
        "gpufill.a.x_old__mutmut_1": "no tests",  # known and reached by no test: a real gap, reported as such
        "gpufill.a.x_new__mutmut_1": "no tests", "gpufill.a.x_new__mutmut_2": "killed",
        "gpufill.a.xǁAskǁtotal__mutmut_1": "no tests"}, "gpufill.b": {"gpufill.b.x_f__mutmut_1": "no tests"}})
    assert run.functions_without_stats(["gpufill.a"]) == {"gpufill.a.x_new", "gpufill.a.xǁAskǁtotal"}
