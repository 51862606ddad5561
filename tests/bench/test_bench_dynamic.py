"""The dynamic markets and their strategies: the same seed gives the same markets, the public
signals stay estimates, no strategy can see hidden capacity, and each baseline keeps the rules
its project's source sets (the modules cite them)."""

from __future__ import annotations

import json

import pytest
from gpufill.local.scenario import MarketScenario
from gpufill.models.request import Request
from gpufill.policy import waiting

from bench import leak
from bench.cases import TIERS, Case
from bench.dynamic import broker, generate, gpufill, karpenter, measure, skypilot
from bench.dynamic.generate import HORIZON_SECONDS, Change, DynamicCase, capacity_at
from bench.dynamic.market import MONTH_SECONDS, SPOT_NOTICE_SECONDS, Ec2, Instance


def stock(price, spot):
    return {"g6.xlarge": {"spot_price": price, "spot": spot}}


def dynamic(regions: dict, count: int, changes=()) -> DynamicCase:
    request = {"instance_types": ["g6.xlarge"], "count": count, "regions": sorted(regions)}
    start = Case(name="hand", scenario={"regions": regions}, request=request, tier="tight")
    return DynamicCase(start=start, changes=tuple(changes))


# Oregon is cheaper; its cheaper zone is empty, its dearer one holds 4. Virginia holds 4.
TWO_REGIONS = {
    "us-west-2": {"advisor_tier": {"g6.xlarge": 0},
                  "zones": {"us-west-2a": stock(0.40, 0), "us-west-2b": stock(0.42, 4)}},
    "us-east-1": {"advisor_tier": {"g6.xlarge": 3}, "zones": {"us-east-1a": stock(0.45, 4)}},
}
SOLD_OUT = {
    "us-west-2": {"advisor_tier": {"g6.xlarge": 0},
                  "zones": {"us-west-2a": stock(0.40, 0), "us-west-2b": stock(0.42, 0)}},
    "us-east-1": {"advisor_tier": {"g6.xlarge": 3}, "zones": {"us-east-1a": stock(0.45, 0)}},
}


class Recorded(Exception):
    pass


def first_launch(strategy_module, case: DynamicCase, run=None):
    """The first launch call a strategy makes on `case`, with its arguments."""
    seen = []

    class Recording(Ec2):
        def run_instances(self, *args, **kwargs):
            seen.append(("RunInstances", args, kwargs))
            raise Recorded

        def create_fleet(self, *args, **kwargs):
            seen.append(("CreateFleet", args, kwargs))
            raise Recorded

    original = strategy_module.Ec2
    strategy_module.Ec2 = Recording
    try:
        with pytest.raises(Recorded):
            (run or strategy_module.run)(case)
    finally:
        strategy_module.Ec2 = original
    return seen[0]


# --- the generator ---------------------------------------------------------------------------


def test_same_seed_same_markets_other_seed_other_markets():
    first, again, other = generate.generated(7), generate.generated(7), generate.generated(8)
    assert [(c.name, c.start.scenario, c.changes) for c in first] == [(c.name, c.start.scenario, c.changes) for c in again]
    assert [c.changes for c in first] != [c.changes for c in other]


def test_markets_drain_restock_and_come_back_in_waves_over_twelve_hours():
    cases = generate.generated(3)
    assert {c.count for c in cases} == set(generate.COUNTS) and {c.tier for c in cases} == set(TIERS)
    for case in cases:
        MarketScenario.model_validate(case.start.scenario)
        Request.model_validate(case.start.request)
        assert not any("quota" in m for m in case.start.scenario["regions"].values())
        assert all(0 < c.at < HORIZON_SECONDS for c in case.changes)
        assert [c.at for c in case.changes] == sorted(c.at for c in case.changes)
        assert any(c.delta > 0 for c in case.changes) and any(c.delta < 0 for c in case.changes)
    # Capacity moves: most markets hold more somewhere at hour 6 than at hour 0, and less somewhere else.
    moved = [c for c in cases if capacity_at(c, 6 * 3600) != capacity_at(c, 0)]
    assert len(moved) == len(cases)


def test_hour_zero_scores_are_estimates_and_say_nothing_of_what_comes_later():
    cases = [c for seed in (1, 2, 3) for c in generate.generated(seed)]
    starts = [c.start for c in cases]
    raw, returned = leak.score_auc(starts), leak.score_auc(starts, as_returned=True)
    assert 0.55 < raw < 0.8, raw  # informative at hour 0, far from an oracle: the static generator's band
    assert returned <= raw + 0.02
    assert 0.55 < leak.region_score_auc(starts) < 0.8
    assert abs(leak.advisor_auc(starts) - 0.5) < 0.08
    # Whether a pool gets capacity back later is not in its hour-0 score.
    scores, restocked = [], []
    for case in cases:
        gains = {ch.pool for ch in case.changes if ch.delta > 0}
        for region, zone, itype, _, raw_score in leak._pools(case.start):
            scores.append(raw_score or 0)
            restocked.append((region, zone, itype) in gains)
    assert abs(leak.auc(scores, restocked) - 0.5) < 0.08


# --- blind to hidden capacity ------------------------------------------------------------------

STRATEGY_RUNS = {
    "skypilot": (skypilot, None),
    "karpenter": (karpenter, None),
    "broker": (broker, None),
    "classic": (gpufill, lambda case: gpufill.run(case, "classic")),
    "gpufill": (gpufill, None),
}


@pytest.mark.parametrize("strategy", sorted(STRATEGY_RUNS))
def test_no_strategy_moves_on_hidden_capacity(strategy):
    """Two markets alike in all AWS tells any account, one full and one sold out with other changes
    to come: every strategy makes the same first launch call in both."""
    module, run = STRATEGY_RUNS[strategy]
    full = dynamic(TWO_REGIONS, 4)
    empty = dynamic(SOLD_OUT, 4, [Change(60.0, "us-east-1", "us-east-1a", "g6.xlarge", 9)])
    assert first_launch(module, full, run) == first_launch(module, empty, run)
    for case in generate.generated(5)[:10]:
        hidden = json.loads(json.dumps(case.start.scenario))
        for market in hidden["regions"].values():
            for types in market["zones"].values():
                for s in types.values():
                    s["spot"] = 0
        other = DynamicCase(start=Case(case.name, hidden, case.start.request, case.tier), changes=())
        assert first_launch(module, case, run) == first_launch(module, other, run), case.name


def test_the_market_keeps_capacity_out_of_reach():
    ec2 = Ec2(dynamic(TWO_REGIONS, 4))
    public = {k for k in vars(ec2) if not k.startswith("_")}
    assert public == {"now", "calls", "instances", "reclaims", "set_up", "warm"}


# --- the baselines keep their project's rules ------------------------------------------------


def test_skypilot_tries_zones_cheapest_first_with_all_nodes_and_blocks_a_zone_after_capacity():
    ec2 = skypilot.run(dynamic(TWO_REGIONS, 4))
    # us-west-2a (cheapest, empty) fails CREATE_TRIES_PER_ZONE times, is blocked; us-west-2b holds all 4.
    assert ec2.calls["RunInstances"] == skypilot.CREATE_TRIES_PER_ZONE + 1
    assert {(i.zone, i.instance_type) for i in ec2.instances} == {("us-west-2b", "g6.xlarge")}
    assert len(ec2.instances) == 4


def test_skypilot_never_launches_part_of_a_cluster():
    # Three free in each zone: no zone holds all four, so nothing launches, round after round.
    three = {"us-west-2": {"advisor_tier": {"g6.xlarge": 0},
                           "zones": {"us-west-2a": stock(0.40, 3), "us-west-2b": stock(0.42, 3)}}}
    ec2 = skypilot.run(dynamic(three, 4))
    assert ec2.instances == [] and ec2.now >= HORIZON_SECONDS


def test_skypilot_retries_every_zone_after_its_gap_with_a_fresh_blocklist():
    one_zone = {"us-west-2": {"advisor_tier": {"g6.xlarge": 0}, "zones": {"us-west-2a": stock(0.40, 0)}}}
    restock_at = 100.0
    ec2 = skypilot.run(dynamic(one_zone, 2, [Change(restock_at, "us-west-2", "us-west-2a", "g6.xlarge", 2)]))
    round_seconds = skypilot.CREATE_TRIES_PER_ZONE * 1.5  # RunInstances' modelled latency
    gap = skypilot.RETRY_UNTIL_UP_GAP_SECONDS
    # Rounds start every round + gap; the zone is asked again each round; the first round after the
    # restock launches.
    rounds_before = 1
    while rounds_before * (round_seconds + gap) + 1.5 < restock_at:
        rounds_before += 1
    launched_at = ec2.instances[0].launched_at
    assert launched_at == pytest.approx(rounds_before * (round_seconds + gap) + 1.5)
    assert ec2.calls["RunInstances"] == rounds_before * skypilot.CREATE_TRIES_PER_ZONE + 1


def test_karpenter_leaves_an_ice_offering_out_for_three_minutes_then_asks_again():
    one_zone = {"us-west-2": {"advisor_tier": {"g6.xlarge": 0},
                              "zones": {"us-west-2a": stock(0.40, 0), "us-west-2b": stock(0.42, 0)}}}
    calls = []

    class Watched(Ec2):
        def create_fleet(self, region, overrides, target):
            calls.append((round(self.now), tuple(overrides)))
            return super().create_fleet(region, overrides, target)

    original, karpenter.Ec2 = karpenter.Ec2, Watched
    try:
        ec2 = karpenter.run(dynamic(one_zone, 1, [Change(400.0, "us-west-2", "us-west-2b", "g6.xlarge", 1)]))
    finally:
        karpenter.Ec2 = original
    assert len(ec2.instances) == 1
    # Both offerings go into the ICE cache at once; the next fleet comes when the sweep after the
    # 3-minute TTL frees them, not before.
    gaps = [b[0] - a[0] for a, b in zip(calls, calls[1:])]
    assert all(gap >= karpenter.ICE_TTL_SECONDS for gap in gaps), calls
    assert all(gap <= karpenter.ICE_TTL_SECONDS + karpenter.ICE_SWEEP_SECONDS + 3 for gap in gaps), calls
    # At 1 s, after each TTL, the fourth after the restock at 400 s, which it launches from.
    assert len(calls) == 4 and calls[-2][0] < 400 < calls[-1][0]


def test_karpenter_asks_one_region_after_another_and_replaces_a_reclaimed_node():
    east_later = {**TWO_REGIONS, "us-east-1": {"advisor_tier": {"g6.xlarge": 3}, "zones": {"us-east-1a": stock(0.45, 0)}}}
    case = dynamic(east_later, 6, [Change(1000.0, "us-west-2", "us-west-2b", "g6.xlarge", -1),
                                   Change(1200.0, "us-east-1", "us-east-1a", "g6.xlarge", 3)])
    ec2 = karpenter.run(case)
    regions = [i.region for i in ec2.instances]
    assert regions == ["us-west-2"] * 4 + ["us-east-1"] * 3
    assert sum(i.interrupted for i in ec2.instances) == 1  # and its pod went pending again: 3 launched, not 2
    assert ec2.running() == 6 and measure.time_to_n(ec2.instances, 6) > 1200
    # Every node is read and tagged once it registers, the replacement too.
    assert ec2.calls["DescribeInstances"] == ec2.calls["CreateTags"] == 7


def test_gpufill_waits_as_its_wait_policy_says_and_finds_the_restock():
    restock_at = 3000.0
    case = dynamic(SOLD_OUT, 2, [Change(restock_at, "us-east-1", "us-east-1a", "g6.xlarge", 2)])
    times = []

    class Watched(Ec2):
        def create_fleet(self, region, overrides, target):
            times.append(self.now)
            return super().create_fleet(region, overrides, target)

    original, gpufill.Ec2 = gpufill.Ec2, Watched
    try:
        ec2 = gpufill.run(case, asked=gpufill.Asked(skip_full=0))  # every try asks every pool: a fleet marks each try
    finally:
        gpufill.Ec2 = original
    assert {i.zone for i in ec2.instances} == {"us-east-1a"} and len(ec2.instances) == 2
    # The startup watch reads the instances in the one region they landed in: a first call that
    # EC2 answers without the two new instances, and the one more ask that finds them.
    assert ec2.calls["DescribeInstances"] == gpufill.CHECK_SERVING_CALLS_PER_REGION + 1 + 1
    # Only the first try and the first after each WAIT_FACTS_TTL_SECONDS score the 2 regions again.
    assert ec2.calls["DescribeSpotPriceHistory"] == 2 * (1 + int(restock_at // gpufill.WAIT_FACTS_TTL_SECONDS))
    # The gaps between tries are the wait policy's delays: 60 s doubling, jittered, the tries' own calls on top.
    tries = [t for n, t in enumerate(times) if n == 0 or t - times[n - 1] > 30]
    for n, (a, b) in enumerate(zip(tries, tries[1:]), start=1):
        delay = waiting.delay(n, waiting.jitter(gpufill.REQUEST_ID, n))
        assert delay <= b - a < delay + 30, (n, b - a, delay)
    assert tries[-1] >= restock_at > tries[-2]


def test_a_gpufill_try_leaves_out_the_pools_found_full_moments_ago_and_sends_them_the_try_after():
    case = dynamic(SOLD_OUT, 2, [Change(3000.0, "us-east-1", "us-east-1a", "g6.xlarge", 2)])
    every = gpufill.run(case, asked=gpufill.Asked(skip_full=0))
    default = gpufill.run(case)
    # The try after the first 45-60 s wait asks nothing (both regions answered less than 100 s before).
    assert default.calls["CreateFleet"] < every.calls["CreateFleet"]
    assert {i.zone for i in default.instances} == {"us-east-1a"} and len(default.instances) == 2


def test_gpufill_refills_an_instance_reclaimed_while_it_waits():
    # Oregon is cheaper and empty; Virginia holds 2 of 3. At 30 s, while the run waits for the third,
    # EC2 reclaims one; at 200 s Virginia frees two.
    short = {**SOLD_OUT, "us-east-1": {"advisor_tier": {"g6.xlarge": 3}, "zones": {"us-east-1a": stock(0.45, 2)}}}
    case = dynamic(short, 3, [Change(30.0, "us-east-1", "us-east-1a", "g6.xlarge", -1),
                              Change(200.0, "us-east-1", "us-east-1a", "g6.xlarge", 2)])
    fleets = []

    class Watched(Ec2):
        def create_fleet(self, region, overrides, target):
            fleets.append((self.now, region, target))
            return super().create_fleet(region, overrides, target)

    original, gpufill.Ec2 = gpufill.Ec2, Watched
    try:
        ec2 = gpufill.run(case)
    finally:
        gpufill.Ec2 = original
    # The request's first try: the cheaper Oregon first, then Virginia for everything missing.
    assert [(region, target) for _, region, target in fleets[:2]] == [("us-west-2", 3), ("us-east-1", 3)]
    # The run keeps counting the reclaimed instance, so it asks for one more; the refill run (maintain,
    # from the notice at 30 s, seen at the run's next try) asks for the one reclaimed. Both find
    # Virginia's two after 200 s.
    refill = [f for f in fleets if 30 < f[0] < 90]
    assert refill and all(target == 1 for _, _, target in refill)
    assert [i.interrupted for i in ec2.instances] == [False, True, False, False]
    assert ec2.running() == 3 and measure.time_to_n(ec2.instances, 3) > 200


def test_gpufill_all_or_nothing_hands_back_a_short_try_and_waits_holding_nothing():
    # Virginia holds 2 of 3 at first; at 1000 s it frees one more. Each try before takes the two and hands
    # them back (their capacity free again); the try after 1000 s takes all three at once.
    short = {**SOLD_OUT, "us-east-1": {"advisor_tier": {"g6.xlarge": 3}, "zones": {"us-east-1a": stock(0.45, 2)}}}
    case = dynamic(short, 3, [Change(1000.0, "us-east-1", "us-east-1a", "g6.xlarge", 1)])
    asked = gpufill.Asked(first_delay=60, max_delay=120, all_or_nothing=True)
    ec2 = gpufill.run(case, asked=asked)
    handed_back, kept = ec2.instances[:-3], ec2.instances[-3:]
    assert len(handed_back) >= 10 and len(handed_back) % 2 == 0 and all(i.ended_at is not None for i in handed_back)
    assert all(i.ended_at is None and i.launched_at > 1000 for i in kept)
    # Never more than the count at once, and none held across a wait: each pair ends in its own try.
    assert all(sum(i.running(t) for i in ec2.instances) <= 3 for t in [i.launched_at for i in ec2.instances])
    assert all(b.ended_at - a.launched_at < 10 for a, b in zip(handed_back[::2], handed_back[1::2]))
    assert ec2.calls["TerminateInstances"] == len(handed_back) // 2
    # Without all_or_nothing the same market keeps the two from the first try.
    assert gpufill.run(case, asked=gpufill.Asked(max_delay=120)).instances[0].ended_at is None


def test_the_backoff_bench_measures_each_cap_with_and_without_all_or_nothing():
    from bench.dynamic import backoff

    case = dynamic(SOLD_OUT, 2, [Change(1500.0, "us-east-1", "us-east-1a", "g6.xlarge", 2)])
    found = backoff.measure([case], [60, 900])
    assert list(found) == [(60, False), (900, False), (60, True), (900, True)]
    # The restock is found at the first try after it that asks the pool again (a try leaves out
    # a pool found full less than WAIT_SKIP_FULL_SECONDS ago): sooner with the shorter cap.
    assert 1500 < found[(60, False)][0].time_to_n < 1500 + gpufill.WAIT_SKIP_FULL_SECONDS + 60
    assert found[(60, False)][0].time_to_n < found[(900, False)][0].time_to_n
    header, rows = backoff.table(found, found[(60, False)])
    assert header[:3] == ["cap", "all_or_nothing", "filled"] and [r[:3] for r in rows] == [
        ["60 s", "no", "1/1"], ["15 min", "no", "1/1"], ["60 s", "yes", "1/1"], ["15 min", "yes", "1/1"], ["karpenter-style", "", "1/1"]]


def test_measures_bill_reclaimed_instances_and_count_idle_hours():
    case = dynamic(TWO_REGIONS, 3)
    ec2 = Ec2(case)
    ec2.instances = [
        Instance("us-west-2", "us-west-2b", "g6.xlarge", 1.0, 0.0),
        Instance("us-west-2", "us-west-2b", "g6.xlarge", 1.0, 0.0, ended_at=1800.0, interrupted=True),
        Instance("us-east-1", "us-east-1a", "g6.xlarge", 2.0, 3600.0),
        Instance("us-east-1", "us-east-1a", "g6.xlarge", 2.0, 3600.0),
    ]
    o = measure.outcome(case, "x", ec2)
    assert o.time_to_n == 3600.0  # three at once only when the last two came
    assert o.dollars == pytest.approx(2.0 + 0.5 + 2.0 + 2.0)  # first: 2 h; reclaimed: 0.5 h; the others: the hour of work
    assert o.idle_dollars == pytest.approx(1.0 + 0.5)
    assert o.wasted_hours == pytest.approx(1.5) and o.interrupted == 1


def test_quick_run_writes_the_report_and_plots_with_every_target_judged(tmp_path):
    from bench.dynamic.__main__ import main

    assert main(["--quick", "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    # The three targets, and the six goals on the committed seeds (a quick run draws no held-out seed):
    # four for the default request, two for all_or_nothing with wait_for_capacity.
    assert report.count("**MET**") + report.count("**MISSED**") == 3 + 6
    assert report.count("| `all_or_nothing` + `wait_for_capacity`:") == 2
    assert "### Where the EC2 calls go" in report and "### The wait's calls, setting by setting" not in report
    assert (tmp_path / "time-to-n.png").stat().st_size > 0 and (tmp_path / "dollars.png").stat().st_size > 0
    assert SPOT_NOTICE_SECONDS == 120


def test_ec2_reclaims_at_the_advisor_tiers_monthly_rate_and_the_same_launch_meets_the_same_fate():
    deep = {
        "us-west-2": {"advisor_tier": {"g6.xlarge": 0}, "zones": {"us-west-2b": stock(0.42, 400)}},
        "us-east-1": {"advisor_tier": {"g6.xlarge": 4}, "zones": {"us-east-1a": stock(0.45, 400)}},
    }
    case = dynamic(deep, 400)
    first, again = Ec2(case), Ec2(case)
    for ec2 in (first, again):
        ec2.run_instances("us-west-2", "g6.xlarge", 400, zone="us-west-2b")
        ec2.run_instances("us-east-1", "g6.xlarge", 400, zone="us-east-1a")
    assert [i.reclaim_at for i in first.instances] == [i.reclaim_at for i in again.instances]
    mean = lambda tier: sum(i.reclaim_at - i.launched_at for i in first.instances if i.tier == tier) / 400  # noqa: E731
    month = MONTH_SECONDS
    assert 0.7 < mean(0) / (month / 0.025) < 1.3 and 0.7 < mean(4) / (month / 0.25) < 1.3
    soonest = min(first.instances, key=lambda i: i.reclaim_at)
    first.wait_until(soonest.reclaim_at)
    assert first.reclaims == [soonest] and soonest.interrupted
    assert soonest.ended_at == soonest.reclaim_at + SPOT_NOTICE_SECONDS


def test_measures_price_a_working_fleets_reclaims_with_the_reload_and_the_time_short():
    reload_h = measure.RELOAD_MINUTES / 60
    working = Instance("us-west-2", "us-west-2b", "g6.xlarge", 1.0, 0.0, tier=4)
    gone = Instance("us-west-2", "us-west-2b", "g6.xlarge", 2.0, 0.0, ended_at=1800.0, interrupted=True, tier=0)
    early = Instance("us-west-2", "us-west-2b", "g6.xlarge", 4.0, 0.0, ended_at=-1.0, interrupted=True)  # before the fleet
    replacement = Instance("us-west-2", "us-west-2b", "g6.xlarge", 1.0, 2700.0, tier=4)
    instances = [early, working, gone, replacement]
    # Reclaimed at 1800 s, replaced at 2700 s: 15 minutes short plus the reload, at $2/h; the early one lost no work.
    assert measure.reclaim_dollars(instances, 0.0, 3600.0) == pytest.approx(2.0 * (reload_h + 0.25))
    assert measure.reclaim_dollars([working, gone], 0.0, 3600.0) == pytest.approx(2.0 * (reload_h + 0.5))  # short to the end
    assert measure.reclaim_dollars(instances, None, 3600.0) == 0.0
    # A month of the fleet running at 0 s: each instance at its tier's share, reload plus the measured 15 minutes.
    lost_h = reload_h + 0.25
    assert measure.month_reclaim_dollars([working, gone, replacement], 0.0) == pytest.approx((0.25 * 1.0 + 0.025 * 2.0) * lost_h)
