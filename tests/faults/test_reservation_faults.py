"""Launches into a capacity reservation are exactly-once like every launch: a reply lost after
the launch is settled by the token, and the reservation's room is taken once."""

import pytest

from tests.support.audit import MARKET, REQUEST, WEST, assert_exactly_once

RESERVED = "cr-0a1b2c3d4e5f60718"
HELD = {**MARKET, "capacity_reservations": [{"id": RESERVED, "zone": "us-west-2a", "type": "g6.xlarge", "count": 3}]}


@pytest.mark.parametrize(("mode", "call"), [("partial", "RunInstances"), ("fleet", "CreateFleet")])
def test_a_reservation_launch_whose_reply_is_lost_is_found_by_its_token_not_launched_again(account, mode, call):
    with account(HELD) as engine:
        engine.faults.aws("ec2", call, error="ReadTimeout", after=True, region=WEST)
        engine.faults.aws("ec2", call, error="ConnectTimeout", region=WEST, times=5)
        execution = engine.run({**REQUEST, "launch_mode": mode}, name=f"reserved-reply-lost-{mode}")
        seen = assert_exactly_once(engine, execution, launched=4)
        room = engine.client("ec2", WEST).describe_capacity_reservations(CapacityReservationIds=[RESERVED])
    reserved = [i for i in execution.output["instances"] if i.get("capacity_reservation_id") == RESERVED]
    assert execution.output["status"] == "FULFILLED" and len(seen.in_ec2) == 4
    assert len(reserved) == 3
    assert room["CapacityReservations"][0]["AvailableInstanceCount"] == 0
