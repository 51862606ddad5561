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
