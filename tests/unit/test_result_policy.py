"""What a finished run answers and what a failed run's cause says, field by field."""

import json

import pytest

from gpufill.models.request import Request, normalise
from gpufill.models.run import Attempt, Instance, Run
from gpufill.policy.result import CAUSE_BUDGET, failure_cause, fill_result, time_to_fill

PARAMETERS = """'{"portNumber":["8000"],"localPortNumber":["8000"]}'"""


def connect(region, instance_id):
    return (f"aws ssm start-session --region {region} --target {instance_id} "
            f"--document-name AWS-StartPortForwardingSession --parameters {PARAMETERS}")


def instance(n, region="us-west-2", market="spot", **fields):
    return Instance(instance_id=f"i-{n:017x}", region=region, availability_zone=f"{region}a",
                    instance_type="g6.xlarge", market=market, **fields)


def attempt(n, outcome="capacity", launched=0):
    return Attempt(number=n, region="us-west-2", availability_zone="us-west-2b", instance_type="g6.xlarge",
                   market="spot", batch=2, launched=launched, outcome=outcome,
                   reason="InsufficientInstanceCapacity" if outcome == "capacity" else None)


def request(count):
    return normalise(Request(count=count), request_id="r-42", default_regions=["us-west-2"], home_region="us-east-1")


def test_a_result_answers_every_field_a_user_reads():
    up = instance(1, hourly_price=0.8048, state="running", private_ip="10.0.0.7")
    lost = instance(2, state="terminated")
    run = Run(batch=2, remaining=1, launched=1, hourly_cost=0.8048, instances=[up], lost=[lost])
    result = fill_result(request(2), run, [attempt(1), attempt(2, "launched", 1)], "PARTIAL")
    assert result == {
        "request_id": "r-42",
        "status": "PARTIAL",
        "requested": 2,
        "launched": 1,
        "instances": [{"instance_id": up.instance_id, "region": "us-west-2", "availability_zone": "us-west-2a",
                       "instance_type": "g6.xlarge", "market": "spot", "hourly_price": 0.8048, "state": "running",
                       "private_ip": "10.0.0.7", "connect": connect("us-west-2", up.instance_id)}],
        "lost": [{"instance_id": lost.instance_id, "region": "us-west-2", "availability_zone": "us-west-2a",
                  "instance_type": "g6.xlarge", "market": "spot", "state": "terminated"}],
        "attempts": [
            {"number": 1, "region": "us-west-2", "availability_zone": "us-west-2b", "instance_type": "g6.xlarge",
             "market": "spot", "batch": 2, "launched": 0, "outcome": "capacity", "reason": "InsufficientInstanceCapacity"},
            {"number": 2, "region": "us-west-2", "availability_zone": "us-west-2b", "instance_type": "g6.xlarge",
             "market": "spot", "batch": 2, "launched": 1, "outcome": "launched"},
        ],
        "attempts_total": 2,
        "hourly_cost": 0.8048,
        "connect_template": connect("REGION", "INSTANCE_ID"),
    }


@pytest.mark.parametrize(("count", "listed"), [(100, True), (101, False)])
def test_each_instance_gets_its_connect_command_up_to_one_hundred(count, listed):
    instances = [instance(n, region="eu-north-1") for n in range(count)]
    result = fill_result(request(count), Run(batch=4, remaining=0, launched=count, instances=instances), [], "FULFILLED")
    commands = [i.get("connect") for i in result["instances"]]
    expected = [connect("eu-north-1", i.instance_id) for i in instances] if listed else [None] * count
    assert commands == expected
    assert result["connect_template"] == connect("REGION", "INSTANCE_ID")


def test_three_hundred_attempts_are_all_listed_without_a_note():
    result = fill_result(request(1), Run(batch=1, remaining=1), [attempt(n) for n in range(1, 301)], "EXHAUSTED")
    assert [a["number"] for a in result["attempts"]] == list(range(1, 301))
    assert result["attempts_total"] == 300 and "attempts_note" not in result


def test_past_three_hundred_attempts_the_newest_are_listed_and_the_note_says_so():
    result = fill_result(request(1), Run(batch=1, remaining=1), [attempt(n) for n in range(1, 302)], "EXHAUSTED")
    assert [a["number"] for a in result["attempts"]] == list(range(2, 302))
    assert result["attempts_total"] == 301
    assert result["attempts_note"] == "the last 300 of 301 attempts; `gpufill status` lists the instances"


def recorded(n, region="us-east-1"):
    """An instance record as the table holds it: more fields than the cause names."""
    return {"instance_id": f"i-{n:017x}", "region": region, "availability_zone": f"{region}c", "instance_type": "g6e.xlarge",
            "market": "on-demand", "request_id": "r-42", "hourly_price": "1.861", "pool": "x"}


def test_a_failure_names_each_launched_instance_once_and_the_teardown_that_ends_them():
    run = Run(batch=2, remaining=0, launched=2, instances=[instance(1, hourly_price=0.5, private_ip="10.0.0.1"),
                                                           instance(3, hourly_price=0.5, state="running")])
    cause = json.loads(failure_cause("r-42", run, [recorded(1), recorded(2)],
                                     {"Error": "States.Timeout", "Cause": {"errorMessage": "too slow"}}))
    assert cause == {
        "error": "PROVISIONING_FAILED",
        "message": "A step failed after its retries (States.Timeout). 3 instance(s) launched so far keep running until torn down.",
        "request_id": "r-42",
        "failed_with": {"error": "States.Timeout", "cause": '{"errorMessage": "too slow"}'},
        "launched": 3,
        # The table's record wins over the state's copy of the same instance.
        "instances": [
            {"instance_id": f"i-{1:017x}", "region": "us-east-1", "availability_zone": "us-east-1c",
             "instance_type": "g6e.xlarge", "market": "on-demand"},
            {"instance_id": f"i-{2:017x}", "region": "us-east-1", "availability_zone": "us-east-1c",
             "instance_type": "g6e.xlarge", "market": "on-demand"},
            {"instance_id": f"i-{3:017x}", "region": "us-west-2", "availability_zone": "us-west-2a",
             "instance_type": "g6.xlarge", "market": "spot"},
        ],
        "teardown": {"action": "teardown", "request_id": "r-42"},
        "hint": "Start the teardown above (it asks for approval), or rerun the request; `gpufill status` shows them.",
    }


def test_a_failure_before_any_launch_says_nothing_was_launched_and_offers_no_teardown():
    cause = json.loads(failure_cause("r-42", Run(batch=1, remaining=1), [], {}))
    assert cause == {
        "error": "PROVISIONING_FAILED",
        "message": "A step failed after its retries (unknown error). Nothing was launched.",
        "request_id": "r-42",
        "failed_with": {"error": "unknown error", "cause": None},
        "launched": 0,
        "instances": [],
    }


def test_a_failure_before_the_run_state_existed_still_lists_the_recorded_instances():
    cause = json.loads(failure_cause("r-42", None, [recorded(5)], {"Error": "TransientAwsError", "Cause": "throttled"}))
    assert [i["instance_id"] for i in cause["instances"]] == [f"i-{5:017x}"] and cause["launched"] == 1
    assert cause["failed_with"] == {"error": "TransientAwsError", "cause": "throttled"}


def test_without_a_request_id_no_teardown_can_be_offered():
    cause = json.loads(failure_cause(None, Run(batch=1, remaining=0, launched=1, instances=[instance(1)]), [], {"Error": "X"}))
    assert cause["request_id"] is None and cause["launched"] == 1
    assert "teardown" not in cause and "hint" not in cause


@pytest.mark.parametrize(("given", "quoted"), [
    ("e" * 2000, "e" * 2000),
    ("e" * 2001, "e" * 2000),
    (["a", 1], '["a", 1]'),
])
def test_the_failed_steps_own_cause_is_quoted_up_to_two_thousand_characters(given, quoted):
    cause = json.loads(failure_cause("r-42", None, [], {"Error": "X", "Cause": given}))
    assert cause["failed_with"]["cause"] == quoted


def _cause_for(length):
    """A failure whose full cause text is `length` characters, by the length of one instance id."""
    def text(pad):
        return failure_cause("r-42", None, [recorded(n) for n in range(150)] + [{"instance_id": "i-" + "f" * pad, "region": "x"}],
                             {"Error": "X"})

    short = len(text(10))
    return text(10 + length - short)


@pytest.mark.parametrize(("length", "full"), [(CAUSE_BUDGET, True), (CAUSE_BUDGET + 1, False)])
def test_a_cause_over_its_budget_lists_only_the_instance_ids(length, full):
    text = _cause_for(length)
    cause = json.loads(text)
    assert cause["launched"] == 151 and len(cause["instances"]) == 151
    if full:
        assert len(text) == CAUSE_BUDGET and cause["instances"][0]["availability_zone"] == "us-east-1c"
    else:
        assert len(text) <= CAUSE_BUDGET and cause["instances"][:2] == [f"i-{0:017x}", f"i-{1:017x}"]
        assert cause["teardown"] == {"action": "teardown", "request_id": "r-42"}


def test_time_to_fill_counts_only_runs_that_hold_instances_from_their_start():
    filled = Run(batch=2, remaining=0, launched=2, started_at=1000.0)
    assert time_to_fill(filled, 1234.56) == 234.6
    assert time_to_fill(filled, 999.0) == 0.0  # a clock that stepped back never reports a negative time
    assert time_to_fill(filled.model_copy(update={"launched": 0}), 1234.0) is None  # no fill, no time to fill
    assert time_to_fill(filled.model_copy(update={"launched": 1}), 1234.0) == 234.0  # one instance is a fill
    assert time_to_fill(filled.model_copy(update={"started_at": None}), 1234.0) is None  # a run from before its start was kept


def test_a_request_with_a_lifetime_says_when_its_teardown_is_asked():
    run = Run(batch=1, remaining=0, launched=1, instances=[instance(1)])
    lived = request(1).model_copy(update={"expires_at": "2026-12-04T14:00:00+00:00"})
    assert fill_result(lived, run, [], "FULFILLED")["expires_at"] == "2026-12-04T14:00:00+00:00"
    assert "expires_at" not in fill_result(request(1), run, [], "FULFILLED")
