"""price-capacity scoring: regions by spot price per likely fill, from AWS's region-level placement scores."""

from hypothesis import given
from hypothesis import strategies as st

from gpufill.models.request import Request, normalise
from gpufill.models.run import RegionFacts, TypeFacts, ZoneOffer
from gpufill.policy import ranking, scoring


def req(**fields):
    return normalise(Request(**fields), request_id="r", default_regions=[], home_region="us-east-1")


def region(name, prices_by_type, tier=1):
    return RegionFacts(region=name, types=[
        TypeFacts(instance_type=t, advisor_tier=tier,
                  zones=[ZoneOffer(availability_zone=f"{name}{chr(97 + i)}", spot_price=p) for i, p in enumerate(prices)])
        for t, prices in prices_by_type.items()
    ])


def ranked(facts, region_scores, types=("g6.xlarge",)):
    request = req(instance_types=list(types), regions=[f.region for f in facts])
    scores = ranking.with_region_scores(ranking.score_all(facts, request), region_scores)
    return ranking.price_capacity_pools(facts, scores, request), scores


def regions_of(pools):
    return list(dict.fromkeys(p.region for p in pools))


def test_is_the_default_scoring():
    assert req().scoring == "price-capacity"


def test_without_scores_the_cheapest_region_goes_first_whatever_its_az_count_or_tier():
    facts = [
        region("us-east-1", {"g6.xlarge": [0.40, 0.41, 0.42, 0.43, 0.44]}, tier=0),  # the classic formula's favourite
        region("eu-central-1", {"g6.xlarge": [0.36]}, tier=4),
        region("us-west-2", {"g6.xlarge": [0.38, 0.50]}, tier=2),
    ]
    pools, _ = ranked(facts, {})
    assert regions_of(pools) == ["eu-central-1", "us-west-2", "us-east-1"]
    # Inside a region the AZs go cheapest first.
    assert [p.availability_zone for p in pools if p.region == "us-west-2"] == ["us-west-2a", "us-west-2b"]


def test_a_region_aws_rates_likelier_goes_first_when_its_price_is_close():
    facts = [region("us-east-1", {"g6.xlarge": [0.40]}), region("us-west-2", {"g6.xlarge": [0.44]})]
    # 0.44 / 3^0.2 = 0.354 against 0.40 / 1: ten per cent dearer but AWS rates it 3 against 1.
    pools, scores = ranked(facts, {"us-east-1": 1, "us-west-2": 3})
    assert regions_of(pools) == ["us-west-2", "us-east-1"]
    west = next(s for s in scores if s.region == "us-west-2")
    assert (west.placement_score, west.price_per_fill) == (3, round(0.44 / 3**0.2, 6))


def test_a_score_does_not_buy_a_much_dearer_region_first():
    facts = [region("us-east-1", {"g6.xlarge": [0.40]}), region("us-west-2", {"g6.xlarge": [0.60]})]
    pools, _ = ranked(facts, {"us-east-1": 1, "us-west-2": 3})
    assert regions_of(pools) == ["us-east-1", "us-west-2"]


def test_a_region_outside_aws_top_ten_counts_as_the_lowest_score():
    facts = [region("us-east-1", {"g6.xlarge": [0.40]}), region("us-west-2", {"g6.xlarge": [0.41]})]
    pools, scores = ranked(facts, {"us-east-1": 1})
    assert regions_of(pools) == ["us-east-1", "us-west-2"]
    assert next(s for s in scores if s.region == "us-west-2").placement_score is None


def test_a_region_is_judged_by_its_cheapest_type_and_offers_every_type_in_preference_order():
    facts = [
        region("us-east-1", {"g6.xlarge": [0.50], "g5.xlarge": [0.30]}),
        region("us-west-2", {"g6.xlarge": [0.45], "g5.xlarge": [0.60]}),
    ]
    pools, _ = ranked(facts, {}, types=("g6.xlarge", "g5.xlarge"))
    assert [(p.region, p.instance_type) for p in pools] == [
        ("us-east-1", "g6.xlarge"), ("us-east-1", "g5.xlarge"), ("us-west-2", "g6.xlarge"), ("us-west-2", "g5.xlarge"),
    ]


def test_regions_without_a_spot_price_or_the_type_are_left_out():
    facts = [
        region("us-east-1", {"g6.xlarge": [None]}),
        RegionFacts(region="eu-central-1", error="AuthFailure: region not enabled"),
        region("us-west-2", {"g6.xlarge": [0.50]}),
    ]
    pools, _ = ranked(facts, {"us-west-2": 2})
    assert regions_of(pools) == ["us-west-2"]


REAL_REGIONS = ["us-east-1", "us-east-2", "us-west-2", "eu-central-1", "eu-west-1", "ap-northeast-1",
                "ap-southeast-1", "ca-central-1"]
PRICES = st.floats(min_value=0.05, max_value=20.0, allow_nan=False)
SCORES = st.one_of(st.none(), st.integers(1, 10))


@given(st.lists(st.tuples(PRICES, SCORES), min_size=2, max_size=8))
def test_a_region_cheaper_and_at_least_as_likely_to_fill_is_never_ranked_below_a_dearer_one(offers):
    names = REAL_REGIONS[: len(offers)]
    facts = [region(n, {"g6.xlarge": [price]}) for n, (price, _) in zip(names, offers)]
    found = {n: s for n, (_, s) in zip(names, offers) if s is not None}
    order = regions_of(ranked(facts, found)[0])
    assert sorted(order) == sorted(names)
    position = {n: order.index(n) for n in names}

    def level(name):
        return found.get(name) or scoring.LOWEST_PLACEMENT_SCORE

    for a, (price_a, _) in zip(names, offers):
        for b, (price_b, _) in zip(names, offers):
            if price_a < price_b and level(a) >= level(b):
                assert position[a] < position[b], (a, b, offers)


@given(PRICES, PRICES, SCORES)
def test_price_per_fill_never_rises_with_the_score_and_rises_with_the_price(cheaper, dearer, score):
    low, high = sorted((cheaper, dearer))
    assert scoring.price_per_fill(low, score) <= scoring.price_per_fill(high, score)
    assert scoring.price_per_fill(low, (score or 1) + 1) <= scoring.price_per_fill(low, score)
