"""FindTeardownInstances, ending without asking anybody: a teardown that defers to another pending
one gives its stop mark back through the decision's own code (handlers/refill_restarts.py), so when
the other was answered while it listed, the refill held back is started again, once."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpufill.adapters import approvals, clock, executions, inventory, run_store
from gpufill.handlers import find_teardown_instances
from gpufill.models.teardown import LiveInstance
from gpufill.policy import refill

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
MACHINE = "arn:aws:states:us-east-1:1:stateMachine:gpufill-dev"
OLD, KEPT = "i-0123456789abcdef0", "i-0fedcba9876543210"
PLACE = {"request_id": "serve-1", "region": "us-east-1", "availability_zone": "us-east-1a", "instance_type": "g6.xlarge",
         "market": "spot", "maintain": True}


class Context:
    function_name = "FindTeardownInstances"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:FindTeardownInstances"
    memory_limit_in_mb = 512
    aws_request_id = "req"
    log_group_name = "/aws/lambda/FindTeardownInstances"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@pytest.fixture
def listing(table, monkeypatch):
    """serve-1 keeps one instance (td-a, still pending when listed, asks about it) and lost one to a
    reclaim while td-a waited (its refill held by td-a); td-a was answered since, so no mark stands."""
    started: list[tuple] = []
    run_store.save_request("serve-1", {"count": 2, "maintain": True, "instance_types": ["g6.xlarge"]})
    records = {OLD: {"instance_id": OLD, **PLACE, "state": "interrupted", "refill_held_by": "td-a"},
               KEPT: {"instance_id": KEPT, **PLACE, "state": "running"}}
    for record in records.values():
        table.put_item(Item=record)
    live = {KEPT: LiveInstance(instance_id=KEPT, region="us-east-1", availability_zone="us-east-1a", instance_type="g6.xlarge",
                               state="running", tags={"gpufill:managed": "true", "gpufill:request-id": "serve-1",
                                                      "gpufill:deployment": "dev"})}
    monkeypatch.setenv("GPUFILL_DEPLOYMENT", "dev")
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(inventory, "gather", lambda **kw: inventory.Inventory(records=records, live=live, deployment="dev"))
    monkeypatch.setattr(approvals, "all_items", lambda pending_only: [
        {"execution_name": "td-a", "kind": "approval", "status": "PENDING", "instance_ids": [KEPT],
         "requested_at": "2026-12-04T11:00:00+00:00", "deadline": "2026-12-05T11:00:00+00:00", "task_token": "t"}])
    # A run started is running (a refill waits for capacity); a name never started has none.
    monkeypatch.setattr(executions, "describe", lambda machine, name: {"status": "RUNNING"} if name in [s[0] for s in started] else None)
    monkeypatch.setattr(executions, "start", lambda name, body, machine: started.append((name, machine, body["refill"]["replaces"])) or "arn")
    return started


def event(name: str) -> dict:
    request = {"request_id": name, "action": "teardown", "instance_types": [], "count": 1, "batch_max": 1, "launch_mode": "fleet",
               "market": "spot", "on_demand_strategy": "cost", "origin_region": "us-east-1", "regions": ["us-east-1"],
               "tags": {}, "target_request_id": "serve-1"}
    return {"request": request, "execution_arn": f"arn:aws:states:us-east-1:1:execution:gpufill-dev:{name}"}


def test_a_listing_that_asks_nobody_and_removes_the_last_mark_restarts_the_held_refill_once(listing):
    out = find_teardown_instances.handler(event("td-b"), Context())
    find_teardown_instances.handler(event("td-b"), Context())  # a retried step: the refill it started still runs
    name = refill.execution_name("serve-1", OLD, after="td-a")
    assert out["instances"] == [] and [r["reason"] for r in out["refused"]] == ["awaiting-approval", "gone"]
    assert listing == [(name, MACHINE, [OLD])]
    assert out["note"].endswith(f"request serve-1 is maintained again; refill(s) started again: {name}.")
    assert run_store.maintenance_stops("serve-1") == frozenset()


def test_a_listing_that_defers_while_the_other_teardown_still_marks_starts_nothing(listing):
    run_store.end_maintenance("serve-1", by="td-a")  # td-a still waits: its mark stands
    out = find_teardown_instances.handler(event("td-b"), Context())
    assert listing == [] and "maintained again" not in (out.get("note") or "")
    assert run_store.maintenance_stops("serve-1") == frozenset({"td-a"})
