"""The policy-level simulators on hand-made markets, counted by hand."""

import itertools

from bench import broker, oracle
from bench.cases import Case
from bench.market import SpotMarket
from bench_markets import OREGON_FIRST, case, stock


def test_broker_asks_again_for_every_instance():
    # instance 1: Oregon launches (1 call). 2 and 3: Oregon empty, Virginia launches (2 calls each).
    # instance 4: Oregon empty, Virginia empty (2 calls), and the broker stops.
    outcome = broker.run(case(OREGON_FIRST, count=4))
    assert outcome.run_instances == 7
    assert outcome.launched == 3
    assert outcome.ec2_calls == 7 + 2 * 2  # plus offerings and spot prices per region
    assert outcome.answers == {"launched": 3, "capacity": 4}
    assert outcome.hourly_cost == round(0.41 + 2 * 0.45, 4)


def test_broker_takes_the_quota_as_an_answer():
    regions = {"us-west-2": {**OREGON_FIRST["us-west-2"], "quota": {"spot_vcpus": 0}}, "us-east-1": OREGON_FIRST["us-east-1"]}
    outcome = broker.run(case(regions, count=2))
    # Each instance: Oregon refuses on quota, Virginia launches.
    assert (outcome.run_instances, outcome.launched) == (4, 2)
    assert outcome.answers == {"quota": 2, "launched": 2}


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


def test_oracle_is_the_cheapest_fill_in_the_fewest_calls():
    for count in (1, 3, 4, 6, 9):
        c = case(MIXED, count)
        outcome = oracle.run(c)
        launched, cost, calls = brute_force(c)
        assert (outcome.launched, outcome.hourly_cost, outcome.run_instances) == (launched, cost, calls), count


def test_oracle_is_a_lower_bound_on_the_broker():
    for count in (1, 3, 4, 6, 9):
        c = case(MIXED, count)
        assert oracle.run(c).run_instances <= broker.run(c).run_instances
        assert oracle.run(c).launched >= broker.run(c).launched


def test_cheapest_cost_of_a_smaller_fleet():
    # Two at $0.30 from the deeper Oregon pool: quota leaves room for three in Oregon.
    assert oracle.cheapest_cost(case(MIXED, 9), 2) == 0.60
    assert oracle.cheapest_cost(case(MIXED, 9), 4) == round(3 * 0.30 + 0.35, 4)
