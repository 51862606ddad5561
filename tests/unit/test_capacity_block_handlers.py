"""The Capacity Block handlers' own work, with AWS replaced by recorders: which offerings each
region reports, which one is chosen and why the others are not, what the approval asks a person,
what is bought and remembered, and the pool the run launches into with its teardown asked an hour
before the block ends (handlers/describe_capacity_block_offerings.py, choose_capacity_block.py,
await_purchase_approval.py, purchase_capacity_block.py, plan_block_launch.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gpufill.adapters import approvals, capacity_blocks, clock, run_store, schedules
from gpufill.handlers import (
    await_purchase_approval,
    choose_capacity_block,
    describe_capacity_block_offerings,
    plan_block_launch,
    purchase_capacity_block,
)
from gpufill.handlers.observability import metrics
from gpufill.models.request import Request, normalise
from gpufill.models.run import Plan, RegionLaunch, Run
from gpufill.policy.capacity_blocks import Offering, shown

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
START = datetime(2026, 12, 5, 11, 30, tzinfo=UTC)
P5, OHIO, VIRGINIA = "p5.48xlarge", "us-east-2", "us-east-1"


class Context:
    function_name = "CapacityBlock"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:CapacityBlock"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/CapacityBlock"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def request(**fields):
    return normalise(Request(**{"instance_types": [P5], "count": 2, "regions": [OHIO, VIRGINIA], "market": "capacity-block",
                                "capacity_block": {"max_upfront_usd": 2000, "duration_hours": 24, "start_within": "P7D"},
                                **fields}),
                     request_id="cb-1", default_regions=[OHIO], home_region=VIRGINIA)


def offering(n: int, fee: float, *, region: str = OHIO, count: int = 2, start: datetime = START) -> Offering:
    return Offering(offering_id=f"cb-{n}", region=region, availability_zone=f"{region}a", instance_type=P5,
                    instance_count=count, start=start, end=start + timedelta(hours=24), duration_hours=24, upfront_fee=fee)


def logged(caplog, message: str):
    [record] = [r for r in caplog.records if r.getMessage() == message]
    return record


@pytest.fixture
def aws(monkeypatch, caplog):
    """What the handlers asked AWS and the table, in order."""
    done: list[tuple] = []
    caplog.set_level("INFO")
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, value)) or
                        done.append(("unit", unit)))
    monkeypatch.setattr(run_store, "save_wait", lambda rid, view: done.append(("wait", rid, view)))
    monkeypatch.setattr(run_store, "save_plan", lambda plan: done.append(("plan", plan)) or "plan-key")
    monkeypatch.setattr(run_store, "load_wait", lambda rid: None)  # no teardown asked while the run waited
    return done


# --- DescribeCapacityBlockOfferings: one region ---------------------------------------------------


def test_a_region_reports_its_offerings_of_a_block_for_what_is_missing_in_the_window(aws, monkeypatch, caplog):
    asked = []
    monkeypatch.setattr(capacity_blocks, "offerings", lambda *args: asked.append(args) or [offering(1, 1390)])
    event = {"region": OHIO, "request": request(count=8).model_dump(mode="json"), "launched": 6}
    out = describe_capacity_block_offerings.handler(event, Context())
    assert asked == [(OHIO, [P5], 2, 24, NOW, NOW + timedelta(days=7))]  # 2 missing: a block of 2
    assert out == {"region": OHIO, "offerings": [shown(offering(1, 1390))], "error": None}
    assert (logged(caplog, "capacity block offerings").region, logged(caplog, "capacity block offerings").count) == (OHIO, 1)


def test_a_region_that_cannot_answer_offers_nothing_and_says_why(aws, monkeypatch, caplog):
    def refuse(*args):
        raise capacity_blocks.RegionNotAnswering("UnauthorizedOperation: " + "x" * 400)

    monkeypatch.setattr(capacity_blocks, "offerings", refuse)
    out = describe_capacity_block_offerings.handler({"region": OHIO, "request": request().model_dump(mode="json")}, Context())
    assert out["offerings"] == [] and out["region"] == OHIO
    assert out["error"].startswith("UnauthorizedOperation: ") and len(out["error"]) == 300
    warned = logged(caplog, "capacity block offerings not read")
    assert warned.region == OHIO and warned.error == "UnauthorizedOperation: " + "x" * 400


def test_no_region_is_asked_when_no_block_is_large_enough(aws, monkeypatch):
    monkeypatch.setattr(capacity_blocks, "offerings", lambda *args: pytest.fail("asked EC2"))
    # The request's rules keep a block's count within 64; the handler still refuses to ask for more.
    event = {"region": OHIO, "request": request().model_copy(update={"count": 100}).model_dump(mode="json"), "launched": 10}
    out = describe_capacity_block_offerings.handler(event, Context())
    assert out == {"region": OHIO, "offerings": [], "error": "no Capacity Block is large enough for what is missing"}


# --- ChooseCapacityBlock ----------------------------------------------------------------------------


def choose(found: list[dict], *, launched: int = 0, **fields) -> dict:
    event = {"request": request().model_copy(update=fields).model_dump(mode="json"), "found": found, "launched": launched}
    return choose_capacity_block.handler(event, Context())


def test_the_cheapest_fitting_offering_across_the_regions_is_chosen_with_the_causes_of_a_no(aws, caplog):
    found = [{"region": OHIO, "offerings": [shown(offering(1, 1800))], "error": None},
             {"region": VIRGINIA, "offerings": [shown(offering(2, 1500, region=VIRGINIA)), shown(offering(3, 900, count=4))],
              "error": None}]
    out = choose(found)
    assert out["found"] is True and out["offering"] == shown(offering(2, 1500, region=VIRGINIA))
    assert out["start"] == "2026-12-05T11:30:00Z" and out["offered"] == 3
    rejected, expired = json.loads(out["rejected_cause"]), json.loads(out["expired_cause"])
    assert (rejected["error"], expired["error"]) == ("PURCHASE_REJECTED", "PURCHASE_EXPIRED")
    assert expired["request_id"] == "cb-1" and expired["proposed"] == out["offering"]
    assert rejected["proposed"]["upfront_fee"] == 1500 and rejected["request_id"] == "cb-1"
    assert ("metric", "CapacityBlocksChosen", 1) in aws and ("unit", "Count") in aws
    assert (logged(caplog, "capacity block chosen").block, logged(caplog, "capacity block chosen").offered) == (out["offering"], 3)


def test_nothing_fitting_ends_no_capacity_block_naming_each_offer_and_each_region_that_did_not_answer(aws, caplog):
    found = [{"region": OHIO, "offerings": [shown(offering(1, 2500))], "error": None},
             {"region": VIRGINIA, "error": "UnauthorizedOperation: no"}]
    out = choose(found)
    cause = json.loads(out["cause"])
    assert out["found"] is False and cause["error"] == "NO_CAPACITY_BLOCK" and cause["request_id"] == "cb-1"
    assert [o["why_not"] for o in cause["offered"]] == ["upfront fee $2,500.00 is above max_upfront_usd $2,000.00"]
    assert cause["regions_not_answering"] == {VIRGINIA: "UnauthorizedOperation: no"}
    assert not any(d[0] == "metric" for d in aws)
    assert logged(caplog, "no capacity block fits").offered == 1


def test_a_partly_filled_run_chooses_a_block_of_what_it_still_misses(aws):
    found = [{"region": OHIO, "offerings": [shown(offering(1, 900, count=8)), shown(offering(2, 1500))], "error": None}]
    assert choose(found, count=8, launched=6)["offering"]["offering_id"] == "cb-2"
    assert choose(found, count=8)["offering"]["offering_id"] == "cb-1"


def test_more_missing_than_any_block_holds_ends_no_capacity_block_saying_so(aws):
    out = choose([], launched=10, count=100)
    assert out["found"] is False
    assert json.loads(out["cause"]) == {
        "error": "NO_CAPACITY_BLOCK",
        "message": "90 instances are missing; a Capacity Block holds at most 64. Nothing was bought.",
        "request_id": "cb-1", "offered": []}


# --- AwaitPurchaseApproval ------------------------------------------------------------------------


def test_the_purchase_is_asked_of_a_person_with_what_it_buys_until_its_deadline(aws, monkeypatch, caplog):
    recorded, published = [], []
    monkeypatch.setattr(approvals, "record_pending_purchase", lambda **fields: recorded.append(fields))
    monkeypatch.setattr(approvals, "publish", lambda subject, body: published.append((subject, body)) or "msg-1")
    arn = "arn:aws:states:us-east-1:1:execution:gpufill:cb-1"
    block = shown(offering(1, 1390))
    event = {"task_token": "tok", "execution_arn": arn, "execution_name": "cb-1", "entered_at": "2026-12-04T12:00:00.000Z",
             "approval_timeout_seconds": 3600, "request": request().model_dump(mode="json"), "block": {"offering": block}}
    out = await_purchase_approval.handler(event, Context())
    deadline = NOW + timedelta(hours=1)
    assert out == {"pending": True, "deadline": "2026-12-04T13:00:00+00:00", "message_id": "msg-1"}
    assert recorded == [{"execution_name": "cb-1", "execution_arn": arn, "task_token": "tok", "request_id": "cb-1",
                         "offering": block, "requested_at": NOW, "deadline": deadline}]
    [(subject, body)] = published
    assert subject == "gpufill: approve buying a Capacity Block $1,390 for cb-1"
    assert "upfront fee:    $1,390.00 USD" in body and f"gpufill approve {arn}" in body
    assert "This approval expires at 2026-12-04T13:00:00+00:00" in body
    assert ("metric", "PurchaseApprovalsRequested", 1) in aws and ("unit", "Count") in aws
    asked = logged(caplog, "purchase approval requested")
    assert (asked.offering, asked.deadline) == (block, "2026-12-04T13:00:00+00:00")


@pytest.mark.parametrize("noted", [True, False])
def test_a_purchase_the_topic_refuses_waits_all_the_same_and_its_item_says_nobody_was_told(aws, monkeypatch, caplog, noted):
    from botocore.exceptions import ClientError

    said = []
    monkeypatch.setattr(approvals, "record_pending_purchase", lambda **fields: None)

    def denied(subject, body):
        raise ClientError({"Error": {"Code": "AuthorizationError", "Message": "not allowed"}}, "Publish")

    monkeypatch.setattr(approvals, "publish", denied)
    monkeypatch.setattr(approvals, "record_notification", lambda name, **kw: said.append((name, kw)) or noted)
    caplog.set_level("WARNING")
    event = {"task_token": "tok", "execution_arn": "arn:aws:states:us-east-1:1:execution:gpufill:cb-1", "execution_name": "cb-1",
             "entered_at": "2026-12-04T12:00:00.000Z", "approval_timeout_seconds": 3600,
             "request": request().model_dump(mode="json"), "block": {"offering": shown(offering(1, 1390))}}
    out = await_purchase_approval.handler(event, Context())
    assert out == {"pending": True, "deadline": "2026-12-04T13:00:00+00:00", "message_id": None}
    [(name, kw)] = said
    assert name == "cb-1" and kw["sent"] is False and kw["at"] == NOW and kw["by"] == "approval request"
    assert kw["error"].startswith("AuthorizationError: ") and "not allowed" in kw["error"]
    [refusal] = [r for r in caplog.records if r.getMessage().startswith("approval request not published")]
    assert (refusal.execution, refusal.error) == ("cb-1", kw["error"])  # logged and counted for its alarm
    unmarked = [r for r in caplog.records if r.getMessage() == "approval item not marked unnotified"]
    assert len(unmarked) == (0 if noted else 1) and all(r.levelname == "WARNING" for r in unmarked)


# --- PurchaseCapacityBlock ------------------------------------------------------------------------


@pytest.mark.parametrize("bought_now", [True, False])
def test_the_approved_offering_is_bought_once_and_the_block_is_remembered_with_its_fee(aws, monkeypatch, bought_now, caplog):
    caplog.set_level("INFO")
    monkeypatch.setenv("GPUFILL_DEPLOYMENT", "prod")
    calls = []
    reservation = {"CapacityReservationId": "cr-1", "AvailabilityZone": "us-east-2b"}
    monkeypatch.setattr(capacity_blocks, "purchase_once",
                        lambda *args, **kwargs: calls.append((args, kwargs)) or (reservation, bought_now))
    block = shown(offering(1, 1390.5))
    out = purchase_capacity_block.handler({"request": request().model_dump(mode="json"), "block": {"offering": block}}, Context())
    assert calls == [((OHIO, "cb-1"), {"deployment": "prod", "request_id": "cb-1"})]
    held = {"capacity_reservation_id": "cr-1", "region": OHIO, "availability_zone": "us-east-2b", "instance_type": P5,
            "instance_count": 2, "start": "2026-12-05T11:30:00Z", "end": "2026-12-06T11:30:00Z"}
    # The launch waits a minute past the start, so a block still "scheduled" a second late is never met.
    assert out == {**held, "upfront_fee": 1390.5, "launch_at": "2026-12-05T11:31:00Z", "payment": "paid"}
    assert ("wait", "cb-1", {"phase": "capacity-block", "execution": "cb-1", **held, "upfront_fee": 1390.5}) in aws
    assert (("metric", "CapacityBlocksBought", 1) in aws) is bought_now
    assert [d for d in aws if d[0] == "unit"] == ([("unit", "Count")] if bought_now else [])
    [logged] = [r for r in caplog.records if r.getMessage() == "capacity block held"]
    assert (logged.reservation, logged.payment) == ("cr-1", "paid")


def test_a_block_without_its_zone_in_the_answer_is_in_the_offerings_zone(aws, monkeypatch):
    monkeypatch.setenv("GPUFILL_DEPLOYMENT", "prod")
    monkeypatch.setattr(capacity_blocks, "purchase_once", lambda *a, **k: ({"CapacityReservationId": "cr-1"}, True))
    block = shown(offering(1, 1390))
    out = purchase_capacity_block.handler({"request": request().model_dump(mode="json"), "block": {"offering": block}}, Context())
    assert out["availability_zone"] == "us-east-2a"


# --- PlanBlockLaunch ------------------------------------------------------------------------------


def held_block(**fields) -> dict:
    return {"capacity_reservation_id": "cr-1", "region": OHIO, "availability_zone": "us-east-2a", "instance_type": P5,
            "instance_count": 2, "start": "2026-12-05T11:30:00Z", "end": "2026-12-07T11:30:00Z", "upfront_fee": 2880.0,
            **fields}


def plan_launch(aws, req, run: Run, hours: int = 48, **fields) -> dict:
    event = {"request": req.model_dump(mode="json"), "run": run.model_dump(mode="json", exclude_none=True),
             "block": {"reservation": held_block(**fields), "offering": {"duration_hours": hours}}}
    return plan_block_launch.handler(event, Context())


def test_the_started_block_is_the_one_pool_launched_into_for_what_is_missing(aws, caplog):
    out = plan_launch(aws, request(count=4, market="spot-then-on-demand"), Run(batch=4, remaining=3, launched=1, next="exhausted",
                                                                             cause="earlier"))
    [(_, plan)] = [d for d in aws if d[0] == "plan"]
    assert isinstance(plan, Plan) and (plan.market, plan.scoring, plan.request_id) == ("on-demand", "capacity-block", "cb-1")
    [pool] = plan.pools
    assert (pool.region, pool.availability_zone, pool.instance_type, pool.market) == (OHIO, "us-east-2a", P5, "on-demand")
    assert (pool.capacity_reservation_id, pool.reserved, pool.capacity_block, pool.upfront_fee) == ("cr-1", 2, True, 2880.0)
    assert pool.price == 30.0  # $2,880 over 2 instances x 48 h: what an instance-hour of the block cost
    assert pool.note == "capacity block cr-1 until 2026-12-07T11:30:00Z"
    assert out["plan"] == {"request_id": "cb-1", "market": "on-demand", "scoring": "capacity-block", "key": "plan-key", "pools": 1,
                           "regions": [], "reservations": []}
    run = out["run"]
    assert (run["cursor"], run["next"], run["batch"], run["remaining"]) == (0, "prepare", 3, 3)
    assert run["capacity_block"] == held_block() and "cause" not in run and "launch" not in run
    assert run["blocked"] == [] and run["reserved_taken"] == {}
    launching = logged(caplog, "launching into the capacity block")
    assert (launching.pool, launching.missing) == (f"on-demand/{OHIO}/us-east-2a/{P5}/cr-1", 3)
    assert ("wait", "cb-1", {"phase": "capacity-block-in-use", "execution": "cb-1", "capacity_reservation_id": "cr-1",
                             "availability_zone": "us-east-2a", "start": "2026-12-05T11:30:00Z", "end": "2026-12-07T11:30:00Z",
                             "upfront_fee": 2880.0}) in aws


def test_what_the_fill_loop_held_before_is_started_afresh_in_the_block(aws):
    before = Run(batch=4, remaining=7, launched=1, next="exhausted", cursor=3, blocked=["us-east-1"], reserved_taken={"cr-x": 1},
                 launch=RegionLaunch(region=VIRGINIA, image_id="ami-1", root_volume_gib=200))
    out = plan_launch(aws, request(count=4, market="spot-then-on-demand"), before, hours=24, upfront_fee=1390.0)
    run = out["run"]
    assert (run["cursor"], run["remaining"], run["blocked"], run["reserved_taken"]) == (0, 3, [], {})
    assert "launch" not in run
    [(_, plan)] = [d for d in aws if d[0] == "plan"]
    assert plan.pools[0].price == 28.9583  # $1,390 over 2 instances x 24 h, to a hundredth of a cent
    assert json.loads(json.dumps(out)) == out  # the state's next input: JSON as it is


def test_the_batch_is_what_is_missing_within_batch_max_and_at_least_one(aws):
    wide = plan_launch(aws, request(count=64, batch_max=8), Run(batch=8, remaining=64, launched=0, next="exhausted"), hours=24)
    assert (wide["run"]["batch"], wide["run"]["remaining"]) == (8, 64)
    full = plan_launch(aws, request(count=2), Run(batch=2, remaining=0, launched=2, next="exhausted"), hours=24)
    assert (full["run"]["batch"], full["run"]["remaining"]) == (1, 0)


def test_a_block_shorter_than_an_hour_is_priced_as_an_hour(aws):
    plan_launch(aws, request(), Run(batch=2, remaining=2, launched=0, next="exhausted"), hours=0)
    [(_, plan)] = [d for d in aws if d[0] == "plan"]
    assert plan.pools[0].price == 1440.0


def test_the_teardown_is_asked_an_hour_before_the_block_ends_unless_the_lifetime_ends_sooner(aws):
    out = plan_launch(aws, request(), Run(batch=2, remaining=2, launched=0, next="exhausted"))
    assert out["request"]["expires_at"] == "2026-12-07T10:30:00+00:00"
    sooner = request().model_copy(update={"expires_at": "2026-12-06T00:00:00+00:00"})
    assert plan_launch(aws, sooner, Run(batch=2, remaining=2, launched=0, next="exhausted"))["request"]["expires_at"] == \
        "2026-12-06T00:00:00+00:00"
    later = request().model_copy(update={"expires_at": "2026-12-09T00:00:00Z"})
    assert plan_launch(aws, later, Run(batch=2, remaining=2, launched=0, next="exhausted"))["request"]["expires_at"] == \
        "2026-12-07T10:30:00+00:00"
    # A lifetime written in another zone is compared as the moment it is (10:00 UTC, before 10:30).
    paris = request().model_copy(update={"expires_at": "2026-12-07T11:00:00+01:00"})
    assert plan_launch(aws, paris, Run(batch=2, remaining=2, launched=0, next="exhausted"))["request"]["expires_at"] == \
        "2026-12-07T11:00:00+01:00"
    # The same moment either way: the lifetime's is kept as it was written.
    same = request().model_copy(update={"expires_at": "2026-12-07T10:30:00Z"})
    assert plan_launch(aws, same, Run(batch=2, remaining=2, launched=0, next="exhausted"))["request"]["expires_at"] == \
        "2026-12-07T10:30:00Z"


def test_a_block_end_without_a_zone_is_read_as_utc_whatever_the_machines_zone(aws, monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        run = Run(batch=2, remaining=2, launched=0, next="exhausted")
        naive = plan_launch(aws, request(), run, end="2026-12-07T11:30:00")
        assert naive["request"]["expires_at"] == "2026-12-07T10:30:00+00:00"
        later = request().model_copy(update={"expires_at": "2026-12-09T00:00:00Z"})
        assert plan_launch(aws, later, run, end="2026-12-07T11:30:00")["request"]["expires_at"] == "2026-12-07T10:30:00+00:00"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_teardown_asked_while_the_run_waited_launches_nothing_into_the_block_and_says_so(aws, monkeypatch, caplog):
    asked = []
    monkeypatch.setattr(run_store, "load_wait", lambda rid: asked.append(rid) or {"phase": "capacity-block-bought",
                                                                                   "stopped_by": "down-1"})
    out = plan_launch(aws, request(), Run(batch=2, remaining=2, launched=0, next="exhausted"))
    assert out == {"stopped_by": "down-1", "capacity_block": held_block()}
    assert asked == ["cb-1"]
    assert aws == [("wait", "cb-1", {"phase": "capacity-block-stopped", "execution": "cb-1", "capacity_reservation_id": "cr-1",
                                     "availability_zone": "us-east-2a", "start": "2026-12-05T11:30:00Z",
                                     "end": "2026-12-07T11:30:00Z", "upfront_fee": 2880.0})]
    assert logged(caplog, "launch into the capacity block stopped by a teardown").teardown == "down-1"


def test_a_wait_view_without_a_teardown_launches_into_the_block(aws, monkeypatch):
    monkeypatch.setattr(run_store, "load_wait", lambda rid: {"phase": "capacity-block-bought"})
    out = plan_launch(aws, request(), Run(batch=2, remaining=2, launched=0, next="exhausted"))
    assert out["run"]["next"] == "prepare" and [d[0] for d in aws] == ["plan", "wait"]


def test_instances_launched_before_the_block_move_the_lifetime_schedule_to_the_blocks_end(aws, monkeypatch, caplog):
    moved = []
    monkeypatch.setattr(schedules, "move_expiry", lambda *a: moved.append(a) or True)
    later = request().model_copy(update={"expires_at": "2026-12-09T00:00:00Z"})
    event = {"request": later.model_dump(mode="json"), "state_machine": "arn:aws:states:us-east-1:1:stateMachine:gpufill",
             "run": Run(batch=2, remaining=1, launched=1, next="exhausted").model_dump(mode="json", exclude_none=True),
             "block": {"reservation": held_block(), "offering": {"duration_hours": 48}}}
    out = plan_block_launch.handler(event, Context())
    assert out["request"]["expires_at"] == "2026-12-07T10:30:00+00:00"
    assert moved == [("cb-1", "2026-12-07T10:30:00+00:00", "arn:aws:states:us-east-1:1:stateMachine:gpufill")]
    record = logged(caplog, "lifetime moved to the block's end")
    assert (record.expires_at, record.moved) == ("2026-12-07T10:30:00+00:00", True)


def test_the_lifetime_schedule_stays_without_earlier_launches_a_lifetime_or_a_later_block_end(aws, monkeypatch):
    moved = []
    monkeypatch.setattr(schedules, "move_expiry", lambda *a: moved.append(a) or True)
    later = request().model_copy(update={"expires_at": "2026-12-09T00:00:00Z"})
    sooner = request().model_copy(update={"expires_at": "2026-12-06T00:00:00Z"})
    plan_launch(aws, later, Run(batch=2, remaining=2, launched=0, next="exhausted"))  # the block's launches do not move it
    plan_launch(aws, request(), Run(batch=2, remaining=1, launched=1, next="exhausted"))  # no lifetime, no schedule
    plan_launch(aws, sooner, Run(batch=2, remaining=1, launched=1, next="exhausted"))  # the lifetime ends first
    assert moved == []


def test_a_block_of_hours_and_minutes_is_priced_over_both(aws):
    # EC2 sells blocks ending at 11:30 UTC: 23 h 30 min (CapacityBlockDurationMinutes) for $2,350 over 2 instances.
    event = {"request": request().model_dump(mode="json"),
             "run": Run(batch=2, remaining=2, launched=0, next="exhausted").model_dump(mode="json", exclude_none=True),
             "block": {"reservation": held_block(upfront_fee=2350.0),
                       "offering": {"duration_hours": 23, "duration_minutes": 30}}}
    plan_block_launch.handler(event, Context())
    [(_, plan)] = [d for d in aws if d[0] == "plan"]
    assert plan.pools[0].price == 50.0
