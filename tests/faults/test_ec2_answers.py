"""EC2's answers as EC2 gives them: capacity as a server error, a replayed fleet without its
instances, a fleet's Errors holding throttling and internal errors. Each run ends audited."""

import pytest

from tests.conftest import zone
from tests.faults.conftest import EAST, MARKET, REQUEST, WEST, assert_exactly_once

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
