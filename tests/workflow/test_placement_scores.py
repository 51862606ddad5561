"""Spot placement scores as the capacity signal, and the classic fallback when they cannot be had."""

from gpufill.local.market import FEW_TYPES_SCORE_CAP
from tests.workflow.conftest import tried

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
        execution = engine.run(REQUEST, name="denied")
    assert execution.output["status"] == "FULFILLED"
    assert _plan(execution)["scoring"] == "classic (spot placement scores unavailable)"
    assert [z for z, *_ in tried(execution)][:1] == ["us-west-2a"]


def _plan(execution):
    import json

    exited = next(e for e in execution.history if e.get("stateExitedEventDetails", {}).get("name") == "RankPools")
    return json.loads(exited["stateExitedEventDetails"]["output"])["plan"]
