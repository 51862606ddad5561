"""Warm facts: a run within their TTL ranks from what the deployment's last run scored and
prepared, and goes to its first launch without ScoreRegions or PrepareRegion; past the TTL, or
when the request asks for fresh facts, it scores every region again."""

from gpufill.constants import WARM_LAUNCH_TTL_SECONDS, WARM_SCORING_TTL_SECONDS
from tests.support import zone

MARKET = {"regions": {
    "us-west-2": {"zones": {"us-west-2a": zone(0.4, spot=0), "us-west-2b": zone(0.45, spot=8)}},
    "us-east-1": {"zones": {"us-east-1a": zone(0.6, spot=8)}},
}}
REQUEST = {"count": 2, "regions": ["us-west-2", "us-east-1"], "ready_timeout": "PT0S"}
SCORING = ("DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory")
SET_UP = ("DescribeImages", "DescribeSubnets", "DescribeSecurityGroups", "CreateSecurityGroup", "DescribeVpcs")


def _ec2(execution) -> dict:
    return execution.metrics["ec2_calls"]


def test_a_second_run_within_the_ttl_makes_no_scoring_or_set_up_call_and_fills_the_same(local_account):
    with local_account(MARKET) as engine:
        first = engine.run(REQUEST, name="first")
        engine.advance(WARM_SCORING_TTL_SECONDS - 120)
        engine.cold_start()  # new containers: only what the table keeps is warm
        second = engine.run(REQUEST, name="second")
    assert first.output["status"] == second.output["status"] == "FULFILLED"
    assert all(_ec2(first).get(api) for api in SCORING) and "ScoreRegions" in first.entered()
    entered = second.entered()
    assert entered[: entered.index("LaunchBatch") + 1] == [
        "ValidateRequest", "IsRequestValid", "WhichAction", "RankFromWarmFacts", "AreFactsWarm", "UseWarmFacts",
        "IsPlanOnly", "LaunchBatch",
    ]
    assert "ScoreRegions" not in entered and "PrepareRegion" not in entered
    assert not any(_ec2(second).get(api) for api in SCORING + SET_UP)
    # The same ranking, so the same pools: us-west-2a is sold out, the fleet lands in us-west-2b.
    assert {i["availability_zone"] for i in second.output["instances"]} == {"us-west-2b"}
    assert second.output["attempts"] == first.output["attempts"]
    # Capacity is still read by the launch itself: the sold-out AZ answered as before.
    assert _ec2(second)["CreateFleet"] == 1


def test_stale_facts_are_scored_again_and_fresh_facts_when_asked(local_account):
    with local_account(MARKET) as engine:
        engine.run(REQUEST, name="first")
        engine.advance(WARM_SCORING_TTL_SECONDS + 1)
        engine.cold_start()
        stale = engine.run(REQUEST, name="stale")
        assert WARM_SCORING_TTL_SECONDS + 1 < WARM_LAUNCH_TTL_SECONDS
        forced = engine.run({**REQUEST, "facts": "fresh"}, name="forced")
    # Past the scoring TTL every region is scored again; the launch settings, good for longer, are not.
    assert "ScoreRegions" in stale.entered() and all(_ec2(stale).get(api) for api in SCORING)
    assert "PrepareRegion" in stale.entered() and not any(_ec2(stale).get(api) for api in SET_UP)
    assert stale.output["status"] == "FULFILLED"
    # "facts": "fresh" scores and prepares anew though everything is warm.
    assert "ScoreRegions" in forced.entered() and all(_ec2(forced).get(api) for api in SCORING)
    assert _ec2(forced).get("DescribeImages") and forced.output["status"] == "FULFILLED"


def test_the_scheduled_refresh_keeps_what_a_run_used_warm_through_an_idle_spell(local_account):
    idle = 2 * WARM_LAUNCH_TTL_SECONDS  # past both TTLs: without the refresh the run would score and prepare
    with local_account(MARKET, facts_refresh=True) as engine:
        engine.run(REQUEST, name="first")
        for _ in range(int(idle // 300)):  # Scheduler's passes, one every 5 modelled minutes
            engine.advance(300)
        engine.cold_start()
        later = engine.run(REQUEST, name="later")
        passes = [r for r in engine.schedule_runs if r["schedule"].endswith("-facts-refresh")]
    entered = later.entered()
    assert "ScoreRegions" not in entered and "PrepareRegion" not in entered
    assert entered[entered.index("UseWarmFacts") + 1: entered.index("LaunchBatch") + 1] == ["IsPlanOnly", "LaunchBatch"]
    assert not any(_ec2(later).get(api) for api in SCORING + SET_UP)
    assert later.output["status"] == "FULFILLED"
    # Every pass ran as the Scheduler role and answered; the ones that found facts due scored
    # both regions again (the first run launched in us-west-2 only, so only it is prepared again).
    assert passes and not any("error" in r for r in passes)
    refreshed = [r["answer"] for r in passes if r["answer"]["scoring"]]
    assert {s["region"] for a in refreshed for s in a["scoring"]} == {"us-west-2", "us-east-1"}
    assert {s["region"] for a in refreshed for s in a["launch"]} == {"us-west-2"}
