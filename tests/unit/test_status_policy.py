"""The status view an operator reads: each instance's facts, where they come from, and the totals."""

from datetime import UTC, datetime

import pytest

from gpufill.constants import TAG_DEPLOYMENT, TAG_MANAGED, TAG_REQUEST_ID
from gpufill.models.teardown import LiveInstance
from gpufill.policy import status

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ENV = "prod"
OURS = {TAG_MANAGED: "true", TAG_DEPLOYMENT: ENV}
MANAGED = {**OURS, TAG_REQUEST_ID: "run-a"}


def view(records=None, live=None, regions=("us-west-2",), target=None):
    return status.report(request_id="status-1", target_request_id=target, regions=list(regions),
                         records=records or {}, live=live or {}, now=NOW, deployment=ENV)


def instance(instance_id="i-1", **fields):
    return LiveInstance(**{"instance_id": instance_id, "region": "us-west-2", "state": "running",
                           "tags": dict(MANAGED), **fields})


def test_a_live_instance_without_a_record_is_described_from_ec2_alone():
    [entry] = view(live={"i-1": instance(availability_zone="us-west-2b", instance_type="g6.xlarge", spot=True,
                                         launch_time="2026-03-01T09:00:00+00:00")}).instances
    assert (entry.request_id, entry.region, entry.availability_zone, entry.instance_type) == (
        "run-a", "us-west-2", "us-west-2b", "g6.xlarge")
    assert (entry.market, entry.hourly_price, entry.launched_at, entry.hours_running, entry.finding) == (
        "spot", None, "2026-03-01T09:00:00+00:00", 3.0, "unrecorded")
    assert view(live={"i-1": instance(spot=False)}).instances[0].market == "on-demand"


def test_the_record_fills_in_what_ec2_does_not_say():
    record = {"request_id": "run-r", "region": "us-west-2", "availability_zone": "us-west-2c",
              "instance_type": "g5.xlarge", "market": "on-demand", "hourly_price": 1.25,
              "launched_at": "2026-03-01T11:30:00Z", "state": "running"}
    [entry] = view(records={"i-1": record}, live={"i-1": instance(tags=dict(OURS), spot=True)}).instances
    assert (entry.request_id, entry.availability_zone, entry.instance_type, entry.market, entry.hourly_price) == (
        "run-r", "us-west-2c", "g5.xlarge", "on-demand", 1.25)
    assert (entry.launched_at, entry.hours_running, entry.finding) == ("2026-03-01T11:30:00Z", 0.5, "recorded")


def test_ec2_wins_over_the_record_where_both_speak():
    record = {"request_id": "run-r", "availability_zone": "us-west-2c", "instance_type": "g5.xlarge",
              "launched_at": "2026-03-01T11:00:00+00:00"}
    live = instance(availability_zone="us-west-2a", instance_type="g6.xlarge", launch_time="2026-03-01T10:00:00+00:00")
    [entry] = view(records={"i-1": record}, live={"i-1": live}).instances
    assert (entry.request_id, entry.availability_zone, entry.instance_type, entry.launched_at) == (
        "run-a", "us-west-2a", "g6.xlarge", "2026-03-01T10:00:00+00:00")


@pytest.mark.parametrize(("state", "hours"), [("pending", 2.0), ("running", 2.0), ("stopping", 2.0),
                                              ("shutting-down", 2.0), ("stopped", None), ("terminated", None)])
def test_hours_are_counted_only_while_the_instance_is_billed_or_ending(state, hours):
    entry = view(live={"i-1": instance(state=state, launch_time="2026-03-01T10:00:00+00:00")}).instances[0]
    assert entry.hours_running == hours


def test_only_running_instances_count_as_running_and_in_the_hourly_cost():
    records = {i: {"region": "us-west-2", "hourly_price": price} for i, price in
               (("i-1", 0.5), ("i-2", 0.25), ("i-3", 2.0), ("i-4", 0.125))}
    live = {"i-1": instance("i-1"), "i-2": instance("i-2"), "i-3": instance("i-3", state="pending"),
            "i-4": instance("i-4", state="stopped")}
    report = view(records=records, live=live)
    assert (report.running, report.hourly_cost) == (2, 0.75)
    assert report.counts == {"pending": 1, "running": 2, "stopped": 1}
    assert list(report.counts) == sorted(report.counts)


def test_a_record_whose_instance_ec2_no_longer_shows_is_gone_and_one_gpufill_ended_is_history():
    records = {
        "i-1": {"request_id": "run-a", "region": "eu-central-1", "availability_zone": "eu-central-1a",
                "instance_type": "g6.xlarge", "market": "spot", "hourly_price": 0.5,
                "launched_at": "2026-03-01T10:00:00+00:00", "state": "running"},
        "i-2": {"request_id": "run-a", "region": "eu-central-1", "state": "terminated"},
        "i-3": {"request_id": "run-a"},
    }
    report = view(records=records, regions=["us-west-2", "eu-central-1"])
    listed = {e.instance_id: e for e in report.instances}
    assert (listed["i-2"].state, listed["i-2"].finding) == ("terminated", "recorded")
    gone = {i: e for i, e in listed.items() if e.finding == "gone"}
    assert sorted(gone) == ["i-1", "i-3"] and report.gone == ["i-3", "i-1"]
    entry = gone["i-1"]
    assert (entry.state, entry.finding, entry.region, entry.availability_zone, entry.instance_type) == (
        "gone", "gone", "eu-central-1", "eu-central-1a", "g6.xlarge")
    assert (entry.market, entry.hourly_price, entry.launched_at, entry.request_id) == (
        "spot", 0.5, "2026-03-01T10:00:00+00:00", "run-a")
    assert gone["i-3"].region == "?"
    assert report.running == 0 and report.hourly_cost == 0.0 and report.counts == {"gone": 2, "terminated": 1}


def test_instances_are_listed_by_region_then_request_then_id_and_the_header_says_what_was_asked():
    live = {"i-9": instance("i-9", region="us-east-1", tags=dict(OURS)),
            "i-2": instance("i-2", tags={**MANAGED, TAG_REQUEST_ID: "run-b"}),
            "i-1": instance("i-1", tags={**MANAGED, TAG_REQUEST_ID: "run-b"}),
            "i-5": instance("i-5")}
    report = view(live=live, regions=["us-west-2", "us-east-1"], target="run-b")
    assert [e.instance_id for e in report.instances] == ["i-9", "i-5", "i-1", "i-2"]
    assert report.unrecorded == ["i-9", "i-5", "i-1", "i-2"]
    assert (report.request_id, report.filter.request_id, report.regions) == (
        "status-1", "run-b", ["us-east-1", "us-west-2"])
    assert report.generated_at == "2026-03-01T12:00:00+00:00"


def test_a_recorded_instance_that_lost_its_managed_or_deployment_tag_is_flagged():
    records = {i: {"region": "us-west-2"} for i in ("i-1", "i-2", "i-3")}
    entries = view(records=records,
                   live={"i-1": instance("i-1", tags={**MANAGED, TAG_MANAGED: "false"}), "i-2": instance("i-2", tags={}),
                         "i-3": instance("i-3", tags={**MANAGED, TAG_DEPLOYMENT: "dev"})}).instances
    assert [e.finding for e in entries] == ["not-managed", "not-managed", "not-managed"]


def test_another_deployments_unrecorded_instance_is_not_in_the_view():
    assert view(live={"i-1": instance("i-1", tags={**MANAGED, TAG_DEPLOYMENT: "dev"})}).instances == []


@pytest.mark.parametrize(
    ("launched", "hours"),
    [("2026-03-01T10:30:00+00:00", 1.5), ("2026-03-01T10:30:00Z", 1.5), ("2026-03-01T11:59:24+00:00", 0.01),
     ("2026-03-01T13:00:00+00:00", 0.0), ("", None), (None, None), ("yesterday", None)],
)
def test_hours_since_launch_reads_iso_times_and_never_goes_negative(launched, hours):
    assert status.hours_since(launched, NOW) == hours


def test_an_instance_without_a_request_sorts_before_every_request_id():
    live = {"i-1": instance("i-1", tags={**OURS, TAG_REQUEST_ID: "A-run"}),
            "i-2": instance("i-2", tags=OURS)}
    assert [e.instance_id for e in view(live=live).instances] == ["i-2", "i-1"]


def test_the_hourly_cost_is_rounded_to_four_places():
    records = {"i-1": {"region": "us-west-2", "hourly_price": 0.12341}, "i-2": {"region": "us-west-2", "hourly_price": 0.1}}
    assert view(records=records, live={"i-1": instance("i-1"), "i-2": instance("i-2")}).hourly_cost == 0.2234


@pytest.mark.parametrize(("launched", "hours"), [("2026-02-25T08:00:00+00:00", 100.0), ("2026-03-01T11:59:00+00:00", 0.02)])
def test_hours_are_whole_hours_of_3600_seconds_shown_to_two_places(launched, hours):
    assert status.hours_since(launched, NOW) == hours


def test_records_to_mark_ended_whatever_their_order_in_the_table():
    records = {
        "i-0": {"region": "us-west-2", "expires_at": 1772400000},  # already on its way out
        "i-1": {"region": "us-west-2", "state": "terminated"},  # gpufill saw it end; EC2 forgot it
        "i-2": {"region": "us-west-2", "launched_at": "2026-03-01T11:00:00+00:00"},  # unseen for exactly an hour
        "i-3": {"region": "us-west-2", "launched_at": "2026-03-01T11:01:00+00:00"},  # new: maybe not visible yet
        "i-4": {"region": "us-west-2", "state": "running"},
    }
    assert status.ended(records, {"i-4": instance("i-4", state="terminated")}, NOW) == {
        "i-1": "terminated", "i-2": "gone", "i-4": "terminated"}


def test_another_deployments_instance_is_passed_over_and_the_rest_still_reported():
    live = {"i-1": instance("i-1", tags={**MANAGED, TAG_DEPLOYMENT: "dev"}), "i-2": instance("i-2")}
    assert [e.instance_id for e in view(live=live).instances] == ["i-2"]


def test_by_request_counts_instances_without_a_request_under_a_question_mark():
    report = view(live={"i-1": instance("i-1", tags=dict(OURS)), "i-2": instance("i-2")})
    assert report.by_request == {"?": {"running": 1}, "run-a": {"running": 1}} and report.other_requests == 0


def test_past_a_hundred_requests_the_biggest_are_counted_one_by_one_and_the_rest_together():
    live = {f"i-{n:03d}": instance(f"i-{n:03d}", tags={**MANAGED, TAG_REQUEST_ID: f"run-{n:03d}"}) for n in range(100)}
    live |= {f"i-z{n}": instance(f"i-z{n}", tags={**MANAGED, TAG_REQUEST_ID: "run-zzz"}) for n in range(2)}
    report = view(live=live)
    assert list(report.by_request) == [f"run-{n:03d}" for n in range(99)] + ["run-zzz"]
    assert report.by_request["run-zzz"] == {"running": 2} and report.other_requests == 1


def test_the_gone_and_unrecorded_lists_follow_region_then_request_then_id():
    records = {"i-1": {"region": "us-west-2"}, "i-2": {"region": "us-west-2", "request_id": "Run-1"}}
    assert view(records=records).gone == ["i-1", "i-2"]


def test_past_a_hundred_instances_what_needs_attention_is_listed_before_history():
    live = {f"i-{n:03d}": instance(f"i-{n:03d}", state="terminated", tags=dict(MANAGED)) for n in range(100)}
    report = view(records={"i-zzz": {"region": "us-west-2", "request_id": "run-a", "state": "running"}}, live=live)
    assert "i-zzz" in [e.instance_id for e in report.instances] and report.listed == 100 and report.total == 101
    assert report.note == (
        "100 of 101 instances listed (those needing attention and the billed ones first); the counts cover all. "
        'For one request\'s instances: {"action": "status", "request_id": "<execution name>"}')


def test_a_live_instance_shows_the_startup_step_its_own_tag_reports_and_what_replaced_it():
    from gpufill.constants import TAG_STARTUP_STEP

    live = {"i-1": instance(tags={**MANAGED, TAG_STARTUP_STEP: "syncing model"}), "i-2": instance("i-2")}
    records = {"i-1": {"request_id": "run-a", "replaced_by": ["i-9"]}, "i-2": {"request_id": "run-a", "replaced_by": []}}
    first, second = view(records=records, live=live).instances
    assert (first.startup_step, first.replaced_by) == ("syncing model", ["i-9"])
    assert (second.startup_step, second.replaced_by) == (None, None)  # nothing reported, nothing replaced


def test_an_instance_in_a_capacity_block_carries_its_block_and_fee_and_adds_nothing_by_the_hour():
    """A block's fee was paid upfront: its instances are not paid for by the hour (policy/spend.py counts the fee once)."""
    block = {"region": "us-west-2", "hourly_price": 28.9583, "capacity_reservation_id": "cr-1", "capacity_block_fee": 1390}
    records = {"i-1": block, "i-2": {"region": "us-west-2", "hourly_price": 0.5, "capacity_reservation_id": "cr-2"},
               "i-3": {**block, "state": "terminated"}}
    report = view(records=records, live={"i-1": instance("i-1"), "i-2": instance("i-2")})
    entries = {e.instance_id: e for e in report.instances}
    assert (entries["i-1"].capacity_reservation_id, entries["i-1"].capacity_block_fee) == ("cr-1", 1390)
    assert (entries["i-3"].capacity_reservation_id, entries["i-3"].capacity_block_fee) == ("cr-1", 1390)
    # An On-Demand Capacity Reservation is paid by the hour: no fee, and its id is not a block's.
    assert (entries["i-2"].capacity_reservation_id, entries["i-2"].capacity_block_fee) == (None, None)
    assert (report.running, report.hourly_cost) == (2, 0.5)



def test_an_entry_says_when_its_request_expires_and_an_ended_one_when_gpufill_saw_it_end():
    from gpufill.constants import LIFETIME_ATTRIBUTE

    record = {"region": "us-west-2", LIFETIME_ATTRIBUTE: "2026-03-02T12:00:00+00:00", "terminated_at": "2026-03-01T11:00:00+00:00"}
    live = view(records={"i-1": record, "i-2": record}, live={"i-1": instance("i-1"), "i-2": instance("i-2", state="terminated")})
    entries = {e.instance_id: e for e in live.instances}
    assert entries["i-1"].expires_at == entries["i-2"].expires_at == "2026-03-02T12:00:00+00:00"
    assert (entries["i-1"].ended_at, entries["i-2"].ended_at) == (None, "2026-03-01T11:00:00+00:00")
    gone = view(records={"i-3": record, "i-4": {**record, "state": "terminated"}})
    entries = {e.instance_id: e for e in gone.instances}
    assert entries["i-3"].expires_at == entries["i-4"].expires_at == "2026-03-02T12:00:00+00:00"
    assert (entries["i-3"].state, entries["i-3"].ended_at) == ("gone", None)
    assert (entries["i-4"].state, entries["i-4"].ended_at) == ("terminated", "2026-03-01T11:00:00+00:00")
