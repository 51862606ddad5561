"""EC2's token buckets as the local engine models them (local/throttling.py): AWS's documented sizes
and refill rates, per region, on the clock the caller passes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufill.local.throttling import TokenBucket, Throttling, request_bucket, resources

FILTERED = {"Filter.1.Name": ["tag:gpufill:request-id"]}


@pytest.mark.parametrize(
    ("action", "params", "expected"),
    [
        ("DescribeSpotPriceHistory", {}, ("DescribeSpotPriceHistory", 100, 20)),
        ("DescribeInstances", FILTERED, ("DescribeInstances", 100, 20)),
        ("DescribeInstances", {"MaxResults": ["5"]}, ("DescribeInstances", 100, 20)),
        ("DescribeInstances", {}, ("DescribeInstances:unfiltered", 50, 10)),
        ("CreateFleet", {}, ("CreateFleet", 50, 5)),
        ("CreateLaunchTemplate", {}, ("CreateLaunchTemplate", 50, 5)),
        ("AuthorizeSecurityGroupIngress", {}, ("AuthorizeSecurityGroupIngress", 50, 5)),
        ("RunInstances", {}, ("RunInstances", 5, 2)),
        ("TerminateInstances", {}, ("TerminateInstances", 100, 5)),
        ("CreateTags", {}, ("CreateTags", 100, 10)),
        ("PurchaseCapacityBlock", {}, ("PurchaseCapacityBlock", 10, 0.15)),
        ("DescribeCapacityBlockOfferings", {}, ("DescribeCapacityBlockOfferings", 10, 0.15)),
    ],
)
def test_each_action_takes_from_the_bucket_aws_documents(action, params, expected):
    assert request_bucket(action, params) == expected


def test_resource_tokens_are_the_instances_a_call_launches_or_terminates():
    assert resources("RunInstances", {"MaxCount": ["8"], "MinCount": ["2"]}) == 2  # needed; taken as launched
    assert resources("TerminateInstances", {"InstanceId.1": ["i-1"], "InstanceId.2": ["i-2"]}) == 2
    assert resources("CreateFleet", {"TargetCapacitySpecification.TotalTargetCapacity": ["8"]}) == 0


def test_a_bucket_refills_at_its_rate_up_to_its_size():
    bucket = TokenBucket(5, 2)
    assert all(bucket.take(0.0) for _ in range(5))
    assert not bucket.take(0.0)  # empty: throttled, and nothing taken
    assert not bucket.take(0.4)
    assert bucket.take(0.5)  # one token after half a second at 2 a second
    assert bucket.level(1000.0) == 5  # never above its size


def test_run_instances_is_throttled_by_calls_and_by_instances_per_region():
    throttling = Throttling()
    one = {"MaxCount": ["1"]}
    assert all(throttling.admit("us-west-2", "RunInstances", one, 0.0) for _ in range(5))
    assert not throttling.admit("us-west-2", "RunInstances", one, 0.0)
    assert throttling.admit("us-east-1", "RunInstances", one, 0.0)  # another region, other buckets
    assert throttling.admit("us-west-2", "RunInstances", one, 0.5)
    # 1,000 instances launched empty the resource bucket: the next launch waits for its refill.
    assert throttling.admit("eu-west-1", "RunInstances", {"MinCount": ["1000"]}, 0.0)
    throttling.launched("eu-west-1", 1000, 0.0)
    assert not throttling.admit("eu-west-1", "RunInstances", {"MinCount": ["3"]}, 1.0)  # 2 tokens back
    assert throttling.admit("eu-west-1", "RunInstances", {"MinCount": ["3"]}, 1.5)
    # More than the bucket could ever hold is judged by EC2's capacity, not refused by the bucket.
    assert throttling.admit("ap-south-1", "RunInstances", {"MinCount": ["10000"]}, 0.0)
    assert throttling.throttled == {("us-west-2", "RunInstances"): 1, ("eu-west-1", "RunInstances"): 1}


def test_terminations_take_a_resource_token_per_instance_named():
    throttling = Throttling()
    ids = {f"InstanceId.{n}": [f"i-{n}"] for n in range(1, 1001)}
    assert throttling.admit("us-west-2", "TerminateInstances", ids, 0.0)
    assert not throttling.admit("us-west-2", "TerminateInstances", {"InstanceId.1": ["i-x"]}, 0.0)
    assert throttling.admit("us-west-2", "TerminateInstances", {"InstanceId.1": ["i-x"]}, 0.05)  # 20 a second


def test_scale_shrinks_every_bucket_and_zero_turns_throttling_off():
    small = Throttling(0.2)
    assert [small.admit("us-west-2", "CreateFleet", {}, 0.0) for _ in range(11)] == [True] * 10 + [False]
    off = Throttling(0)
    assert all(off.admit("us-west-2", "RunInstances", {}, 0.0) for _ in range(100))
    with pytest.raises(ValueError, match="scale"):
        Throttling(-1)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 50),
    rate=st.floats(0.1, 20),
    gaps=st.lists(st.floats(0, 2), min_size=1, max_size=200),
)
def test_never_more_calls_granted_in_a_window_than_size_plus_rate_times_window(size, rate, gaps):
    bucket = TokenBucket(size, rate)
    now, granted = 0.0, []
    for gap in gaps:
        now += gap
        if bucket.take(now):
            granted.append(now)
    for i, start in enumerate(granted):
        for j in range(i, len(granted)):
            window = granted[j] - start
            assert j - i + 1 <= size + rate * window + 1e-9


def test_a_scenario_sets_the_scale_and_refuses_a_negative_one():
    from pydantic import ValidationError

    from gpufill.local.scenario import MarketScenario

    assert MarketScenario.model_validate({"ec2_throttling": 0}).ec2_throttling == 0
    assert MarketScenario.model_validate({}).ec2_throttling == 1.0
    with pytest.raises(ValidationError, match="ec2_throttling"):
        MarketScenario.model_validate({"ec2_throttling": -1})


def test_a_caller_behind_what_a_bucket_has_seen_is_told_where_it_stands():
    throttling = Throttling()
    assert throttling.admit_at("us-west-2", "CreateFleet", {}, 10.0) == (True, 10.0)
    # Another caller's clock is at 0: it meets the bucket as it is at 10 s, not refilled from 0.
    assert throttling.admit_at("us-west-2", "CreateFleet", {}, 0.0) == (True, 10.0)
    assert throttling.admit_at("us-east-1", "CreateFleet", {}, 0.0) == (True, 0.0)
