"""Fleet launches under faults: a lost CreateFleet reply, a launch step killed before its records."""

import pytest

from tests.support.audit import EAST, REQUEST, WEST, assert_exactly_once

FLEET = {**REQUEST, "launch_mode": "fleet"}


# A lost reply and a 5xx take the same settle-by-token path (both pinned for CreateFleet in
# tests/unit/test_fleet_calls.py); the 5xx runs in `make test-all`.
@pytest.mark.parametrize("error", ["ReadTimeout", pytest.param("InternalError", marks=pytest.mark.slow)])
def test_a_fleet_whose_reply_was_lost_is_answered_by_its_token_not_launched_again(account, error):
    with account() as engine:
        # The first CreateFleet launches; each of its botocore attempts, and the one identical
        # call sent to settle it, lose their replies: the step is retried with the same token.
        engine.faults.aws("ec2", "CreateFleet", error=error, after=True, times=10)
        execution = engine.run(FLEET, name=f"fleet-lost-{error.lower()}")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4
    assert engine.faults.total >= 10


def test_a_fleet_step_killed_before_its_records_are_written_keeps_every_instance(account):
    with account() as engine:
        engine.faults.kill_at("dynamodb", "UpdateItem", task="LaunchBatch")
        execution = engine.run(FLEET, name="fleet-killed")
        seen = assert_exactly_once(engine, execution, launched=4)
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4


def test_an_unreachable_region_is_skipped_and_the_next_one_fills(account):
    with account() as engine:
        engine.faults.aws("ec2", "CreateLaunchTemplateVersion", error="EndpointConnectionError", region=WEST, times=None)
        execution = engine.run(FLEET, name="fleet-unreachable")
        assert_exactly_once(engine, execution, launched=4)
    assert {i["region"] for i in execution.output["instances"]} == {EAST}
