"""Gang placement rules, each branch with exact values: the request fields, where a gang may go,
when it is rolled back, where it starts again, and what GANG_NOT_PLACED says."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpufill.models.request import Request, describe_problems, normalise
from gpufill.models.run import Attempt, Gang, Instance, LaunchResult, Pool, RegionLaunch, Run
from gpufill.policy import fill, gang


def request(**fields):
    fields = {"instance_types": ["g6.xlarge"], "launch_mode": "partial", **fields}
    return normalise(Request.model_validate(fields), request_id="gang-1", default_regions=["us-west-2"], home_region="us-east-1")


def problems(fields: dict) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        Request.model_validate(fields)
    return {p["field"]: p["problem"] for p in describe_problems(caught.value)}


def pool(region="us-west-2", zone="a", itype="g6.xlarge", market="spot"):
    return Pool(region=region, availability_zone=f"{region}{zone}", instance_type=itype, market=market)


def instances(p: Pool, n: int, first: int = 0) -> list[Instance]:
    return [Instance(instance_id=f"i-{first + k:08x}", region=p.region, availability_zone=p.availability_zone,
                     instance_type=p.instance_type, market=p.market) for k in range(n)]


WEST_A, WEST_B, EAST_A = pool(zone="a"), pool(zone="b"), pool("us-east-1", "a")


# --- the request ---------------------------------------------------------------------------------


def test_placement_and_all_or_nothing_default_to_a_spread_fill_that_keeps_what_it_gets():
    resolved = request()
    assert (resolved.placement, resolved.all_or_nothing) == ("any", False)
    resolved = request(placement="same-az", all_or_nothing=True)
    assert (resolved.placement, resolved.all_or_nothing) == ("same-az", True)
    assert request(placement="same-region").placement == "same-region"


def test_placement_must_be_one_of_three_words_and_all_or_nothing_a_boolean():
    assert problems({"placement": "same-rack"}) == {"placement": "must be 'any', 'same-region' or 'same-az'"}
    assert problems({"all_or_nothing": "yes"}) == {"all_or_nothing": "must be true or false, got a string"}
    assert problems({"all_or_nothing": 1}) == {"all_or_nothing": "must be true or false, got a number"}


@pytest.mark.parametrize("action", ["teardown", "status"])
def test_a_gang_only_goes_with_a_provisioning_request(action):
    found = problems({"action": action, "request_id": "run-1", "placement": "same-az", "all_or_nothing": True})
    assert found == {
        "placement": f"only goes with action 'provision' (this request's action is {action!r})",
        "all_or_nothing": f"only goes with action 'provision' (this request's action is {action!r})",
    }
    assert Request.model_validate({"action": action, "request_id": "run-1", "placement": "any"}).placement == "any"


def test_a_plan_may_carry_the_gang_fields_of_the_request_it_plans():
    assert Request.model_validate({"action": "plan", "placement": "same-az", "all_or_nothing": True}).all_or_nothing


# --- where a gang may go ---------------------------------------------------------------------------


def test_a_pools_place_is_its_region_or_its_region_and_zone():
    assert gang.place(WEST_A, "same-region") == "us-west-2"
    assert gang.place(WEST_A, "same-az") == "us-west-2/us-west-2a"
    assert gang.place(WEST_A, "any") is None


def test_once_anchored_only_the_anchors_place_is_open():
    anchored = Gang(anchor="us-west-2/us-west-2a")
    assert [gang.allows(p, anchored, "same-az") for p in (WEST_A, WEST_B, EAST_A)] == [True, False, False]
    anchored = Gang(anchor="us-west-2")
    assert [gang.allows(p, anchored, "same-region") for p in (WEST_A, WEST_B, EAST_A)] == [True, True, False]


def test_without_an_anchor_every_place_but_the_excluded_ones_in_that_market_is_open():
    excluded = Gang(excluded=["spot:us-west-2/us-west-2a"])
    assert [gang.allows(p, excluded, "same-az") for p in (WEST_A, WEST_B, EAST_A)] == [False, True, True]
    assert gang.allows(pool(zone="a", market="on-demand"), excluded, "same-az") is True
    assert gang.allows(WEST_A, None, "same-az") is True
    assert gang.allows(WEST_A, Gang(anchor="us-east-1"), "any") is True


def test_the_first_landing_anchors_the_gang_and_remembers_where_to_resume():
    run = Run(batch=2, remaining=4, cursor=3)
    anchored = gang.landed(run, WEST_B, request(placement="same-az"))
    assert anchored.gang == Gang(anchor="us-west-2/us-west-2b", market="spot", resume=4)
    again = gang.landed(anchored.model_copy(update={"cursor": 5}), pool(zone="b", itype="g5.xlarge"), request(placement="same-az"))
    assert again.gang == anchored.gang
    assert gang.landed(run, WEST_B, request()).gang is None


def test_a_gang_is_rolled_back_only_with_all_or_nothing_an_anchor_and_something_launched():
    anchored = Run(batch=2, remaining=2, launched=2, gang=Gang(anchor="us-west-2"))
    strict = request(placement="same-region", all_or_nothing=True, count=4)
    assert gang.must_roll_back(anchored, strict) is True
    assert gang.must_roll_back(anchored, request(placement="same-region", count=4)) is False
    assert gang.must_roll_back(anchored.model_copy(update={"launched": 1}), strict) is True
    assert gang.must_roll_back(anchored.model_copy(update={"launched": 0}), strict) is False
    assert gang.must_roll_back(anchored.model_copy(update={"gang": Gang()}), strict) is False
    assert gang.must_roll_back(anchored.model_copy(update={"gang": None}), strict) is False


def test_the_next_market_starts_from_its_top_and_keeps_the_anchor():
    moved = gang.for_next_market(Gang(anchor="us-west-2", market="spot", resume=7, excluded=["spot:us-east-1"], rolled_back=3))
    assert moved == Gang(anchor="us-west-2", market="spot", resume=0, excluded=["spot:us-east-1"], rolled_back=3)
    assert gang.for_next_market(None) is None


def test_a_rollback_clears_what_the_run_holds_and_excludes_the_anchor_in_its_market():
    held = instances(WEST_A, 3)
    run = Run(batch=1, remaining=1, launched=3, instances=held, hourly_cost=1.2,
              gang=Gang(anchor="us-west-2/us-west-2a", market="on-demand", resume=2, excluded=["spot:x"], rolled_back=1))
    cleared = gang.rolled_back(run, request(count=4), 3)
    assert (cleared.instances, cleared.launched, cleared.remaining, cleared.hourly_cost) == ([], 0, 4, 0.0)
    assert cleared.gang == Gang(anchor=None, market="on-demand", resume=2,
                                excluded=["spot:x", "on-demand:us-west-2/us-west-2a"], rolled_back=4)
    assert gang.rolled_back(Run(batch=1, remaining=1), request(count=2), 0).gang == Gang()


# --- the fill loop with a gang ----------------------------------------------------------------------


def test_a_same_az_gang_skips_other_zones_once_it_landed_and_rolls_back_when_its_zone_runs_out():
    pools = [WEST_A, WEST_B, pool(zone="a", itype="g5.xlarge"), EAST_A]
    strict = request(count=4, placement="same-az", all_or_nothing=True, instance_types=["g6.xlarge", "g5.xlarge"])
    run = fill.enter_region(fill.prepare(fill.start(strict), pools, strict), RegionLaunch(region="us-west-2", image_id="ami-1", root_volume_gib=100))
    run = fill.after_attempt(run, pools, LaunchResult(outcome="launched", instances=instances(WEST_A, 2)), strict)
    assert (run.cursor, run.next, run.gang.anchor, run.gang.resume) == (2, "launch", "us-west-2/us-west-2a", 1)
    run = fill.after_attempt(run, pools, LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity"), strict)
    assert (run.cursor, run.next, run.launched) == (2, "rollback", 2)
    resumed = fill.after_rollback(run, pools, strict, 2)
    # us-west-2b was skipped while the gang was anchored in 2a: it is the first place to try now.
    assert (resumed.cursor, resumed.next, resumed.launched, resumed.remaining) == (1, "launch", 0, 4)
    assert resumed.gang.excluded == ["spot:us-west-2/us-west-2a"]
    assert resumed.gang.rolled_back == 2


def test_after_the_last_place_failed_the_market_is_exhausted_with_nothing_held():
    pools = [WEST_A]
    strict = request(count=4, placement="same-az", all_or_nothing=True)
    run = Run(batch=4, remaining=2, launched=2, instances=instances(WEST_A, 2), next="rollback", blocked=["spot/us-east-1"],
              gang=Gang(anchor="us-west-2/us-west-2a", market="spot", resume=1))
    ended = fill.after_rollback(run, pools, strict, 2)
    assert (ended.next, ended.cursor, ended.launched, ended.blocked, ended.batch) == ("exhausted", 0, 0, [], 4)
    assert ended.gang.resume == 0


def test_an_incomplete_end_of_the_fill_rolls_back_for_good():
    strict = request(count=4, all_or_nothing=True)
    run = Run(batch=2, remaining=1, launched=3, instances=instances(WEST_A, 3), next="exhausted")
    ended = fill.after_rollback(run, [WEST_A], strict, 3)
    assert (ended.next, ended.launched, ended.gang.rolled_back) == ("not_placed", 0, 3)


def test_a_short_gang_without_all_or_nothing_is_kept_and_the_market_exhausted():
    pools = [WEST_A, WEST_B]
    loose = request(count=4, placement="same-az")
    run = fill.enter_region(fill.prepare(fill.start(loose), pools, loose), RegionLaunch(region="us-west-2", image_id="ami-1", root_volume_gib=100))
    run = fill.after_attempt(run, pools, LaunchResult(outcome="launched", instances=instances(WEST_A, 2)), loose)
    assert (run.next, run.launched, run.gang.anchor) == ("exhausted", 2, "us-west-2/us-west-2a")


def test_prepare_skips_a_pool_outside_the_gang():
    pools = [WEST_A, EAST_A]
    run = Run(batch=1, remaining=1, cursor=1, gang=Gang(anchor="us-west-2"))
    assert fill.prepare(run, pools, request(placement="same-region")).next == "exhausted"
    assert fill.prepare(run, pools, request()).next == "prepare"


# --- what GANG_NOT_PLACED says ---------------------------------------------------------------------


def attempt(p: Pool, launched: int, outcome: str, reason=None, number=1):
    return Attempt(number=number, region=p.region, availability_zone=p.availability_zone, instance_type=p.instance_type,
                   market=p.market, batch=4, launched=launched, outcome=outcome, reason=reason)


def test_the_cause_lists_every_pool_tried_and_every_instance_rolled_back():
    attempts = [attempt(WEST_A, 2, "launched"), attempt(WEST_A, 0, "capacity", "InsufficientInstanceCapacity", 2),
                attempt(WEST_B, 1, "launched", number=3)]
    rolled = [{"instance_id": "i-2", "region": "us-west-2", "availability_zone": "us-west-2b", "instance_type": "g6.xlarge",
               "market": "spot", "state": "terminated"},
              {"instance_id": "i-1", "region": "us-west-2", "availability_zone": "us-west-2a", "instance_type": "g6.xlarge"}]
    strict = request(count=4, placement="same-az", all_or_nothing=True)
    cause = json.loads(gang.not_placed_cause(strict, attempts, rolled, ["spot:us-west-2/us-west-2a"]))
    assert cause == {
        "error": "GANG_NOT_PLACED",
        "message": "The gang of 4 x g6.xlarge could not be placed in one Availability Zone after trying 2 pool(s). "
        "2 instance(s) this run launched were terminated (rolled back); nothing keeps running.",
        "request_id": "gang-1",
        "requested": 4,
        "placement": "same-az",
        "places_tried": ["spot:us-west-2/us-west-2a"],
        "pools_tried": [
            {"pool": "us-west-2/us-west-2a/g6.xlarge", "market": "spot", "launched": 2, "outcome": "capacity",
             "reason": "InsufficientInstanceCapacity"},
            {"pool": "us-west-2/us-west-2b/g6.xlarge", "market": "spot", "launched": 1, "outcome": "launched", "reason": None},
        ],
        "rolled_back_count": 2,
        "rolled_back": [
            {"instance_id": "i-1", "region": "us-west-2", "availability_zone": "us-west-2a", "instance_type": "g6.xlarge"},
            {"instance_id": "i-2", "region": "us-west-2", "availability_zone": "us-west-2b", "instance_type": "g6.xlarge",
             "market": "spot"},
        ],
        "hint": "\"placement\": \"same-region\" accepts a gang spread over one region's AZs; "
        "\"market\": \"spot-then-on-demand\" also tries On-Demand capacity; "
        "more regions or instance types give the gang more places; without \"all_or_nothing\" the run keeps a partial gang.",
    }


def test_the_cause_of_a_spread_gang_that_launched_nothing_says_nothing_was_rolled_back():
    strict = request(count=2, all_or_nothing=True, market="on-demand", placement="same-region")
    cause = json.loads(gang.not_placed_cause(strict, [attempt(pool(market="on-demand"), 0, "capacity")], [], []))
    assert cause["message"] == ("The gang of 2 x g6.xlarge could not be placed in one region after trying 1 pool(s). "
                                "Nothing was launched, so nothing was rolled back.")
    assert cause["hint"] == ("more regions or instance types give the gang more places; "
                             "without \"all_or_nothing\" the run keeps a partial gang.")
    anywhere = json.loads(gang.not_placed_cause(request(count=2, all_or_nothing=True), [attempt(WEST_A, 0, "capacity")], [], []))
    assert anywhere["message"].startswith("The gang of 2 x g6.xlarge could not be placed after trying 1 pool(s). ")
    two = request(count=2, all_or_nothing=True, instance_types=["g6.xlarge", "g5.xlarge"], regions=["us-west-2", "us-east-1"])
    nowhere = json.loads(gang.not_placed_cause(two, [], [], []))
    assert nowhere["message"] == ("No pool to try: none of the candidate regions (us-west-2, us-east-1) offers g6.xlarge, "
                                  "g5.xlarge in any AZ, so the gang of 2 could not be placed. Nothing was launched.")
    spread = json.loads(gang.not_placed_cause(two, [attempt(WEST_A, 0, "capacity")], [], []))
    assert spread["message"].startswith("The gang of 2 x g6.xlarge, g5.xlarge could not be placed after trying 1 pool(s).")


def test_a_cause_over_budget_keeps_the_ids_and_the_pools_that_launched():
    many = [attempt(pool(zone=f"z{n}"), n % 2, "launched" if n % 2 else "capacity", number=n) for n in range(600)]
    rolled = [{"instance_id": f"i-{n:05d}", "region": "us-west-2", "availability_zone": "us-west-2a",
               "instance_type": "g6.xlarge", "market": "spot"} for n in range(300)]
    text = gang.not_placed_cause(request(count=250, all_or_nothing=True), many, rolled, [])
    cause = json.loads(text)
    assert len(text) <= gang.CAUSE_BUDGET + 2000
    assert cause["rolled_back_count"] == 300
    assert cause["rolled_back"] == [f"i-{n:05d}" for n in range(gang.LISTED_ROLLED_BACK)]
    assert cause["pools_tried"] == [f"us-west-2/us-west-2z{n}/g6.xlarge" for n in range(1, 600, 2)]
    assert cause["pools_note"] == "600 pools tried; only those that launched are listed (the execution history holds all)"


def test_a_hand_built_anchor_without_a_market_is_excluded_as_spot():
    run = Run(batch=1, remaining=1, gang=Gang(anchor="us-west-2"))
    assert gang.rolled_back(run, request(), 0).gang.excluded == ["spot:us-west-2"]


# --- cluster placement groups ------------------------------------------------------------------------


def test_efa_types_are_the_multi_node_sizes_in_the_catalog():
    from gpufill import catalog

    assert [t for t in ("g6e.12xlarge", "p4d.24xlarge", "p5.48xlarge", "g5.8xlarge") if catalog.supports_efa(t)] == [
        "g6e.12xlarge", "p4d.24xlarge", "p5.48xlarge", "g5.8xlarge"]
    assert [t for t in ("g6.xlarge", "g6e.4xlarge", "g5.4xlarge", "no.such") if catalog.supports_efa(t)] == []


def test_a_same_az_gang_of_efa_types_gets_one_cluster_group_per_deployment_request_and_zone():
    efa = pool(zone="b", itype="g6e.12xlarge")
    assert gang.cluster_group(request(placement="same-az", instance_types=["g6e.12xlarge"]), efa, "prod") == (
        "gpufill-prod-gang-1-us-west-2b")
    assert gang.cluster_group(request(placement="same-region", instance_types=["g6e.12xlarge"]), efa, "prod") is None
    assert gang.cluster_group(request(placement="same-az"), WEST_B, "prod") is None
    long = gang.cluster_group(request(placement="same-az", instance_types=["g6e.12xlarge"]), efa, "d" * 300)
    assert long == f"gpufill-{'d' * 300}"[: gang.MAX_GROUP_NAME] and len(long) == 255


def test_a_request_that_must_land_whole_may_wait_for_capacity_with_its_own_backoff():
    asked = {"all_or_nothing": True, "wait_for_capacity": {"deadline": "PT6H", "first_delay": "PT30S", "max_delay": "PT2M"}}
    resolved = request(**asked)
    assert (resolved.all_or_nothing, resolved.wait_for_capacity_seconds) == (True, 6 * 3600)
    assert (resolved.wait_first_delay_seconds, resolved.wait_max_delay_seconds) == (30, 120)
    plain = request(all_or_nothing=True, placement="same-az", wait_for_capacity={"deadline": "PT6H"})
    assert (plain.wait_first_delay_seconds, plain.wait_max_delay_seconds) == (None, None)  # the deployment's


@pytest.mark.parametrize(("wait", "field", "problem"), [
    ({"deadline": "PT6H", "max_delay": "PT5S"}, "wait_for_capacity.max_delay", "must be from 10 seconds to 6 hours"),
    ({"deadline": "PT6H", "first_delay": "PT7H"}, "wait_for_capacity.first_delay", "must be from 10 seconds to 6 hours"),
    ({"deadline": "PT6H", "max_delay": 300}, "wait_for_capacity.max_delay", "ISO 8601 duration"),
    ({"deadline": "PT6H", "first_delay": "PT10M", "max_delay": "PT5M"}, "wait_for_capacity",
     "first_delay (600 s) is longer than max_delay (300 s)"),
    ({"deadline": "PT6H", "cap": "PT5M"}, "wait_for_capacity.cap", ""),
])
def test_a_bad_backoff_is_refused_naming_its_field(wait, field, problem):
    found = problems({"all_or_nothing": True, "wait_for_capacity": wait})
    assert list(found) == [field] and problem in found[field]


def test_a_maintained_request_is_not_a_gang_yet():
    refused = "does not go with a gang (placement other than 'any', or all_or_nothing) yet"
    assert problems({"maintain": True, "placement": "same-az"}) == {"maintain": refused}
    assert problems({"maintain": True, "all_or_nothing": True}) == {"maintain": refused}
    assert Request.model_validate({"maintain": True, "placement": "any"}).maintain


def test_a_cause_exactly_at_the_budget_is_kept_whole(monkeypatch):
    tried = [attempt(WEST_A, 1, "launched")]
    rolled = [{"instance_id": "i-00001", "region": "us-west-2", "availability_zone": "us-west-2a"}]
    whole = gang.not_placed_cause(request(count=2, all_or_nothing=True), tried, rolled, [])
    monkeypatch.setattr(gang, "CAUSE_BUDGET", len(whole))
    assert gang.not_placed_cause(request(count=2, all_or_nothing=True), tried, rolled, []) == whole
    monkeypatch.setattr(gang, "CAUSE_BUDGET", len(whole) - 1)
    assert "pools_note" in json.loads(gang.not_placed_cause(request(count=2, all_or_nothing=True), tried, rolled, []))


def test_a_rollback_is_settled_only_when_ec2_shows_every_instance_ending():
    ids = ["i-1", "i-2"]
    assert gang.rollback_settled(ids, {"i-1": "shutting-down", "i-2": "terminated"})
    assert not gang.rollback_settled(ids, {"i-1": "terminated", "i-2": "running"})
    # Not described (a new instance EC2 does not show yet) is not known to be ended.
    assert not gang.rollback_settled(ids, {"i-1": "terminated"})
    assert not gang.rollback_settled([], {})


# --- all_or_nothing with wait_for_capacity: a try launches the whole count or keeps nothing --------


def test_a_waiting_run_that_ends_a_try_short_hands_everything_back_and_waits():
    from gpufill.policy import waiting

    req = request(count=3, all_or_nothing=True, wait_for_capacity={"deadline": "PT1H"})
    # As IsFulfilled leaves it (a member lost before it ran): mid-plan, a region blocked, a reservation slot taken.
    short = Run(batch=3, remaining=1, launched=2, next="ready", instances=instances(WEST_A, 2), cursor=1,
                blocked=["spot/us-east-1"], launch=RegionLaunch(region="us-west-2", image_id="ami-1", root_volume_gib=100),
                reserved_taken={"cr-1": 1}, gang=Gang(excluded=["spot:us-east-1"], rolled_back=4), wait=waiting.begin(3600, 0))
    after = fill.after_rollback(short, [WEST_A, EAST_A], req, 2)
    assert (after.next, after.instances, after.launched, after.remaining) == ("await_capacity", [], 0, 3)
    assert after.gang == Gang(rolled_back=6)
    assert (after.cursor, after.blocked, after.launch, after.reserved_taken) == (0, [], None, {})
    # Without a wait, the same end is final.
    assert fill.after_rollback(short.model_copy(update={"wait": None}), [WEST_A, EAST_A], req, 2).next == "not_placed"


def test_a_gang_that_ran_out_of_its_place_while_waiting_still_tries_the_next_place_first():
    from gpufill.policy import waiting

    req = request(count=3, all_or_nothing=True, placement="same-region", wait_for_capacity={"deadline": "PT1H"})
    run = Run(batch=3, remaining=1, launched=2, next="rollback", cursor=1, instances=instances(WEST_A, 2),
              gang=Gang(anchor="us-west-2", market="spot", resume=1), wait=waiting.begin(3600, 0))
    after = fill.after_rollback(run, [WEST_A, WEST_B, EAST_A], req, 2)
    assert (after.next, after.cursor, after.gang.excluded) == ("prepare", 2, ["spot:us-west-2"])


def test_each_instance_rolled_back_is_recorded_with_why():
    from gpufill.policy import waiting

    req = request(count=4, all_or_nothing=True)
    held = Run(batch=4, remaining=1, launched=3, next="rollback", gang=Gang(anchor="us-west-2/us-west-2a"))
    assert gang.rollback_reason(held, req) == (
        "all_or_nothing: the gang could not complete in us-west-2/us-west-2a; started again elsewhere")
    waited = held.model_copy(update={"next": "exhausted", "gang": None, "wait": waiting.begin(60, 0).model_copy(update={"tries": 5})})
    assert gang.rollback_reason(waited, req) == (
        "all_or_nothing: try 5 launched 3 of 4 and could not complete; handed back before waiting for capacity")
    assert gang.rollback_reason(waited.model_copy(update={"next": "rollback"}), req) == gang.rollback_reason(waited, req)
    assert gang.rollback_reason(held.model_copy(update={"next": "ready"}), req) == (
        "all_or_nothing: the fill launched 3 of 4 and could not complete")


def _fleet_try(req, pools, room, wait):
    """One try of the fill loop's fleet policy against pools with `room` instances each: what each
    CreateFleet is answered is at most its target and what its pools hold. Returns the runs seen."""
    from gpufill.models.run import FleetAnswer, PoolAnswer
    from gpufill.policy import fleet_moves

    run, seen, number = fill.start(req).model_copy(update={"wait": wait}), [], 0
    run = fill.prepare(run, pools, req)
    while run.next in ("prepare", "launch"):
        run = fleet_moves.begin_call(fill.enter_region(run, RegionLaunch(region=pools[run.cursor].region, image_id="ami-1", root_volume_gib=100)) if run.next == "prepare" else run)
        target, answers = run.batch, []
        for index in fleet_moves.overrides(run, pools, req):
            take = min(room[index], target)
            room[index] -= take
            target -= take
            got = instances(pools[index], take, first=number)
            number += take
            answers.append(PoolAnswer(index=index, result=LaunchResult(outcome="launched", instances=got) if take else
                                      LaunchResult(outcome="capacity", reason="InsufficientInstanceCapacity")))
        run = fleet_moves.after_fleet(run, pools, FleetAnswer(answers=answers), req)
        seen.append(run)
        if run.next == "rollback":
            run = fill.after_rollback(run, pools, req, run.launched)
            seen.append(run)
    if run.next == "exhausted":  # WhatAfterThisMarket: all_or_nothing goes to RollBackGang
        run = fill.after_rollback(run, pools, req, run.launched)
        seen.append(run)
    return seen


@settings(max_examples=150, deadline=None)
@given(count=st.integers(min_value=1, max_value=12), room=st.lists(st.integers(min_value=0, max_value=6), min_size=3, max_size=3),
       placement=st.sampled_from(["any", "same-region", "same-az"]))
def test_a_waiting_all_or_nothing_try_launches_the_whole_count_or_keeps_nothing_and_never_more(count, room, placement):
    from gpufill.policy import waiting

    req = request(count=count, all_or_nothing=True, placement=placement, launch_mode="fleet", wait_for_capacity={"deadline": "PT1H"})
    pools = [WEST_A, WEST_B, EAST_A]
    seen = _fleet_try(req, pools, list(room), waiting.begin(3600, 0))
    assert all(r.launched == len(r.instances) <= count and r.launched + r.remaining == count for r in seen)
    end = seen[-1]
    if end.next == "done":
        assert end.launched == count
    else:  # the try could not complete: nothing is held while the run waits
        assert (end.next, end.instances, end.launched) == ("await_capacity", [], 0)
        assert end.gang.rolled_back == sum(r.launched for r in seen if r.next in ("rollback", "exhausted"))
