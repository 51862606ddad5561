"""Region scores at their edges: ties, regions that cannot be scored, and placement scores out of range."""

from gpufill.models.run import RegionFacts, TypeFacts, ZoneOffer
from gpufill.policy import scoring


def region(name, prices, *, tier=None, itype="g6.xlarge", placement=()):
    zones = [ZoneOffer(availability_zone=f"{name}{chr(97 + i)}", spot_price=p) for i, p in enumerate(prices)]
    for zone, score in zip(zones, placement):
        zone.placement_score = score
    return RegionFacts(region=name, types=[TypeFacts(instance_type=itype, zones=zones, advisor_tier=tier)])


def test_equal_scores_go_to_the_cheaper_region_then_by_name():
    facts = [region("us-west-2", [0.50]), region("eu-west-1", [0.50]), region("us-east-1", [0.50]),
             region("ap-south-1", [0.49])]
    assert [s.region for s in scoring.score_regions(facts, "g6.xlarge")] == [
        "ap-south-1", "eu-west-1", "us-east-1", "us-west-2"]
    # ap-south-1 is cheapest and so scores 40 price points; the others score int(40 * 0.49 / 0.5) = 39.
    assert [s.score for s in scoring.score_regions(facts, "g6.xlarge")] == [48, 47, 47, 47]


def test_a_region_without_the_type_is_dropped_with_the_reason_and_only_priced_regions_set_the_best_price():
    facts = [region("us-west-2", [0.50, 0.60]), region("us-east-1", [0.40], itype="g5.xlarge"),
             region("eu-west-1", []), region("eu-central-1", [None, None, None])]
    scores = {s.region: s for s in scoring.score_regions(facts, "g6.xlarge")}
    assert scores["us-east-1"].dropped == scores["eu-west-1"].dropped == "type not offered in any zone"
    assert (scores["eu-central-1"].dropped, scores["eu-central-1"].az_count) == ("no spot price", 3)
    best = scores["us-west-2"]
    assert (best.points["price"], best.spot_price, best.az_count, best.rank) == (40, 0.5, 2, "B")


def test_no_priced_region_gives_only_the_dropped_ones_in_the_given_order():
    facts = [region("us-west-2", [None]), RegionFacts(region="us-east-1", error="UnauthorizedOperation")]
    assert [(s.region, s.dropped, s.score) for s in scoring.score_regions(facts, "g6.xlarge")] == [
        ("us-west-2", "no spot price", 0), ("us-east-1", "UnauthorizedOperation", 0)]


def test_an_errored_region_is_dropped_even_when_it_reports_offers():
    facts = [RegionFacts(region="us-east-1", error="RequestLimitExceeded",
                         types=[TypeFacts(instance_type="g6.xlarge", zones=[ZoneOffer(availability_zone="us-east-1a",
                                                                                      spot_price=0.1)])])]
    [score] = scoring.score_regions(facts, "g6.xlarge")
    assert (score.dropped, score.score) == ("RequestLimitExceeded", 0)


def test_the_best_zone_placement_score_is_kept_and_capped_at_ten():
    facts = [region("us-west-2", [0.5, 0.5, 0.5], tier=0, placement=(3, None, 7))]
    [blended] = scoring.score_regions(facts, "g6.xlarge", blended=True)
    assert (blended.placement_score, blended.points, blended.score, blended.rank) == (
        7, {"price": 40, "capacity": 28, "interruption": 20}, 88, "S")
    assert scoring.capacity_points(12) == 40 and scoring.capacity_points(0) == 0
    [classic] = scoring.score_regions(facts, "g6.xlarge")
    assert (classic.placement_score, classic.points) == (7, {"price": 40, "az": 24, "interruption": 20})


def test_blended_scoring_gives_no_capacity_points_to_a_region_outside_aws_top_ten():
    [score] = scoring.score_regions([region("us-west-2", [0.5, 0.5], tier=None)], "g6.xlarge", blended=True)
    assert (score.points, score.placement_score, score.advisor_tier) == (
        {"price": 40, "capacity": 0, "interruption": 0}, None, None)


def test_the_spot_interruption_tier_is_reported_with_the_score():
    [score] = scoring.score_regions([region("us-west-2", [0.5], tier=2)], "g6.xlarge")
    assert (score.advisor_tier, score.points["interruption"]) == (2, 10)
