"""A teardown whose TerminateInstances is throttled or failing keeps going until every approved
instance is terminated, and never ends an instance outside the approved set."""

from __future__ import annotations

import time
from unittest import mock

import pytest
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses.instances import InstanceResponse

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.workflow.planting import EAST, MARKET, WEST, in_background, launch, record, states, terminated_ids


class _NoSleep:
    """botocore's own retry backoff costs no wall time in these tests."""

    @staticmethod
    def sleep(seconds: float) -> None:
        return None

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def failing_terminate():
    """TerminateInstances answers `code` for the first `times` calls, then behaves as EC2 does."""
    real = InstanceResponse.terminate_instances
    calls = {"refused": 0}

    def install(code: str, times: int):
        def terminate_instances(response):
            if calls["refused"] < times:
                calls["refused"] += 1
                raise EC2ClientError(code, "simulated: EC2 is busy")
            return real(response)

        return mock.patch.object(InstanceResponse, "terminate_instances", terminate_instances)

    with mock.patch("botocore.endpoint.time", _NoSleep()):
        yield install, calls


# InternalError is in the same THROTTLE_CODES as RequestLimitExceeded (policy/errors.py), one path: `make test-all` runs it.
@pytest.mark.parametrize("code", ["RequestLimitExceeded", pytest.param("InternalError", marks=pytest.mark.slow)])
def test_a_throttled_terminate_is_retried_until_every_approved_instance_is_terminated(failing_terminate, code):
    install, calls = failing_terminate
    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        mine = launch(engine, WEST, count=3, request_id="run-busy") + launch(engine, EAST, request_id="run-busy")
        name = "teardown-busy"
        # Two regions end in parallel, each try making up to 6 calls (botocore's 5 retries):
        # 12 refusals are more than both branches' first tries can absorb, so a step must be retried.
        with install(code, times=12), in_background(engine, {"action": "teardown", "request_id": "run-busy"}, name) as done:
            engine.wait_for_approval(name)
            # launched for the same request after the approval was asked for: not in the approved set
            late = launch(engine, WEST, request_id="run-busy")
            engine.answer_approval(name, "approved")
            execution = done()

        assert execution.status == "SUCCEEDED", (execution.error, execution.cause)
        assert calls["refused"] == 12
        assert execution.output["status"] == "TERMINATED"
        assert terminated_ids(execution) == sorted(mine)
        assert set(states(engine, WEST, mine[:3]).values()) == {"terminated"}
        assert set(states(engine, EAST, mine[3:]).values()) == {"terminated"}
        assert states(engine, WEST, late) == {late[0]: "running"}
        assert all(record(engine, i)["state"] == "terminated" for i in mine)
        failures = [d.get("error") for e in execution.history for k, d in e.items() if k.endswith("FailedEventDetails")]
        assert failures and set(failures) == {"TransientAwsError"}, [e["type"] for e in execution.history]


def test_a_terminate_refused_for_good_ends_in_a_named_state_not_a_raw_error(failing_terminate):
    install, _ = failing_terminate
    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        mine = launch(engine, WEST, request_id="run-down")
        with install("RequestLimitExceeded", times=10_000):
            execution = engine.run(
                {"action": "teardown", "request_id": "run-down"}, name="teardown-down", decision="approved"
            )
        assert (execution.status, execution.error) == ("FAILED", "TEARDOWN_INCOMPLETE")
        assert "Run the same teardown again" in str(execution.cause)
        assert states(engine, WEST, mine) == {mine[0]: "running"}
