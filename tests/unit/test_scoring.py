"""Region scoring exactly as the facts: price 40, AZs 40, interruption 20; ranks S/A/B/C."""

import pytest

from gpufill.models.run import RegionFacts, TypeFacts, ZoneOffer
from gpufill.policy import scoring


def region(name, prices, tier=None, itype="g6.xlarge"):
    zones = [ZoneOffer(availability_zone=f"{name}{chr(97 + i)}", spot_price=p) for i, p in enumerate(prices)]
    return RegionFacts(region=name, types=[TypeFacts(instance_type=itype, zones=zones, advisor_tier=tier)])


@pytest.mark.parametrize(("zones", "points"), [(1, 8), (2, 16), (3, 24), (4, 32), (5, 40), (6, 40), (0, 8)])
def test_az_points(zones, points):
    assert scoring.az_points(zones) == points


@pytest.mark.parametrize(("tier", "points"), [(0, 20), (1, 15), (2, 10), (3, 5), (4, 0), (None, 0)])
def test_interruption_points(tier, points):
    assert scoring.interruption_points(tier) == points


@pytest.mark.parametrize(("score", "letter"), [(100, "S"), (75, "S"), (74, "A"), (65, "A"), (64, "B"), (50, "B"), (49, "C")])
def test_rank(score, letter):
    assert scoring.rank(score) == letter


def test_price_points_truncate_against_the_cheapest_region():
    assert scoring.price_points(0.4264, 0.4264) == 40
    assert scoring.price_points(0.6100, 0.4264) == int(40 * 0.4264 / 0.6100) == 27


def test_regions_ranked_by_total_and_unpriced_regions_dropped_with_reason():
    facts = [
        region("ap-northeast-1", [0.61, 0.64], tier=3),
        region("us-west-2", [0.4264, 0.45, 0.438], tier=1),
        region("eu-central-1", [None, None], tier=0),
        RegionFacts(region="us-east-2", error="AuthFailure: region not enabled"),
    ]
    scores = scoring.score_regions(facts, "g6.xlarge")
    assert [(s.region, s.score, s.rank, s.dropped) for s in scores] == [
        ("us-west-2", 40 + 24 + 15, "S", None),
        ("ap-northeast-1", 27 + 16 + 5, "C", None),
        ("eu-central-1", 0, "C", "no spot price"),
        ("us-east-2", 0, "C", "AuthFailure: region not enabled"),
    ]
    assert scores[0].points == {"price": 40, "az": 24, "interruption": 15}


def test_blended_scoring_replaces_az_points_with_placement_capacity_points():
    facts = [region("us-west-2", [0.40, 0.44, 0.46], tier=1), region("us-east-1", [0.41], tier=1)]
    facts[0].types[0].zones[2].placement_score = 9
    facts[1].types[0].zones[0].placement_score = 2
    blended = {s.region: s for s in scoring.score_regions(facts, "g6.xlarge", blended=True)}
    classic = {s.region: s for s in scoring.score_regions(facts, "g6.xlarge")}
    assert blended["us-west-2"].points == {"price": 40, "capacity": 36, "interruption": 15}
    assert blended["us-east-1"].points == {"price": 39, "capacity": 8, "interruption": 15}
    assert classic["us-west-2"].points == {"price": 40, "az": 24, "interruption": 15}
    assert scoring.capacity_points(10) == 40 and scoring.capacity_points(1) == 4
