"""handlers/refill_restarts.py: the one way a teardown's ending gives its stop mark back and starts
again the refills held, with at most one live refill run per reclaimed instance."""

from __future__ import annotations

import logging

import pytest
from botocore.exceptions import ClientError

from gpufill.adapters import executions, instances_table, run_store
from gpufill.handlers import refill_restarts
from gpufill.handlers.observability import metrics
from gpufill.policy import refill

MACHINE = "arn:aws:states:us-east-1:1:stateMachine:gpufill-dev"
STORED = {"count": 1, "maintain": True, "instance_types": ["g6.xlarge"]}
PLACE = {"request_id": "req-1", "region": "us-east-1", "availability_zone": "us-east-1a", "instance_type": "g6.xlarge",
         "market": "spot", "state": "interrupted"}
STOPPED = {**PLACE, "refill_run": "req-1-refill-i-1"}  # its refill was stopped by a mark
HELD = {**PLACE, "refill_held_by": "td-a"}  # its refill never started


@pytest.fixture
def world(monkeypatch):
    w = {"left": frozenset(), "stored": STORED, "records": {"i-1": STOPPED}, "status": {}, "claims": True, "calls": []}
    monkeypatch.setattr(run_store, "give_back_maintenance", lambda request_id, by: w["calls"].append(("give back", request_id, by)) or w["left"])
    monkeypatch.setattr(run_store, "load_request", lambda request_id: w["stored"])
    monkeypatch.setattr(instances_table, "request_holdings", lambda request_id: instances_table.Holdings(records=w["records"]))
    monkeypatch.setattr(executions, "describe",
                        lambda machine, name: {"status": w["status"][name]} if name in w["status"] else None)
    monkeypatch.setattr(instances_table, "mark_refill_restarted",
                        lambda instance_id, **kw: w["calls"].append(("claim", instance_id, kw)) or w["claims"])
    monkeypatch.setattr(executions, "start", lambda name, body, machine: w["calls"].append(("start", name, body, machine)) or "arn")
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: w["calls"].append(("metric", name, unit, value)))
    return w


def test_a_stopped_refill_is_started_again_under_a_name_that_follows_it(world, caplog):
    caplog.set_level(logging.INFO)
    world["status"] = {"req-1-refill-i-1": "SUCCEEDED"}
    outcome = refill_restarts.give_back(["req-1"], by="td-b", state_machine=MACHINE)
    name = refill.execution_name("req-1", "i-1", after="req-1-refill-i-1")
    body = refill.refill_input(STORED, request_id="req-1", instance_id="i-1", pool=refill.reclaimed_pool(STOPPED))
    assert world["calls"] == [
        ("give back", "req-1", "td-b"),
        ("claim", "i-1", {"refill_run": name, "was": "req-1-refill-i-1", "by": "td-b"}),
        ("start", name, body, MACHINE),
        ("metric", "RefillsRestarted", "Count", 1),
    ]
    assert outcome == {"req-1": [name]}
    assert [(r.message, r.runs) for r in caplog.records if r.message == "refills started again"] == [("refills started again", [name])]


def test_a_refill_held_back_is_started_after_the_teardown_that_held_it(world):
    world["records"] = {"i-1": HELD}
    outcome = refill_restarts.give_back(["req-1"], by="td-b", state_machine=MACHINE)
    name = refill.execution_name("req-1", "i-1", after="td-a")
    assert ("claim", "i-1", {"refill_run": name, "was": None, "by": "td-b"}) in world["calls"]
    assert outcome == {"req-1": [name]}


def test_a_refill_that_still_runs_goes_on_and_nothing_else_starts(world):
    world["status"] = {"req-1-refill-i-1": "RUNNING"}
    assert refill_restarts.give_back(["req-1"], by="td-b", state_machine=MACHINE) == {"req-1": []}
    assert world["calls"] == [("give back", "req-1", "td-b")]


def test_a_restart_another_ending_claimed_first_starts_nothing(world):
    world["claims"] = False
    assert refill_restarts.give_back(["req-1"], by="td-b", state_machine=MACHINE) == {"req-1": []}
    assert [c[0] for c in world["calls"]] == ["give back", "claim"]


def test_marks_left_or_none_held_start_nothing_and_say_which(world):
    world["left"] = frozenset({"td-c", "td-a"})
    assert refill_restarts.give_back(["req-1"], by="td-b", state_machine=MACHINE) == {"req-1": "td-a, td-c"}
    world["left"] = None
    assert refill_restarts.give_back(["req-1"], by="td-b", state_machine=MACHINE) == {}
    world["left"], world["stored"] = frozenset(), None  # a request no longer kept
    assert refill_restarts.give_back(["req-1"], by="td-b", state_machine=MACHINE) == {"req-1": []}
    assert not [c for c in world["calls"] if c[0] in ("claim", "start", "metric")]


@pytest.mark.parametrize("error", [
    ClientError({"Error": {"Code": "ExecutionLimitExceeded", "Message": "full"}}, "StartExecution"),
    executions.ExecutionNameTaken("taken"),
])
def test_a_refill_not_started_is_counted_and_the_next_request_still_gets_its_own(world, monkeypatch, caplog, error):
    def start(name, body, machine):
        if "req-1" in name:
            raise error
        world["calls"].append(("start", name))
        return "arn"

    monkeypatch.setattr(executions, "start", start)
    world["records"] = {"i-1": HELD}
    outcome = refill_restarts.give_back(["req-1", "req-2"], by="td-b", state_machine=MACHINE)
    assert outcome == {"req-1": [], "req-2": [refill.execution_name("req-2", "i-1", after="td-a")]}
    assert ("metric", "RefillsNotRestarted", "Count", 1) in world["calls"]
    assert ("metric", "RefillsRestarted", "Count", 1) in world["calls"]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert (warning.message, warning.request) == ("refill not started again", "req-1") and str(error) in warning.error
