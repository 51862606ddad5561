"""Pool order: regions by score, types by preference inside a region, AZs by spot price; on-demand by strategy."""

from gpufill.models.request import Request, normalise
from gpufill.models.run import RegionFacts, RegionScore, TypeFacts, ZoneOffer
from gpufill.policy import ranking


def req(**fields):
    return normalise(Request(**fields), request_id="r", default_regions=[], home_region="us-east-1")


def offer(itype, prices, od=None, region=""):
    zones = [ZoneOffer(availability_zone=f"{region}{chr(97 + i)}", spot_price=p) for i, p in enumerate(prices)]
    return TypeFacts(instance_type=itype, zones=zones, on_demand_price=od)


def test_every_zone_of_the_best_region_for_each_type_before_the_next_region():
    facts = [
        RegionFacts(region="us-west-2", types=[offer("g6.xlarge", [0.50, 0.40], region="us-west-2"),
                                              offer("g5.xlarge", [0.60], region="us-west-2")]),
        RegionFacts(region="us-east-1", types=[offer("g6.xlarge", [0.45], region="us-east-1"),
                                              offer("g5.xlarge", [0.30, 0.31, 0.32, 0.33, 0.34], region="us-east-1")]),
    ]
    request = req(instance_types=["g6.xlarge", "g5.xlarge"], regions=["us-west-2", "us-east-1"])
    pools = ranking.spot_pools(facts, ranking.score_all(facts, request), request)
    # us-east-1's g5 score (40 + 40 + 0) beats us-west-2's best (g6: 40 + 16 + 0), so us-east-1 goes first,
    # and inside it g6 (the preferred type) comes before g5.
    assert [(p.region, p.instance_type, p.availability_zone) for p in pools] == [
        ("us-east-1", "g6.xlarge", "us-east-1a"),
        ("us-east-1", "g5.xlarge", "us-east-1a"),
        ("us-east-1", "g5.xlarge", "us-east-1b"),
        ("us-east-1", "g5.xlarge", "us-east-1c"),
        ("us-east-1", "g5.xlarge", "us-east-1d"),
        ("us-east-1", "g5.xlarge", "us-east-1e"),
        ("us-west-2", "g6.xlarge", "us-west-2b"),
        ("us-west-2", "g6.xlarge", "us-west-2a"),
        ("us-west-2", "g5.xlarge", "us-west-2a"),
    ]


def test_on_demand_by_cost_breaks_price_ties_by_latency_and_by_latency_uses_the_origin():
    facts = [
        RegionFacts(region=r, types=[offer("g6.xlarge", [None], od=p, region=r)])
        for r, p in (("us-east-1", 0.984), ("us-west-2", 0.984), ("ap-northeast-1", 1.3412), ("eu-central-1", 1.2024))
    ]
    cost = req(market="on-demand", on_demand_strategy="cost", origin_region="ap-northeast-1")
    latency = req(market="on-demand", on_demand_strategy="latency", origin_region="ap-northeast-1")
    assert [p.region for p in ranking.on_demand_pools(facts, cost)] == [
        "us-west-2", "us-east-1", "eu-central-1", "ap-northeast-1"
    ]
    assert [p.region for p in ranking.on_demand_pools(facts, latency)] == [
        "ap-northeast-1", "us-west-2", "us-east-1", "eu-central-1"
    ]


def test_a_region_in_aws_top_ten_goes_before_a_cheaper_region_aws_did_not_score():
    def zone(region, letter, price):
        return ZoneOffer(availability_zone=f"{region}{letter}", zone_id=f"{region}-az{letter}", spot_price=price)

    facts = [
        # Cheapest, five AZs, best interruption tier: would win on the classic formula.
        RegionFacts(region="us-east-1", types=[TypeFacts(instance_type="g6.xlarge", advisor_tier=0,
                    zones=[zone("us-east-1", c, 0.30) for c in "abcde"])]),
        RegionFacts(region="eu-central-1", types=[TypeFacts(instance_type="g6.xlarge", advisor_tier=4,
                    zones=[zone("eu-central-1", "a", 0.90), zone("eu-central-1", "b", 0.95)])]),
    ]
    request = req(instance_types=["g6.xlarge"], regions=["us-east-1", "eu-central-1"])
    # AWS's answer names one AZ of eu-central-1, with a low score, and nothing in us-east-1.
    scored = ranking.with_placement_scores(facts, {("eu-central-1", "eu-central-1-azb"): 2})
    scores = ranking.score_all(scored, request, blended=True)
    pools = ranking.spot_pools(scored, scores, request, blended=True)
    assert [p.availability_zone for p in pools][:2] == ["eu-central-1b", "eu-central-1a"]
    east = next(s for s in scores if s.region == "us-east-1")
    assert east.points["capacity"] == 0 and east.placement_score is None


def test_azs_without_a_recent_spot_price_are_tried_after_the_priced_ones():
    facts = [RegionFacts(region="us-west-2", types=[offer("g6.xlarge", [None, 0.50, 0.40], region="us-west-2")])]
    request = req(instance_types=["g6.xlarge"], regions=["us-west-2"])
    pools = ranking.spot_pools(facts, ranking.score_all(facts, request), request)
    assert [p.availability_zone for p in pools] == ["us-west-2c", "us-west-2b", "us-west-2a"]
    assert pools[-1].price is None


def test_on_demand_leaves_out_regions_that_errored_or_offer_none_of_the_types():
    facts = [
        RegionFacts(region="us-east-1", error="UnauthorizedOperation: not enabled"),
        RegionFacts(region="eu-central-1", types=[TypeFacts(instance_type="g6.xlarge", zones=[])]),
        RegionFacts(region="us-west-2", types=[offer("g5.xlarge", [None], od=1.006, region="us-west-2"),
                                               offer("g6.xlarge", [None, None], od=0.984, region="us-west-2")]),
    ]
    request = req(market="on-demand", instance_types=["g6.xlarge", "g5.xlarge"], regions=["us-east-1", "eu-central-1", "us-west-2"])
    pools = ranking.on_demand_pools(facts, request)
    # Only Oregon is left; inside it the preferred type first, its AZs in name order, at the on-demand price.
    assert [(p.region, p.instance_type, p.availability_zone, p.price) for p in pools] == [
        ("us-west-2", "g6.xlarge", "us-west-2a", 0.984),
        ("us-west-2", "g6.xlarge", "us-west-2b", 0.984),
        ("us-west-2", "g5.xlarge", "us-west-2a", 1.006),
    ]


def test_a_pool_another_run_just_found_empty_goes_last_with_the_reason():
    pools = ranking.spot_pools(
        [RegionFacts(region="us-west-2", types=[offer("g6.xlarge", [0.40, 0.41, 0.42], region="us-west-2")])],
        ranking.score_all([RegionFacts(region="us-west-2", types=[offer("g6.xlarge", [0.40, 0.41, 0.42], region="us-west-2")])],
                          req(regions=["us-west-2"])),
        req(regions=["us-west-2"]),
    )
    deferred = ranking.defer_recently_full(pools, {pools[0].key: 1000}, now=1030)
    assert [p.availability_zone for p in deferred] == ["us-west-2b", "us-west-2c", "us-west-2a"]
    assert deferred[-1].note == "answered capacity 30 s ago in another run; tried last" and deferred[0].note is None
    # A fleet asks for the deferred pools apart, after the others (policy/fleet_moves.py).
    assert [p.deferred for p in deferred] == [False, False, True]


def test_a_try_that_reuses_its_facts_leaves_out_only_the_pools_found_full_within_the_window():
    facts = [RegionFacts(region="us-west-2", types=[offer("g6.xlarge", [0.40, 0.41, 0.42], region="us-west-2")])]
    pools = ranking.spot_pools(facts, ranking.score_all(facts, req(regions=["us-west-2"])), req(regions=["us-west-2"]))
    full = {pools[0].key: 1000, pools[1].key: 900}
    kept = ranking.leave_out_recently_full(ranking.defer_recently_full(pools, full, now=1099), full, now=1099, within=100)
    # us-west-2a answered 99 s ago: left out; us-west-2b 199 s ago: asked again, last; the window's edge is asked.
    assert [(p.availability_zone, p.deferred) for p in kept] == [("us-west-2c", False), ("us-west-2b", True)]
    assert len(ranking.leave_out_recently_full(pools, full, now=1100, within=100)) == 3
    assert ranking.leave_out_recently_full(pools, {}, now=1100, within=100) == pools


def test_classic_scoring_is_the_default_whatever_placement_scores_the_facts_carry():
    def zone(region, letter, price, placement=None):
        return ZoneOffer(availability_zone=f"{region}{letter}", spot_price=price, placement_score=placement)

    facts = [
        RegionFacts(region="us-east-1", types=[TypeFacts(instance_type="g6.xlarge", advisor_tier=0,
                    zones=[zone("us-east-1", c, 0.30) for c in "abcde"])]),
        RegionFacts(region="eu-central-1", types=[TypeFacts(instance_type="g6.xlarge",
                    zones=[zone("eu-central-1", "a", 0.32, placement=10), zone("eu-central-1", "b", 0.33)])]),
    ]
    request = req(instance_types=["g6.xlarge"], regions=["us-east-1", "eu-central-1"])
    pools = ranking.spot_pools(facts, ranking.score_all(facts, request), request)
    assert [p.region for p in pools] == ["us-east-1"] * 5 + ["eu-central-1"] * 2
    blended = ranking.spot_pools(facts, ranking.score_all(facts, request, blended=True), request, blended=True)
    assert [p.region for p in blended][:1] == ["eu-central-1"]


def score(region, itype, points, price, placement=None):
    return RegionScore(region=region, instance_type=itype, spot_price=price, score=points, placement_score=placement)


TWO_TYPES = req(instance_types=["g6.xlarge", "g5.xlarge"], regions=["us-west-2", "us-east-1"])
FACTS = [RegionFacts(region=r, types=[offer("g6.xlarge", [0.5], region=r), offer("g5.xlarge", [0.6], region=r)])
         for r in ("us-west-2", "us-east-1")]


def regions_of(pools):
    return list(dict.fromkeys(p.region for p in pools))


def test_classic_judges_a_region_by_its_best_type_score_ignoring_placement_scores():
    scores = [score("us-west-2", "g6.xlarge", 60, 0.5, placement=5), score("us-west-2", "g5.xlarge", 80, 0.6),
              score("us-east-1", "g6.xlarge", 70, 0.5, placement=3)]
    assert regions_of(ranking.spot_pools(FACTS, scores, TWO_TYPES)) == ["us-west-2", "us-east-1"]


def test_blended_judges_a_region_by_its_best_type_aws_scored_before_a_better_unscored_one():
    scores = [score("us-west-2", "g6.xlarge", 60, 0.5, placement=5), score("us-west-2", "g5.xlarge", 80, 0.6),
              score("us-east-1", "g6.xlarge", 40, 0.5, placement=2)]
    assert regions_of(ranking.spot_pools(FACTS, scores, TWO_TYPES, blended=True)) == ["us-west-2", "us-east-1"]


def test_two_types_scoring_alike_the_region_is_judged_by_the_preferred_ones_price():
    scores = [score("us-west-2", "g6.xlarge", 70, 0.5), score("us-west-2", "g5.xlarge", 70, 0.9),
              score("us-east-1", "g6.xlarge", 70, 0.7)]
    assert regions_of(ranking.spot_pools(FACTS, scores, TWO_TYPES)) == ["us-west-2", "us-east-1"]


def test_a_region_that_scored_only_a_later_type_still_offers_its_pools_at_their_spot_prices():
    facts = [RegionFacts(region="us-west-2", types=[offer("g6.xlarge", [0.5], region="us-west-2"),
                                                    offer("g5.xlarge", [0.61, 0.6], region="us-west-2")])]
    scores = [RegionScore(region="us-west-2", instance_type="g6.xlarge", dropped="no spot price"),
              score("us-west-2", "g5.xlarge", 70, 0.6)]
    pools = ranking.spot_pools(facts, scores, TWO_TYPES)
    assert [(p.instance_type, p.availability_zone, p.price, p.market) for p in pools] == [
        ("g5.xlarge", "us-west-2b", 0.6, "spot"), ("g5.xlarge", "us-west-2a", 0.61, "spot")]


def test_blended_tries_an_az_aws_scored_even_lowly_before_one_it_did_not_score():
    zones = [ZoneOffer(availability_zone="us-west-2a", spot_price=0.5),
             ZoneOffer(availability_zone="us-west-2b", spot_price=0.9, placement_score=1)]
    facts = [RegionFacts(region="us-west-2", types=[TypeFacts(instance_type="g6.xlarge", zones=zones)])]
    request = req(instance_types=["g6.xlarge"], regions=["us-west-2"])
    pools = ranking.spot_pools(facts, [score("us-west-2", "g6.xlarge", 70, 0.5, placement=1)], request, blended=True)
    assert [p.availability_zone for p in pools] == ["us-west-2b", "us-west-2a"]


def test_on_demand_puts_a_region_without_a_price_or_a_known_distance_last(monkeypatch):
    from gpufill import catalog

    facts = [RegionFacts(region=r, types=[offer("g6.xlarge", [None], od=p, region=r)])
             for r, p in (("us-east-1", None), ("us-west-2", 0.984), ("eu-central-1", 1.2024))]
    assert [p.region for p in ranking.on_demand_pools(facts, req(market="on-demand", origin_region="us-west-2"))] == [
        "us-west-2", "eu-central-1", "us-east-1"]
    known = catalog.latency_ms
    monkeypatch.setattr(catalog, "latency_ms", lambda origin, region: None if region == "us-west-2" else known(origin, region))
    latency = req(market="on-demand", on_demand_strategy="latency", origin_region="us-west-2")
    assert [p.region for p in ranking.on_demand_pools(facts, latency)] == ["us-east-1", "eu-central-1", "us-west-2"]
