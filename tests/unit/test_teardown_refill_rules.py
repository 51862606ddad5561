"""What a teardown of everything or of instance ids marks and lists so that no refill racing it
keeps a replacement (policy/teardown.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpufill.policy import teardown


def test_the_requests_recorded_are_those_named_on_records_and_maintained_ones_when_asked():
    records = {
        "i-1": {"request_id": "a", "maintain": True},
        "i-2": {"request_id": "b"},
        "i-3": {"request_id": "a", "maintain": False},
        "i-4": {"maintain": True},  # no request: nothing to mark
        "approval#t": "not a record",
    }
    assert teardown.requests_recorded(records) == ["a", "b"]
    assert teardown.requests_recorded(records, maintained_only=True) == ["a"]


def test_replacements_are_the_refills_of_the_named_instances_not_already_named():
    records = {"i-1": {"replaced_by": ["i-9", "i-2"]}, "i-2": {}, "i-3": {"replaced_by": ["i-8"]}}
    assert teardown.replacements(["i-1", "i-2"], records) == ["i-9"]
    assert teardown.replacements(["i-4"], records) == []


@given(st.dictionaries(st.sampled_from([f"i-{n}" for n in range(8)]),
                       st.fixed_dictionaries({"replaced_by": st.lists(st.sampled_from([f"i-{n}" for n in range(8)]))})),
       st.lists(st.sampled_from([f"i-{n}" for n in range(8)]), min_size=1))
def test_following_replacements_ends_with_every_replacement_named_once(records, named):
    named = list(dict.fromkeys(named))
    extra = teardown.replacements(named, records)
    while extra:
        assert not set(extra) & set(named) and extra == sorted(set(extra))
        named += extra
        extra = teardown.replacements(named, records)
    assert all(new in named for i in named for new in (records.get(i) or {}).get("replaced_by", []))
