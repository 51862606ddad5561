"""EC2's answers as EC2 gives them: capacity as a server error, a replayed fleet without its
instances, a fleet's Errors holding throttling and internal errors. Each run ends audited."""

import pytest

from tests.support import zone
from tests.support.audit import EAST, MARKET, REQUEST, WEST, assert_exactly_once

FLEET = {**REQUEST, "launch_mode": "fleet"}
# Oregon's first AZ sold out: EC2 answers InsufficientInstanceCapacity there, with HTTP 500.
SOLD_OUT_FIRST = {"regions": {
    **MARKET["regions"],
    WEST: {**MARKET["regions"][WEST], "zones": {
        "us-west-2a": zone(0.40, spot=0, on_demand=10), "us-west-2b": zone(0.42, spot=10, on_demand=10)}},
}}


@pytest.mark.parametrize("mode", ["partial", "exact"])
def test_a_sold_out_pool_is_one_attempt_read_as_capacity_and_the_run_goes_on(account, mode):
    with account(SOLD_OUT_FIRST) as engine:
        execution = engine.run({**REQUEST, "launch_mode": mode, "batch_max": 4}, name=f"sold-out-{mode}")
        seen = assert_exactly_once(engine, execution, launched=4)
    first, *rest = execution.output["attempts"]
    assert (first["availability_zone"], first["outcome"], first["reason"]) == (
        "us-west-2a", "capacity", "InsufficientInstanceCapacity")
    assert {i["availability_zone"] for i in execution.output["instances"]} == {"us-west-2b"}
    # exact asks the empty pool for 4, 2, then 1 (halving on capacity): one RunInstances each.
    asked_in_sold_out = 3 if mode == "exact" else 1
    assert execution.metrics["run_instances_calls"] == asked_in_sold_out + 1
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4


# --- fleets -----------------------------------------------------------------------------------


def test_a_fleet_launched_then_unreachable_is_found_by_its_token_not_launched_again(account):
    with account() as engine:
        # The first attempt launches and loses its reply; botocore's later attempts cannot connect.
        engine.faults.aws("ec2", "CreateFleet", error="ReadTimeout", after=True, region=WEST)
        engine.faults.aws("ec2", "CreateFleet", error="ConnectTimeout", region=WEST, times=5)
        execution = engine.run(FLEET, name="fleet-then-unreachable")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4
    assert {i["region"] for i in execution.output["instances"]} == {WEST}


def test_a_launch_then_unreachable_on_the_run_instances_path_is_found_by_its_token(account):
    with account() as engine:
        engine.faults.aws("ec2", "RunInstances", error="ReadTimeout", after=True, region=WEST)
        engine.faults.aws("ec2", "RunInstances", error="EndpointConnectionError", region=WEST, times=5)
        execution = engine.run(REQUEST, name="launch-then-unreachable")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4


def test_a_replay_answering_idempotent_parameter_mismatch_is_settled_by_the_token_tag(account):
    with account() as engine:
        # The first CreateFleet launches and every attempt loses its reply; the call sent again
        # to settle it, and the retried step's, answer IdempotentParameterMismatch.
        engine.faults.aws("ec2", "CreateFleet", error="ReadTimeout", after=True, region=WEST, times=6)
        engine.faults.aws("ec2", "CreateFleet", error="IdempotentParameterMismatch", region=WEST, times=3)
        execution = engine.run(FLEET, name="fleet-mismatch")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4


def test_a_replayed_fleet_is_read_back_by_describe_fleets(account):
    with account() as engine:
        # Every reply of the first call is lost; the step is retried and its call answers the
        # fleet id alone, as EC2 answers a token it has seen.
        engine.faults.aws("ec2", "CreateFleet", error="InternalError", after=True, region=WEST, times=12)
        execution = engine.run(FLEET, name="fleet-replayed")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4
    assert execution.metrics["create_fleet_calls"] >= 13


@pytest.mark.parametrize("error", ["RequestLimitExceeded", "InternalError"])
def test_a_fleet_answering_only_busy_errors_is_asked_again_never_read_as_exhausted(account, error):
    with account() as engine:
        engine.faults.fleet_errors(error, region=WEST)
        execution = engine.run(FLEET, name=f"fleet-busy-{error.lower()}")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4
    assert {i["region"] for i in execution.output["instances"]} == {WEST}
    busy = [a for a in execution.output["attempts"] if a["outcome"] == "throttled"]
    assert busy and all(a["reason"] == error for a in busy)
    assert not any(a["outcome"] == "capacity" for a in execution.output["attempts"])


def test_a_region_busy_on_every_fleet_is_left_for_the_next_one(account):
    with account() as engine:
        engine.faults.fleet_errors("RequestLimitExceeded", region=WEST, unnamed=True, times=None)
        execution = engine.run(FLEET, name="fleet-busy-region")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and {i["region"] for i in execution.output["instances"]} == {EAST}
    assert len(seen.in_ec2) == 4


def test_busy_answers_never_reach_the_capacity_cache_or_an_exhaustion_claim(account):
    only_west = {"regions": {WEST: MARKET["regions"][WEST]}}
    with account(only_west) as engine:
        engine.faults.fleet_errors("InternalError", region=WEST, times=None)
        execution = engine.run({**FLEET, "regions": [WEST]}, name="fleet-busy-only")
        seen = assert_exactly_once(engine, execution, launched=0)
        plan = engine.run({"count": 4, "regions": [WEST], "action": "plan"}, name="plan-after-busy").output
    assert not any("tried last" in (p.get("note") or "") for p in plan["pools"])  # nothing cached as full
    assert execution.error == "ALL_SPOT_EXHAUSTED"
    assert "did not answer for (InternalError)" in execution.cause["message"]
    assert {p["outcome"] for p in execution.cause["pools_tried"]} == {"throttled"}
    assert not seen.in_ec2


def test_a_token_ec2_holds_for_a_call_that_launched_nothing_is_replaced_by_a_fresh_one(account):
    with account() as engine:
        # The step's token is EC2's for an earlier call with other settings, and nothing carries it.
        engine.faults.aws("ec2", "CreateFleet", error="IdempotentParameterMismatch", region=WEST)
        execution = engine.run(FLEET, name="fleet-mismatch-empty")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4
    assert {i["region"] for i in execution.output["instances"]} == {WEST}
    spent = [a for a in execution.output["attempts"] if a.get("reason") == "IdempotentParameterMismatch"]
    assert spent and all(a["outcome"] == "throttled" and a["launched"] == 0 for a in spent)


def test_a_region_whose_every_token_is_refused_is_left_not_failed(account):
    with account() as engine:
        engine.faults.aws("ec2", "CreateFleet", error="IdempotentParameterMismatch", region=WEST, times=None)
        execution = engine.run(FLEET, name="fleet-mismatch-always")
        assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED"
    assert {i["region"] for i in execution.output["instances"]} == {EAST}
