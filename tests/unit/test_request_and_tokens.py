import json

import pytest
from pydantic import ValidationError

from gpufill.models.request import Request, describe_problems, normalise
from gpufill.policy.tokens import client_token


def test_defaults_fill_in():
    request = normalise(Request(), request_id="r1", default_regions=["us-west-2"], home_region="us-east-1")
    assert (request.instance_types, request.count, request.batch_max) == (["g6.xlarge"], 1, 1)
    assert (request.market, request.launch_mode, request.regions, request.origin_region) == (
        "spot", "fleet", ["us-west-2"], "us-east-1")
    assert normalise(Request(count=9), request_id="r", default_regions=[], home_region="x").batch_max == 4


def test_every_bad_field_is_named_at_once():
    with pytest.raises(ValidationError) as caught:
        Request.model_validate({"count": 0, "regions": ["atlantis-1"], "market": "x", "tags": {"aws:x": "y"}})
    assert sorted(p["field"] for p in describe_problems(caught.value)) == ["count", "market", "regions", "tags"]


DEV = "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-provisioner-dev"
PROD = "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-provisioner-prod"


def test_client_token_is_deterministic_short_and_distinct_per_step_and_deployment():
    long_id = "x" * 80
    assert client_token(DEV, long_id, 3) == client_token(DEV, long_id, 3)
    assert client_token(DEV, long_id, 3) != client_token(DEV, long_id, 4)
    assert client_token(DEV, "a", 1) != client_token(DEV, "b", 1)
    # Two deployments running the same execution name never share a token.
    assert client_token(DEV, "my-run", 1) != client_token(PROD, "my-run", 1)
    assert len(client_token(DEV, long_id, 99999)) <= 64 and client_token(DEV, long_id, 1).isascii()


def test_a_fleet_larger_than_one_run_can_hold_is_refused_with_the_reason():
    with pytest.raises(ValidationError) as caught:
        Request(count=251)
    [problem] = describe_problems(caught.value)
    assert problem["field"] == "count" and "256 KB" in problem["problem"] and "several runs" in problem["problem"]


def test_the_largest_run_and_its_result_fit_the_step_functions_payload_limit():
    """250 instances and 4,500 attempts: the state carries the last step's attempts only, and the
    result lists every instance and the newest 300 attempts."""
    from gpufill.models.run import Attempt, Instance, Run
    from gpufill.policy import boot
    from gpufill.policy.result import fill_result

    instances = [Instance(instance_id=f"i-{n:017x}", region="ap-northeast-1", availability_zone="ap-northeast-1a",
                          instance_type="g6e.12xlarge", market="on-demand", hourly_price=10.4926) for n in range(250)]
    attempts = [Attempt(number=n, region="ap-northeast-1", availability_zone="ap-northeast-1c", instance_type="g6e.12xlarge",
                        market="spot", batch=1, launched=0, outcome="capacity",
                        reason="InsufficientInstanceCapacity") for n in range(1, 4501)]
    run = Run(batch=4, remaining=0, launched=250, attempts_total=4500, step_attempts=attempts[-8:], instances=instances)
    settled = boot.settle(run, {i.instance_id: {"state": "running", "private_ip": "172.31.100.200"} for i in instances})
    assert len(settled.model_dump_json(exclude_none=True)) < 100_000
    result = fill_result(normalise(Request(count=250), request_id="big", default_regions=["us-east-1"], home_region="us-east-1"),
                         settled, attempts, "FULFILLED")
    assert len(result["instances"]) == 250 and all("connect" not in i for i in result["instances"])  # over 100
    assert "INSTANCE_ID" in result["connect_template"]
    assert result["attempts_total"] == 4500 and len(result["attempts"]) == 300
    assert len(json.dumps(result)) < 200_000


def test_a_steps_token_is_the_same_in_every_release():
    """A step retried after a redeploy must send the token it sent before, or EC2 launches twice."""
    assert client_token(DEV, "my-run", 7) == "gpufill-4d206bdb7ec501263bda65ae6ffdadb4efb3849b-7"


def test_no_attempt_number_makes_a_token_longer_than_ec2_accepts():
    token = client_token(DEV, "my-run", 10**16)
    assert len(token) == 64 and token.startswith("gpufill-")
