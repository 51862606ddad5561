"""Capacity Blocks for ML end to end on the local engine: the cheapest fitting block across regions,
bought only after a person approves, exactly once, waited for, launched into, and ended by EC2 at
the block's end (docs/capacity-blocks.md)."""

from datetime import timedelta

from gpufill.adapters import clock

import pytest

from gpufill.approve import ApprovalError

P5 = "p5.48xlarge"
OHIO, VIRGINIA = "us-east-2", "us-east-1"
BLOCK = {"max_upfront_usd": 2000, "duration_hours": 24, "start_within": "P7D"}


def zone_of(region):
    return {f"{region}a": {P5: {"spot": 0, "on_demand": 0}}}


def offer(region, fee, *, start_in_hours=3, count=2, hours=24):
    return {"zone": f"{region}a", "type": P5, "count": count, "start_in_hours": start_in_hours,
            "duration_hours": hours, "upfront_fee": fee}


def market(*offers):
    return {"regions": {OHIO: {"zones": zone_of(OHIO)}, VIRGINIA: {"zones": zone_of(VIRGINIA)}},
            "capacity_blocks": list(offers)}


def request(**fields):
    return {"instance_type": P5, "count": 2, "regions": [OHIO, VIRGINIA], "market": "capacity-block",
            "capacity_block": BLOCK, "ready_timeout": "PT0S", **fields}


def blocks_held(engine):
    return {b.id: b for b in engine.market.reservations.held.values() if getattr(b, "offering_id", None)}


def test_the_cheapest_fitting_block_across_regions_is_bought_after_approval_and_launched_into(local_account):
    with local_account(market(offer(OHIO, 1800, start_in_hours=2), offer(VIRGINIA, 1500, start_in_hours=5))) as engine:
        execution = engine.run(request(), name="cb-cheapest", decision="approved")
        held = blocks_held(engine)
        elapsed = engine.elapsed
    assert execution.status == "SUCCEEDED", execution.cause
    [block] = held.values()
    assert (block.region, block.upfront_fee) == (VIRGINIA, 1500)
    result = execution.output
    assert result["status"] == "FULFILLED"
    assert {(i["region"], i["capacity_reservation_id"]) for i in result["instances"]} == {(VIRGINIA, block.id)}
    assert {i["market"] for i in result["instances"]} == {"capacity-block"}  # neither spot nor On-Demand
    # It waited for the block's start (5 modelled hours), then launched once, into the block.
    assert elapsed >= 5 * 3600
    entered = execution.entered()
    assert entered.index("AwaitPurchaseApproval") < entered.index("PurchaseCapacityBlock") < entered.index("WaitForBlockStart")
    assert entered.count("PurchaseCapacityBlock") == 1
    assert block.tags["gpufill:request-id"] == "cb-cheapest" and block.tags["gpufill:deployment"] == "local"
    # The result says which block, where, and when it ends.
    shown = result["capacity_block"]
    assert (shown["capacity_reservation_id"], shown["availability_zone"], shown["upfront_fee"]) == (block.id, f"{VIRGINIA}a", 1500)
    assert shown["end"] == block.end.isoformat().replace("+00:00", "Z")
    # Its teardown is asked (behind the approval) an hour before the block ends.
    assert result["expires_at"] == (block.end - timedelta(hours=1)).isoformat()


def test_over_budget_ends_no_capacity_block_naming_every_offer_and_buys_nothing(local_account):
    with local_account(market(offer(OHIO, 2500), offer(VIRGINIA, 3100))) as engine:
        execution = engine.run(request(), name="cb-over-budget", decision="approved")
        bought = engine.market.blocks.purchases
    assert execution.error == "NO_CAPACITY_BLOCK"
    assert sorted(o["upfront_fee"] for o in execution.cause["offered"]) == [2500, 3100]
    assert all("above max_upfront_usd" in o["why_not"] for o in execution.cause["offered"])
    assert bought == [] and "AwaitPurchaseApproval" not in execution.entered()


@pytest.mark.parametrize(("decision", "error"), [("rejected", "PURCHASE_REJECTED"), ("timeout", "PURCHASE_EXPIRED")])
def test_a_rejected_or_unanswered_purchase_buys_nothing(local_account, decision, error):
    with local_account(market(offer(OHIO, 1800))) as engine:
        execution = engine.run(request(), name=f"cb-{decision}", decision=decision)
        bought = engine.market.blocks.purchases
        # Answering afterwards is refused and says what it left as it was.
        with pytest.raises(ApprovalError, match="already rejected" if decision == "rejected" else "nothing was bought"):
            engine.answer_approval(f"cb-{decision}", "approved")
    assert execution.error == error
    assert "nothing was bought" in execution.cause["message"] and execution.cause["proposed"]["upfront_fee"] == 1800
    assert bought == []


@pytest.mark.parametrize("fault", ["reply lost", "step retried"])
def test_a_purchase_whose_reply_is_lost_or_whose_step_is_retried_buys_one_block(local_account, fault):
    with local_account(market(offer(OHIO, 1800), offer(OHIO, 1900, start_in_hours=4))) as engine:
        if fault == "reply lost":
            engine.faults.aws("ec2", "PurchaseCapacityBlock", error="ReadTimeout", after=True)
        else:
            engine.faults.lambda_invoke("PurchaseCapacityBlock", after_handler=True)
        execution = engine.run(request(), name=f"cb-{fault.replace(' ', '-')}", decision="approved")
        bought = engine.market.blocks.purchases
        injected = engine.faults.injected
    assert injected, "the planned fault did not happen"
    assert execution.status == "SUCCEEDED", execution.cause
    assert len(bought) == 1
    assert execution.output["launched"] == 2


def test_a_teardown_is_asked_an_hour_before_the_block_ends_and_ec2_ends_its_instances_at_the_end(local_account):
    with local_account(market(offer(OHIO, 1800, start_in_hours=1))) as engine:
        execution = engine.run(request(), name="cb-ends", decision="approved")
        status = engine.run({"action": "status", "request_id": "cb-ends"}, name="cb-ends-status").output
        shown = status["waiting"]
        assert shown.startswith("runs in Capacity Block cr-") and "until " in shown
        # Recorded, listed and described by EC2 as what it is: a Capacity Block's instance, $0 an hour.
        assert {i["market"] for i in status["instances"]} == {"capacity-block"} and status["hourly_cost"] == 0
        lifecycles = {i.get("InstanceLifecycle") for r in engine.client("ec2", OHIO).describe_instances(
            InstanceIds=[i["instance_id"] for i in status["instances"]])["Reservations"] for i in r["Instances"]}
        assert lifecycles == {"capacity-block"}
        [block] = blocks_held(engine).values()
        ids = [i["instance_id"] for i in execution.output["instances"]]
        left = (block.end - clock.now()).total_seconds()
        engine.advance(left - 3600 + 60)  # an hour before the end: the request's teardown asks a person
        assert "cb-ends-expired" in engine.executions()
        engine.wait_for_approval("cb-ends-expired")
        engine.advance(3600)
        ec2 = engine.client("ec2", OHIO)
        states = {i["State"]["Name"] for r in ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]}
        described = ec2.describe_capacity_reservations(CapacityReservationIds=[block.id])["CapacityReservations"][0]
    assert states <= {"shutting-down", "terminated"}
    assert described["State"] == "expired"


def test_spot_and_on_demand_come_first_and_the_block_only_when_they_cannot_fill(local_account):
    with local_account(market(offer(OHIO, 1800))) as engine:
        execution = engine.run(request(market="spot-then-on-demand"), name="cb-after", decision="approved")
    entered = execution.entered()
    assert execution.status == "SUCCEEDED", execution.cause
    assert entered.index("RankOnDemandPools") < entered.index("FindCapacityBlocks")


def audited(engine, execution, request_id):
    """The exactly-once audit (tests/support/audit.py): what EC2 runs, what the records hold and
    what the run said agree; one purchase per approved purchase approval."""
    from tests.support.audit import live_instances, recorded_instances, reported_instances

    live = live_instances(request_id, regions=(OHIO, VIRGINIA))
    assert live == recorded_instances(request_id) == reported_instances(execution)
    asked = sum(e.entered().count("AwaitPurchaseApproval") for e in [*execution.continued_from, execution])
    assert len(engine.market.blocks.purchases) == asked == 1
    return live


def test_a_failed_payment_ends_purchase_failed_naming_the_block_with_nothing_launched(local_account):
    with local_account(market(offer(OHIO, 1800))) as engine:
        engine.faults.payment_failed(after_minutes=3)
        execution = engine.run(request(), name="cb-unpaid", decision="approved")
        live = audited(engine, execution, "cb-unpaid")
        [block] = blocks_held(engine).values()
        status = engine.run({"action": "status", "request_id": "cb-unpaid"}, name="cb-unpaid-status").output["waiting"]
    assert execution.error == "PURCHASE_FAILED" and live == set()
    held = execution.cause["capacity_block"]
    assert (held["capacity_reservation_id"], held["upfront_fee"], held["payment"]) == (block.id, 1800, "failed")
    assert block.id in execution.cause["message"] and "nothing was launched" in execution.cause["message"]
    # It waited out payment-pending (a look a minute) and never reached the block's start.
    entered = execution.entered()
    assert entered.count("CheckBlockPayment") >= 2 and "WaitForBlockStart" not in entered
    assert status.startswith(f"the payment for Capacity Block {block.id}")


def test_a_continued_wait_keeps_the_block_it_bought_and_launches_into_it(local_account, monkeypatch):
    # The launch into the block comes up short once: the wait hands over to a new execution at once.
    monkeypatch.setenv("WAIT_TRIES_PER_EXECUTION", "1")
    with local_account(market(offer(OHIO, 1800, start_in_hours=1))) as engine:
        engine.faults.aws("ec2", "RunInstances", error="InsufficientInstanceCapacity")
        execution = engine.run(request(wait_for_capacity={"deadline": "PT6H"}), name="cb-waits", decision="approved")
        live = audited(engine, execution, "cb-waits")
        [block] = blocks_held(engine).values()
    assert [e.output["status"] for e in execution.continued_from] == ["CONTINUED"]
    assert execution.status == "SUCCEEDED", execution.cause
    assert execution.output["status"] == "FULFILLED" and execution.output["capacity_block"]["capacity_reservation_id"] == block.id
    # The continued execution launched into the block it was handed, and bought nothing more.
    assert {i["capacity_reservation_id"] for i in execution.output["instances"]} == {block.id} and len(live) == 2
    assert "FindCapacityBlocks" not in execution.entered()


def test_a_teardown_asked_while_the_run_waits_for_its_block_stops_the_launch_into_it(local_account):
    # One Spot instance of two launches, a block of one is bought for the rest; while the run waits
    # for the block's start the request's teardown is asked and approved.
    one_spot = market(offer(OHIO, 900, count=1, start_in_hours=5))
    one_spot["regions"][OHIO]["zones"][f"{OHIO}a"][P5].update(spot=1, spot_price=12.5)
    torn: dict = {}

    def tear_down():
        torn.update(engine.run({"action": "teardown", "request_id": "cb-torn"}, name="cb-torn-down", decision="approved").output)

    with local_account(one_spot) as engine:
        engine.at(2 * 3600, tear_down)
        execution = engine.run(request(market="spot"), name="cb-torn", decision="approved")
        from tests.support.audit import live_instances, recorded_instances

        live, recorded = live_instances("cb-torn", regions=(OHIO, VIRGINIA)), recorded_instances("cb-torn")
        [block] = blocks_held(engine).values()
        bought = engine.market.blocks.purchases
        status = engine.run({"action": "status", "request_id": "cb-torn"}, name="cb-torn-status").output["waiting"]
    assert torn["status"] == "TERMINATED" and torn["instance_count"] == 1
    assert execution.status == "SUCCEEDED", execution.cause
    out = execution.output
    assert (out["status"], out["launched"]) == ("WAIT_ENDED", 1) and "teardown" in out["reason"]
    # Nothing launched into the block; the one Spot instance was the teardown's, and nothing runs.
    assert out["capacity_block"]["capacity_reservation_id"] == block.id and block.instances == []
    assert [i["instance_id"] for i in out["instances"]] == [i["instance_id"] for i in torn["instances"]]
    assert live == recorded == set() and len(bought) == 1
    assert execution.entered()[-3:] == ["PlanBlockLaunch", "IsBlockLaunchStopped", "BlockLaunchStoppedByTeardown"]
    assert status.startswith(f"the launch into Capacity Block {block.id} was stopped by teardown cb-torn-down")


def test_the_lifetime_schedule_made_before_the_block_moves_to_an_hour_before_the_block_ends(local_account):
    one_spot = market(offer(OHIO, 900, count=1, start_in_hours=1))
    one_spot["regions"][OHIO]["zones"][f"{OHIO}a"][P5].update(spot=1, spot_price=12.5)
    with local_account(one_spot) as engine:
        # The Spot instance makes the request's schedule for 20 days; the block ends within 3.
        execution = engine.run(request(market="spot", max_lifetime="P20D"), name="cb-life", decision="approved")
        [block] = blocks_held(engine).values()
        life = engine.client("scheduler", "us-east-1").get_schedule(GroupName="gpufill-local", Name="life-cb-life")
        live = audited(engine, execution, "cb-life")
    due = (block.end - timedelta(hours=1)).replace(tzinfo=None).isoformat(timespec="seconds")
    assert execution.output["status"] == "FULFILLED" and len(live) == 2
    assert life["ScheduleExpression"] == f"at({due})" and life["ActionAfterCompletion"] == "DELETE"
    assert execution.output["expires_at"] == (block.end - timedelta(hours=1)).isoformat()
