"""The generated markets: the same seed gives the same cases, and every case is a valid market and request."""

from gpufill.local.scenario import MarketScenario
from gpufill.models.request import Request

from bench.cases import TIERS
from bench.generate import COUNTS, REGION_ZONES, all_cases, examples, generated


def test_same_seed_same_cases_other_seed_other_cases():
    first, again, other = generated(7), generated(7), generated(8)
    assert [(c.name, c.scenario, c.request) for c in first] == [(c.name, c.scenario, c.request) for c in again]
    assert [c.scenario for c in first] != [c.scenario for c in other]


def test_every_case_is_a_valid_market_and_request():
    for case in all_cases(seed=11):
        MarketScenario.model_validate(case.scenario)
        Request.model_validate(case.request)


def test_markets_have_the_shape_the_issue_asks_for():
    cases = generated(3)
    assert {c.count for c in cases} == set(COUNTS)
    assert {c.tier for c in cases} == set(TIERS)
    assert any("quota" in r for c in cases for r in c.scenario["regions"].values())
    for case in cases:
        regions = case.scenario["regions"]
        assert 5 <= len(regions) <= 8
        for region, market in regions.items():
            letters = {zone[-1] for zone in market["zones"]}
            assert letters <= set(REGION_ZONES[region]), "only zones EC2 has in that region"
            assert min(3, len(REGION_ZONES[region])) <= len(letters) <= 6


def test_scarcity_rises_from_plenty_to_nearly_sold_out():
    cases = generated(5, scenarios=40)
    share = {t: sum(c.sold_out_share for c in cases if c.tier == t) for t in TIERS}
    assert share["plenty"] < share["tight"] < share["nearly sold out"]


def test_the_hand_written_markets_come_with_a_request():
    cases = examples()
    assert cases, "examples/markets has scenarios"
    for case in cases:
        assert case.source.startswith("examples/markets/")
        assert case.request["count"] >= 1
