"""Spot placement scores as the capacity signal, and the classic fallback when they cannot be had."""

from gpufill.local.market_answers import FEW_TYPES_SCORE_CAP
from tests.support import tried

# Oregon's cheapest AZ is empty; AWS's placement scores know it, the AZ count does not.
MARKET = {"regions": {
    "us-west-2": {"advisor_tier": {"g6.xlarge": 1}, "placement_score": {"g6.xlarge": 3}, "zones": {
        "us-west-2a": {"g6.xlarge": {"spot_price": 0.40, "spot": 0, "placement_score": 1}},
        "us-west-2b": {"g6.xlarge": {"spot_price": 0.44, "spot": 1, "placement_score": 2}},
        "us-west-2c": {"g6.xlarge": {"spot_price": 0.46, "spot": 8, "placement_score": 9}}}},
    "us-east-1": {"advisor_tier": {"g6.xlarge": 1}, "placement_score": {"g6.xlarge": 9}, "zones": {
        "us-east-1a": {"g6.xlarge": {"spot_price": 0.41, "spot": 8}}}},
}}
REQUEST = {"count": 4, "regions": ["us-west-2", "us-east-1"], "launch_mode": "partial"}  # pool by pool, in rank order


def test_blended_scoring_asks_the_likeliest_pool_first(simulate):
    blended = simulate({**REQUEST, "scoring": "blended"}, MARKET, name="blended")
    classic = simulate({**REQUEST, "scoring": "classic"}, MARKET, name="classic")
    assert tried(blended) == [("us-west-2c", 4, 4, "launched")]
    assert [z for z, *_ in tried(classic)] == ["us-west-2a", "us-west-2b", "us-west-2c"]
    assert blended.metrics["ec2_calls"]["RunInstances"] < classic.metrics["ec2_calls"]["RunInstances"]
    plan = _plan(blended)
    assert plan["scoring"] == "blended"
    oregon = next(s for s in plan["regions"] if s["region"] == "us-west-2")
    # One acceptable type: AWS's scores stay low (capped), but their order still points at 2c.
    assert oregon["placement_score"] == FEW_TYPES_SCORE_CAP
    assert oregon["points"] == {"price": 40, "capacity": int(40 * FEW_TYPES_SCORE_CAP / 10), "interruption": 15}
    assert "GetSpotPlacementScores" not in classic.metrics["ec2_calls"]


def test_denied_placement_scores_fall_back_to_classic_and_the_run_goes_on(local_account):
    with local_account(MARKET) as engine:
        engine.market.placement_scores_denied = True
        execution = engine.run({**REQUEST, "scoring": "blended"}, name="denied")
    assert execution.output["status"] == "FULFILLED"
    assert _plan(execution)["scoring"] == "classic (spot placement scores unavailable)"
    assert [z for z, *_ in tried(execution)][:1] == ["us-west-2a"]


def _plan(execution):
    import json

    exited = next(e for e in execution.history if e.get("stateExitedEventDetails", {}).get("name") == "RankPools")
    return json.loads(exited["stateExitedEventDetails"]["output"])["plan"]


# Ohio is a little cheaper but AWS rates a fleet there unlikely (and it is empty); Virginia it rates well.
REGION_MARKET = {"regions": {
    "us-east-2": {"advisor_tier": {"g6.xlarge": 0}, "placement_score": {"g6.xlarge": 1}, "zones": {
        f"us-east-2{z}": {"g6.xlarge": {"spot_price": 0.40, "spot": 0}} for z in "abc"}},
    "us-east-1": {"advisor_tier": {"g6.xlarge": 1}, "placement_score": {"g6.xlarge": 9}, "zones": {
        "us-east-1a": {"g6.xlarge": {"spot_price": 0.43, "spot": 2}},
        "us-east-1b": {"g6.xlarge": {"spot_price": 0.42, "spot": 8}}}},
}}
FLEET_REQUEST = {"count": 4, "regions": ["us-east-2", "us-east-1"]}  # the defaults: a fleet per region, price-capacity


def test_price_capacity_sends_the_fleet_to_the_region_aws_rates_likely_to_fill_past_a_slightly_cheaper_one(simulate):
    run = simulate(FLEET_REQUEST, REGION_MARKET, name="price-capacity")
    assert run.output["status"] == "FULFILLED"
    assert run.metrics["ec2_calls"]["CreateFleet"] == 1
    assert run.metrics["ec2_calls"]["GetSpotPlacementScores"] == 1
    assert {i["availability_zone"] for i in run.output["instances"]} == {"us-east-1b"}
    plan = _plan(run)
    assert plan["scoring"] == "price-capacity"
    scores = {s["region"]: s for s in plan["regions"]}
    # One type asked: AWS caps the scores at 3, and Ohio's own 1 stays 1.
    assert (scores["us-east-1"]["placement_score"], scores["us-east-2"]["placement_score"]) == (FEW_TYPES_SCORE_CAP, 1)
    assert scores["us-east-1"]["price_per_fill"] < scores["us-east-2"]["price_per_fill"]
    # By price alone (the classic formula here: Ohio has more AZs and a better tier) Ohio goes first and costs a fleet.
    by_price = simulate({**FLEET_REQUEST, "scoring": "classic"}, REGION_MARKET, name="classic-fleet")
    assert by_price.metrics["ec2_calls"]["CreateFleet"] == 2


def test_price_capacity_without_placement_scores_orders_regions_by_price_and_the_run_goes_on(local_account):
    with local_account(REGION_MARKET) as engine:
        engine.market.placement_scores_denied = True
        execution = engine.run(FLEET_REQUEST, name="price-capacity-denied")
    assert execution.output["status"] == "FULFILLED"
    plan = _plan(execution)
    assert plan["scoring"] == "price-capacity (spot placement scores unavailable: by price)"
    assert [s["region"] for s in plan["regions"]][:1] == ["us-east-2"]
    assert execution.metrics["ec2_calls"]["CreateFleet"] == 2
