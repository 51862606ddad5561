"""The facts refresh: which warm facts a scheduled pass scores or prepares again
(policy/facts_refresh.py), and the record of what runs used (adapters/warm_facts.note_used)."""

from hypothesis import given
from hypothesis import strategies as st

from dynamodb_table import item
from gpufill.adapters import warm_facts as store
from gpufill.constants import (
    FACTS_REFRESH_DEFAULT_MINUTES,
    FACTS_REFRESH_MARGIN_SECONDS,
    FACTS_REFRESH_MAX_MINUTES,
    FACTS_REFRESH_WINDOW_SECONDS,
    WARM_CLOCK_SKEW_SECONDS,
    WARM_LAUNCH_TTL_SECONDS,
    WARM_SCORING_TTL_SECONDS,
)
from gpufill.models.run import TypeFacts
from gpufill.policy import facts_refresh
from gpufill.policy.facts_refresh import Refresh, Usage
from gpufill.policy.warm_facts import PreparedRegion, ScoredType, is_fresh

NOW = 1_800_000_000.0
EVERY = FACTS_REFRESH_DEFAULT_MINUTES * 60
REGIONS = ["us-east-1", "us-west-2"]
TYPES = ["g6.xlarge", "g5.xlarge"]
PAIRS = [(r, t) for r in REGIONS for t in TYPES]


def fact(key, age: float, zone_ids: bool = False) -> ScoredType:
    return ScoredType(region=key[0], facts=TypeFacts(instance_type=key[1]), written_at=NOW - age, zone_ids=zone_ids)


def launch(region: str, age: float, zones=("a", "b")) -> PreparedRegion:
    return PreparedRegion(region=region, image_id="ami-1", snapshot_gib=None, security_group_id="sg-1",
                          subnets={z: f"subnet-{z}" for z in zones}, zones=tuple(zones), written_at=NOW - age)


def plan(usage, scored=None, prepared=None, every=EVERY):
    return facts_refresh.to_refresh(usage, scored or {}, prepared or {}, now=NOW, every_seconds=every)


def test_the_default_interval_is_shorter_than_the_scoring_ttl_with_the_margin():
    assert EVERY + FACTS_REFRESH_MARGIN_SECONDS < WARM_SCORING_TTL_SECONDS
    assert FACTS_REFRESH_MAX_MINUTES * 60 < WARM_SCORING_TTL_SECONDS


def test_nothing_used_refreshes_nothing():
    assert not plan(Usage())
    assert plan(Usage()) == Refresh()


def test_a_use_older_than_the_window_is_not_refreshed_and_one_inside_is():
    key = ("us-east-1", "g6.xlarge")
    old = Usage(scored={key: NOW - FACTS_REFRESH_WINDOW_SECONDS - 1}, launched={"us-east-1": NOW - FACTS_REFRESH_WINDOW_SECONDS - 1},
                zones={"us-east-1": ("a",)})
    assert not plan(old)
    recent = Usage(scored={key: NOW - FACTS_REFRESH_WINDOW_SECONDS}, launched={"us-east-1": NOW}, zones={"us-east-1": ("a",)})
    assert plan(recent) == Refresh(scoring={"us-east-1": (("g6.xlarge",), False)}, launch={"us-east-1": ("a",)})


def test_a_fact_refreshed_last_pass_waits_for_the_next_and_zone_ids_are_looked_up_when_blended_wants_them():
    key = ("us-east-1", "g6.xlarge")
    usage = Usage(scored={key: NOW}, zone_ids={key: NOW - 60})
    assert not plan(usage, {key: fact(key, 10, zone_ids=True)})
    # Written without zone ids: a blended run could not use it, so it is scored again with them.
    assert plan(usage, {key: fact(key, 10)}) == Refresh(scoring={"us-east-1": (("g6.xlarge",), True)})


def test_one_blended_use_looks_up_zone_ids_for_every_type_refreshed_in_its_region():
    usage = Usage(scored={(r, t): NOW for r in REGIONS for t in TYPES}, zone_ids={("us-east-1", "g5.xlarge"): NOW})
    assert plan(usage).scoring == {"us-east-1": (("g5.xlarge", "g6.xlarge"), True), "us-west-2": (("g5.xlarge", "g6.xlarge"), False)}


def test_the_window_is_the_one_given():
    key = ("us-east-1", "g6.xlarge")
    usage = Usage(scored={key: NOW - 7200}, zone_ids={key: NOW - 7200}, launched={"us-east-1": NOW - 7200}, zones={"us-east-1": ("a",)})
    assert not facts_refresh.to_refresh(usage, {}, {}, now=NOW, every_seconds=EVERY, window=3600)
    # Scored within a window of an hour, blended only before it: no zone ids.
    usage = Usage(scored={key: NOW - 60}, zone_ids={key: NOW - 7200})
    assert facts_refresh.to_refresh(usage, {}, {}, now=NOW, every_seconds=EVERY, window=3600).scoring == {"us-east-1": (("g6.xlarge",), False)}


def test_launch_settings_missing_an_az_a_run_used_are_prepared_again():
    usage = Usage(launched={"us-west-2": NOW}, zones={"us-west-2": ("a", "b", "c")})
    assert plan(usage, prepared={"us-west-2": launch("us-west-2", 0, ("a", "b"))}).launch == {"us-west-2": ("a", "b", "c")}
    assert not plan(usage, prepared={"us-west-2": launch("us-west-2", 0, ("a", "b", "c"))})
    # A region launched in without any AZ noted has nothing to look up.
    assert not plan(Usage(launched={"us-west-2": NOW}))


def test_a_stamp_from_the_future_is_neither_a_use_nor_a_fresh_fact():
    key = ("us-east-1", "g6.xlarge")
    assert not plan(Usage(scored={key: NOW + 3600}))
    assert plan(Usage(scored={key: NOW}), {key: fact(key, -3600)}).scoring == {"us-east-1": (("g6.xlarge",), False)}


def test_the_edges_of_a_use_and_of_a_fact_due():
    skew = WARM_CLOCK_SKEW_SECONDS
    assert facts_refresh.recent(NOW + skew, NOW) and not facts_refresh.recent(NOW + skew + 0.01, NOW)
    assert facts_refresh.recent(NOW - FACTS_REFRESH_WINDOW_SECONDS, NOW)
    # Due exactly when the next pass (and its margin) would find it at its TTL.
    edge = WARM_SCORING_TTL_SECONDS - EVERY - FACTS_REFRESH_MARGIN_SECONDS
    assert facts_refresh.due("scoring", NOW - edge, NOW, EVERY) and not facts_refresh.due("scoring", NOW - edge + 0.01, NOW, EVERY)
    # A stamp ahead of the clock by the skew is taken as written now; further ahead, it is due.
    assert not facts_refresh.due("scoring", NOW + skew, NOW, EVERY) and facts_refresh.due("scoring", NOW + skew + 0.01, NOW, EVERY)
    assert facts_refresh.due("launch", None, NOW, EVERY)
    assert Refresh(scoring={"us-east-1": (("g6.xlarge",), False)}) and Refresh(launch={"us-east-1": ("a",)})


uses = st.dictionaries(st.sampled_from(PAIRS), st.floats(0, 2 * FACTS_REFRESH_WINDOW_SECONDS), max_size=4)
ages = st.dictionaries(st.sampled_from(PAIRS), st.floats(0, 3 * WARM_LAUNCH_TTL_SECONDS), max_size=4)
launch_ages = st.dictionaries(st.sampled_from(REGIONS), st.floats(0, 3 * WARM_LAUNCH_TTL_SECONDS), max_size=2)
launch_uses = st.dictionaries(st.sampled_from(REGIONS), st.floats(0, 2 * FACTS_REFRESH_WINDOW_SECONDS), max_size=2)
intervals = st.integers(1, FACTS_REFRESH_MAX_MINUTES).map(lambda m: m * 60)


@given(uses, ages, launch_uses, launch_ages, intervals)
def test_refreshes_only_what_runs_used_and_every_used_fact_that_would_go_stale_before_the_next_pass(
    used, written, launched, prepared_ages, every
):
    usage = Usage(scored={k: NOW - a for k, a in used.items()}, launched={r: NOW - a for r, a in launched.items()},
                  zones={r: ("a", "b") for r in launched})
    scored = {k: fact(k, a) for k, a in written.items()}
    prepared = {r: launch(r, a) for r, a in prepared_ages.items()}
    chosen = plan(usage, scored, prepared, every)
    chosen_scoring = {(r, t) for r, (types, _) in chosen.scoring.items() for t in types}
    for key in chosen_scoring:  # never a fact no run used inside the window
        assert used[key] <= FACTS_REFRESH_WINDOW_SECONDS
    for region in chosen.launch:
        assert launched[region] <= FACTS_REFRESH_WINDOW_SECONDS
    for key, age in used.items():
        if age > FACTS_REFRESH_WINDOW_SECONDS:
            continue
        kept = scored.get(key)
        # Left alone, a used fact is still fresh when the next pass (and its margin) is over.
        if key not in chosen_scoring:
            assert kept is not None and is_fresh("scoring", kept.written_at, NOW + every + FACTS_REFRESH_MARGIN_SECONDS - 1)
        # Anything used and older than the interval is refreshed (the scoring TTL is under two intervals + margin).
        if kept is None or NOW - kept.written_at >= every and every * 2 + FACTS_REFRESH_MARGIN_SECONDS >= WARM_SCORING_TTL_SECONDS:
            assert key in chosen_scoring
    for region, age in launched.items():
        kept = prepared.get(region)
        if age <= FACTS_REFRESH_WINDOW_SECONDS and region not in chosen.launch:
            assert kept is not None and is_fresh("launch", kept.written_at, NOW + every + FACTS_REFRESH_MARGIN_SECONDS - 1)


# --- the record of what runs used ------------------------------------------------------------


def test_uses_are_noted_in_one_item_that_expires_a_window_after_the_last(table):
    store.note_used(scored=[("us-east-1", "g6.xlarge")], zone_ids=True, at=NOW - 100)
    store.note_used(scored=[("us-east-1", "g6.xlarge"), ("us-west-2", "g5.xlarge")], launched={"us-west-2": {"b"}}, at=NOW)
    store.note_used(launched={"us-west-2": {"a"}, "us-east-1": set()}, at=NOW - 5)
    usage = store.load_used()
    assert usage.scored == {("us-east-1", "g6.xlarge"): NOW, ("us-west-2", "g5.xlarge"): NOW}
    assert usage.zone_ids == {("us-east-1", "g6.xlarge"): NOW - 100}
    # The AZs add up; an empty set notes no launch.
    assert usage.launched == {"us-west-2": NOW - 5} and usage.zones == {"us-west-2": ("a", "b")}
    kept = item(table, "warm#used")
    assert kept["kind"] == "warm" and "request_id" not in kept
    assert int(kept["expires_at"]) == int(NOW - 5 + FACTS_REFRESH_WINDOW_SECONDS) + 1


def test_nothing_noted_reads_as_no_use_and_noting_nothing_writes_nothing(table):
    store.note_used(at=NOW)
    assert item(table, "warm#used") is None
    assert store.load_used() == Usage()


def test_a_use_that_cannot_be_noted_is_logged_not_raised(table, monkeypatch):
    monkeypatch.setenv("INSTANCES_TABLE", "no-such-table")
    store.note_used(scored=[("us-east-1", "g6.xlarge")], at=NOW)  # no exception: the run goes on
