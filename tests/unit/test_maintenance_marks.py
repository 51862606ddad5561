"""A maintained request's refills stop while any teardown of it waits for its approval (or was
approved), whatever the order several teardowns are asked, rejected, left to expire or approved
in; each rejection or expiry removes its own mark only, and the one that leaves none starts the
held refills again, once. The marks live in moto's DynamoDB (adapters/run_store.py) and the
decision is RecordApprovalDecision's (restart_refills)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufill.adapters import executions, run_store
from gpufill.handlers import record_approval_decision
from gpufill.models.teardown import Teardown, TeardownTarget

TEARDOWNS = ("td-a", "td-b", "td-c")
MACHINE = "arn:aws:states:us-east-1:1:stateMachine:gpufill-dev"
OLD = "i-0123456789abcdef0"
_ids = itertools.count()

steps = st.lists(st.tuples(st.sampled_from(("ask", "reject", "expire", "approve", "asks-nobody")), st.sampled_from(TEARDOWNS)),
                 max_size=14)


@pytest.fixture
def started(table, monkeypatch):
    runs: list[str] = []
    monkeypatch.setattr(executions, "start", lambda name, body, machine: runs.append(name) or "arn")
    return runs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps)
def test_refills_stay_stopped_exactly_while_a_teardown_waits_or_was_approved(started, plan):
    request_id = f"serve-{next(_ids)}"  # one request per example, in the one table
    run_store.save_request(request_id, {"count": 1, "maintain": True, "instance_types": ["g6.xlarge"]})
    run_store._table().put_item(Item={
        "instance_id": f"{OLD}-{request_id}", "request_id": request_id, "region": "us-east-1",
        "availability_zone": "us-east-1a", "instance_type": "g6.xlarge", "market": "spot", "maintain": True,
        "state": "interrupted", "refill_held_by": "td-a",
    })
    state = {t: "never" for t in TEARDOWNS}  # never | waiting | approved | ended (rejected or expired)
    released, first = 0, len(started)  # the list is the test's, kept across examples
    for move, teardown_id in plan:
        before = len(started)
        if move == "ask" and state[teardown_id] == "never":
            run_store.end_maintenance(request_id, by=teardown_id)  # FindTeardownInstances' mark
            state[teardown_id] = "waiting"
        elif move in ("reject", "expire", "asks-nobody") and state[teardown_id] in ("waiting", "ended"):
            stopping = any(s in ("waiting", "approved") for s in state.values())
            if move == "asks-nobody":
                run_store.give_back_maintenance(request_id, by=teardown_id)
            else:
                teardown = Teardown(request_id=teardown_id, status="AWAITING_APPROVAL", target=TeardownTarget(request_id=request_id))
                record_approval_decision.restart_refills(teardown, by=teardown_id, state_machine=MACHINE)
            state[teardown_id] = "ended"
            if move != "asks-nobody" and stopping and not any(s in ("waiting", "approved") for s in state.values()):
                released += 1
        elif move == "approve" and state[teardown_id] == "waiting":
            state[teardown_id] = "approved"  # its mark stays: the request is being torn down
        else:
            continue
        stopped = run_store.refills_stopped_by(request_id)
        assert (stopped is not None) == any(s in ("waiting", "approved") for s in state.values()), (move, teardown_id, state)
        assert stopped is None or state[stopped] in ("waiting", "approved")
        # A decision starts the held refill only when it leaves no teardown stopping the request.
        assert len(started) - before in (0, 1)
        assert len(started) - first == released, (move, teardown_id, state)
