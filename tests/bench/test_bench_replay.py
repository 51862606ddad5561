"""bench.replay compares region orders for a fleet per region; it must replay what the bench runs."""

from bench import karpenter, replay
from bench.generate import generated


def test_the_classic_order_replays_karpenter_market_for_market():
    for case in generated(20261106):
        outcome = karpenter.run(case)
        result = replay.replay(replay.classic, [case])
        assert sum(result["calls"].values()) == outcome.ec2_by_api["CreateFleet"], case.name
        assert round(sum(result["cost"].values()), 4) == outcome.hourly_cost, case.name


def test_price_capacity_replays_the_exponent_the_default_uses():
    cases = generated(20261107)
    default = replay.replay(replay.price_capacity(), cases)
    explicit = replay.replay(replay.price_capacity(replay.scoring.CAPACITY_EXPONENT), cases)
    assert default == explicit
