"""The sweep on the real stack (local engine): its schedule runs every 15 modelled minutes as the
deployment's Scheduler role, finds an instance launched outside gpufill with the deployment's
tag, notifies once, asks for one teardown behind the approval, and terminates nothing itself.
Likewise for a request past its max_lifetime and a Capacity Block about to end, each with its own
teardown rejected: one notification, one ask, nothing ended before the answer, nothing repeated."""

from __future__ import annotations

import json

from gpufill.adapters import clock
from gpufill.constants import SWEEP_GRACE_SECONDS, function_name
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.workflow import test_capacity_blocks as blocks
from tests.workflow.planting import MARKET, WEST, launch, states

MINUTES = 60
HOUR = 60 * MINUTES


def test_an_untracked_instance_is_found_notified_once_and_ended_only_after_an_approval():
    with LocalEngine(MarketScenario.model_validate(MARKET), sweep=True) as engine:
        [stray] = launch(engine, WEST, request_id="by-hand", record=False)
        engine.advance(31 * MINUTES)  # two passes: the first may see it inside its 15 minutes of grace
        asks = [name for name in engine.executions() if name.startswith("sweep-teardown-by-hand-")]
        assert len(asks) == 1, engine.schedule_runs
        [ask] = asks
        engine.wait_for_approval(ask)
        assert states(engine, WEST, [stray]) == {stray: "running"}
        found = [m for m in engine.approval_messages() if "sweep: untracked" in (m["subject"] or "")]
        assert len(found) == 1 and stray in found[0]["message"] and f"gpufill approve {ask}" in found[0]["message"]

        engine.advance(30 * MINUTES)  # two more passes repeat nothing
        assert [n for n in engine.executions() if n.startswith("sweep-")] == [ask]
        assert len([m for m in engine.approval_messages() if "sweep: untracked" in (m["subject"] or "")]) == 1
        runs = [r for r in engine.schedule_runs if r["schedule"] == "gpufill-local-sweep"]
        assert len(runs) >= 4 and not [r for r in runs if r.get("error")], runs  # one at creation, then every 15

        engine.answer_approval(ask, "approved", approver="ana")
        teardown = engine.follow(ask)
        assert teardown.output["status"] == "TERMINATED", teardown.cause
        assert states(engine, WEST, [stray]) == {stray: "terminated"}


def sweep_pass(engine) -> dict:
    """One pass of the deployed Sweep function, invoked as its schedule invokes it. The engine of a
    Capacity Block runs without the schedule: a block lasts a day or more, and a pass every 15
    modelled minutes across it would cost the suite a hundred passes for nothing."""
    reply = engine.client("lambda").invoke(FunctionName=function_name("local", "Sweep"), Payload=b"{}")
    assert "FunctionError" not in reply, reply["Payload"].read()
    return json.loads(reply["Payload"].read())


def test_a_block_ending_with_its_teardown_rejected_is_notified_once_and_asked_for_once(local_account):
    with local_account(blocks.market(blocks.offer(blocks.OHIO, 1800, start_in_hours=1))) as engine:
        execution = engine.run(blocks.request(), name="cb-sweep", decision="approved")
        [block] = blocks.blocks_held(engine).values()
        ids = sorted(i["instance_id"] for i in execution.output["instances"])
        engine.advance((block.end - clock.now()).total_seconds() - 3600 + 60)
        engine.wait_for_approval("cb-sweep-expired")  # the request's own teardown, an hour before the end
        assert sweep_pass(engine)["found"]["block-ending"] == 0  # it is pending: nothing to find
        engine.answer_approval("cb-sweep-expired", "rejected", approver="ana")
        engine.follow("cb-sweep-expired")

        first = sweep_pass(engine)
        [ask] = first["teardowns_asked"]
        assert first["found"]["block-ending"] == 2 and ask.startswith("sweep-teardown-cb-sweep-"), first
        engine.wait_for_approval(ask)
        [told] = [m for m in engine.approval_messages() if "sweep: block-ending" in (m["subject"] or "")]
        assert block.id in told["message"] and "upfront fee 1800 USD" in told["message"]
        assert f"gpufill approve {ask}" in told["message"]
        assert set(states(engine, blocks.OHIO, ids).values()) == {"running"}  # nothing ends before the answer

        again = sweep_pass(engine)  # a second pass: the ask waits for its answer, nothing repeats
        assert again["found"]["block-ending"] == 0 and again["teardowns_asked"] == []
        assert [n for n in engine.executions() if n.startswith("sweep-")] == [ask]
        assert len([m for m in engine.approval_messages() if "sweep: block-ending" in (m["subject"] or "")]) == 1

        engine.answer_approval(ask, "approved", approver="ana")
        assert engine.follow(ask).output["status"] == "TERMINATED"
        assert set(states(engine, blocks.OHIO, ids).values()) <= {"shutting-down", "terminated"}


def test_an_expired_request_whose_teardown_was_rejected_is_notified_once_and_asked_for_once(local_account):
    with local_account(MARKET) as engine:
        execution = engine.run({"regions": [WEST], "count": 2, "ready_timeout": "PT0S", "max_lifetime": "PT1H"}, name="old")
        ids = sorted(i["instance_id"] for i in execution.output["instances"])
        # The run ended with its instances: its time to fill is on the dashboard's metric.
        filled = [d["TimeToFillSeconds"] for d in engine.embedded_metrics.documents if "TimeToFillSeconds" in d]
        [seconds] = [v for value in filled for v in (value if isinstance(value, list) else [value])]  # EMF may list values
        assert 0 < seconds < HOUR, filled
        engine.advance(HOUR + MINUTES)
        engine.wait_for_approval("old-expired")  # the request's own teardown, behind the approval
        engine.answer_approval("old-expired", "rejected", approver="ana")
        engine.follow("old-expired")
        engine.advance(SWEEP_GRACE_SECONDS)

        first = sweep_pass(engine)
        [ask] = first["teardowns_asked"]
        assert first["found"]["expired"] == 2 and ask.startswith("sweep-teardown-old-"), first
        engine.wait_for_approval(ask)
        [told] = [m for m in engine.approval_messages() if "sweep: expired" in (m["subject"] or "")]
        assert "past its max_lifetime" in told["message"] and f"gpufill approve {ask}" in told["message"]
        assert set(states(engine, WEST, ids).values()) == {"running"}

        again = sweep_pass(engine)
        assert again["found"]["expired"] == 0 and again["teardowns_asked"] == []
        assert [n for n in engine.executions() if n.startswith("sweep-")] == [ask]
        assert len([m for m in engine.approval_messages() if "sweep: expired" in (m["subject"] or "")]) == 1

        engine.answer_approval(ask, "approved", approver="ana")
        assert engine.follow(ask).output["status"] == "TERMINATED"
        assert set(states(engine, WEST, ids).values()) == {"terminated"}
