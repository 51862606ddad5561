"""A malformed request ends at the first state with InvalidRequest, names every bad field and launches nothing."""

import pytest

from tests.conftest import zone

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
    ({**GOOD, "batch_max": 5}, ["batch_max"]),
    ({**GOOD, "launch_mode": "greedy"}, ["launch_mode"]),
    ({**GOOD, "on_demand_strategy": "fastest"}, ["on_demand_strategy"]),
    ({**GOOD, "origin_region": "moon-1"}, ["origin_region"]),
    ({**GOOD, "tags": {"gpufill:managed": "false"}}, ["tags"]),
    ({**GOOD, "instance_type": "g5.xlarge"}, ["instance_type"]),
    ({**GOOD, "action": "destroy"}, ["action"]),
    ({"count": 0, "market": "cheap", "regions": ["nowhere-1"]}, ["count", "market", "regions"]),
    (["g6.xlarge"], ["(request)"]),
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
    assert "Nothing was launched" in execution.cause["message"]
