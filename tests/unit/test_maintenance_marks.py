"""A maintained request's refills stop while any teardown of it waits for its approval (or was
approved), whatever the order several teardowns are asked, rejected, left to expire or approved
in; each rejection, expiry or listing that asks nobody removes its own mark only, and the one that
leaves none starts the held refill again, unless its refill still runs: never two live refills for
one reclaimed instance. The marks live in moto's DynamoDB (adapters/run_store.py) and the
decision is RecordApprovalDecision's (restart_refills)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpufill.adapters import executions, run_store
from gpufill.handlers import record_approval_decision, refill_restarts
from gpufill.models.teardown import Teardown, TeardownTarget

TEARDOWNS = ("td-a", "td-b", "td-c")
MACHINE = "arn:aws:states:us-east-1:1:stateMachine:gpufill-dev"
OLD = "i-0123456789abcdef0"
_ids = itertools.count()

steps = st.lists(st.tuples(st.sampled_from(("ask", "reject", "expire", "approve", "asks-nobody", "refill-ends")),
                           st.sampled_from(TEARDOWNS)), max_size=14)


@pytest.fixture
def started(table, monkeypatch):
    """Every refill run started, and those still live (a refill waiting for capacity), kept across
    examples; Step Functions' DescribeExecution answers from them."""
    runs: dict[str, str] = {}  # name -> RUNNING | ENDED

    def start(name, body, machine):
        runs.setdefault(name, "RUNNING")
        return "arn"

    monkeypatch.setattr(executions, "start", start)
    monkeypatch.setattr(executions, "describe", lambda machine, name: {"status": runs[name]} if name in runs else None)
    return runs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps)
# A restarted refill still waits when a later teardown of the request is rejected.
@example([("ask", "td-a"), ("reject", "td-a"), ("ask", "td-b"), ("reject", "td-b")])
# The teardown another one deferred to is answered first: the listing that asks nobody removes the last mark.
@example([("ask", "td-a"), ("ask", "td-b"), ("reject", "td-a"), ("asks-nobody", "td-b")])
def test_refills_stay_stopped_exactly_while_a_teardown_waits_or_was_approved(started, plan):
    request_id = f"serve-{next(_ids)}"  # one request per example, in the one table
    run_store.save_request(request_id, {"count": 1, "maintain": True, "instance_types": ["g6.xlarge"]})
    run_store._table().put_item(Item={
        "instance_id": f"{OLD}-{request_id}", "request_id": request_id, "region": "us-east-1",
        "availability_zone": "us-east-1a", "instance_type": "g6.xlarge", "market": "spot", "maintain": True,
        "state": "interrupted", "refill_held_by": "td-a",
    })
    mine = f"{request_id}-refill-{OLD}-{request_id}"

    def live() -> list[str]:
        return [name for name, status in started.items() if name.startswith(mine) and status == "RUNNING"]

    state = {t: "never" for t in TEARDOWNS}  # never | waiting | approved | ended (rejected, expired, asked nobody)
    for move, teardown_id in plan:
        was = state[teardown_id]
        if move == "ask" and state[teardown_id] == "never":
            run_store.end_maintenance(request_id, by=teardown_id)  # FindTeardownInstances' mark
            state[teardown_id] = "waiting"
        elif move in ("reject", "expire", "asks-nobody") and state[teardown_id] in ("waiting", "ended"):
            if move == "asks-nobody":  # FindTeardownInstances' ending when another teardown already asks
                refill_restarts.give_back([request_id], by=teardown_id, state_machine=MACHINE)
            else:
                teardown = Teardown(request_id=teardown_id, status="AWAITING_APPROVAL", target=TeardownTarget(request_id=request_id))
                record_approval_decision.restart_refills(teardown, by=teardown_id, state_machine=MACHINE)
            state[teardown_id] = "ended"
        elif move == "approve" and state[teardown_id] == "waiting":
            state[teardown_id] = "approved"  # its mark stays: the request is being torn down
        elif move == "refill-ends" and live():
            started[live()[0]] = "ENDED"  # stopped by a mark at its next try, or failed, launching nothing
        else:
            continue
        stopping = any(s in ("waiting", "approved") for s in state.values())
        stopped = run_store.refills_stopped_by(request_id)
        assert (stopped is not None) == stopping, (move, teardown_id, state)
        assert stopped is None or state[stopped] in ("waiting", "approved")
        # Never two live refills for one reclaimed instance, whatever the order of the endings.
        assert len(live()) <= 1, (move, teardown_id, started)
        # The ending that removes the last mark has the refill running (a retried one changes nothing).
        if move in ("reject", "expire", "asks-nobody") and was == "waiting" and not stopping:
            assert len(live()) == 1, (move, teardown_id, state, started)
