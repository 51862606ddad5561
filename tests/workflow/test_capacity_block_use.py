"""A bought Capacity Block is used for what it is and never silently lost (docs/capacity-blocks.md):
only the request that bought it launches into it, and at its start a capacity answer is tried again
until the block's end - 30 min; every end names the block."""

from datetime import timedelta

import pytest

from gpufill.adapters import clock
from gpufill.cli.render_summary import render_summary
from gpufill.local.reservations import SLOT_RELEASE_SECONDS
from tests.support.audit import assert_exactly_once, assert_purchases_approved
from tests.workflow.test_capacity_blocks import OHIO, P5, blocks_held, offer, request


def market(on_demand=0):
    return {"regions": {OHIO: {"zones": {f"{OHIO}a": {P5: {"spot": 0, "on_demand": on_demand}}}}},
            "capacity_blocks": [offer(OHIO, 1800, start_in_hours=1)]}


def test_a_block_bought_by_one_request_is_never_planned_as_a_reservation_by_another(local_account):
    with local_account(market(on_demand=4)) as engine:
        bought = engine.run(request(regions=[OHIO]), name="cb-owner", decision="approved")
        [block] = blocks_held(engine).values()
        # The owner's user ends one of its instances: the block has room for one again.
        ended = bought.output["instances"][0]["instance_id"]
        engine.client("ec2", OHIO).terminate_instances(InstanceIds=[ended])
        engine.advance(SLOT_RELEASE_SECONDS)  # EC2 cleans the instance up before its slot is back
        later = {mode: engine.run({"instance_type": P5, "count": 1, "regions": [OHIO], "market": "on-demand",
                                   "launch_mode": mode, "ready_timeout": "PT0S"}, name=f"cb-other-{mode}")
                 for mode in ("partial", "fleet")}
        room = block.available()
        for mode, execution in later.items():
            assert execution.status == "SUCCEEDED", (mode, execution.error, execution.cause)
            [instance] = execution.output["instances"]
            # On-Demand capacity, not the other request's paid block (nor LAUNCH_REJECTED by EC2).
            assert instance.get("capacity_reservation_id") is None, (mode, instance)
            assert_exactly_once(engine, execution, launched=1, regions=(OHIO,))
        assert room == 1
        assert assert_purchases_approved(engine) == [block.offering_id]


def test_a_block_that_turns_active_late_is_launched_into_after_backoff_not_given_up(local_account):
    with local_account(market()) as engine:
        engine.faults.block_late(minutes=10)
        execution = engine.run(request(regions=[OHIO]), name="cb-late", decision="approved")
        [block] = blocks_held(engine).values()
        late = engine.faults.injected["capacity-block:late"]
        assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
        result = execution.output
        assert result["status"] == "FULFILLED" and late >= 1
        assert {i["capacity_reservation_id"] for i in result["instances"]} == {block.id}
        # Tried again after a Wait state (durable), not by sleeping in a function.
        entered = execution.entered()
        assert entered.count("TryBlockAgain") == late and entered.count("PauseForBlock") == late
        shown = result["capacity_block"]
        assert (shown["capacity_reservation_id"], shown["upfront_fee"], shown["paid"]) == (block.id, 1800, True)
        assert_exactly_once(engine, execution, launched=2, regions=(OHIO,))
        assert assert_purchases_approved(engine) == [block.offering_id]


def test_a_run_that_fails_after_its_purchase_names_the_paid_block_in_its_cause_text_and_status(local_account):
    with local_account(market()) as engine:
        engine.faults.lambda_invoke("PlanBlockLaunch", error="Lambda.ServiceException", times=None)
        execution = engine.run(request(regions=[OHIO]), name="cb-failed", decision="approved")
        [block] = blocks_held(engine).values()
        waiting = engine.run({"action": "status", "request_id": "cb-failed"}, name="cb-failed-status").output["waiting"]
        assert execution.error == "PROVISIONING_FAILED", (execution.error, execution.cause)
        named = execution.cause["capacity_block"]  # what --json shows
        assert (named["capacity_reservation_id"], named["availability_zone"], named["upfront_fee"], named["paid"]) == (
            block.id, f"{OHIO}a", 1800, True)
        assert named["start"] == block.start.isoformat().replace("+00:00", "Z")
        text = render_summary(execution)  # what the text output shows
        assert f"Capacity Block {block.id}" in text and "$1,800.00 paid upfront, not refundable" in text
        assert "Nothing runs in it" in text
        # `gpufill status` no longer says the run launches into it at its start.
        assert waiting.startswith(f"held Capacity Block {block.id}") and "ended PROVISIONING_FAILED" in waiting
        assert "at its start" not in waiting
        assert_exactly_once(engine, execution, launched=0, regions=(OHIO,))
        assert assert_purchases_approved(engine) == [block.offering_id]


@pytest.mark.slow
def test_a_block_that_never_turns_active_is_tried_until_its_end_less_30_minutes_and_ends_unused_naming_it(local_account):
    with local_account(market()) as engine:
        engine.faults.block_late(minutes=48 * 60)  # never active in its 24 hours
        execution = engine.run(request(regions=[OHIO]), name="cb-unused", decision="approved")
        [block] = blocks_held(engine).values()
        waiting = engine.run({"action": "status", "request_id": "cb-unused"}, name="cb-unused-status").output["waiting"]
        assert execution.error == "CAPACITY_BLOCK_UNUSED", (execution.error, execution.cause)
        cause = execution.cause
        assert cause["capacity_block"]["capacity_reservation_id"] == block.id and cause["launched"] == 0
        # Tried from its start until 30 minutes before its end, 15 minutes apart at most.
        assert clock.now() >= block.end - timedelta(minutes=45)
        assert execution.entered().count("TryBlockAgain") == cause["tries"] > 24 * 4 - 10
        # One execution's history stays far under Step Functions' 25,000 events (measured: docs/capacity-blocks.md).
        assert len(execution.history) < 6000, len(execution.history)
        assert "ended CAPACITY_BLOCK_UNUSED with nothing launched into it" in waiting
        assert_exactly_once(engine, execution, launched=0, regions=(OHIO,))
        assert assert_purchases_approved(engine) == [block.offering_id]
