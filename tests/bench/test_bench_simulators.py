"""The policy-level simulators on hand-made markets, counted by hand."""

import inspect
import itertools
import json

from bench import broker, karpenter, oracle
from bench.cases import Case
from bench.market import Ec2, PublicView, SpotMarket
from bench_markets import OREGON_FIRST, case, stock


def test_broker_asks_a_region_for_all_it_misses_and_remembers_failures():
    # Oregon (scored first): one call for 4 lands 1 in us-west-2b; asked again, Oregon fails and is
    # remembered; Virginia: one call launches 2, the next fails. 4 calls, 3 launched.
    outcome = broker.run(case(OREGON_FIRST, count=4))
    assert outcome.run_instances == outcome.launch_calls == 4
    assert outcome.launched == 3
    assert outcome.ec2_calls == 4 + 2 * 2  # plus offerings and spot prices per region
    assert outcome.answers == {"launched": 2, "capacity": 2}
    assert outcome.hourly_cost == round(0.41 + 2 * 0.45, 4)


def test_broker_keeps_within_the_quota_it_can_read():
    regions = {"us-west-2": {**OREGON_FIRST["us-west-2"], "quota": {"spot_vcpus": 0}}, "us-east-1": OREGON_FIRST["us-east-1"]}
    outcome = broker.run(case(regions, count=2))
    # Oregon has no room under its quota, so the broker does not ask it; Virginia launches both.
    assert (outcome.run_instances, outcome.launched) == (1, 2)
    assert outcome.answers == {"launched": 1}


def test_runinstances_without_a_subnet_lands_in_one_az():
    ec2 = Ec2(case(MIXED, 9))
    answer = ec2.run_instances("us-east-1", "g6.xlarge", max_count=9)
    assert answer.instances == {("us-east-1b", "g6.xlarge"): 9}  # one AZ, never spread
    assert ec2.run_instances("us-east-1", "g6.xlarge", max_count=2).instances == {("us-east-1a", "g6.xlarge"): 1}
    assert ec2.run_instances("us-east-1", "g6.xlarge", max_count=1).errors == {("us-east-1", "g6.xlarge"): "capacity"}
    assert ec2.calls == {"RunInstances": 3}


def test_fleet_takes_the_cheapest_pool_that_holds_the_target_else_the_deepest():
    ec2 = Ec2(case(MIXED, 9))
    overrides = [("us-west-2a", "g6.xlarge"), ("us-west-2b", "g6.xlarge"), ("us-west-2c", "g6.xlarge")]
    two = ec2.create_fleet("us-west-2", overrides, 2)
    assert two.instances == {("us-west-2a", "g6.xlarge"): 2}  # 2a and 2b hold 2 at $0.30; 2a sorts first
    # The quota (12 vCPUs = 3 instances) leaves room for one more: partial fulfilment, and a quota error.
    rest = ec2.create_fleet("us-west-2", overrides, 7)
    assert rest.count == 1 and "quota" in rest.errors.values()
    assert ec2.calls == {"CreateFleet": 2}


def test_karpenter_one_fleet_per_region_and_an_ice_cache():
    outcome = karpenter.run(case(OREGON_FIRST, count=4))
    # Oregon: a fleet over 3 AZs launches 1 and reports all 3 empty (cached); Virginia: 2, then empty.
    assert (outcome.launch_calls, outcome.run_instances, outcome.launched) == (2, 0, 3)
    assert outcome.ec2_by_api["CreateFleet"] == 2
    assert outcome.hourly_cost == round(0.41 + 2 * 0.45, 4)


def test_strategies_see_only_the_public_view():
    c = case(MIXED, 4)
    view = PublicView(c)
    assert '"spot":' not in json.dumps(view.scenario)  # prices and tiers only
    assert all(p.capacity == 0 for p in view._market.pools)
    for strategy in (broker, karpenter):
        assert list(inspect.signature(strategy.decide).parameters) == ["view", "ec2"]
        source = inspect.getsource(strategy)
        assert "SpotMarket" not in source and ".left" not in source and "scenario" not in source
    assert not [name for name in vars(Ec2(c)) if not name.startswith("_Ec2__") and name != "calls"]


def test_region_order_is_the_classic_score():
    assert [r for r, _ in SpotMarket(case(OREGON_FIRST, 1)).classic_order()] == ["us-west-2", "us-east-1"]


MIXED = {
    "us-west-2": {
        "quota": {"spot_vcpus": 12},  # three g6.xlarge
        "zones": {"us-west-2a": stock(0.30, 2), "us-west-2b": stock(0.30, 5), "us-west-2c": stock(0.50, 4)},
    },
    "us-east-1": {"zones": {"us-east-1a": stock(0.35, 1), "us-east-1b": stock(0.60, 9)}},
}


def brute_force(c: Case):
    """(cheapest $/h, fewest calls at that price, most launched) over every allocation the market allows."""
    market = SpotMarket(c)
    pools = market.pools
    best = None
    for take in itertools.product(*(range(p.capacity + 1) for p in pools)):
        if sum(take) > c.count:
            continue
        per_region = {}
        for p, n in zip(pools, take):
            per_region[p.region] = per_region.get(p.region, 0) + n * p.vcpus
        if any(market.quota_vcpus[r] is not None and v > market.quota_vcpus[r] for r, v in per_region.items()):
            continue
        key = (-sum(take), round(sum(p.price * n for p, n in zip(pools, take)), 4), sum(1 for n in take if n))
        best = key if best is None or key < best else best
    return -best[0], best[1], best[2]


def test_oracle_cheapest_fill_matches_brute_force():
    for count in (1, 3, 4, 6, 9):
        c = case(MIXED, count)
        launched, cost, _ = brute_force(c)
        assert (sum(oracle.cheapest_fill(c).values()), oracle.cheapest_cost(c, launched)) == (launched, cost), count
        assert (oracle.run(c).launched, oracle.run(c).hourly_cost) == (launched, cost)


def test_oracle_calls_are_the_fewest_regions_that_hold_the_fill():
    # Usable: Oregon min(11, quota 3) = 3, Virginia 10. 9 fit in Virginia alone; 12 need both.
    for count, calls in ((1, 1), (9, 1), (10, 1), (11, 2), (13, 2), (20, 2)):
        assert oracle.run(case(MIXED, count)).launch_calls == calls, count
    assert oracle.run(case(MIXED, 20)).launched == 13


def test_oracle_is_a_lower_bound_on_every_simulated_baseline():
    for count in (1, 3, 4, 6, 9, 13):
        c = case(MIXED, count)
        bound = oracle.run(c)
        for strategy in (broker, karpenter):
            outcome = strategy.run(c)
            assert bound.launch_calls <= outcome.launch_calls or outcome.launched < bound.launched
            assert bound.launched >= outcome.launched


def test_cheapest_cost_of_a_smaller_fleet():
    # Two at $0.30 from the deeper Oregon pool: quota leaves room for three in Oregon.
    assert oracle.cheapest_cost(case(MIXED, 9), 2) == 0.60
    assert oracle.cheapest_cost(case(MIXED, 9), 4) == round(3 * 0.30 + 0.35, 4)
