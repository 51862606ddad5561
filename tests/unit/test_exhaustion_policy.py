"""The causes a run fails with when a market is used up or EC2 refuses the launch, field by field."""

import json

import pytest

from gpufill import catalog
from gpufill.models.request import Request, normalise
from gpufill.models.run import Attempt, Instance, Run
from gpufill.policy.exhaustion import CAUSE_BUDGET, exhaustion_cause, on_demand_hint, rejection_cause

# On-demand prices ($/h) and round trips from eu-central-1 (ms) the hint chooses between.
PRICES = {
    ("g6.xlarge", "us-east-1"): 0.8048, ("g6.xlarge", "us-west-2"): 0.8048, ("g6.xlarge", "ca-central-1"): 0.8048,
    ("g6.xlarge", "eu-west-1"): 0.9, ("g6.xlarge", "eu-west-2"): 0.85,
    # Cheaper, nearer and in every region, but only the first type the user asked for is quoted.
    ("p5.48xlarge", "us-east-1"): 0.1, ("p5.48xlarge", "eu-west-1"): 0.1,
    ("g6.xlarge", "us-east-2"): 0.8048, ("g6.xlarge", "eu-north-1"): 0.85,
}
LATENCY = {"us-east-1": 150, "us-west-2": 90, "eu-west-1": 25, "eu-west-2": 25,  # ca-central-1: unknown
           "us-east-2": 90, "eu-north-1": 25}


@pytest.fixture
def market(monkeypatch):
    monkeypatch.setattr(catalog, "on_demand_price", lambda itype, region: PRICES.get((itype, region)))
    monkeypatch.setattr(catalog, "latency_ms",
                        lambda origin, region: LATENCY.get(region) if origin == "eu-central-1" else None)


def request(regions=("us-east-1", "us-west-2", "ca-central-1", "eu-west-1", "eu-west-2", "ap-south-1"),
            types=("g6.xlarge", "p5.48xlarge"), count=4):
    return normalise(Request(instance_types=list(types), regions=list(regions), origin_region="eu-central-1", count=count),
                     request_id="r-7", default_regions=[], home_region="us-east-1")


def test_the_hint_names_the_cheapest_and_the_nearest_region_for_the_first_type(market):
    # Three regions share the lowest price: the nearest of them wins, and a region of unknown
    # distance counts as far. Two regions are nearest: the cheaper wins. ap-south-1 offers nothing.
    assert on_demand_hint(request()) == (
        'Rerun with "market": "on-demand": "on_demand_strategy": "cost" starts in us-west-2 (g6.xlarge at $0.8048/h); '
        '"on_demand_strategy": "latency" starts in eu-west-2 (25 ms from eu-central-1, $0.8500/h).')


def test_a_region_of_unknown_distance_is_still_the_cheapest_when_it_alone_is(market):
    assert on_demand_hint(request(regions=("ca-central-1", "eu-west-1"))) == (
        'Rerun with "market": "on-demand": "on_demand_strategy": "cost" starts in ca-central-1 (g6.xlarge at $0.8048/h); '
        '"on_demand_strategy": "latency" starts in eu-west-1 (25 ms from eu-central-1, $0.9000/h).')


def test_regions_equal_in_price_and_distance_are_named_in_alphabetical_order(market):
    assert on_demand_hint(request(regions=("us-west-2", "us-east-2", "eu-west-2", "eu-north-1"))) == (
        'Rerun with "market": "on-demand": "on_demand_strategy": "cost" starts in us-east-2 (g6.xlarge at $0.8048/h); '
        '"on_demand_strategy": "latency" starts in eu-north-1 (25 ms from eu-central-1, $0.8500/h).')


def test_with_no_on_demand_price_known_the_hint_names_both_strategies(market):
    assert on_demand_hint(request(regions=("ap-south-1",))) == (
        'Rerun with "market": "on-demand" and "on_demand_strategy": "cost" or "latency".')


def attempt(n, region="us-west-2", zone="a", itype="g6.xlarge", market="spot", outcome="capacity",
            reason="InsufficientInstanceCapacity", note=None):
    return Attempt(number=n, region=region, availability_zone=region + zone, instance_type=itype, market=market,
                   batch=4, launched=0, outcome=outcome, reason=reason, note=note)


def test_all_spot_exhausted_names_each_spot_pool_once_with_its_last_answer(market):
    attempts = [attempt(1), attempt(2, zone="b", outcome="quota", reason="MaxSpotInstanceCountExceeded"),
                attempt(3, market="on-demand", outcome="error", reason=None),
                attempt(4, outcome="throttled", reason="RequestLimitExceeded")]
    cause = json.loads(exhaustion_cause(Run(batch=4, remaining=3, launched=1), attempts, request(), "spot"))
    assert cause == {
        "error": "ALL_SPOT_EXHAUSTED",
        # A pool whose last answer was EC2 too busy to answer is not claimed empty.
        "message": "Every spot pool was tried (2); none had capacity for g6.xlarge, p5.48xlarge. 1 of them EC2 did not "
                   "answer for (RequestLimitExceeded): their capacity is unknown, a later run may find some.",
        "request_id": "r-7",
        "requested": 4,
        "launched": 1,
        "pools_tried": [
            {"pool": "us-west-2/us-west-2a/g6.xlarge", "market": "spot", "outcome": "throttled", "reason": "RequestLimitExceeded"},
            {"pool": "us-west-2/us-west-2b/g6.xlarge", "market": "spot", "outcome": "quota", "reason": "MaxSpotInstanceCountExceeded"},
        ],
        "hint": on_demand_hint(request()),
        "attempts": [
            {"number": 1, "region": "us-west-2", "availability_zone": "us-west-2a", "instance_type": "g6.xlarge",
             "market": "spot", "batch": 4, "launched": 0, "outcome": "capacity", "reason": "InsufficientInstanceCapacity"},
            {"number": 2, "region": "us-west-2", "availability_zone": "us-west-2b", "instance_type": "g6.xlarge",
             "market": "spot", "batch": 4, "launched": 0, "outcome": "quota", "reason": "MaxSpotInstanceCountExceeded"},
            {"number": 3, "region": "us-west-2", "availability_zone": "us-west-2a", "instance_type": "g6.xlarge",
             "market": "on-demand", "batch": 4, "launched": 0, "outcome": "error"},
            {"number": 4, "region": "us-west-2", "availability_zone": "us-west-2a", "instance_type": "g6.xlarge",
             "market": "spot", "batch": 4, "launched": 0, "outcome": "throttled", "reason": "RequestLimitExceeded"},
        ],
    }


def test_all_on_demand_failed_counts_on_demand_pools_and_points_at_quotas():
    attempts = [attempt(1), attempt(2, region="eu-west-1", market="on-demand", outcome="quota", reason="VcpuLimitExceeded")]
    cause = json.loads(exhaustion_cause(Run(batch=4, remaining=4), attempts, request(), "on-demand"))
    assert (cause["error"], cause["message"], cause["hint"]) == (
        "ALL_ON_DEMAND_FAILED",
        "Every on-demand pool was tried (1); none could launch g6.xlarge, p5.48xlarge.",
        "Try more regions or instance types, ask for a quota increase where the outcome is 'quota', or retry later.")
    assert cause["pools_tried"] == [
        {"pool": "eu-west-1/eu-west-1a/g6.xlarge", "market": "on-demand", "outcome": "quota", "reason": "VcpuLimitExceeded"}]
    assert (cause["request_id"], cause["requested"], cause["launched"], len(cause["attempts"])) == ("r-7", 4, 0, 2)


@pytest.mark.parametrize(("market", "error"), [("spot", "ALL_SPOT_EXHAUSTED"), ("on-demand", "ALL_ON_DEMAND_FAILED")])
def test_a_market_with_no_pool_says_no_region_offers_the_types(market, error):
    cause = json.loads(exhaustion_cause(Run(batch=4, remaining=4), [], request(regions=("us-east-1", "eu-west-1")), market))
    assert (cause["error"], cause["pools_tried"], cause["attempts"]) == (error, [], [])
    assert cause["message"] == (
        f"No {market} pool to try: none of the candidate regions (us-east-1, eu-west-1) offers g6.xlarge, p5.48xlarge "
        "in any AZ, or every region was dropped while scoring. Nothing was launched.")
    assert cause["hint"] == ("Add regions that offer these types, or other instance types; "
                             'a plan run ("action": "plan") shows what each region offers.')


def _sized(target, build):
    """build(pad) -> cause text whose length grows one for one with pad: the text of length `target`."""
    return build(10 + target - len(build(10)))


def test_a_cause_at_its_budget_keeps_every_attempt_and_one_over_summarises_them(market):
    def build(pad):
        attempts = [attempt(n, zone=str(n)) for n in range(1, 60)] + [attempt(60, note="x" * pad)]
        return exhaustion_cause(Run(batch=4, remaining=4), attempts, request(), "spot")

    full = json.loads(_sized(CAUSE_BUDGET, build))
    assert len(full["attempts"]) == 60 and len(full["pools_tried"]) == 60
    over = _sized(CAUSE_BUDGET + 1, build)
    cause = json.loads(over)
    assert len(over) <= CAUSE_BUDGET and len(cause["pools_tried"]) == 60
    assert cause["attempts"] == "60 attempts; the result of `gpufill status` and the execution history hold them"


def test_a_cause_whose_pools_alone_exceed_the_budget_lists_one_line_per_region_and_type(market):
    def build(pad):
        attempts = [attempt(n, zone=f"-{n}") for n in range(1, 200)] + [attempt(200, itype="g6." + "x" * pad)]
        return exhaustion_cause(Run(batch=4, remaining=4), attempts, request(), "spot")

    at_budget = json.loads(_sized(CAUSE_BUDGET, build))
    assert isinstance(at_budget["attempts"], str) and len(at_budget["pools_tried"]) == 200
    over = json.loads(_sized(CAUSE_BUDGET + 1, build))
    assert [p["pools"] for p in over["pools_tried"]][:1] == ["us-west-2/g6.xlarge"] and len(over["pools_tried"]) == 2


def test_grouped_pools_list_their_zones_and_count_each_outcome(market):
    outcomes = ["capacity", "capacity", "quota", "capacity", "throttled", "capacity"]
    attempts = [attempt(n, region=region, zone=zone, itype=f"g6.{size}xlarge", outcome=outcome, reason=None)
                for n, (region, size, (zone, outcome)) in enumerate(
                    ((r, s, z) for r in ("us-west-2", "eu-west-1", "us-east-1") for s in range(2, 42)
                     for z in zip("abcdef", outcomes)), 1)]
    text = exhaustion_cause(Run(batch=4, remaining=4), attempts, request(), "spot")
    cause = json.loads(text)
    assert len(text) <= CAUSE_BUDGET and len(cause["pools_tried"]) == 3 * 40
    assert cause["pools_tried"][0] == {"pools": "us-west-2/g6.2xlarge", "zones": ["a", "b", "c", "d", "e", "f"],
                                       "outcomes": {"capacity": 4, "quota": 1, "throttled": 1}}
    assert cause["pools_tried"][-1]["pools"] == "us-east-1/g6.41xlarge"


def instance(n):
    return Instance(instance_id=f"i-{n:017x}", region="us-west-2", availability_zone="us-west-2a",
                    instance_type="g6.xlarge", market="spot")


def refused(reason, note=None):
    return attempt(9, outcome="error", reason=reason, note=note)


def test_launch_rejected_quotes_ec2_and_names_the_teardown_for_what_runs():
    run = Run(batch=4, remaining=2, launched=2, instances=[instance(1), instance(2)],
              step_attempts=[refused("UnauthorizedOperation", "You are not authorized to perform this operation.")])
    assert json.loads(rejection_cause(run, request())) == {
        "error": "LAUNCH_REJECTED",
        "message": "EC2 refused the launch in us-west-2/us-west-2a with UnauthorizedOperation: "
                   "You are not authorized to perform this operation.",
        "request_id": "r-7",
        "code": "UnauthorizedOperation",
        "what_to_change": "The LaunchBatch role may not launch with these settings: check its IAM policy and any SCP.",
        "requested": 4,
        "launched": 2,
        "instances": [f"i-{1:017x}", f"i-{2:017x}"],
        "teardown": {"action": "teardown", "request_id": "r-7"},
        "attempts": [{"number": 9, "region": "us-west-2", "availability_zone": "us-west-2a", "instance_type": "g6.xlarge",
                      "market": "spot", "batch": 4, "launched": 0, "outcome": "error", "reason": "UnauthorizedOperation",
                      "note": "You are not authorized to perform this operation."}],
    }


@pytest.mark.parametrize(("reason", "advice"), [
    ("InvalidBlockDeviceMapping", "Raise root_volume_gib to at least the AMI's root snapshot size, or use another AMI."),
    ("InvalidParameterValue", "A launch parameter is not valid for this account: check the regions config overrides and the request."),
    ("InvalidKMSKey.InvalidState", "Fix the launch settings named in EC2's message; every pool would refuse the same call."),
    (None, "Fix the launch settings named in EC2's message; every pool would refuse the same call."),
])
def test_each_refusal_says_what_to_change(reason, advice):
    run = Run(batch=4, remaining=4, step_attempts=[refused(reason)])
    cause = json.loads(rejection_cause(run, request()))
    assert cause["what_to_change"] == advice and cause.get("code") == reason


def test_a_refusal_without_ec2s_words_ends_on_the_code_and_offers_no_teardown():
    cause = json.loads(rejection_cause(Run(batch=4, remaining=4, step_attempts=[refused("InvalidParameterValue")]), request()))
    assert cause["message"] == "EC2 refused the launch in us-west-2/us-west-2a with InvalidParameterValue"
    assert cause["instances"] == [] and "teardown" not in cause and cause["launched"] == 0
    assert cause["attempts"] == [{"number": 9, "region": "us-west-2", "availability_zone": "us-west-2a",
                                  "instance_type": "g6.xlarge", "market": "spot", "batch": 4, "launched": 0,
                                  "outcome": "error", "reason": "InvalidParameterValue"}]


def test_ec2s_words_are_quoted_to_the_last_character():
    note = "Value (m7i.48xlarge) for parameter instanceType is invalid for architecture X"
    run = Run(batch=4, remaining=4, step_attempts=[refused("InvalidParameterValue", note)])
    assert json.loads(rejection_cause(run, request()))["message"].endswith(": " + note)


def test_a_rejected_step_names_the_paid_block_it_leaves_with_what_it_launched_and_a_done_step_is_left_alone():
    from test_block_use import HELD

    from gpufill.policy import block_use
    from gpufill.policy.exhaustion import step_end

    req = request()
    refused = Attempt(number=2, region="us-east-2", availability_zone="us-east-2a", instance_type="p5.48xlarge", market="on-demand",
                      batch=1, launched=0, outcome="error", reason="InvalidParameterValue")
    run = Run(batch=2, remaining=1, launched=1, next="rejected", capacity_block=HELD, step_attempts=[refused])
    ended, view = step_end(run, req, [], "on-demand", [])
    assert ended.cause == block_use.with_block(rejection_cause(run, req), HELD, 1)
    assert view == block_use.ended_view(HELD, execution="r-7", error="LAUNCH_REJECTED", launched=1)
    plain = run.model_copy(update={"capacity_block": None})
    assert step_end(plain, req, [], "on-demand", []) == (plain.model_copy(update={"cause": rejection_cause(plain, req)}), None)
    done = Run(batch=1, remaining=0, next="done")
    assert step_end(done, req, [], "spot", []) == (done, None)


def test_pools_ec2_was_too_busy_for_are_named_by_each_reason_once():
    from gpufill.policy.exhaustion import exhaustion_cause

    attempts = [attempt(1, outcome="throttled", reason="RequestLimitExceeded"), attempt(2, zone="b", outcome="throttled", reason=None),
                attempt(3, zone="c", outcome="throttled", reason="InternalError")]
    cause = json.loads(exhaustion_cause(Run(batch=4, remaining=4), attempts, request(), "spot"))
    assert cause["message"].endswith(" 3 of them EC2 did not answer for (InternalError, RequestLimitExceeded, busy): their "
                                     "capacity is unknown, a later run may find some.")


def test_no_reservation_room_says_what_the_run_found_and_lists_only_its_reservation_attempts():
    from gpufill.models.run import ReservationSeen
    from gpufill.policy.exhaustion import no_reservation_room_cause

    hint = ('Free room in a reservation (end instances running in it), create or extend one, or rerun with '
            '"capacity_reservations": "open" to go on to Spot and On-Demand when the reservations are full.')
    req = request(regions=("us-west-2", "us-east-1"), types=("g6.xlarge",), count=3)
    into = attempt(2, market="on-demand", outcome="capacity", reason="ReservationCapacityExceeded").model_copy(
        update={"capacity_reservation_id": "cr-1"})
    none_found = json.loads(no_reservation_room_cause(Run(batch=3, remaining=3), [attempt(1), into], req, []))
    assert none_found == {
        "error": "NO_RESERVATION_ROOM",
        "message": "No On-Demand Capacity Reservation of this deployment holds g6.xlarge in us-west-2, us-east-1: none is active "
                   "and tagged gpufill:deployment for it, or named in capacity_reservation_ids. Nothing was launched.",
        "request_id": "r-7", "requested": 3, "launched": 0, "reservations_found": [], "hint": hint,
        "attempts": [into.model_dump(mode="json", exclude_none=True)],
    }
    seen = [ReservationSeen(capacity_reservation_id=f"cr-{n}", region="us-west-2", availability_zone="us-west-2a",
                            instance_type="g6.xlarge", available=n, planned=n, match="open") for n in (1, 2)]
    two = request(regions=("us-west-2",), types=("g6.xlarge", "g6.2xlarge"), count=3)
    found = json.loads(no_reservation_room_cause(Run(batch=3, remaining=2, launched=1), [into], two, seen))
    assert found["message"] == "The capacity reservations found had room for 3 of 3 g6.xlarge, g6.2xlarge; 1 launched into them."
    assert found["reservations_found"] == [s.model_dump(mode="json", exclude_none=True) for s in seen]
    assert (found["launched"], found["hint"]) == (1, hint)
