"""Modelled time: Wait states cost no wall time but move the clock the handlers read, and
capacity a scenario restocks appears when that clock reaches it."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from gpufill.adapters import clock
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario

ZONE = "us-east-1a"


def _scenario(**extra) -> MarketScenario:
    return MarketScenario.model_validate({
        "regions": {"us-east-1": {"zones": {ZONE: {"g6.xlarge": {"spot_price": 0.5, "spot": 0}}}}},
        **extra,
    })


def test_restocked_capacity_appears_when_modelled_time_reaches_it():
    scenario = _scenario(restock=[{"at_seconds": 7200, "zone": ZONE, "type": "g6.xlarge", "spot": 4}])
    with LocalEngine(scenario) as account:
        before = clock.epoch()
        account.advance(3600)
        assert account.market.left("us-east-1", ZONE, "g6.xlarge", "spot") == 0
        account.advance(3600)
        assert account.market.left("us-east-1", ZONE, "g6.xlarge", "spot") == 4
        assert account.elapsed == 7200
        # The handlers' clock moved two hours while the test took well under a minute.
        assert 7200 <= clock.epoch() - before < 7260
    assert abs(clock.epoch() - time.time()) < 1  # the engine leaves the clock as it found it


def test_a_wait_state_moves_the_clock_by_its_seconds_and_counts_in_the_modelled_time():
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    with LocalEngine(_scenario()) as account:
        fired = []
        account.at(600, lambda: fired.append(account.elapsed))
        WaitFunction._wait_interval(None, None, 900)  # what the interpreter calls for `"Seconds": 900`
        assert account.elapsed == 900
        assert fired == [900]
        assert account.calls.wait_seconds == [900]


def test_a_restock_of_a_zone_the_scenario_does_not_list_is_refused():
    with pytest.raises(ValidationError, match=r"restock\[0\]: us-east-1b does not list g6.xlarge"):
        _scenario(restock=[{"at_seconds": 60, "zone": "us-east-1b", "type": "g6.xlarge", "spot": 1}])


def test_a_drain_of_a_zone_the_scenario_does_not_list_or_of_nothing_is_refused():
    with pytest.raises(ValidationError, match=r"drain\[0\]: us-east-1b does not list g6.xlarge"):
        _scenario(drain=[{"at_seconds": 60, "zone": "us-east-1b", "type": "g6.xlarge", "spot": 1}])
    with pytest.raises(ValidationError, match=r"drain\.0\.spot"):
        _scenario(drain=[{"at_seconds": 60, "zone": ZONE, "type": "g6.xlarge", "spot": 0}])


def test_an_instance_launched_after_modelled_hours_has_ec2s_launch_time_on_that_clock():
    """EC2's LaunchTime is when the launch happened: what spend since launch is counted from."""
    scenario = MarketScenario.model_validate({"regions": {"us-east-1": {"zones": {ZONE: {"g6.xlarge": {"on_demand": 2}}}}}})
    with LocalEngine(scenario) as account:
        account.advance(48 * 3600)
        ec2 = account.client("ec2", "us-east-1")
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        [launched] = ec2.run_instances(ImageId=image, InstanceType="g6.xlarge", MinCount=1, MaxCount=1,
                                       Placement={"AvailabilityZone": ZONE})["Instances"]
        assert abs(launched["LaunchTime"].timestamp() - clock.epoch()) < 60
