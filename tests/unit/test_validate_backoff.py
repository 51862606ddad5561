"""ValidateRequest fixes a waiting run's backoff once (handlers/validate_request.py): the request's
own first delay and cap, else the deployment's (WAIT_FIRST_DELAY_SECONDS / WAIT_MAX_DELAY_SECONDS)."""

import pytest

from gpufill.adapters import clock
from gpufill.handlers import validate_request

ASKED = {"instance_type": "g6.xlarge", "count": 2, "regions": ["us-west-2"]}


class Context:
    function_name = "ValidateRequest"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:ValidateRequest"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/ValidateRequest"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def wait_of(wait: dict) -> dict:
    out = validate_request.handler({"request_id": "run-b", "input": {**ASKED, "all_or_nothing": True, "wait_for_capacity": wait}},
                                   Context())
    assert out["valid"], out
    return out["run"]["wait"]


@pytest.mark.parametrize(("environment", "wait", "backoff"), [
    ({}, {"deadline": "PT1H"}, (60, 150)),
    ({"WAIT_FIRST_DELAY_SECONDS": "30", "WAIT_MAX_DELAY_SECONDS": "600"}, {"deadline": "PT1H"}, (30, 600)),
    ({"WAIT_MAX_DELAY_SECONDS": "600"}, {"deadline": "PT1H", "max_delay": "PT90S"}, (60, 90)),
    ({"WAIT_FIRST_DELAY_SECONDS": "30"}, {"deadline": "PT1H", "first_delay": "PT5M", "max_delay": "PT10M"}, (300, 600)),
])
def test_the_backoff_is_the_requests_else_the_deployments(monkeypatch, environment, wait, backoff):
    monkeypatch.setattr(clock, "epoch", lambda: 1_780_000_000.0)
    for name in ("WAIT_FIRST_DELAY_SECONDS", "WAIT_MAX_DELAY_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    found = wait_of(wait)
    assert (found["first_delay_seconds"], found["max_delay_seconds"]) == backoff
    assert found["deadline_epoch"] == 1_780_000_000.0 + 3600
