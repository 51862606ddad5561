"""The lifetime of a run's launch template versions (policy/template_versions.py): which version a
fleet reuses, which ones the run's end deletes, and which steps end the run, read against the
state machine's own choices."""

import json
from pathlib import Path
from types import SimpleNamespace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpufill.models.run import Run, TemplateVersion, Waiting
from gpufill.policy import template_versions

ROOT = Path(__file__).resolve().parents[2]
STATES = json.loads((ROOT / "statemachine" / "provisioner.asl.json").read_text())["States"]
WEST = TemplateVersion(region="us-west-2", token="t1", template_id="lt-1", version="7")
EAST = TemplateVersion(region="us-east-1", token="t2", template_id="lt-2", version="3")
DEFAULT = TemplateVersion(region="us-west-2", token="t3", template_id="lt-1", version="1", default=True)
WAIT = Waiting(deadline="2030-01-01T00:00:00Z", deadline_epoch=1.9e9)


def run(**fields) -> Run:
    return Run(batch=1, remaining=fields.pop("remaining", 1), **fields)


def test_a_version_is_found_by_region_and_token_and_remembered_once():
    held = template_versions.remember(run(), WEST)
    assert template_versions.known(held, "us-west-2", "t1") == WEST
    assert template_versions.known(held, "us-east-1", "t1") is None and template_versions.known(held, "us-west-2", "t2") is None
    assert template_versions.remember(held, WEST).template_versions == [WEST]  # a retried read adds nothing
    assert template_versions.remember(held, None) == held
    assert template_versions.remember(held, EAST).template_versions == [WEST, EAST]


def test_the_end_deletes_every_version_but_a_default_one_by_region_and_forgets_them():
    held = run(template_versions=[WEST, EAST, DEFAULT])
    assert template_versions.to_delete(held) == {"us-west-2": [WEST], "us-east-1": [EAST]}
    assert template_versions.forget(held).template_versions == []


# --- which steps end the run: the same answer as the state machine's choices ---------------------


def _value(data: dict, path: str):
    node = data
    for part in path.removeprefix("$.").split("."):
        if not isinstance(node, dict) or part not in node:
            return KeyError
        node = node[part]
    return node


def _holds(rule: dict, data: dict) -> bool:
    """The few ASL choice operators WhereNext and WhatAfterThisMarket use."""
    if "And" in rule:
        return all(_holds(r, data) for r in rule["And"])
    if "Not" in rule:
        return not _holds(rule["Not"], data)
    value = _value(data, rule["Variable"])
    if "IsPresent" in rule:
        return (value is not KeyError) == rule["IsPresent"]
    if value is KeyError:
        return False
    if "IsNull" in rule:
        return (value is None) == rule["IsNull"]
    for op, test in [("StringEquals", lambda a, b: a == b), ("BooleanEquals", lambda a, b: a is b),
                     ("NumericEquals", lambda a, b: a == b), ("NumericGreaterThan", lambda a, b: a > b)]:
        if op in rule:
            return isinstance(value, type(rule[op])) and test(value, rule[op])
    raise AssertionError(f"operator not read by this test: {rule}")


def _chosen(state: str, data: dict) -> str:
    choice = STATES[state]
    return next((c["Next"] for c in choice["Choices"] if _holds(c, data)), choice["Default"])


def _ends_without_a_task(state: str) -> bool:
    return STATES[state]["Type"] == "Fail" or (STATES[state]["Type"] == "Pass" and STATES[state].get("End", False))


def _example(**fields):
    base = dict(move="exhausted", asked="spot", market="spot", scoring="price-capacity", all_or_nothing=False,
                waiting=False, reservations="open", block=False, launched=0, remaining=1)
    return example(**{**base, **fields})


@settings(max_examples=300, deadline=None)
# The orders that matter, whatever the examples drawn: a bought block tried again, no reservation
# room before a Capacity Block, a Capacity Block looked for once something was launched.
@_example(scoring="capacity-block", block=True)
@_example(scoring="capacity-block", block=True, remaining=0)
@_example(reservations="only", block=True)
@_example(reservations="only", block=True, launched=1)
@_example(block=True)
@_example(asked="spot-then-on-demand")
@given(
    move=st.sampled_from(["done", "launch", "prepare", "refresh", "rejected", "rollback", "not_placed",
                          "await_capacity", "stopped", "exhausted"]),
    asked=st.sampled_from(["spot", "on-demand", "spot-then-on-demand"]),
    market=st.sampled_from(["spot", "on-demand"]),
    scoring=st.sampled_from(["price-capacity", "capacity-block"]),
    all_or_nothing=st.booleans(),
    waiting=st.booleans(),
    reservations=st.sampled_from(["open", "none", "only"]),
    block=st.booleans(),
    launched=st.integers(0, 2),
    remaining=st.integers(0, 2),
)
def test_a_step_ends_the_run_exactly_when_the_state_machine_goes_on_to_an_ending_with_no_task(
    move, asked, market, scoring, all_or_nothing, waiting, reservations, block, launched, remaining
):
    held = run(next=move, launched=launched, remaining=remaining, wait=WAIT if waiting else None)
    request = SimpleNamespace(market=asked, all_or_nothing=all_or_nothing, capacity_reservations=reservations,
                              capacity_block={"duration_hours": 24} if block else None)
    data = {"run": held.model_dump(mode="json", exclude_none=True), "plan": {"market": market, "scoring": scoring},
            "request": {"market": asked, "all_or_nothing": all_or_nothing, "capacity_reservations": reservations,
                        **({"capacity_block": {"duration_hours": 24}} if block else {})}}
    after = _chosen("WhereNext", data)
    if after == "WhatAfterThisMarket":
        after = _chosen(after, data)
    assert template_versions.ends_after(held, request, market, scoring) == _ends_without_a_task(after), after
