"""What instances report about themselves cannot take a run past Step Functions' limits."""


import pytest

from gpufill import constants
from tests.support import largest_state, zone
from tests.support.audit import WEST, assert_exactly_once

# The longest tag value EC2 takes (256 characters), three bytes each in UTF-8.
LONG_STEP = "failed: " + "模型权重同步中断" * 31


def market(count: int) -> dict:
    return {"startup": {"stalls_at": "syncing model"},
            "regions": {WEST: {"zones": {"us-west-2a": zone(0.40, spot=count), "us-west-2b": zone(0.42, spot=count)}}}}


def report_long_steps(engine, request_id: str) -> None:
    """startup.sh on every instance of the request tags it with the longest step EC2 takes."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    backend = ec2_backends[DEFAULT_ACCOUNT_ID][WEST]
    for instance in backend.all_instances():
        if backend.tags.get(instance.id, {}).get(constants.TAG_REQUEST_ID) == request_id:
            backend.tags[instance.id][constants.TAG_STARTUP_STEP] = LONG_STEP


def run_with_long_steps(account, count: int):
    name = f"long-steps-{count}"
    with account(market(count)) as engine:
        engine.at(400, lambda: report_long_steps(engine, name))  # after the market's own reports
        execution = engine.run({"count": count, "regions": [WEST], "ready_timeout": "PT15M"}, name=name, timeout=1200)
        assert_exactly_once(engine, execution, launched=count) if count <= 4 else None
    return execution


def check_bounded(execution, count: int) -> None:
    assert execution.status == "SUCCEEDED", (execution.error, str(execution.cause)[:300])
    instances = execution.output["instances"]
    assert len(instances) == count and execution.output["instances_serving"] == 0
    for instance in instances:
        step = instance["startup_step"]
        assert step.startswith("failed: 模型权重同步中断") and step.endswith("…")
        assert len(step.encode()) <= 120 < len(LONG_STEP.encode())
        assert instance["serving_reason"] == f"startup.sh stopped: {step} (its log: /var/log/gpufill-startup.log)"
    assert largest_state(execution) < constants.STATE_SIZE_LIMIT_BYTES


def test_a_long_non_ascii_startup_step_is_carried_cut_at_a_character(account):
    check_bounded(run_with_long_steps(account, 4), 4)


@pytest.mark.slow
def test_250_instances_reporting_the_longest_non_ascii_step_stay_under_the_state_limit(account):
    execution = run_with_long_steps(account, 250)
    check_bounded(execution, 250)
    print(f"250 long steps: largest state {largest_state(execution)} bytes")
