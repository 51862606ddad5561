"""Teardown and status policy: who may be terminated and why not, what counts as approval, the status view."""

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from gpufill.approve import AlreadyDecided, ApprovalError, ApprovalExpired, parse_execution, refuse_if_settled
from gpufill.constants import TAG_DEPLOYMENT, TAG_MANAGED, TAG_REQUEST_ID
from gpufill.models.request import Request, describe_problems, normalise
from gpufill.models.teardown import LiveInstance, Teardown, TeardownInstance, TeardownTarget
from gpufill.policy import approval, status, teardown

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ENV = "prod"


def live(instance_id, *, request="run-a", managed=True, state="running", region="us-west-2", deployment=ENV):
    tags = {TAG_REQUEST_ID: request} if request else {}
    if managed:
        tags[TAG_MANAGED] = "true"
    if deployment:
        tags[TAG_DEPLOYMENT] = deployment
    return LiveInstance(instance_id=instance_id, region=region, availability_zone=f"{region}a",
                        instance_type="g6.xlarge", state=state, tags=tags, launch_time="2026-03-01T10:00:00+00:00")


def rec(instance_id, request="run-a", region="us-west-2", **extra):
    return {"instance_id": instance_id, "request_id": request, "region": region, "market": "spot",
            "hourly_price": 0.5, "state": "running", "launched_at": "2026-03-01T10:00:00+00:00", **extra}


# --- which instances a teardown may terminate ---------------------------------------------------


def test_by_request_keeps_only_managed_live_instances_tagged_with_that_request():
    records = {i: rec(i) for i in ("i-1", "i-2", "i-3", "i-4", "i-5", "i-6")}
    seen = {
        "i-1": live("i-1"),
        "i-2": live("i-2", managed=False),
        "i-3": live("i-3", request="run-b"),
        "i-4": live("i-4", state="shutting-down"),
        # i-5: recorded, but EC2 no longer has it
        "i-6": live("i-6", request=None),
        "i-7": live("i-7", region="us-east-1"),  # tagged for run-a, never recorded
        "i-8": live("i-8", deployment="dev"),  # the same request name in another deployment of the account
        "i-9": live("i-9", deployment=None),  # launched without the deployment tag
    }
    allowed, refused = teardown.select(TeardownTarget(request_id="run-a"), records, seen, ENV)
    assert [(i.instance_id, i.recorded) for i in allowed] == [("i-1", True), ("i-7", False)]
    assert {r.instance_id: r.reason for r in refused} == {
        "i-2": "not-managed", "i-3": "other-request", "i-4": "already-terminated", "i-5": "gone", "i-6": "other-request",
        "i-8": "other-deployment", "i-9": "other-deployment",
    }
    assert "'dev', not 'prod'" in next(r.detail for r in refused if r.instance_id == "i-8")
    assert "run-b" in next(r.detail for r in refused if r.instance_id == "i-3")


def test_by_ids_refuses_ids_without_a_record_and_records_that_disagree_with_the_tags():
    records = {"i-1": rec("i-1"), "i-2": rec("i-2", request="run-a"), "i-3": rec("i-3", request="run-b")}
    seen = {"i-1": live("i-1"), "i-2": live("i-2", request="run-z"), "i-3": live("i-3", request="run-b"),
            "i-9": live("i-9")}
    target = TeardownTarget(instance_ids=["i-9", "i-1", "i-2", "i-3"])
    allowed, refused = teardown.select(target, records, seen, ENV)
    assert [i.instance_id for i in allowed] == ["i-1", "i-3"]  # each matches the request it was recorded under
    assert {r.instance_id: r.reason for r in refused} == {"i-9": "unknown", "i-2": "other-request"}


def test_by_region_groups_sorted_with_the_request_each_must_still_carry():
    instances = [
        TeardownInstance(instance_id=i, request_id=r, region=g, state="running")
        for i, r, g in [("i-2", "a", "us-west-2"), ("i-1", "a", "us-west-2"), ("i-3", "b", "eu-central-1")]
    ]
    batches = teardown.by_region(instances)
    assert [(b.region, b.instance_ids, b.requests) for b in batches] == [
        ("eu-central-1", ["i-3"], {"b": ["i-3"]}),
        ("us-west-2", ["i-1", "i-2"], {"a": ["i-1", "i-2"]}),
    ]
    assert batches[1].request_of("i-2") == "a" and batches[1].request_of("i-3") is None


def test_a_retagged_instance_is_refused_at_termination_time():
    where = {"region": "us-west-2"}
    assert teardown.refusal("i-1", where, live("i-1"), "run-a", ENV) is None
    assert teardown.refusal("i-1", where, live("i-1", managed=False), "run-a", ENV).reason == "not-managed"
    assert teardown.refusal("i-1", where, live("i-1", deployment="dev"), "run-a", ENV).reason == "other-deployment"
    assert teardown.refusal("i-1", where, None, "run-a", ENV).reason == "gone"


# --- the approval ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, decision",
    [
        ({"decision": "approved"}, "approved"),
        ({"decision": "approved", "approver": "ana", "reason": "done"}, "approved"),
        ({"decision": "Approved"}, "rejected"),
        ({"decision": "approved "}, "rejected"),
        ({"decision": "rejected"}, "rejected"),
        ({"decision": True}, "rejected"),
        ({"approved": True}, "rejected"),
        ("approved", "rejected"),
        (None, "rejected"),
    ],
)
def test_only_exactly_approved_approves(answer, decision):
    assert approval.decide(answer)[0] == decision


def test_the_answer_approver_and_reason_are_kept_short_and_never_missing():
    decision, sent, approver, reason = approval.decide({"decision": "no", "reason": "x" * 2000})
    assert (decision, sent, approver) == ("rejected", "no", "unknown (no approver in the answer)")
    assert len(reason) == approval.MAX_TEXT


@pytest.mark.parametrize(
    "answer, raw",
    [
        ({"decision": "approved "}, "approved "),
        ({"decision": " approved"}, " approved"),
        ({"decision": True}, "true"),
        ({"decision": ["approved"]}, '["approved"]'),
    ],
)
def test_the_raw_answer_is_kept_exactly_as_sent_next_to_the_rejection(answer, raw):
    decision, sent, _, _ = approval.decide(answer)
    assert (decision, sent) == ("rejected", raw)


@pytest.mark.parametrize("name_length", [1, 40, 80])
def test_the_approval_subject_is_under_100_characters_for_any_execution_name(name_length):
    name = "t" * name_length
    found = Teardown(request_id=name, status="AWAITING_APPROVAL", target=TeardownTarget(request_id="run-a"), instance_count=1,
                     instances=[TeardownInstance(instance_id="i-1", region="us-west-2", state="running")])
    subject, _ = approval.message(found, execution_arn="arn:aws:states:us-east-1:1:execution:m:" + name,
                                  task_token="tok", expires=NOW)
    assert len(subject) < 100
    if name_length == 80:
        assert subject.endswith("...)") and name[:40] in subject
    else:
        assert subject.endswith(f"({name})")


def test_the_approval_message_carries_the_exact_commands():
    token = "AQB8AAAAKgAAAAMAAAAAAAAAAf+token/with'quote"
    arn = "arn:aws:states:eu-central-1:123456789012:execution:gpufill-provisioner-prod:tear-1"
    found = Teardown(
        request_id="tear-1", status="AWAITING_APPROVAL", target=TeardownTarget(request_id="run-a"),
        requested_by="ana@example.com", instance_count=1,
        instances=[TeardownInstance(instance_id="i-1", region="us-west-2", state="running", hourly_price=0.5)],
        hourly_cost=0.5,
    )
    subject, body = approval.message(found, execution_arn=arn, task_token=token, expires=NOW)
    assert len(subject) <= 100 and "tear-1" in subject
    assert f"gpufill approve {arn}" in body and f"gpufill reject {arn} --reason" in body
    assert "aws stepfunctions send-task-success --region eu-central-1 --task-token 'AQB8AAAAKgAAAAMAAAAAAAAAAf+token/with'\"'\"'quote'" in body
    assert "--task-output '{\"decision\":\"approved\",\"approver\":\"YOUR-NAME\"}'" in body
    assert "ana@example.com" in body and "i-1" in body and "2026-03-01T12:00:00+00:00" in body


def test_execution_names_and_arns_both_find_the_approval():
    assert parse_execution("tear-1").name == "tear-1"
    ref = parse_execution("arn:aws:states:eu-central-1:123456789012:execution:gpufill-provisioner-prod:tear-1")
    assert (ref.name, ref.region, ref.env) == ("tear-1", "eu-central-1", "prod")
    with pytest.raises(ApprovalError):
        parse_execution("arn:aws:states:eu-central-1:123456789012:stateMachine:gpufill-provisioner-prod")


def test_settled_approvals_are_refused_with_what_happened():
    pending = {"deadline": "2026-03-01T13:00:00+00:00"}
    refuse_if_settled("t", pending, NOW)  # still open
    with pytest.raises(ApprovalExpired, match="expired at 2026-03-01T13:00:00"):
        refuse_if_settled("t", pending, datetime(2026, 3, 1, 13, 0, 1, tzinfo=UTC))
    with pytest.raises(AlreadyDecided, match="already rejected by bob"):
        refuse_if_settled("t", {**pending, "decided_at": "x", "decision": "rejected", "approver": "bob"}, NOW)
    with pytest.raises(ApprovalExpired):
        refuse_if_settled("t", {**pending, "decided_at": "x", "decision": "expired"}, NOW)
    with pytest.raises(AlreadyDecided, match="answered 'approved' by ana"):
        refuse_if_settled("t", {**pending, "answered_at": "x", "answer": "approved", "answered_by": "ana"}, NOW)


# --- the status view ---------------------------------------------------------------------------


def test_status_reports_unrecorded_gone_and_the_running_total():
    records = {
        "i-1": rec("i-1"),
        "i-2": rec("i-2", hourly_price=0.25),
        "i-3": rec("i-3"),  # gone from EC2
        "i-4": rec("i-4", state="terminated"),  # gpufill ended it: history, not news
        "i-5": rec("i-5"),
    }
    seen = {"i-1": live("i-1"), "i-2": live("i-2", state="stopped"), "i-5": live("i-5", managed=False),
            "i-9": live("i-9", request="run-b"), "i-8": live("i-8", request=None),
            "i-7": live("i-7", deployment="dev")}  # another deployment's: not in this view at all
    report = status.report(request_id="status-1", target_request_id=None, regions=["us-west-2"],
                           records=records, live=seen, now=NOW, deployment=ENV, reconciled=["i-9"])
    found = {e.instance_id: (e.state, e.finding) for e in report.instances}
    assert found == {"i-1": ("running", "recorded"), "i-2": ("stopped", "recorded"), "i-3": ("gone", "gone"),
                     "i-5": ("running", "not-managed"), "i-9": ("running", "reconciled"),
                     "i-8": ("running", "unrecorded"), "i-4": ("terminated", "recorded")}
    assert (report.reconciled, report.unrecorded, report.gone) == (["i-9"], ["i-8"], ["i-3"])
    assert report.running == 4 and report.hourly_cost == 1.0  # i-1 and i-5 at 0.5; i-8's and i-9's prices unknown
    assert report.counts == {"gone": 1, "running": 4, "stopped": 1, "terminated": 1}
    assert report.by_region == {"us-west-2": {"gone": 1, "running": 4, "stopped": 1, "terminated": 1}}
    assert report.by_request["run-a"] == {"gone": 1, "running": 2, "stopped": 1, "terminated": 1}
    assert (report.total, report.listed, report.note) == (7, 7, None)
    entry = next(e for e in report.instances if e.instance_id == "i-1")
    assert entry.hours_running == 2.0 and entry.market == "spot" and entry.hourly_price == 0.5
    assert next(e for e in report.instances if e.instance_id == "i-2").hours_running is None


def test_a_status_over_thousands_lists_what_needs_attention_first_and_counts_everything():
    records = {f"i-{n:05d}": rec(f"i-{n:05d}", request=f"run-{n % 300}", state="terminated") for n in range(5000)}
    seen = {f"i-{n:05d}": live(f"i-{n:05d}", request=f"run-{n % 300}") for n in range(4000, 5000)}
    seen["i-99999"] = live("i-99999", request="run-x")  # unrecorded
    report = status.report(request_id="s", target_request_id=None, regions=["us-west-2"], records=records,
                           live=seen, now=NOW, deployment=ENV)
    assert (report.total, report.listed) == (5001, status.STATUS_LISTED_INSTANCES)
    assert report.counts == {"running": 1001, "terminated": 4000}
    assert "i-99999" in {e.instance_id for e in report.instances}  # attention first
    assert {e.state for e in report.instances} == {"running"}  # then billed; history last
    assert len(report.by_request) == status.STATUS_LISTED_REQUESTS and report.other_requests == 301 - status.STATUS_LISTED_REQUESTS
    assert '"request_id"' in report.note and "100 of 5001" in report.note


def test_records_of_ended_instances_are_marked_for_expiry_and_new_invisible_ones_are_not():
    records = {
        "i-1": rec("i-1"),  # EC2 says terminated
        "i-2": rec("i-2", launched_at="2026-03-01T11:59:50+00:00"),  # 10 s old, not visible yet
        "i-3": rec("i-3"),  # launched 2 h ago, EC2 forgot it
        "i-4": rec("i-4", state="terminated", expires_at=123),  # already expiring
        "i-5": rec("i-5"),  # running
    }
    seen = {"i-1": live("i-1", state="terminated"), "i-5": live("i-5")}
    assert status.ended(records, seen, NOW) == {"i-1": "terminated", "i-3": "gone"}


def test_status_and_teardown_search_every_region_the_deployment_could_have_launched_in():
    regions = status.search_regions(request_regions=["us-east-1"], deployed_regions=["us-west-2"],
                                    intent_regions={"ap-south-1"}, record_regions=["eu-west-1"])
    assert regions == ["ap-south-1", "eu-west-1", "us-east-1", "us-west-2"]
    everything = status.search_regions(request_regions=[], deployed_regions=["us-west-2"], intent_regions=(),
                                       record_regions=(), launch_regions={"sa-east-1"})
    assert everything == ["sa-east-1", "us-west-2"]


def test_only_this_deployments_live_tagged_instances_are_recorded_when_found_unrecorded():
    assert status.owner(live("i-1"), ENV) == "run-a"
    assert status.owner(live("i-1", deployment="dev"), ENV) is None
    assert status.owner(live("i-1", managed=False), ENV) is None
    assert status.owner(live("i-1", request=None), ENV) is None
    assert status.owner(live("i-1", state="terminated"), ENV) is None


# --- the request fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_json, field",
    [
        ({"action": "teardown"}, "request_id"),
        ({"action": "teardown", "request_id": "a", "instance_ids": ["i-0123456789abcdef0"]}, "instance_ids"),
        ({"request_id": "a"}, "request_id"),
        ({"action": "plan", "instance_ids": ["i-0123456789abcdef0"]}, "instance_ids"),
        ({"action": "status", "instance_ids": ["i-0123456789abcdef0"]}, "instance_ids"),
        ({"action": "status", "approval_timeout_seconds": 600}, "approval_timeout_seconds"),
        ({"action": "teardown", "request_id": "a", "approval_timeout_seconds": 59}, "approval_timeout_seconds"),
        ({"action": "teardown", "request_id": "a", "approval_timeout_seconds": 7 * 86400 + 1}, "approval_timeout_seconds"),
        ({"action": "teardown", "request_id": "$previous"}, "request_id"),
        ({"action": "teardown", "instance_ids": ["i-123"]}, "instance_ids"),
        ({"action": "teardown", "instance_ids": []}, "instance_ids"),
        ({"action": "teardown", "instance_ids": ["i-0123456789abcdef0", "i-0123456789abcdef0"]}, "instance_ids"),
        ({"action": "teardown", "request_id": "a", "all": True}, "all"),
        ({"action": "teardown", "instance_ids": ["i-0123456789abcdef0"], "all": True}, "all"),
        ({"action": "teardown", "all": "yes"}, "all"),
        ({"action": "teardown", "all": False}, "request_id"),
        ({"action": "status", "all": True}, "all"),
        ({"all": True}, "all"),
    ],
)
def test_teardown_and_status_fields_are_checked_and_named(request_json, field):
    with pytest.raises(ValidationError) as caught:
        Request.model_validate(request_json)
    assert [p["field"] for p in describe_problems(caught.value)] == [field]


def test_teardown_and_status_requests_normalise():
    def norm(body):
        return normalise(Request.model_validate(body), request_id="me", default_regions=["us-west-2"], home_region="us-east-1")

    teardown_request = norm({"action": "teardown", "instance_ids": ["i-0123456789abcdef0"], "requested_by": "ana"})
    assert (teardown_request.instance_ids, teardown_request.target_request_id) == (["i-0123456789abcdef0"], None)
    assert teardown_request.approval_timeout_seconds == 86400 and teardown_request.requested_by == "ana"
    assert norm({"action": "teardown", "request_id": "run-a", "approval_timeout_seconds": 60}).approval_timeout_seconds == 60
    everything = norm({"action": "teardown", "all": True})
    assert (everything.all, everything.target_request_id, everything.instance_ids) == (True, None, None)
    status_request = norm({"action": "status", "request_id": "run-a"})
    assert (status_request.target_request_id, status_request.regions) == ("run-a", ["us-west-2"])


def test_a_teardown_stops_the_maintenance_of_the_request_named_and_of_every_instance_it_ends():
    from gpufill.models.teardown import TeardownInstance, TeardownTarget
    from gpufill.policy.teardown import maintenance_to_stop

    def one(iid, req):
        return TeardownInstance(instance_id=iid, request_id=req, region="us-east-1", state="running", recorded=True)

    assert maintenance_to_stop(TeardownTarget(request_id="a"), []) == ["a"]
    assert maintenance_to_stop(TeardownTarget(instance_ids=["i-1", "i-2"]), [one("i-1", "b"), one("i-2", None)]) == ["b"]
    assert maintenance_to_stop(TeardownTarget(all=True), [one("i-1", "c"), one("i-2", "b"), one("i-3", "c")]) == ["b", "c"]


def test_a_teardown_that_asks_nobody_gives_its_maintenance_back_only_when_another_teardown_holds_its_instances():
    from gpufill.models.teardown import Refusal

    held = Refusal(instance_id="i-1", reason="awaiting-approval", detail="teardown end-a already asks")
    gone = Refusal(instance_id="i-2", reason="already-terminated", detail="terminated")
    asked = TeardownInstance(instance_id="i-3", region="us-west-2", state="running")
    assert teardown.gives_back_maintenance([], [held, gone]) is True
    assert teardown.gives_back_maintenance([], [gone]) is False  # nothing left: the request stays ended
    assert teardown.gives_back_maintenance([], []) is False
    assert teardown.gives_back_maintenance([asked], [held]) is False  # it asks: its mark stands
