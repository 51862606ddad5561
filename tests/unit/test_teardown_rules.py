"""What a teardown shows a person before approval: which instances, in what order, with which facts and why not."""

from gpufill.constants import TAG_DEPLOYMENT, TAG_MANAGED, TAG_REQUEST_ID
from gpufill.models.teardown import LiveInstance, TeardownInstance, TeardownTarget
from gpufill.policy import teardown

ENV = "prod"
TAGS = {TAG_MANAGED: "true", TAG_DEPLOYMENT: ENV, TAG_REQUEST_ID: "run-a"}
BY_REQUEST = TeardownTarget(request_id="run-a")


def live(instance_id, **fields):
    return LiveInstance(**{"instance_id": instance_id, "region": "us-west-2", "state": "running", "tags": dict(TAGS),
                           **fields})


def test_recorded_instances_come_first_by_region_then_id_then_the_unrecorded_ones_likewise():
    records = {"i-4": {"region": "us-west-2"}, "i-3": {"region": "eu-central-1"}, "i-1": {"region": "us-west-2"},
               "i-0": {}}
    seen = {i: live(i, region=region) for i, region in
            (("i-4", "us-west-2"), ("i-3", "eu-central-1"), ("i-1", "us-west-2"), ("i-0", "us-west-2"),
             ("i-9", "ap-south-1"), ("i-7", "us-west-2"), ("i-8", "ap-south-1"))}
    assert teardown.candidates(BY_REQUEST, records, seen) == ["i-0", "i-3", "i-1", "i-4", "i-8", "i-9", "i-7"]
    ids = TeardownTarget(instance_ids=["i-4", "i-0"])
    assert teardown.candidates(ids, records, seen) == ["i-4", "i-0"]


def test_each_refusal_says_why_in_words():
    unknown = teardown.refusal("i-1", None, None, "run-a", ENV)
    assert (unknown.reason, unknown.detail) == (
        "unknown", "gpufill holds no record of this instance, so it did not launch it (or its record is gone)")
    assert teardown.refusal("i-1", {"region": "eu-west-1"}, None, "run-a", ENV).detail == "no such instance in eu-west-1 any more"
    assert teardown.refusal("i-1", {"request_id": "run-a"}, None, "run-a", ENV).detail == "no such instance in its region any more"
    assert teardown.refusal("i-1", None, live("i-1", state="terminated"), "run-a", ENV).detail == "already terminated"
    not_managed = teardown.refusal("i-1", {}, live("i-1", tags={**TAGS, TAG_MANAGED: "True"}), "run-a", ENV)
    assert (not_managed.reason, not_managed.detail) == (
        "not-managed", "not tagged gpufill:managed=true: gpufill only terminates instances it launched")
    other = teardown.refusal("i-1", {}, live("i-1"), "run-b", ENV)
    assert (other.reason, other.detail) == ("other-request", "tagged gpufill:request-id='run-a', not 'run-b'")
    theirs = teardown.refusal("i-1", {}, live("i-1", tags={**TAGS, TAG_DEPLOYMENT: "dev"}), "run-a", ENV)
    assert (theirs.reason, theirs.detail) == (
        "other-deployment",
        "tagged gpufill:deployment='dev', not 'prod': one deployment never ends another's instances")


def test_both_ended_states_count_as_already_terminated():
    for state in ("shutting-down", "terminated"):
        assert teardown.refusal("i-1", {}, live("i-1", state=state), "run-a", ENV).reason == "already-terminated"
    for state in ("pending", "running", "stopping", "stopped"):
        assert teardown.refusal("i-1", {}, live("i-1", state=state), "run-a", ENV) is None


def test_an_instance_to_terminate_carries_ec2s_facts_with_the_record_filling_gaps():
    record = {"region": "us-west-2", "availability_zone": "us-west-2c", "instance_type": "g5.xlarge",
              "market": "on-demand", "hourly_price": 1.006, "launched_at": "2026-03-01T09:00:00+00:00"}
    seen = {"i-1": live("i-1", spot=True, launch_time="2026-03-01T10:00:00+00:00"),
            "i-2": live("i-2", availability_zone="us-west-2a", instance_type="g6.xlarge", spot=True,
                        launch_time="2026-03-01T10:00:00+00:00"),
            "i-3": live("i-3", state="stopped")}
    allowed, refused = teardown.select(BY_REQUEST, {"i-1": record, "i-2": {"region": "us-west-2"}}, seen, ENV)
    assert refused == []
    one, two, three = allowed
    assert (one.request_id, one.availability_zone, one.instance_type, one.market, one.hourly_price) == (
        "run-a", "us-west-2c", "g5.xlarge", "on-demand", 1.006)
    assert (one.launched_at, one.state, one.recorded) == ("2026-03-01T09:00:00+00:00", "running", True)
    assert (two.availability_zone, two.instance_type, two.market, two.hourly_price, two.launched_at) == (
        "us-west-2a", "g6.xlarge", "spot", None, "2026-03-01T10:00:00+00:00")
    assert (three.market, three.state, three.recorded) == ("on-demand", "stopped", False)
    assert teardown.hourly_cost(allowed) == 1.006


def test_the_hourly_cost_adds_known_prices_rounded_to_four_places():
    priced = [TeardownInstance(instance_id=f"i-{n}", region="us-west-2", state="running", hourly_price=p)
              for n, p in enumerate((0.12345, 0.1, None))]
    assert teardown.hourly_cost(priced) == 0.2235
    assert teardown.hourly_cost([]) == 0.0


def test_an_instance_without_a_request_tag_is_batched_with_an_empty_request():
    [batch] = teardown.by_region([TeardownInstance(instance_id="i-1", region="us-west-2", state="running")])
    assert batch.requests == {"": ["i-1"]} and batch.request_of("i-1") == ""


def test_a_record_without_a_region_says_its_region():
    assert teardown.refusal("i-1", {}, None, "run-a", ENV).detail == "no such instance in its region any more"


EVERYTHING = TeardownTarget(all=True)


def test_a_teardown_of_everything_passes_over_records_gpufill_marked_terminated():
    records = {"i-1": {"region": "us-west-2", "state": "terminated"}, "i-2": {"region": "us-west-2", "state": "running"}}
    assert teardown.candidates(EVERYTHING, records, {}) == ["i-2"]
    # By request the ended record is still judged, so the person sees it was already terminated.
    assert teardown.candidates(BY_REQUEST, records, {}) == ["i-1", "i-2"]


def test_a_record_gpufill_marked_terminated_says_when():
    def detail(record):
        why = teardown.refusal("i-1", {"state": "terminated", **record}, None, "run-a", ENV)
        assert (why.instance_id, why.reason) == ("i-1", "already-terminated")
        return why.detail

    assert detail({"terminated_at": "2026-03-01T11:00:00+00:00", "ended_at": "2026-03-01T10:59:00+00:00"}) == (
        "terminated 2026-03-01T11:00:00+00:00")
    assert detail({"ended_at": "2026-03-01T10:59:00+00:00"}) == "terminated 2026-03-01T10:59:00+00:00"
    assert detail({}) == "terminated earlier"


def test_everything_matches_a_recorded_instance_to_its_record_and_an_unrecorded_one_to_its_tag():
    seen = {"i-1": live("i-1"), "i-2": live("i-2", tags={**TAGS, TAG_REQUEST_ID: "run-b"}),
            "i-3": live("i-3", tags={**TAGS, TAG_REQUEST_ID: "run-c"})}
    records = {"i-1": {"region": "us-west-2", "request_id": "run-a"},
               "i-3": {"region": "us-west-2", "request_id": "run-a"}}  # retagged since it was recorded
    allowed, refused = teardown.select(EVERYTHING, records, seen, ENV)
    assert [(i.instance_id, i.request_id, i.recorded) for i in allowed] == [("i-1", "run-a", True), ("i-2", "run-b", False)]
    assert [(r.instance_id, r.reason, r.detail) for r in refused] == [
        ("i-3", "other-request", "tagged gpufill:request-id='run-c', not 'run-a'")]


def test_everything_refuses_an_unrecorded_instance_without_a_request_tag():
    untagged = {k: v for k, v in TAGS.items() if k != TAG_REQUEST_ID}
    allowed, refused = teardown.select(EVERYTHING, {}, {"i-1": live("i-1", tags=untagged)}, ENV)
    assert allowed == [] and [(r.reason, r.detail) for r in refused] == [("other-request", "tagged gpufill:request-id=None, not None")]


def allowed_instance(n, region="us-west-2", price=0.5):
    return TeardownInstance(instance_id=f"i-{n:04d}", request_id="run-a", region=region, state="running", hourly_price=price)


def refused_instance(n, reason="gone"):
    return teardown.Refusal(instance_id=f"i-r{n:03d}", reason=reason, detail="no such instance in us-west-2 any more")


def test_the_teardown_found_lists_counts_batches_and_costs_what_it_would_end():
    allowed = [allowed_instance(2, "us-west-2"), allowed_instance(1, "eu-west-1", 1.25)]
    refused = [refused_instance(1), refused_instance(2, "not-managed"), refused_instance(3)]
    found = teardown.found(request_id="td-1", target=BY_REQUEST, requested_by="ana", allowed=allowed, refused=refused)
    assert found.model_dump(exclude_none=True) == {
        "request_id": "td-1", "action": "teardown", "status": "AWAITING_APPROVAL", "target": {"request_id": "run-a", "all": False},
        "requested_by": "ana", "instance_count": 2, "instances": [i.model_dump(exclude_none=True) for i in allowed],
        "refused_count": 3, "refused_reasons": {"gone": 2, "not-managed": 1},
        "refused": [r.model_dump() for r in refused],
        "regions": [{"region": "eu-west-1", "requests": {"run-a": ["i-0001"]}},
                    {"region": "us-west-2", "requests": {"run-a": ["i-0002"]}}],
        "hourly_cost": 1.75,
    }


def test_with_nothing_allowed_there_is_nothing_to_terminate():
    found = teardown.found(request_id="td-1", target=BY_REQUEST, requested_by=None, allowed=[], refused=[refused_instance(1)])
    assert (found.status, found.instance_count, found.regions, found.hourly_cost, found.refused_count) == (
        "NOTHING_TO_TERMINATE", 0, [], 0.0, 1)


def test_fifty_instances_and_fifty_refusals_are_listed_in_full():
    found = teardown.found(request_id="td-1", target=EVERYTHING, requested_by=None,
                           allowed=[allowed_instance(n) for n in range(50)], refused=[refused_instance(n) for n in range(50)])
    assert (len(found.instances), len(found.refused), found.note) == (50, 50, None)


def test_past_fifty_the_details_stop_and_the_note_says_every_one_is_in_the_batches():
    allowed = [allowed_instance(n) for n in range(51)]
    found = teardown.found(request_id="td-1", target=EVERYTHING, requested_by=None, allowed=allowed, refused=[])
    assert [i.instance_id for i in found.instances] == [f"i-{n:04d}" for n in range(50)]
    assert found.note == ("details of the first 50 instances (and refusals) are listed; every one of the "
                          "51 to terminate is in `regions`, and the instances table holds each record")
    assert found.instance_count == 51 and found.regions[0].requests["run-a"][-1] == "i-0050"
    refusals = teardown.found(request_id="td-1", target=EVERYTHING, requested_by=None, allowed=allowed[:1],
                              refused=[refused_instance(n) for n in range(51)])
    assert (len(refusals.refused), refusals.refused_count) == (50, 51)
    assert refusals.note.startswith("details of the first 50 instances") and "every one of the 1 to terminate" in refusals.note


def test_a_regions_termination_answers_ids_their_states_before_and_what_it_left():
    from datetime import UTC, datetime

    skipped = [refused_instance(n, "other-request") for n in range(52)]
    done = teardown.region_termination(
        "us-west-2", terminated=["i-3", "i-1", "i-2"], previous={"i-1": "running", "i-3": "stopped"},
        already_ended=["i-9", "i-8"], skipped=skipped, at=datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC))
    assert done.model_dump(exclude={"skipped"}) == {
        "region": "us-west-2", "terminated_at": "2026-03-01T12:30:15+00:00", "terminated_count": 3,
        "terminated": ["i-1", "i-2", "i-3"], "previous_states": {"running": 1, "stopped": 1, "unknown": 1},
        "already_ended": ["i-8", "i-9"], "skipped_count": 52,
    }
    assert done.skipped == skipped[:50]
