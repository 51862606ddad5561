"""Scheduled interruptions (the market's `interruptions`): a spot instance is warned two minutes
before EC2 ends it with Server.SpotInstanceTermination; an on-demand one ends at once, as a host
failure. Each test has its own simulated account: instance n counts from the account's start."""

from __future__ import annotations

from gpufill import constants
from gpufill.local import interruptions
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.engine.test_engine_events import EAST, MARKET, _delivered, _launch


def test_a_scheduled_spot_interruption_warns_then_ends_the_instance_two_minutes_later():
    scenario = MarketScenario.model_validate({**MARKET, "interruptions": [{"at_seconds": 300, "instance": 2}]})
    with LocalEngine(scenario, regions_config={"regions": [EAST]}, visibility_delay_calls=0) as account:
        _launch(account, EAST, spot=False)
        second = _launch(account, EAST)
        ec2 = account.client("ec2", EAST)
        account.advance(299)
        assert _delivered(account, second) == []
        account.advance(1)
        assert [e["detail-type"] for e in _delivered(account, second)] == [constants.SPOT_INTERRUPTION_WARNING]
        assert _delivered(account, second)[0]["detail"] == {"instance-id": second, "instance-action": "terminate"}
        assert ec2.describe_instances(InstanceIds=[second])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"
        account.advance(interruptions.SPOT_WARNING_SECONDS - 1)
        assert len(_delivered(account, second)) == 1
        account.advance(1)
        states = sorted(e["detail"].get("state", "") for e in _delivered(account, second))
        assert states == ["", "shutting-down", "terminated"]
        described = ec2.describe_instances(InstanceIds=[second])["Reservations"][0]["Instances"][0]
        assert described["State"]["Name"] == "terminated"
        assert described["StateReason"]["Code"] == "Server.SpotInstanceTermination"
        [reclaim] = account.reclaims
        assert (reclaim.instance, reclaim.instance_id, reclaim.market) == (2, second, "spot")


def test_an_on_demand_instance_ends_at_once_with_a_host_failure():
    scenario = MarketScenario.model_validate({**MARKET, "interruptions": [{"at_seconds": 60, "instance": 1}]})
    with LocalEngine(scenario, regions_config={"regions": [EAST]}, visibility_delay_calls=0) as account:
        first = _launch(account, EAST, spot=False)
        account.advance(60)
        assert sorted(e["detail"]["state"] for e in _delivered(account, first)) == ["shutting-down", "terminated"]
        described = account.client("ec2", EAST).describe_instances(InstanceIds=[first])["Reservations"][0]["Instances"][0]
        assert described["StateReason"]["Code"] == "Server.InternalError"
        assert account.reclaims[0].note == "on-demand host failure: terminated by EC2"
