"""A bought Capacity Block is used for what it is and accounted for at every end
(policy/reservations.py, policy/block_use.py; docs/capacity-blocks.md)."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufill.adapters import clock, run_store
from gpufill.constants import BLOCK_MAX_TRIES
from gpufill.handlers import launch_batch, plan_block_launch, report_failure
from gpufill.handlers.events import FailureEvent
from gpufill.handlers.observability import metrics
from gpufill.models.run import Attempt, Run
from gpufill.models.request import Request, normalise
from gpufill.policy import block_use, waiting
from gpufill.policy.reservations import Reservation, plan
from gpufill.policy.result import fill_result

OHIO = "us-east-2"


def request(**fields):
    return normalise(
        Request(**{"count": 2, "instance_type": "p5.48xlarge", "regions": [OHIO], "market": "on-demand", **fields}),
        request_id="r", default_regions=[OHIO], home_region=OHIO,
    )


def test_a_capacity_block_is_never_planned_as_an_on_demand_capacity_reservation_even_when_named():
    block = Reservation(capacity_reservation_id="cr-0000000000000000b", region=OHIO, availability_zone=f"{OHIO}a",
                        instance_type="p5.48xlarge", available=2, match="targeted", for_deployment=True,
                        reservation_type="capacity-block")
    odcr = Reservation(capacity_reservation_id="cr-0000000000000000d", region=OHIO, availability_zone=f"{OHIO}a",
                       instance_type="p5.48xlarge", available=2, match="targeted", for_deployment=True)
    for named in ([], ["cr-0000000000000000b"]):
        seen = {s.capacity_reservation_id: s for s in plan([block, odcr], request(capacity_reservation_ids=named or None))}
        assert seen["cr-0000000000000000b"].planned == 0
        assert seen["cr-0000000000000000b"].why_not == "a Capacity Block: only the request that bought it launches into it"
        assert seen["cr-0000000000000000d"].planned == 2


# --- policy/block_use.py: tried until its end - 30 min, named at every end -------------------

START = datetime(2026, 12, 6, 11, 30, tzinfo=UTC)
HELD = {"capacity_reservation_id": "cr-0123456789abcdef0", "region": OHIO, "availability_zone": f"{OHIO}a",
        "instance_type": "p5.48xlarge", "instance_count": 2, "start": "2026-12-06T11:30:00Z",
        "end": "2026-12-07T11:30:00Z", "upfront_fee": 1390.0}


def held(days=1):
    return {**HELD, "end": (START + timedelta(days=days)).isoformat().replace("+00:00", "Z")}


def test_retries_back_off_from_a_minute_doubling_to_fifteen_minutes():
    assert [block_use.retry_delay(n, held()) for n in (1, 2, 3, 4, 5, 6, 40)] == [60, 120, 240, 480, 900, 900, 900]
    # A 182-day block: the longest delay is what spreads the try bound over the block's usable time.
    assert block_use.retry_delay(40, held(182)) == (182 * 86400 - 1800) // BLOCK_MAX_TRIES == 52410
    assert block_use.moment("2026-12-06T11:30:00") == block_use.moment("2026-12-06T11:30:00Z") == START
    assert block_use.moment("2026-12-06T13:30:00+02:00") == START


@given(days=st.sampled_from([1, 2, 7, 14, 21, 91, 182]), now_minutes=st.integers(0, 182 * 24 * 60), tries=st.integers(1, 400))
def test_no_try_comes_after_the_block_stops_being_usable_and_a_long_block_keeps_the_try_bound(days, now_minutes, tries):
    block = held(days)
    now = START + timedelta(minutes=now_minutes)
    delay = block_use.next_try(now, tries, block)
    if delay is not None:
        assert now + timedelta(seconds=delay) <= block_use.usable_until(block)
        assert tries < BLOCK_MAX_TRIES and delay >= 60
    # Even tried at its longest delay all along, the tries fit in the bound over the whole block.
    span = (block_use.usable_until(block) - START).total_seconds()
    assert span / block_use.retry_delay(BLOCK_MAX_TRIES, block) <= BLOCK_MAX_TRIES


def test_the_last_try_is_the_one_that_still_ends_before_ec2_starts_ending_the_blocks_instances():
    until = block_use.usable_until(held())
    assert until == START + timedelta(days=1, minutes=-30)
    assert block_use.next_try(until - timedelta(seconds=900), 10, held()) == 900
    assert block_use.next_try(until - timedelta(seconds=899), 10, held()) is None
    assert block_use.next_try(START, BLOCK_MAX_TRIES, held()) is None


def test_a_failure_after_the_purchase_names_the_block_in_its_message_and_as_a_field():
    cause = json.loads(block_use.with_block(json.dumps({"error": "X", "message": "A step failed."}), HELD, 0))
    assert cause["capacity_block"] == {**HELD, "paid": True}
    assert cause["message"] == (
        "A step failed. Capacity Block cr-0123456789abcdef0 (2 x p5.48xlarge in us-east-2a, 2026-12-06T11:30:00Z to "
        "2026-12-07T11:30:00Z): $1,390.00 paid upfront, not refundable. Nothing runs in it: it stays yours, unused, "
        "until 2026-12-07T11:00:00Z (launch into it with InstanceMarketOptions.MarketType capacity-block and its "
        "reservation id as the target)."
    )
    bare = json.loads(block_use.with_block("{}", {**HELD, "upfront_fee": None}, 0))
    assert bare["message"].startswith("Capacity Block cr-0123456789abcdef0 (2 x p5.48xlarge in us-east-2a, "
                                      "2026-12-06T11:30:00Z to 2026-12-07T11:30:00Z): paid upfront, not refundable.")
    kept = json.loads(block_use.with_block(json.dumps({"message": "m"}), HELD, 1))
    assert "1 instance(s) run in it; the rest of it stays unused until 2026-12-07T11:00:00Z." in kept["message"]


def test_an_unused_block_ends_with_its_own_error_naming_the_tries_and_ecs_last_answer():
    cause = json.loads(block_use.unused_cause("r", 2, HELD, 37, "ReservationCapacityExceeded"))
    assert (cause["error"], cause["request_id"], cause["requested"], cause["tries"], cause["launched"]) == (
        "CAPACITY_BLOCK_UNUSED", "r", 2, 37, 0)
    assert cause["capacity_block"]["paid"] is True
    unanswered = json.loads(block_use.unused_cause("r", 2, HELD, 1, None))
    assert unanswered["message"].startswith("The Capacity Block answered no room to 1 launch(es) from its start until EC2 "
                                            "begins ending its instances. Capacity Block cr-")
    assert "Nothing runs in it" in unanswered["message"]
    assert cause["message"].startswith("The Capacity Block answered no room to 37 launch(es) from its start until EC2 "
                                       "begins ending its instances (last answer: ReservationCapacityExceeded).")


def test_status_says_what_became_of_the_block_after_the_run_and_while_it_tries_again():
    ended = block_use.ended_view(HELD, execution="r", error="LAUNCH_REJECTED", launched=0)
    # next_try_at None: the item's earlier next try is removed, not left to be shown.
    assert ended == {"phase": "capacity-block-ended", "execution": "r", "error": "LAUNCH_REJECTED", "launched": 0,
                     "next_try_at": None, **{k: v for k, v in HELD.items() if k != "region"}}
    assert waiting.view_line(ended) == (
        "held Capacity Block cr-0123456789abcdef0 (2 x p5.48xlarge in us-east-2a) from 2026-12-06T11:30:00Z to "
        "2026-12-07T11:30:00Z, $1,390.00 paid; r ended LAUNCH_REJECTED with nothing launched into it")
    assert "with 1 instance(s) launched into it" in waiting.view_line({**ended, "launched": 1})
    assert "2026-12-07T11:30:00Z, paid; r ended" in waiting.view_line({**ended, "upfront_fee": None})
    trying = block_use.trying_view(HELD, execution="r", tries=2, next_try_at="2026-12-06T11:33:00Z", launched=1)
    assert waiting.view_line(trying) == (
        "holds Capacity Block cr-0123456789abcdef0 (us-east-2a) from 2026-12-06T11:30:00Z to 2026-12-07T11:30:00Z; "
        "EC2 answered no room to 2 launch(es) into it (1 running); r tries again at 2026-12-06T11:33:00Z, "
        "until 2026-12-07T11:00:00Z")
    assert "(0 running)" in waiting.view_line({k: v for k, v in trying.items() if k != "launched"})
    assert trying["upfront_fee"] == 1390.0  # the fee paid stays on the item while the block is tried again


# --- TryBlockAgain (handlers/plan_block_launch.py, phase "retry") ------------------------------


class Context:
    function_name = "PlanBlockLaunch"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:PlanBlockLaunch"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/PlanBlockLaunch"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 15_000


@pytest.fixture
def shown(monkeypatch):
    """What the handler wrote for `gpufill status`, and its metrics, at a fixed modelled time."""
    done: list[tuple] = []
    moment = {"now": START + timedelta(minutes=1)}
    monkeypatch.setattr(clock, "now", lambda: moment["now"])
    monkeypatch.setattr(run_store, "save_wait", lambda rid, view: done.append(("show", rid, view)))
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, value)))
    return done, moment


def again(tries: int, launched: int = 0) -> dict:
    run = Run(batch=2, remaining=2 - launched, launched=launched, next="exhausted", capacity_block=HELD,
              step_attempts=[Attempt(number=1, region=OHIO, availability_zone=f"{OHIO}a", instance_type="p5.48xlarge",
                                     market="on-demand", batch=2, launched=0, outcome="capacity",
                                     reason="ReservationCapacityExceeded")])
    block = {"reservation": HELD, "offering": {"duration_hours": 24}, **({"retry": {"tries": tries}} if tries else {})}
    return {"phase": "retry", "request": request().model_dump(mode="json"), "execution": "r",
            "run": run.model_dump(mode="json", exclude_none=True), "block": block}


def test_a_block_with_no_room_at_its_start_is_tried_again_after_a_minute_and_status_says_when(shown):
    done, _ = shown
    assert plan_block_launch.handler(again(0), Context()) == {"next": "retry", "tries": 1, "delay_seconds": 60}
    [(_, rid, view)] = done
    assert (rid, view["phase"], view["tries"], view["next_try_at"]) == ("r", "capacity-block-trying", 1, "2026-12-06T11:32:00Z")


def test_past_its_usable_time_the_block_ends_the_run_partial_or_unused_and_named(shown):
    done, moment = shown
    moment["now"] = START + timedelta(hours=23, minutes=50)
    assert plan_block_launch.handler(again(90, launched=1), Context()) == {"next": "partial", "tries": 91}
    assert done == []  # what runs in the block keeps its status line: it runs there until the end
    out = plan_block_launch.handler(again(90), Context())
    assert (out["next"], out["tries"]) == ("unused", 91)
    cause = json.loads(out["cause"])
    assert (cause["error"], cause["capacity_block"]["capacity_reservation_id"]) == ("CAPACITY_BLOCK_UNUSED", HELD["capacity_reservation_id"])
    assert "last answer: ReservationCapacityExceeded" in cause["message"]
    assert done[0][2]["phase"] == "capacity-block-ended" and done[0][2]["error"] == "CAPACITY_BLOCK_UNUSED"
    assert done[1] == ("metric", "CapacityBlocksUnused", 1)


# --- ReportFailure finds the block a failed run bought (handlers/report_failure.py) -----------


def test_a_failed_run_finds_its_block_on_the_run_or_in_the_status_item_its_purchase_wrote(monkeypatch):
    read: list[str] = []
    item = {"phase": "capacity-block", "execution": "r", **HELD}
    monkeypatch.setattr(run_store, "load_wait", lambda rid: read.append(rid) or item)
    blocked = request(market="capacity-block", capacity_block={"max_upfront_usd": 2000, "duration_hours": 24,
                                                                "start_within": "P7D"})

    def failure(req, run=None):
        return FailureEvent.model_validate({"request": req.model_dump(mode="json"), "failure": {"Error": "X"},
                                            "execution": "r"}), run

    assert report_failure._block_held(*failure(blocked, Run(batch=2, remaining=2, capacity_block=HELD))) == HELD
    assert read == []  # on the run: nothing read
    assert report_failure._block_held(*failure(blocked)) == item
    item["execution"] = "another-run"  # the request's item, written by another execution: not this run's block
    assert report_failure._block_held(*failure(blocked)) is None
    item.update(execution="r", phase="capacity-block-ended")
    assert report_failure._block_held(*failure(blocked)) is None
    read.clear()
    assert report_failure._block_held(*failure(request())) is None and read == []  # no capacity_block: no read


def test_a_launch_into_the_block_that_ec2_refuses_names_the_block_in_launch_rejected_and_in_status(monkeypatch):
    shown: list[tuple] = []
    monkeypatch.setattr(run_store, "save_attempts", lambda rid, attempts: None)
    monkeypatch.setattr(run_store, "save_wait", lambda rid, view: shown.append((rid, view)))
    refused = Attempt(number=1, region=OHIO, availability_zone=f"{OHIO}a", instance_type="p5.48xlarge", market="on-demand",
                      batch=2, launched=0, outcome="error", reason="InvalidParameterValue", note="bad AMI platform")
    run = Run(batch=2, remaining=2, next="rejected", capacity_block=HELD, step_attempts=[refused])
    cause = json.loads(launch_batch.finish_step(run, request(), "on-demand").cause)
    assert (cause["error"], cause["capacity_block"]["capacity_reservation_id"]) == ("LAUNCH_REJECTED", HELD["capacity_reservation_id"])
    assert "$1,390.00 paid upfront, not refundable" in cause["message"]
    [(rid, view)] = shown
    assert (rid, view["phase"], view["error"]) == ("r", "capacity-block-ended", "LAUNCH_REJECTED")
    # A rejection with no block bought says nothing of one and writes no status item.
    plain = json.loads(launch_batch.finish_step(run.model_copy(update={"capacity_block": None}), request(), "on-demand").cause)
    assert "capacity_block" not in plain and len(shown) == 1


def test_a_result_after_a_purchase_names_the_block_as_paid_and_one_without_says_nothing_of_one():
    run = Run(batch=2, remaining=0, launched=0, capacity_block={**HELD, "launch_at": "2026-12-06T11:31:00Z"})
    assert fill_result(request(), run, [], "FULFILLED")["capacity_block"] == {**HELD, "paid": True}
    assert "capacity_block" not in fill_result(request(), run.model_copy(update={"capacity_block": None}), [], "FULFILLED")


def test_every_end_names_the_block_and_who_approved_buying_it():
    from gpufill.policy.block_use import summary

    held = {"capacity_reservation_id": "cr-1", "region": "us-east-2", "availability_zone": "us-east-2a",
            "instance_type": "p5.48xlarge", "instance_count": 2, "start": "2026-12-06T11:30:00Z",
            "end": "2026-12-07T11:30:00Z", "upfront_fee": 1390.0, "launch_at": "2026-12-06T11:31:00Z", "payment": "paid"}
    assert summary(held) == {**{k: v for k, v in held.items() if k not in ("launch_at", "payment")}, "paid": True}
    approved = {"approved_by": "arn:aws:sts::123456789012:assumed-role/Approvers/bea", "approved_at": "2026-12-04T21:50:12Z",
                "approval_reason": "planned"}
    assert summary({**held, **approved}) == {**summary(held), **approved}
