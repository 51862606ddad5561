"""Warm facts: when what an earlier run scored or prepared stands in for asking AWS
(policy/warm_facts.py), and how it is kept (adapters/warm_facts.py, moto's DynamoDB)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynamodb_table import item
from gpufill.adapters import warm_facts as store
from gpufill.constants import WARM_CLOCK_SKEW_SECONDS, WARM_LAUNCH_TTL_SECONDS, WARM_SCORING_TTL_SECONDS
from gpufill.models.request import Request, normalise
from gpufill.models.run import RegionFacts, RegionLaunch, TypeFacts, ZoneOffer
from gpufill.policy import warm_facts
from gpufill.policy.warm_facts import PreparedRegion, ScoredType

NOW = 1_800_000_000.0
REGIONS = ["us-east-1", "us-west-2"]
TYPES = ["g6.xlarge", "g5.xlarge"]


def request(**fields):
    asked = Request.model_validate({"instance_types": TYPES, "count": 4, "regions": REGIONS, **fields})
    return normalise(asked, request_id="req-1", default_regions=REGIONS, home_region="us-east-1")


def type_facts(instance_type: str, price: float = 0.5) -> TypeFacts:
    return TypeFacts(instance_type=instance_type, zones=[ZoneOffer(availability_zone="x-1a", spot_price=price)], advisor_tier=1)


def scored(age: float, *, zone_ids: bool = False, only: set | None = None) -> dict:
    return {
        (r, t): ScoredType(region=r, facts=type_facts(t), written_at=NOW - age, zone_ids=zone_ids)
        for r in REGIONS
        for t in TYPES
        if only is None or (r, t) in only
    }


def prepared(age: float = 0.0, zones=("us-east-1a", "us-east-1b"), subnets=None) -> PreparedRegion:
    return PreparedRegion(
        region="us-east-1", image_id="ami-1", snapshot_gib=250, security_group_id="sg-1",
        subnets=subnets if subnets is not None else {z: f"subnet-{z[-1]}" for z in zones}, zones=tuple(zones),
        written_at=NOW - age,
    )


# --- the policy ---------------------------------------------------------------------------


def test_fresh_facts_for_every_region_and_type_rank_the_run_in_the_requests_order():
    facts = warm_facts.warm_region_facts(request(), scored(60), NOW)
    assert facts == [RegionFacts(region=r, types=[type_facts(t) for t in TYPES]) for r in REGIONS]


@pytest.mark.parametrize(
    "found, fields",
    [
        (scored(WARM_SCORING_TTL_SECONDS), {}),  # exactly its TTL old: stale
        (scored(60, only={("us-east-1", "g6.xlarge"), ("us-east-1", "g5.xlarge"), ("us-west-2", "g6.xlarge")}), {}),
        ({}, {}),
        (scored(60), {"facts": "fresh"}),  # the request asks for a fresh pass
        (scored(60), {"scoring": "blended"}),  # blended needs the zone ids, not looked up then
        (scored(-2 * WARM_CLOCK_SKEW_SECONDS), {}),  # stamped in the future: not trusted
    ],
    ids=["stale", "one-missing", "none", "fresh-asked", "blended-without-zone-ids", "from-the-future"],
)
def test_a_stale_missing_or_refused_fact_sends_the_whole_run_to_scoring(found, fields):
    assert warm_facts.warm_region_facts(request(**fields), found, NOW) is None


def test_blended_scoring_uses_facts_that_looked_up_the_zone_ids():
    assert warm_facts.warm_region_facts(request(scoring="blended"), scored(60, zone_ids=True), NOW) is not None


def test_the_edges_of_a_facts_life():
    assert warm_facts.is_fresh("scoring", NOW, NOW + WARM_SCORING_TTL_SECONDS - 0.001)
    assert not warm_facts.is_fresh("scoring", NOW, NOW + WARM_SCORING_TTL_SECONDS)
    assert warm_facts.is_fresh("launch", NOW + WARM_CLOCK_SKEW_SECONDS, NOW)  # another Lambda's clock, a little ahead
    assert not warm_facts.is_fresh("launch", NOW + WARM_CLOCK_SKEW_SECONDS + 0.001, NOW)
    # DynamoDB may delete the item from the first whole second it is no longer used, not before.
    assert warm_facts.expires_at("scoring", 1000.5) == 1000 + WARM_SCORING_TTL_SECONDS + 1
    assert warm_facts.expires_at("launch", 1000.0) == 1000 + WARM_LAUNCH_TTL_SECONDS + 1


@given(
    kind=st.sampled_from(["scoring", "launch"]),
    written_at=st.floats(min_value=0, max_value=2e9),
    age=st.floats(min_value=-1e6, max_value=1e6),
)
def test_a_fact_older_than_its_ttl_is_never_used(kind, written_at, age):
    now = written_at + age
    fresh = warm_facts.is_fresh(kind, written_at, now)
    if now - written_at >= warm_facts.TTL_SECONDS[kind] or written_at > now + WARM_CLOCK_SKEW_SECONDS:
        assert not fresh
    # Its TTL attribute never keeps it past that: DynamoDB may delete it once it is stale.
    assert warm_facts.expires_at(kind, written_at) > written_at + warm_facts.TTL_SECONDS[kind] - 1


@given(
    age=st.floats(min_value=0, max_value=WARM_SCORING_TTL_SECONDS - 1),
    overdue=st.floats(min_value=0, max_value=1e6),
    stale=st.sets(st.sampled_from([(r, t) for r in REGIONS for t in TYPES])),
)
def test_the_run_ranks_from_warm_facts_only_when_none_of_them_is_stale(age, overdue, stale):
    found = {k: v if k not in stale else ScoredType(v.region, v.facts, NOW - WARM_SCORING_TTL_SECONDS - overdue)
             for k, v in scored(age).items()}
    facts = warm_facts.warm_region_facts(request(), found, NOW)
    assert (facts is None) == bool(stale)


def test_warm_launch_settings_enter_the_region_with_the_requests_root_volume():
    launch = warm_facts.warm_launch(request(root_volume_gib=100), prepared(60), {"us-east-1a"}, NOW)
    assert launch == RegionLaunch(region="us-east-1", image_id="ami-1", root_volume_gib=250, security_group_id="sg-1",
                                  subnets={"us-east-1a": "subnet-a"})
    assert warm_facts.warm_launch(request(root_volume_gib=300), prepared(60), {"us-east-1a"}, NOW).root_volume_gib == 300
    unknown = PreparedRegion(**{**prepared(60).__dict__, "snapshot_gib": None})
    assert warm_facts.warm_launch(request(root_volume_gib=100), unknown, {"us-east-1a"}, NOW).root_volume_gib == 100


@pytest.mark.parametrize(
    "kept, zones, fields",
    [
        (None, {"us-east-1a"}, {}),
        (prepared(WARM_LAUNCH_TTL_SECONDS), {"us-east-1a"}, {}),
        (prepared(60), {"us-east-1a", "us-east-1c"}, {}),  # an AZ never looked up
        (prepared(60, subnets={}), {"us-east-1a"}, {}),  # looked up, no subnet: PrepareRegion says why
        (prepared(60), {"us-east-1a"}, {"facts": "fresh"}),
    ],
    ids=["none", "stale", "az-not-looked-up", "no-subnet", "fresh-asked"],
)
def test_launch_settings_are_prepared_again_unless_fresh_and_covering_every_az(kept, zones, fields):
    assert warm_facts.warm_launch(request(**fields), kept, zones, NOW) is None


def test_an_az_looked_up_without_a_subnet_is_left_out_as_prepare_region_leaves_it():
    kept = prepared(60, zones=("us-east-1a", "us-east-1b"), subnets={"us-east-1a": "subnet-a"})
    assert warm_facts.warm_launch(request(), kept, {"us-east-1a", "us-east-1b"}, NOW).subnets == {"us-east-1a": "subnet-a"}


# --- the adapter --------------------------------------------------------------------------


def test_scored_facts_are_kept_per_region_and_type_with_their_expiry(table):
    facts = RegionFacts(region="us-east-1", types=[type_facts("g6.xlarge", 0.42), type_facts("g5.xlarge")])
    store.save_scored(facts, written_at=NOW, zone_ids=True)
    store.save_scored(RegionFacts(region="us-west-2", error="AccessDenied"), written_at=NOW, zone_ids=False)
    found = store.load_scored(REGIONS, TYPES)
    assert set(found) == {("us-east-1", "g6.xlarge"), ("us-east-1", "g5.xlarge")}
    assert found[("us-east-1", "g6.xlarge")] == ScoredType("us-east-1", type_facts("g6.xlarge", 0.42), NOW, zone_ids=True)
    kept = item(table, "warm#facts#us-east-1#g6.xlarge")
    assert kept["kind"] == "warm" and "request_id" not in kept
    assert kept["expires_at"] == warm_facts.expires_at("scoring", NOW)


def test_launch_settings_are_kept_per_region_and_read_back(table):
    store.save_prepared(prepared(0))
    assert store.load_prepared("us-east-1") == prepared(0)
    assert store.load_prepared("us-west-2") is None
    assert item(table, "warm#launch#us-east-1")["expires_at"] == warm_facts.expires_at("launch", NOW)


def test_an_unreadable_table_reads_as_nothing_kept(table, monkeypatch):
    monkeypatch.setenv("GPUFILL_INSTANCES_TABLE", "no-such-table")
    monkeypatch.setattr(store, "ENV_INSTANCES_TABLE", "GPUFILL_INSTANCES_TABLE")
    assert store.load_scored(REGIONS, TYPES) == {}
    assert store.load_prepared("us-east-1") is None
    store.save_prepared(prepared(0))  # not kept, and no error: the next run asks AWS
    store.save_scored(RegionFacts(region="us-east-1", types=[type_facts("g6.xlarge")]), written_at=NOW, zone_ids=False)
