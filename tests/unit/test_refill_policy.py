"""Which EC2 events start a refill run, and what that run asks for (gpufill.policy.refill)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gpufill.models.request import REQUEST_ID_PATTERN, Request, normalise
from gpufill.policy import refill

OLD = "i-0123456789abcdef0"
WARNING = refill.InstanceEvent(kind="warning", instance_id=OLD, region="us-east-1", action="terminate")
ENDING = refill.InstanceEvent(kind="state-change", instance_id=OLD, region="us-east-1", state="terminated")
RECORD = {
    "instance_id": OLD,
    "request_id": "serve",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "instance_type": "g6.xlarge",
    "market": "spot",
    "maintain": True,
    "state": "running",
}
STORED = normalise(
    Request(instance_types=["g6.xlarge", "g5.xlarge"], count=3, maintain=True, regions=["us-east-1"], tags={"team": "ml"}),
    request_id="serve",
    default_regions=[],
    home_region="us-east-1",
).model_dump(mode="json", exclude_none=True)


def envelope(detail_type: str, detail: dict, **fields) -> dict:
    return {"source": "aws.ec2", "detail-type": detail_type, "region": "eu-west-1", "detail": detail, **fields}


# --- reading EventBridge's envelope ------------------------------------------------------


def test_a_spot_warning_is_read_with_its_action():
    event = envelope("EC2 Spot Instance Interruption Warning", {"instance-id": OLD, "instance-action": "terminate"})
    assert refill.read_event(event) == refill.InstanceEvent(kind="warning", instance_id=OLD, region="eu-west-1", action="terminate")


@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_an_ending_state_change_is_read(state):
    event = envelope("EC2 Instance State-change Notification", {"instance-id": OLD, "state": state})
    assert refill.read_event(event) == refill.InstanceEvent(kind="state-change", instance_id=OLD, region="eu-west-1", state=state)


@pytest.mark.parametrize(
    "event",
    [
        envelope("EC2 Instance State-change Notification", {"instance-id": OLD, "state": "stopped"}),
        envelope("EC2 Instance State-change Notification", {"instance-id": OLD, "state": "running"}),
        envelope("EC2 Instance Rebalance Recommendation", {"instance-id": OLD}),
        envelope("EC2 Spot Instance Interruption Warning", {"instance-id": OLD}, source="aws.autoscaling"),
        envelope("EC2 Spot Instance Interruption Warning", {"instance-id": 7}),
        envelope("EC2 Spot Instance Interruption Warning", {"instance-action": "terminate"}),
        envelope("EC2 Spot Instance Interruption Warning", {"instance-id": OLD}, region=""),
        {"source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "detail": {"instance-id": OLD}},
        envelope("EC2 Spot Instance Interruption Warning", "not an object"),
        {},
    ],
)
def test_anything_else_is_not_an_instance_event(event):
    assert refill.read_event(event) is None


# --- execution names ---------------------------------------------------------------------


def test_the_name_is_the_request_and_the_instance():
    assert refill.execution_name("serve", OLD) == f"serve-refill-{OLD}"


def test_a_name_of_exactly_80_characters_is_kept_and_81_is_shortened():
    fits = "r" * (80 - len(f"-refill-{OLD}"))
    assert refill.execution_name(fits, OLD) == f"{fits}-refill-{OLD}"
    assert len(refill.execution_name(fits, OLD)) == 80
    longer = fits + "x"
    shortened = refill.execution_name(longer, OLD)
    assert len(shortened) == 80
    assert shortened.startswith("r" * 44 + "-") and shortened.endswith(f"-refill-{OLD}")
    assert shortened != refill.execution_name(fits + "y", OLD)  # the hash keeps requests apart


@given(st.from_regex(REQUEST_ID_PATTERN, fullmatch=True), st.sampled_from([OLD, "i-0abc1234", "i-fffffffffffffffff"]))
def test_every_name_is_a_valid_execution_name_unique_to_its_request_and_instance(request_id, instance_id):
    name = refill.execution_name(request_id, instance_id)
    assert len(name) <= 80
    assert REQUEST_ID_PATTERN.match(name)
    assert name.endswith(f"-refill-{instance_id}")
    assert name == refill.execution_name(request_id, instance_id)


# --- the refill run's input ---------------------------------------------------------------


def test_the_refill_asks_for_one_instance_of_the_same_request():
    assert refill.refill_input(STORED, request_id="serve", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge") == {
        "action": "provision",
        "count": 1,
        "instance_types": ["g6.xlarge", "g5.xlarge"],
        "batch_max": 3,
        "launch_mode": "fleet",
        "market": "spot",
        "on_demand_strategy": "cost",
        "origin_region": "us-east-1",
        "regions": ["us-east-1"],
        "tags": {"team": "ml"},
        "model_id": STORED["model_id"],
        "image": STORED["image"],
        "root_volume_gib": 200,
        "scoring": "price-capacity",
        "facts": "warm",
        "placement": "any",
        "all_or_nothing": False,
        "ready_timeout": "PT1800S",
        "maintain": True,
        # A refill uses the request's capacity reservations as its first run did.
        "capacity_reservations": "open",
        "refill": {"request_id": "serve", "replaces": [OLD], "reclaimed_pool": "spot/us-east-1/us-east-1a/g6.xlarge"},
    }


def test_the_refill_input_is_a_valid_request():
    body = refill.refill_input(STORED, request_id="serve", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge")
    parsed = Request.model_validate(body)
    assert parsed.count == 1 and parsed.maintain and parsed.refill.replaces == [OLD]


def test_a_refill_waits_for_capacity_with_the_backoff_its_request_asked():
    stored = {**STORED, "wait_for_capacity_seconds": 7200, "wait_first_delay_seconds": 30, "wait_max_delay_seconds": 300}
    body = refill.refill_input(stored, request_id="serve", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge")
    assert body["wait_for_capacity"] == {"deadline": "PT7200S", "first_delay": "PT30S", "max_delay": "PT300S"}
    # A backoff the request left to the deployment stays the deployment's.
    del stored["wait_first_delay_seconds"]
    body = refill.refill_input(stored, request_id="serve", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge")
    assert body["wait_for_capacity"] == {"deadline": "PT7200S", "max_delay": "PT300S"}


# --- the decision -------------------------------------------------------------------------


def decide(event=WARNING, record=RECORD, stored=STORED, siblings=(), reason=None) -> refill.Decision:
    return refill.decide(event, None if record is None else dict(record), stored, list(siblings), reason)


def test_a_warning_to_terminate_refills():
    decision = decide()
    assert decision.refill is True
    assert decision.reason == "reclaimed"
    assert decision.execution_name == f"serve-refill-{OLD}"
    assert decision.reclaimed_pool == "spot/us-east-1/us-east-1a/g6.xlarge"
    assert decision.interruption == "spot interruption warning"
    assert decision.detail == f"{OLD} of request serve was reclaimed (spot interruption warning); serve-refill-{OLD} replaces it"
    assert decision.input == refill.refill_input(STORED, request_id="serve", instance_id=OLD, pool=decision.reclaimed_pool)


@pytest.mark.parametrize("code", ["Server.SpotInstanceTermination", "Server.InternalError", "Server.ScheduledStop"])
def test_an_end_ec2_caused_refills_and_says_why(code):
    decision = decide(ENDING, reason=code)
    assert (decision.refill, decision.interruption) == (True, code)


def test_an_interrupted_record_not_yet_replaced_refills_again_under_the_same_name():
    decision = decide(ENDING, record={**RECORD, "state": "interrupted"}, reason="Server.SpotInstanceTermination")
    assert decision.refill is True and decision.execution_name == f"serve-refill-{OLD}"


@pytest.mark.parametrize(
    ("kwargs", "reason", "detail"),
    [
        ({"record": None}, "not-ours", f"{OLD} is not an instance this deployment launched"),
        ({"record": {**RECORD, "request_id": None}}, "not-ours", f"{OLD} is not an instance this deployment launched"),
        ({"record": {**RECORD, "maintain": False}}, "no-maintain", "request serve did not ask for maintain"),
        ({"record": {k: v for k, v in RECORD.items() if k != "maintain"}}, "no-maintain", "request serve did not ask for maintain"),
        ({"stored": None}, "request-unknown", "request serve is no longer kept, so it cannot be asked for again"),
        ({"record": {**RECORD, "terminated_by": "tear-1"}}, "teardown", f"{OLD} was ended by gpufill teardown tear-1"),
        (
            {"siblings": [RECORD, {**RECORD, "instance_id": "i-1", "terminated_by": "tear-2"}, {**RECORD, "terminated_by": "tear-1"}]},
            "torn-down",
            "request serve was torn down (tear-1, tear-2): a teardown stops its maintenance",
        ),
        ({"record": {**RECORD, "replaced_by": ["i-2", "i-3"]}}, "already-refilled", f"{OLD} was already replaced by i-2, i-3"),
        ({"event": WARNING.model_copy(update={"action": "stop"})}, "not-reclaimed", f"EC2 will stop {OLD}, not take it away"),
        ({"event": WARNING.model_copy(update={"action": None})}, "not-reclaimed", f"EC2 will not end {OLD}, not take it away"),
        (
            {"event": ENDING, "reason": "Client.InstanceInitiatedShutdown"},
            "instance-initiated",
            f"{OLD} shut itself down (the idle watchdog or `shutdown`)",
        ),
        (
            {"event": ENDING, "reason": "Client.UserInitiatedShutdown"},
            "user-initiated",
            f"{OLD} was ended through the EC2 API (Client.UserInitiatedShutdown)",
        ),
        ({"event": ENDING, "reason": None}, "reason-unknown", f"EC2 gives no reason why {OLD} is terminated"),
        ({"event": ENDING, "reason": "Unknown.Code"}, "reason-unknown", f"EC2 gives no reason why {OLD} is terminated"),
    ],
)
def test_what_starts_nothing_and_why(kwargs, reason, detail):
    decision = decide(**kwargs)
    assert decision == refill.Decision(refill=False, reason=reason, detail=detail)


def test_the_first_reason_wins_in_the_order_a_person_would_ask():
    # another deployment's instance: nothing else about it matters
    assert decide(record=None, stored=None).reason == "not-ours"
    # ended by a teardown and its request torn down: the instance's own reason first
    torn = {**RECORD, "terminated_by": "tear-1"}
    assert decide(record=torn, siblings=[torn]).reason == "teardown"
    # torn down beats already refilled, and both beat the event's own reason
    assert decide(ENDING, record={**RECORD, "replaced_by": ["i-2"]}, siblings=[{"terminated_by": "t"}], reason="Server.X").reason == "torn-down"
    assert decide(ENDING, record={**RECORD, "replaced_by": ["i-2"]}, reason="Client.InstanceInitiatedShutdown").reason == "already-refilled"


@given(
    st.sampled_from(["warning", "state-change"]),
    st.sampled_from([None, "terminate", "stop"]),
    st.sampled_from([None, "Server.SpotInstanceTermination", "Client.InstanceInitiatedShutdown", "Client.UserInitiatedShutdown"]),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_a_refill_only_ever_follows_a_reclaim_of_a_maintained_live_request(kind, action, code, maintain, torn, replaced):
    event = refill.InstanceEvent(kind=kind, instance_id=OLD, region="us-east-1", action=action, state="terminated")
    record = {**RECORD, "maintain": maintain, **({"replaced_by": ["i-2"]} if replaced else {})}
    siblings = [{"terminated_by": "tear-1"}] if torn else []
    decision = refill.decide(event, record, STORED, siblings, code)
    reclaim = action == "terminate" if kind == "warning" else code == "Server.SpotInstanceTermination"
    assert decision.refill == (maintain and not torn and not replaced and reclaim)
    assert (decision.input is not None) == decision.refill


# --- the request fields -------------------------------------------------------------------


def problems(body: dict) -> list[dict[str, str]]:
    from pydantic import ValidationError

    from gpufill.models.request import describe_problems

    with pytest.raises(ValidationError) as caught:
        Request.model_validate(body)
    return describe_problems(caught.value)


def test_maintain_defaults_to_false_and_reaches_the_normalised_request():
    assert Request().maintain is False
    normalised = normalise(Request(maintain=True), request_id="r", default_regions=["us-east-1"], home_region="us-east-1")
    assert normalised.maintain is True and normalised.refill is None and normalised.owner_id == "r"


def test_a_refill_run_launches_for_the_request_it_refills():
    body = refill.refill_input(STORED, request_id="serve", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge")
    normalised = normalise(Request.model_validate(body), request_id=f"serve-refill-{OLD}", default_regions=[], home_region="us-east-1")
    assert normalised.request_id == f"serve-refill-{OLD}"  # its own run's items (plan, attempts, tokens)
    assert normalised.owner_id == "serve"  # its instances' records and tags


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"maintain": "yes"}, [{"field": "maintain", "problem": "must be true or false, got a string"}]),
        ({"maintain": 1}, [{"field": "maintain", "problem": "must be true or false, got a number"}]),
        (
            {"action": "status", "maintain": True},
            [{"field": "maintain", "problem": "only goes with action 'provision' (this request's action is 'status')"}],
        ),
        (
            {"action": "plan", "maintain": True},
            [{"field": "maintain", "problem": "only goes with action 'provision' (this request's action is 'plan')"}],
        ),
        (
            {"refill": {"request_id": "serve", "replaces": [OLD]}},
            [{"field": "refill", "problem": "is set by gpufill on the refill runs of a request with maintain: true"}],
        ),
        (
            {"action": "plan", "maintain": True, "refill": {"request_id": "serve", "replaces": [OLD]}},
            [
                {"field": "maintain", "problem": "only goes with action 'provision' (this request's action is 'plan')"},
                {"field": "refill", "problem": "is set by gpufill on the refill runs of a request with maintain: true"},
            ],
        ),
    ],
)
def test_maintain_and_refill_are_checked_and_each_problem_names_its_field(body, expected):
    assert problems(body) == expected


@pytest.mark.parametrize(
    ("refill_block", "field", "text"),
    [
        ({"request_id": "serve", "replaces": ["vm-1"]}, "refill.replaces", "not EC2 instance ids (i-0123456789abcdef0): 'vm-1'"),
        ({"request_id": "serve", "replaces": []}, "refill.replaces", "must have at least 1 item, not 0"),
        ({"request_id": "a b", "replaces": [OLD]}, "refill.request_id", "'a b' is not a request id (the execution name of a provisioning run)"),
        ({"request_id": "serve", "replaces": [OLD], "extra": 1}, "refill.extra", "unknown field"),
    ],
)
def test_a_malformed_refill_block_is_named(refill_block, field, text):
    assert problems({"maintain": True, "refill": refill_block}) == [{"field": field, "problem": text}]


# --- what status and the result say about maintained requests ------------------------------


def test_an_interrupted_record_keeps_saying_so_when_it_ends_and_lists_what_replaced_it():
    from datetime import UTC, datetime

    from gpufill.models.teardown import LiveInstance
    from gpufill.policy import status

    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    old = {"request_id": "serve", "region": "us-east-1", "state": "interrupted", "replaced_by": ["i-new"],
           "launched_at": "2026-03-01T10:00:00+00:00"}
    ended = LiveInstance(instance_id="i-old", region="us-east-1", state="terminated")
    # EC2 still shows it terminated, or no longer shows it: either way it stays "interrupted"
    assert status.ended({"i-old": old}, {"i-old": ended}, now) == {"i-old": "interrupted"}
    assert status.ended({"i-old": old}, {}, now) == {"i-old": "interrupted"}
    assert status.ended({"i-old": {**old, "expires_at": 1}}, {}, now) == {}
    running = LiveInstance(instance_id="i-old", region="us-east-1", state="shutting-down")
    assert status.ended({"i-old": old}, {"i-old": running}, now) == {}
    report = status.report(request_id="s", target_request_id="serve", regions=["us-east-1"],
                           records={"i-old": old}, live={}, now=now, deployment="local")
    [entry] = report.instances
    assert (entry.state, entry.finding, entry.replaced_by) == ("terminated", "recorded", ["i-new"])


def test_a_refill_runs_result_answers_for_its_request_and_says_what_it_replaced():
    from gpufill.models.run import Run
    from gpufill.policy.result import fill_result

    body = refill.refill_input(STORED, request_id="serve", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge")
    request = normalise(Request.model_validate(body), request_id=f"serve-refill-{OLD}", default_regions=[], home_region="us-east-1")
    result = fill_result(request, Run(batch=1, remaining=0, launched=0), [], "FULFILLED")
    assert result["request_id"] == "serve"
    assert result["refill"] == {
        "run": f"serve-refill-{OLD}", "request_id": "serve", "replaces": [OLD], "reclaimed_pool": "spot/us-east-1/us-east-1a/g6.xlarge",
    }
    # A refill asked without a reclaimed pool (none was known) says nothing of one.
    unknown = {**body, "refill": {"request_id": "serve", "replaces": [OLD]}}
    request = normalise(Request.model_validate(unknown), request_id="serve-refill-x", default_regions=[], home_region="us-east-1")
    assert fill_result(request, Run(batch=1, remaining=0), [], "FULFILLED")["refill"] == {
        "run": "serve-refill-x", "request_id": "serve", "replaces": [OLD]}
    plain = fill_result(normalise(Request(), request_id="once", default_regions=["us-east-1"], home_region="us-east-1"),
                        Run(batch=1, remaining=0), [], "FULFILLED")
    assert plain["request_id"] == "once" and "refill" not in plain


def test_the_refill_keeps_the_requests_own_waits():
    stored = normalise(
        Request(instance_type="g6.xlarge", count=2, maintain=True, ready_timeout="PT0S", wait_for_capacity={"deadline": "PT2H"}),
        request_id="patient", default_regions=["us-east-1"], home_region="us-east-1",
    ).model_dump(mode="json")
    asked = refill.refill_input(stored, request_id="patient", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge")
    assert (asked["ready_timeout"], asked["wait_for_capacity"]) == ("PT0S", {"deadline": "PT7200S"})
    accepted = Request.model_validate(asked)
    assert (accepted.ready_timeout.total_seconds(), accepted.wait_for_capacity.deadline.total_seconds()) == (0, 7200)


def test_the_refill_keeps_the_requests_expiry_and_counts_no_new_lifetime():
    stored = normalise(
        Request(instance_type="g6.xlarge", count=2, maintain=True, max_lifetime="PT8H"),
        request_id="guarded", default_regions=["us-east-1"], home_region="us-east-1",
    ).model_copy(update={"expires_at": "2026-12-04T20:00:00+00:00"}).model_dump(mode="json")
    asked = refill.refill_input(stored, request_id="guarded", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge")
    assert "max_lifetime" not in asked  # a lifetime counted from the refill would outlive the request
    normalised = normalise(Request.model_validate(asked), request_id=f"guarded-refill-{OLD}", default_regions=[], home_region="us-east-1")
    assert normalised.expires_at == "2026-12-04T20:00:00+00:00"
    assert normalised.max_lifetime_seconds is None


def test_a_refill_of_a_request_without_a_lifetime_has_no_expiry():
    asked = refill.refill_input(STORED, request_id="serve", instance_id=OLD, pool="spot/us-east-1/us-east-1a/g6.xlarge")
    assert "expires_at" not in asked["refill"]
    assert normalise(Request.model_validate(asked), request_id="r", default_regions=[], home_region="us-east-1").expires_at is None


@pytest.mark.parametrize("moment", ["2026-12-04T20:00:00", "tomorrow"])
def test_a_refill_expiry_must_be_a_moment_with_its_zone(moment):
    with pytest.raises(ValidationError, match="refill.expires_at"):
        Request.model_validate({"maintain": True, "refill": {"request_id": "serve", "replaces": [OLD], "expires_at": moment}})


def test_a_teardown_asked_and_not_yet_approved_already_stops_the_refill():
    decision = refill.decide(WARNING, dict(RECORD), STORED, [], None, stopped_by="end-serve")
    assert (decision.refill, decision.reason) == (False, "torn-down")
    assert "end-serve" in decision.detail
    # The reclaim is held for that teardown: a rejection starts its refill.
    assert (decision.held_by, decision.interruption) == ("end-serve", "spot interruption warning")


def test_only_a_reclaim_is_held_and_only_for_a_teardown_that_ended_nothing_yet():
    # The instance shut itself down: nothing to refill, so nothing held.
    shut = refill.decide(ENDING, dict(RECORD), STORED, [], "Client.InstanceInitiatedShutdown", stopped_by="end-serve")
    assert (shut.reason, shut.held_by, shut.interruption) == ("torn-down", None, None)
    # EC2 took it back (its state reason says so): held, naming why.
    taken = refill.decide(ENDING, dict(RECORD), STORED, [], "Server.SpotInstanceTermination", stopped_by="end-serve")
    assert (taken.held_by, taken.interruption) == ("end-serve", "Server.SpotInstanceTermination")
    # A teardown already ended instances of the request: it was approved, nothing is held.
    ended = refill.decide(WARNING, dict(RECORD), STORED, [{"terminated_by": "end-serve"}], None, stopped_by="end-serve")
    assert (ended.reason, ended.held_by) == ("torn-down", None)
    # No teardown waits: the refill starts, nothing is held.
    assert refill.decide(WARNING, dict(RECORD), STORED, [], None).held_by is None


# --- a rejected teardown starts again the refills it stopped ------------------------------

NEW, LATER = "i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"
RECLAIMED = {**RECORD, "state": "interrupted", "refill_run": f"serve-refill-{OLD}"}


def test_a_refill_that_was_stopped_is_started_again_and_one_that_stands_is_not():
    rolled_back = {**RECORD, "instance_id": NEW, "state": "terminated", "rolled_back": True, "terminated_at": "t"}
    # Stopped before it launched (no replacement), or after (its replacement terminated unused).
    assert refill.refills_to_restart({OLD: RECLAIMED}) == [OLD]
    assert refill.refills_to_restart({OLD: {**RECLAIMED, "replaced_by": [NEW]}, NEW: rolled_back}) == [OLD]
    for ended in ({"state": "terminated"}, {"state": "shutting-down"}, {"terminated_at": "t"}, {"rolled_back": True}):
        assert refill.refills_to_restart({OLD: {**RECLAIMED, "replaced_by": [NEW]}, NEW: {**RECORD, "instance_id": NEW, **ended}}) == [OLD]
    # A replacement that runs, was reclaimed in its turn (its own refill stands for it), or is unknown: nothing.
    assert refill.refills_to_restart({OLD: {**RECLAIMED, "replaced_by": [NEW]}, NEW: {**RECORD, "instance_id": NEW}}) == []
    assert refill.refills_to_restart({OLD: {**RECLAIMED, "replaced_by": [NEW]}, NEW: {**RECLAIMED, "instance_id": NEW, "state": "terminated"}}) == [NEW]
    assert refill.refills_to_restart({OLD: {**RECLAIMED, "replaced_by": [NEW]}}) == []
    # One of two replacements stands: the instance is replaced.
    assert refill.refills_to_restart({OLD: {**RECLAIMED, "replaced_by": [NEW, LATER]}, NEW: rolled_back,
                                      LATER: {**RECORD, "instance_id": LATER}}) == []
    # Never reclaimed, or ended by a teardown: nothing to refill.
    assert refill.refills_to_restart({OLD: RECORD}) == []
    assert refill.refills_to_restart({OLD: {**RECLAIMED, "terminated_by": "serve-down"}}) == []
    assert refill.refills_to_restart({LATER: RECLAIMED, OLD: RECLAIMED}) == [OLD, LATER]


def test_a_refill_a_waiting_teardown_held_back_is_started_once_no_teardown_stops_the_request():
    held = {**RECORD, "state": "interrupted", "refill_held_by": "end-serve"}
    assert refill.refills_to_restart({OLD: held}, released=True) == [OLD]
    assert refill.refills_to_restart({OLD: {**held, "refill_held_by": "another-teardown"}}, released=True) == [OLD]
    assert refill.refills_to_restart({OLD: held}) == []  # another teardown still stops the request
    assert refill.refills_to_restart({OLD: {**held, "terminated_by": "end-serve"}}, released=True) == []
    assert refill.refills_to_restart({OLD: {**held, "replaced_by": [NEW]}, NEW: {**RECORD, "instance_id": NEW}}, released=True) == []


def test_the_requests_a_rejected_teardown_gives_back_are_the_one_it_names_and_those_it_listed():
    assert refill.requests_to_resume("serve", ["b", "a", "serve"]) == ["a", "b", "serve"]
    assert refill.requests_to_resume(None, ["b", "a"]) == ["a", "b"]
    assert refill.requests_to_resume(None, []) == []


@given(st.text(min_size=1, max_size=80).filter(lambda s: REQUEST_ID_PATTERN.match(s) is not None), st.text(min_size=1, max_size=80))
def test_a_refill_started_again_has_a_name_of_its_own_per_teardown_within_the_limit(request_id, teardown):
    from gpufill.policy import execution_names, waiting

    first = refill.execution_name(request_id, OLD)
    again = refill.execution_name(request_id, OLD, after=teardown)
    assert again != first and again == refill.execution_name(request_id, OLD, after=teardown)
    assert again != refill.execution_name(request_id, OLD, after=teardown + "x")
    assert len(again) <= 80 and not waiting.is_successor_name(again)
    assert execution_names.reserved_problem(again, {"action": "provision", "refill": {}}) is None
    assert f"-refill-{OLD}-after-r" in again


def test_an_instance_of_a_capacity_block_is_never_refilled_outside_its_block():
    block = {**RECORD, "market": "capacity-block", "capacity_reservation_id": "cr-0123456789abcdef0"}
    decision = decide(record=block)
    assert (decision.refill, decision.reason) == (False, "capacity-block")
    assert decision.detail == (f"{OLD} ran in Capacity Block cr-0123456789abcdef0: a refill would launch outside "
                               "the block, so none starts")
    assert decide(record={**block, "capacity_reservation_id": None}).detail.startswith(f"{OLD} ran in Capacity Block ?:")


def test_a_restart_follows_the_run_it_takes_over_from_or_the_teardown_that_held_it_never_the_one_ending():
    assert refill.restart_after({"refill_run": "req-1-refill-i-1", "refill_held_by": "td-a"}) == "req-1-refill-i-1"
    assert refill.restart_after({"refill_held_by": "td-a"}) == "td-a"
    assert refill.restart_after({"refill_run": "", "refill_held_by": "td-a"}) == "td-a"
