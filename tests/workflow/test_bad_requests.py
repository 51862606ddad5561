"""A malformed request ends at the first state with InvalidRequest, names every bad field and launches nothing."""

import pytest

from tests.support import zone

MARKET = {"regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.4, spot=10, on_demand=10)}}}}
GOOD = {"instance_types": ["g6.xlarge"], "count": 2, "regions": ["us-west-2"]}

BAD_REQUESTS = [
    ({**GOOD, "count": 0}, ["count"]),
    ({**GOOD, "count": 251}, ["count"]),
    ({**GOOD, "count": "6"}, ["count"]),
    ({**GOOD, "colour": "red"}, ["colour"]),
    ({**GOOD, "market": "reserved"}, ["market"]),
    ({**GOOD, "regions": ["mars-north-1"]}, ["regions"]),
    ({**GOOD, "regions": []}, ["regions"]),
    ({**GOOD, "instance_types": ["not a type"]}, ["instance_types"]),
    ({**GOOD, "instance_types": []}, ["instance_types"]),
    ({**GOOD, "launch_mode": "greedy"}, ["launch_mode"]),
    ({**GOOD, "on_demand_strategy": "fastest"}, ["on_demand_strategy"]),
    ({**GOOD, "origin_region": "moon-1"}, ["origin_region"]),
    ({**GOOD, "tags": {"gpufill:managed": "false"}}, ["tags"]),
    ({**GOOD, "instance_type": "g5.xlarge"}, ["instance_type"]),
    ({**GOOD, "action": "destroy"}, ["action"]),
    ({"count": 0, "market": "cheap", "regions": ["nowhere-1"]}, ["count", "market", "regions"]),
    (["g6.xlarge"], ["(request)"]),
    # Types EC2 would refuse, or that gpufill's x86_64 machine image cannot boot.
    ({**GOOD, "instance_types": ["g6.xlarg"]}, ["instance_types"]),
    ({**GOOD, "instance_types": ["g5g.xlarge"]}, ["instance_types"]),
    ({**GOOD, "instance_types": ["g6.xlarge", "g6.xlarge"]}, ["instance_types"]),
    ({**GOOD, "regions": ["us-west-2", "us-west-2"]}, ["regions"]),
    ({**GOOD, "tags": {f"team{n}": "ml" for n in range(47)}}, ["tags"]),
    ({**GOOD, "tags": {"k" * 129: "v"}}, ["tags"]),
    ({**GOOD, "tags": {"team": "v" * 257}}, ["tags"]),
    ({**GOOD, "tags": {"cost;centre": "ml"}}, ["tags"]),
    ({**GOOD, "model_id": "../../etc/passwd"}, ["model_id"]),
    ({**GOOD, "image": "vllm/../vllm-openai:latest"}, ["image"]),
    ({**GOOD, "root_volume_gib": 0}, ["root_volume_gib"]),
    ({**GOOD, "root_volume_gib": 16385}, ["root_volume_gib"]),
    # The spend guard: an ISO 8601 duration from 15 minutes to 30 days, on a provisioning request.
    ({**GOOD, "max_lifetime": "PT10M"}, ["max_lifetime"]),
    ({**GOOD, "max_lifetime": "P31D"}, ["max_lifetime"]),
    ({**GOOD, "max_lifetime": 28800}, ["max_lifetime"]),
    ({**GOOD, "max_lifetime": "8 hours"}, ["max_lifetime"]),
    ({**GOOD, "trigger": "max_lifetime"}, ["trigger"]),
]


@pytest.fixture(scope="module")
def account():
    from gpufill.local.engine import LocalEngine
    from gpufill.local.scenario import MarketScenario

    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        yield engine


@pytest.mark.parametrize(("bad", "fields"), BAD_REQUESTS, ids=[",".join(f) for _, f in BAD_REQUESTS])
def test_bad_request_fails_first_naming_every_field_and_launches_nothing(account, bad, fields):
    before = account.calls.mark()
    execution = account.run(bad, name=f"bad-{len(account.calls.invocations)}")
    assert execution.status == "FAILED"
    assert execution.error == "InvalidRequest"
    named = [f["field"].split(".")[0] for f in execution.cause["fields"]]
    assert sorted(set(named)) == sorted(fields)
    assert execution.entered()[:2] == ["ValidateRequest", "IsRequestValid"]
    assert execution.entered()[-1] == "InvalidRequest"
    assert not [c for c in account.calls.calls[before[1]:] if c.startswith("ec2:")]
    assert "Nothing was launched." in execution.cause["message"]
    assert not [f for f in execution.cause["fields"] if "errors.pydantic.dev" in f["problem"]]


@pytest.mark.parametrize(
    ("text", "kind"),
    [('"g6.xlarge"', "a string"), ("4", "a number"), ("null", "null"), ("[]", "a list"), ("true", "true")],
)
def test_any_json_value_that_is_not_an_object_is_refused_by_name(account, text, kind):
    execution = account.run(text, name=f"not-an-object-{len(account.calls.invocations)}")
    assert (execution.status, execution.error) == ("FAILED", "InvalidRequest")
    assert execution.cause["fields"] == [
        {"field": "(request)", "problem": f"the request must be a JSON object, got {kind}"}
    ]


@pytest.mark.parametrize(
    ("lifetime", "problem"),
    [
        ("PT10M", "must be from PT15M to P30D, got 10 minutes"),
        ("P45D", "must be from PT15M to P30D, got 45 days"),
        (28800, "must be an ISO 8601 duration such as 'PT8H' or 'P2D', got a number"),
        ("PT8H0.5S", "give whole seconds, such as 'PT8H'"),
    ],
)
def test_a_bad_max_lifetime_is_named_with_its_bounds_and_schedules_nothing(account, lifetime, problem):
    execution = account.run({**GOOD, "max_lifetime": lifetime}, name=f"bad-life-{len(account.calls.invocations)}")
    assert (execution.status, execution.error) == ("FAILED", "InvalidRequest")
    assert execution.cause["fields"] == [{"field": "max_lifetime", "problem": problem}]
    group = "gpufill-local"
    assert account.client("scheduler").list_schedules(GroupName=group)["Schedules"] == []


def test_a_provisioning_run_may_not_take_a_name_the_spend_guard_keeps(account):
    execution = account.run(GOOD, name="my-run-expired")
    assert execution.error == "InvalidRequest"
    assert execution.cause["fields"][0]["field"] == "(execution name)"
    assert "max_lifetime keeps for the teardown" in execution.cause["fields"][0]["problem"]


def test_max_lifetime_on_a_teardown_is_refused_and_changes_nothing(account):
    execution = account.run({"action": "teardown", "request_id": "r", "max_lifetime": "PT8H"}, name="bad-life-teardown")
    assert execution.cause["fields"] == [
        {"field": "max_lifetime", "problem": "only goes with action 'provision' (this request's action is 'teardown')"}
    ]
    assert "Nothing was changed." in execution.cause["message"]


def test_a_misspelt_type_gets_a_suggestion_and_an_arm64_type_the_reason(account):
    request = {**GOOD, "instance_types": ["g6.xlarg", "g5g.xlarge"]}
    execution = account.run(request, name="misspelt-and-arm64")
    [problem] = execution.cause["fields"]
    assert "'g6.xlarg' is not a GPU instance type gpufill knows: did you mean 'g6.xlarge'?" in problem["problem"]
    assert "'g5g.xlarge' is an arm64 type" in problem["problem"] and "x86_64 only" in problem["problem"]


@pytest.mark.parametrize(
    "bad",
    [{"action": "teardown"}, {"action": "teardown", "request_id": "has space"}, {"action": "status", "count": "x"}],
    ids=["teardown-without-target", "teardown-bad-id", "status-with-bad-field"],
)
def test_a_bad_teardown_or_status_says_nothing_was_changed(account, bad):
    execution = account.run(bad, name=f"bad-change-{len(account.calls.invocations)}")
    assert (execution.status, execution.error) == ("FAILED", "InvalidRequest")
    assert execution.cause["message"].endswith("Nothing was changed.")


def test_batch_max_above_count_is_capped_not_refused(account):
    execution = account.run({**GOOD, "count": 2, "batch_max": 5}, name="batch-max-above-count")
    assert execution.status == "SUCCEEDED", execution.cause
    assert [a["batch"] for a in execution.output["attempts"]] == [2]
