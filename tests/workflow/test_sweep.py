"""The sweep on the real stack (local engine): its schedule runs every 15 modelled minutes as the
deployment's Scheduler role, finds an instance launched outside gpufill with the deployment's
tag, notifies once, asks for one teardown behind the approval, and terminates nothing itself."""

from __future__ import annotations

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.workflow.planting import MARKET, WEST, launch, states

MINUTES = 60


def test_an_untracked_instance_is_found_notified_once_and_ended_only_after_an_approval():
    with LocalEngine(MarketScenario.model_validate(MARKET), sweep=True) as engine:
        [stray] = launch(engine, WEST, request_id="by-hand", record=False)
        engine.advance(31 * MINUTES)  # two passes: the first may see it inside its 15 minutes of grace
        asks = [name for name in engine.executions() if name.startswith("sweep-untracked-by-hand-")]
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
