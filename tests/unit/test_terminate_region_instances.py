"""TerminateRegionInstances' own work (handlers/terminate_region_instances.py): after the approval
each instance is looked at once more, and only the approved ids still tagged with this deployment
and their request are sent to TerminateInstances; the ended ones (and those that ended meanwhile)
are recorded terminated by the teardown, the refused ones reported with their reason, and the
torn-down requests' empty cluster groups removed. AWS is replaced by recorders."""

import logging
from datetime import UTC, datetime

import pytest

from gpufill.adapters import clock, instances_table, managed_instances, placement_groups
from gpufill.constants import TAG_DEPLOYMENT, TAG_MANAGED, TAG_MANAGED_VALUE, TAG_REQUEST_ID
from gpufill.handlers import terminate_region_instances
from gpufill.handlers.observability import metrics
from gpufill.models.teardown import LiveInstance

REGION = "us-west-2"
NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)


class Context:
    function_name = "TerminateRegionInstances"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:TerminateRegionInstances"
    memory_limit_in_mb = 256
    aws_request_id = "req"
    log_group_name = "/aws/lambda/TerminateRegionInstances"
    log_stream_name = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def live(iid: str, request_id: str | None = "req-1", state: str = "running", deployment: str = "prod",
         managed: str = TAG_MANAGED_VALUE) -> LiveInstance:
    tags = {TAG_MANAGED: managed, TAG_DEPLOYMENT: deployment}
    if request_id is not None:
        tags[TAG_REQUEST_ID] = request_id
    return LiveInstance(instance_id=iid, region=REGION, state=state, tags=tags)


def event(requests: dict[str, list[str]]) -> dict:
    return {"teardown_id": "td-7", "batch": {"region": REGION, "requests": requests}}


@pytest.fixture
def aws(monkeypatch):
    """The instances EC2 shows, and what the handler asked AWS for, in order."""
    done: list[tuple] = []
    shown: dict[str, LiveInstance] = {}
    monkeypatch.setenv("GPUFILL_DEPLOYMENT", "prod")
    monkeypatch.setattr(clock, "now", lambda: NOW)
    monkeypatch.setattr(managed_instances, "by_ids", lambda region, ids: done.append(("describe", region, ids)) or {
        i: shown[i] for i in ids if i in shown})
    monkeypatch.setattr(managed_instances, "terminate", lambda region, ids: done.append(("terminate", region, ids)) or {
        i: shown[i].state for i in ids})
    monkeypatch.setattr(instances_table, "mark_terminated", lambda iid, **kw: done.append(("terminated", iid, kw)))
    monkeypatch.setattr(placement_groups, "remove_empty", lambda region, deployment, ids: done.append(("groups", region, deployment, ids)))
    monkeypatch.setattr(metrics, "add_metric", lambda name, unit, value: done.append(("metric", name, unit, value)))
    return done, shown


def test_only_the_approved_instances_still_tagged_for_their_request_are_terminated_and_recorded(aws, caplog):
    done, shown = aws
    caplog.set_level(logging.INFO)
    shown.update({
        "i-a": live("i-a"), "i-b": live("i-b", state="stopped"), "i-c": live("i-c", request_id="req-2"),
        "i-other": live("i-other", request_id="req-9"),         # retagged to another request meanwhile
        "i-dep": live("i-dep", deployment="staging"),           # another deployment's
        "i-hand": live("i-hand", managed="false"),              # no longer managed by gpufill
        "i-ended": live("i-ended", state="shutting-down"),      # a spot interruption got there first
    })
    out = terminate_region_instances.handler(event({
        "req-1": ["i-a", "i-b", "i-other", "i-dep", "i-hand", "i-ended", "i-gone"], "req-2": ["i-c"]}), Context())
    at = {"region": REGION, "terminated_at": NOW, "terminated_by": "td-7"}
    assert done == [
        ("describe", REGION, ["i-a", "i-b", "i-c", "i-dep", "i-ended", "i-gone", "i-hand", "i-other"]),
        ("terminate", REGION, ["i-a", "i-b", "i-c"]),
        ("terminated", "i-a", {**at, "request_id": "req-1"}),
        ("terminated", "i-b", {**at, "request_id": "req-1"}),
        ("terminated", "i-c", {**at, "request_id": "req-2"}),
        ("terminated", "i-ended", {**at, "request_id": "req-1"}),
        ("groups", REGION, "prod", {"req-1", "req-2"}),
        ("metric", "InstancesTerminated", "Count", 3),
    ]
    assert out["region"] == REGION and out["terminated_at"] == "2026-12-04T12:00:00+00:00"
    assert (out["terminated"], out["terminated_count"], out["already_ended"]) == (["i-a", "i-b", "i-c"], 3, ["i-ended"])
    assert out["previous_states"] == {"running": 2, "stopped": 1}
    assert {s["instance_id"]: s["reason"] for s in out["skipped"]} == {
        "i-dep": "other-deployment", "i-gone": "gone", "i-hand": "not-managed", "i-other": "other-request"}
    assert out["skipped_count"] == 4
    [gone] = [s for s in out["skipped"] if s["instance_id"] == "i-gone"]
    assert gone["detail"] == f"no such instance in {REGION} any more"
    [logged] = [r for r in caplog.records if r.getMessage() == "region torn down"]
    assert (logged.region, logged.terminated, logged.skipped) == (REGION, ["i-a", "i-b", "i-c"], 4)


def test_an_unrecorded_instance_of_a_teardown_of_everything_is_recorded_under_no_request(aws):
    done, shown = aws
    shown.update({"i-x": live("i-x", request_id=None, state="terminated"), "i-y": live("i-y", request_id="")})
    out = terminate_region_instances.handler(event({"": ["i-x", "i-y"]}), Context())
    assert [d for d in done if d[0] == "terminated"] == [
        ("terminated", "i-x", {"region": REGION, "request_id": None, "terminated_at": NOW, "terminated_by": "td-7"})]
    assert ("groups", REGION, "prod", set()) in done  # no request of its own: no group to remove
    assert [d[0] for d in done].count("terminate") == 0  # nothing to end: TerminateInstances is not called
    assert out["terminated"] == [] and out["previous_states"] == {}
    assert [(s["instance_id"], s["reason"]) for s in out["skipped"]] == [("i-y", "other-request")]


def test_a_failure_to_record_the_terminations_is_retried_when_it_is_transient(aws, monkeypatch):
    from gpufill.adapters.aws import TransientAwsError

    from aws_fakes import client_error

    _, shown = aws
    shown["i-a"] = live("i-a")

    def throttled(iid, **kw):
        raise client_error("ProvisionedThroughputExceededException", operation="UpdateItem")

    monkeypatch.setattr(instances_table, "mark_terminated", throttled)
    with pytest.raises(TransientAwsError, match="^recording the terminations: "):
        terminate_region_instances.handler(event({"req-1": ["i-a"]}), Context())
