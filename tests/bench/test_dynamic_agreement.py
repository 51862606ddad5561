"""gpufill's dynamic replay (bench.dynamic.gpufill) against the real state machine on the local
engine, on one market that restocks, drains a pool under a running instance (EC2 reclaims it) and
restocks another for the refill: the same pools in the same order, the same tries, the same
one-off calls, launch times within the tries' own call latencies (the engine's clock moves with
Wait states only; the replay's also with each call's modelled latency)."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections import Counter

from gpufill import constants
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from gpufill.policy import waiting

from bench.cases import Case
from bench.costs import complete_engine_model
from bench.dynamic import engine_check, generate, gpufill
from bench.dynamic.generate import Change, DynamicCase


def stock(price, spot):
    return {"g6.xlarge": {"spot_price": price, "spot": spot}}


REGIONS = {
    "us-west-2": {"advisor_tier": {"g6.xlarge": 0}, "placement_score": {"g6.xlarge": 3},
                  "zones": {"us-west-2a": stock(0.40, 1), "us-west-2b": stock(0.42, 0)}},
    "us-east-1": {"advisor_tier": {"g6.xlarge": 0}, "placement_score": {"g6.xlarge": 2},
                  "zones": {"us-east-1a": stock(0.45, 0)}},
}
REQUEST = {"instance_types": ["g6.xlarge"], "count": 2, "regions": sorted(REGIONS)}
RECLAIM_AT = 1000.0
# One fits at once; a restock completes the fleet; a drain takes us-west-2a's capacity back from
# the instance there (the first launched); a restock in us-east-1a lets the refill land.
CHANGES = (
    Change(400.0, "us-west-2", "us-west-2b", "g6.xlarge", 1),
    Change(RECLAIM_AT, "us-west-2", "us-west-2a", "g6.xlarge", -1),
    Change(1300.0, "us-east-1", "us-east-1a", "g6.xlarge", 1),
)
SETUP = ("DescribeVpcs", "DescribeSecurityGroups", "CreateSecurityGroup", "CreateLaunchTemplate", "DescribeSubnets")
SCORING = ("DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory", "DescribeCapacityReservations",
           "GetSpotPlacementScores")


def on_engine() -> tuple[list[tuple[float, str]], Counter]:
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    complete_engine_model()
    scenario = {
        "regions": REGIONS,
        "restock": [{"at_seconds": c.at, "zone": c.zone, "type": c.instance_type, "spot": c.delta}
                    for c in CHANGES if c.delta > 0],
        # The drain takes more than is free in us-west-2a: EC2 reclaims the instance there.
        "drain": [{"at_seconds": c.at, "zone": c.zone, "type": c.instance_type, "spot": -c.delta}
                  for c in CHANGES if c.delta < 0],
    }
    launches: list[tuple[float, str]] = []
    with contextlib.redirect_stdout(io.StringIO()), LocalEngine(MarketScenario.model_validate(scenario)) as engine:
        admit = engine.market.admit

        def counted(backend, region, zone, itype, market, instances, **options):
            launches.extend([(engine.elapsed, zone)] * len(instances))
            return admit(backend, region, zone, itype, market, instances, **options)

        engine.market.admit = counted
        assert engine.run({**REQUEST, "wait_for_capacity": {"deadline": "PT12H"}, "maintain": True},
                          name="agree").output["status"] == "FULFILLED"
        engine.advance(RECLAIM_AT - engine.elapsed)
        engine.settle()
        [refill] = [n for n in engine.executions() if constants.REFILL_NAME_INFIX in n]
        assert engine.follow(refill).output["status"] == "FULFILLED"
        calls = Counter(c.split(":", 1)[1] for c in engine.calls.calls if c.startswith("ec2:"))
    return launches, calls


def test_the_replay_and_the_state_machine_agree_on_a_drain_a_reclaim_and_a_refill(monkeypatch):
    # The refill's jitter is seeded by its run's name, which on the engine holds the reclaimed
    # instance's random id: pinned here, so which pools a try leaves out (found full less than
    # WAIT_SKIP_FULL_SECONDS ago) is decided at the same seconds in both.
    monkeypatch.setattr(waiting, "jitter", lambda request_id, tries: 0.5)
    case = DynamicCase(start=Case(name="agree", scenario={"regions": REGIONS}, request=REQUEST, tier="scarce"),
                       changes=CHANGES)
    ec2 = gpufill.run(case, request_id="agree")
    launches, calls = on_engine()

    assert [i.zone for i in ec2.instances] == [zone for _, zone in launches] == ["us-west-2a", "us-west-2b", "us-east-1a"]
    assert ec2.reclaims == [ec2.instances[0]]
    # The replay's clock also runs during calls (seconds a try), the engine's with Wait states only.
    for (engine_at, _), mine in zip(launches, ec2.instances):
        assert abs(mine.launched_at - engine_at) <= 120
    # Scoring calls: only the tries that read the facts again (every WAIT_FACTS_TTL_SECONDS) make them.
    for api in SETUP + SCORING:
        assert ec2.calls[api] == calls[api], api
    # One image lookup per region a run enters, until it reads its facts again (run.prepared).
    assert ec2.calls["DescribeImages"] == calls["DescribeImages"]
    # One launch template version per run and region it launched in, deleted at the run's end.
    for api in ("CreateLaunchTemplateVersion", "DeleteLaunchTemplateVersions"):
        assert ec2.calls[api] == calls[api], (api, ec2.calls[api], calls[api])
    # The startup watch's reads of each complete run's instances, at the replay's measured rate.
    assert abs(calls["DescribeInstances"] - ec2.calls["DescribeInstances"]) <= 1
    # A known gap, bounded: the engine sends more fleets (its clock leaves out the tries' call
    # latencies, so a pool's age against WAIT_SKIP_FULL_SECONDS can differ by seconds). One with
    # the 100 s window and 2-minute cap; four (18 against 14) with the 120 s window and 150 s cap,
    # a gap not yet traced fleet by fleet.
    assert 0 <= calls["CreateFleet"] - ec2.calls["CreateFleet"] <= 4


def test_engine_check_finds_both_agreeing_on_a_generated_market_with_a_drain_a_reclaim_and_a_refill():
    """`python -m bench.dynamic.engine_check` on d01-ample-n1 of the committed seed: its drains play
    as the scenario's `drain` on the engine, one reclaims the instance and StartRefill's run replaces
    it. Both sides count the same calls by action but the launch template versions (counted apart)."""
    case = generate.generated(generate.DEFAULT_SEED)[1]
    found = engine_check.compared(case, engine_check.replay(case), engine_check.on_engine(case))
    assert found["same_pools"] and found["refills"] == 1
    assert found["instances"] == [2, 2] and found["interrupted"] == [1, 1]
    assert found["time_to_n"][0] == found["time_to_n"][1]
    assert found["fleets"][0] == found["fleets"][1]
    assert found["calls_differ"] == {}
    assert abs(found["dollars"][0] - found["dollars"][1]) <= 0.01 * found["dollars"][0]
