"""Every valid request fits Step Functions' limits: 256 KB a state, 25,000 history events.

The largest valid request: count 250 over every catalog region x 10 instance types x 4 AZs
(600 pools a market). One representative case runs in `make test`; the sweeps over modes and
empty markets take minutes and run in `make test-all`.
"""

import pytest

from gpufill import constants

from tests.support.maxima import TEN_TYPES, every_region, maxima_market


def request(**fields):
    return {"count": 250, "instance_types": TEN_TYPES, "regions": every_region(), **fields}


def test_a_fleet_of_250_over_every_region_and_ten_types_fits(run_at_maxima):
    execution, largest, events = run_at_maxima(request(), maxima_market(spot=40), "max-fill")
    assert execution.status == "SUCCEEDED", execution.cause
    result = execution.output
    assert (result["status"], result["launched"], len(result["instances"])) == ("FULFILLED", 250, 250)
    assert largest < constants.STATE_SIZE_LIMIT_BYTES and events < constants.HISTORY_EVENTS_LIMIT


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exact", "fleet"])
def test_no_spot_anywhere_ends_all_spot_exhausted_not_a_data_limit(run_at_maxima, mode):
    execution, largest, events = run_at_maxima(request(launch_mode=mode), maxima_market(), f"max-empty-{mode}")
    assert (execution.status, execution.error) == ("FAILED", "ALL_SPOT_EXHAUSTED")
    assert execution.cause["launched"] == 0 and len(execution.cause["pools_tried"]) >= 150
    assert largest < constants.STATE_SIZE_LIMIT_BYTES and events < constants.HISTORY_EVENTS_LIMIT


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["partial", "exact", "fleet"])
def test_spot_then_on_demand_at_the_maxima_reaches_the_on_demand_path_and_fills(run_at_maxima, mode):
    market = maxima_market(spot=0, on_demand=1)
    execution, largest, events = run_at_maxima(request(launch_mode=mode, market="spot-then-on-demand"), market, f"max-od-{mode}")
    assert execution.status == "SUCCEEDED", execution.cause
    result = execution.output
    assert result["launched"] == 250 and {i["market"] for i in result["instances"]} == {"on-demand"}
    # Every pool answers: the result keeps the newest 300 attempts of the thousands made.
    assert result["attempts_total"] > len(result["attempts"]) == 300
    assert largest < constants.STATE_SIZE_LIMIT_BYTES and events < constants.HISTORY_EVENTS_LIMIT


@pytest.mark.slow
def test_a_small_request_over_the_largest_market_with_nothing_anywhere_names_every_pool(run_at_maxima):
    execution, largest, events = run_at_maxima(
        request(count=4, launch_mode="exact", market="spot-then-on-demand"), maxima_market(), "max-nothing")
    assert (execution.status, execution.error) == ("FAILED", "ALL_ON_DEMAND_FAILED")
    assert largest < constants.STATE_SIZE_LIMIT_BYTES and events < constants.HISTORY_EVENTS_LIMIT


@pytest.mark.slow
def test_250_servers_that_never_answer_within_two_hours_fit(run_at_maxima):
    # The longest wait (ready_timeout PT2H, a check a minute) with every instance's verdict and
    # reason in the state: the largest readiness loop a valid request can make.
    market = {**maxima_market(spot=40), "startup": {"stalls_at": "pulling image and syncing model"}}
    execution, largest, events = run_at_maxima(request(ready_timeout="PT2H"), market, "max-never-serves")
    assert execution.status == "SUCCEEDED", execution.cause
    result = execution.output
    assert (result["launched"], result["instances_serving"]) == (250, 0)
    assert {i["serving_reason"] for i in result["instances"]} == {
        "still at startup step 'pulling image and syncing model' when ready_timeout PT2H ran out"}
    # A check a minute for two hours, and the first at once: at most 121 (the handlers' clock also
    # counts the wall time the checks themselves take, so a slow machine makes fewer).
    assert 100 < execution.entered().count("CheckServing") <= 121
    assert largest < constants.STATE_SIZE_LIMIT_BYTES and events < constants.HISTORY_EVENTS_LIMIT
    print(f"max-never-serves: largest state {largest} bytes, {events} history events")
