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


def test_a_drain_takes_free_capacity_first_then_reclaims_the_newest_spot_instance_not_yet_warned():
    # Four spot instances free in us-east-1a; the account runs two spot and one on-demand there.
    drains = [{"at_seconds": at, "zone": "us-east-1a", "type": "g6.xlarge", "spot": n} for at, n in ((100, 2), (200, 1), (300, 5))]
    scenario = MarketScenario.model_validate({**MARKET, "drain": drains})
    with LocalEngine(scenario, regions_config={"regions": [EAST]}, visibility_delay_calls=0) as account:
        first, second = _launch(account, EAST), _launch(account, EAST)
        _launch(account, EAST, spot=False)
        account.advance(100)  # two taken of the two free: nobody's instance is reclaimed
        assert account.market.left(EAST, "us-east-1a", "g6.xlarge", "spot") == 0
        assert account.reclaims == []
        account.advance(100)  # short by one: the newest spot instance is warned (the on-demand one is not EC2's to take)
        assert [(r.instance_id, r.market) for r in account.reclaims] == [(second, "spot")]
        assert [e["detail-type"] for e in _delivered(account, second)] == [constants.SPOT_INTERRUPTION_WARNING]
        account.advance(100)  # short again: the next newest, since the warned one is already going
        assert [r.instance_id for r in account.reclaims] == [second, first]
        account.advance(interruptions.SPOT_WARNING_SECONDS)
        ec2 = account.client("ec2", EAST)
        for gone in (first, second):
            described = ec2.describe_instances(InstanceIds=[gone])["Reservations"][0]["Instances"][0]
            assert described["StateReason"]["Code"] == "Server.SpotInstanceTermination"
        assert account.market.left(EAST, "us-east-1a", "g6.xlarge", "spot") == 0  # a reclaim frees nothing
