"""policy.sweep: the findings, the teardown asks (never two for one instance, never a
termination) and the once-a-day notification, pinned without an engine."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta

from gpufill.constants import LIFETIME_ATTRIBUTE, SWEEP_GRACE_SECONDS, TAG_DEPLOYMENT, TAG_MANAGED, TAG_REQUEST_ID
from gpufill.models.teardown import LiveInstance
from gpufill.policy import sweep
from hypothesis import given, settings
from hypothesis import strategies as st

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
LONG_AGO = (NOW - timedelta(hours=3)).isoformat()


def live(instance_id, *, request="r1", deployment="dev", state="running", launched=LONG_AGO, region="us-west-2"):
    tags = {TAG_MANAGED: "true", TAG_DEPLOYMENT: deployment}
    if request:
        tags[TAG_REQUEST_ID] = request
    return LiveInstance(
        instance_id=instance_id, region=region, availability_zone=f"{region}a", instance_type="p5.48xlarge",
        state=state, tags=tags, launch_time=launched,
    )


def record(request="r1", **extra):
    return {"request_id": request, "region": "us-west-2", "state": "running", "hourly_price": 10.0, **extra}


def assess(*, records=None, live_=None, reconciled=(), approvals=(), executions=None, notified=None, now=NOW, block_ends=None):
    return sweep.assess(
        records=records or {}, live={i.instance_id: i for i in live_ or []}, reconciled=reconciled, deployment="dev",
        approvals=approvals, executions=executions or {}, notified=notified or {}, now=now,
        price=lambda instance_type, region: 55.0, block_ends=block_ends,
    )


BLOCK = "cr-0123456789abcdef0"


def in_block(request="r1", fee=1800.0, **extra):
    """The record of an instance launched into Capacity Block BLOCK (its launch recorded the fee)."""
    return record(request, capacity_reservation_id=BLOCK, capacity_block_fee=fee, hourly_price=None, **extra)


def approval(name, ids, *, requested=NOW - timedelta(hours=1), deadline=NOW + timedelta(hours=3)):
    return sweep.PendingApproval(execution_name=name, requested_at=requested, deadline=deadline, instance_ids=ids)


def test_an_unrecorded_instance_is_untracked_once_past_the_grace_and_gets_one_teardown_ask():
    result = assess(live_=[live("i-1")], reconciled=["i-1"], records={})
    [finding] = result.findings
    assert (finding.kind, finding.instance_ids, finding.hourly_cost) == ("untracked", ["i-1"], 55.0)
    [ask] = result.teardowns
    assert ask.execution_input() == {"action": "teardown", "instance_ids": ["i-1"], "requested_by": "gpufill sweep (untracked)"}
    assert ask.name.startswith("sweep-teardown-r1-") and len(ask.name) <= 80
    assert ask.name in finding.command and result.notify == [finding]
    just_launched = live("i-2", launched=(NOW - timedelta(seconds=SWEEP_GRACE_SECONDS - 60)).isoformat())
    assert assess(live_=[just_launched], reconciled=["i-2"]).findings == []  # a step may be recording it now


def test_an_instance_without_a_request_tag_is_notified_but_not_asked_for():
    result = assess(live_=[live("i-1", request=None)])
    [finding] = result.findings
    assert finding.request_id is None and result.teardowns == [] and "EC2 console" in finding.command


def test_other_deployments_and_ending_instances_are_not_findings():
    result = assess(live_=[live("i-1", deployment="prod"), live("i-2", state="shutting-down")], reconciled=["i-1", "i-2"])
    assert result.findings == [] and result.running == 0


def test_an_expired_request_is_asked_for_once_and_not_while_its_teardown_waits():
    expired = (NOW - timedelta(hours=1)).isoformat()
    records = {"i-1": record(**{LIFETIME_ATTRIBUTE: expired}), "i-2": record(**{LIFETIME_ATTRIBUTE: expired})}
    result = assess(records=records, live_=[live("i-1"), live("i-2")])
    [finding] = result.findings
    assert (finding.kind, finding.instance_ids, finding.hourly_cost) == ("expired", ["i-1", "i-2"], 20.0)
    assert [a.instance_ids for a in result.teardowns] == [["i-1", "i-2"]]
    waiting = assess(records=records, live_=[live("i-1"), live("i-2")], approvals=[approval("lifetime-r1", ["i-1", "i-2"])])
    assert [f.kind for f in waiting.findings] == [] and waiting.teardowns == []
    recently = {"i-1": record(**{LIFETIME_ATTRIBUTE: (NOW - timedelta(minutes=5)).isoformat()})}
    assert assess(records=recently, live_=[live("i-1")]).findings == []  # its own lifetime teardown is on the way


def test_the_same_instances_give_the_same_ask_name_and_a_finding_is_notified_once_a_day():
    first = assess(live_=[live("i-1")], reconciled=["i-1"])
    again = assess(live_=[live("i-1")], records={"i-1": record(reconciled=True)}, notified={first.findings[0].key: NOW})
    assert again.teardowns[0].name == first.teardowns[0].name  # Step Functions refuses a second start
    assert again.notify == []
    a_day_later = assess(
        live_=[live("i-1")], records={"i-1": record(reconciled=True)}, notified={first.findings[0].key: NOW},
        now=NOW + timedelta(days=1),
    )
    assert len(a_day_later.notify) == 1


def test_an_approval_past_half_its_deadline_is_a_finding():
    early = approval("t1", ["i-1"], requested=NOW - timedelta(minutes=10), deadline=NOW + timedelta(hours=1))
    late = approval("t2", ["i-1"], requested=NOW - timedelta(hours=2), deadline=NOW + timedelta(hours=1))
    result = assess(records={"i-1": record()}, live_=[live("i-1")], approvals=[early, late])
    [finding] = result.findings
    assert finding.key == "approval-waiting:t2" and "gpufill approve t2" in finding.command
    assert result.pending_approvals == 2 and result.teardowns == []


def test_a_run_that_ended_with_pending_records_is_a_finding():
    records = {"i-1": record(state="pending"), "i-2": record("r2", state="pending")}
    assert sweep.requests_to_look_up(records) == ["r1", "r2"]
    result = assess(records=records, live_=[live("i-1"), live("i-2", request="r2")], executions={"r1": "FAILED", "r2": "RUNNING"})
    [finding] = result.findings
    assert (finding.kind, finding.request_id, finding.command) == ("run-ended", "r1", "gpufill status r1")


def test_the_summary_and_the_notification():
    result = assess(live_=[live("i-1")], reconciled=["i-1"])
    summary = result.summary()
    assert summary["found"] == {"untracked": 1, "expired": 0, "block-ending": 0, "approval-waiting": 0, "run-ended": 0}
    assert summary["hourly_cost"] == 55.0 and summary["teardowns_asked"] == [result.teardowns[0].name]
    subject, body = sweep.notification(result.findings[0], "dev")
    assert len(subject) < 100 and "55 USD per hour" in body and "gpufill approve sweep-teardown-r1-" in body


def test_pending_approval_reads_only_waiting_items():
    item = {"status": "PENDING", "execution_name": "t1", "deadline": NOW.isoformat(), "requested_at": NOW.isoformat(), "instance_ids": ["i-2", "i-1"]}
    assert sweep.pending_approval(item).instance_ids == ["i-1", "i-2"]
    assert sweep.pending_approval({**item, "status": "APPROVED", "decided_at": NOW.isoformat()}) is None


ids = st.sampled_from([f"i-{n}" for n in range(8)])


@settings(max_examples=80, deadline=None)
@given(
    untracked=st.sets(ids),
    expired=st.sets(ids),
    pending=st.lists(st.sets(ids, max_size=3), max_size=3),
    requests=st.lists(st.sampled_from(["r1", "r2", None]), min_size=8, max_size=8),
    blocks=st.sets(ids),
    ending_in=st.integers(min_value=-30, max_value=120),
)
def test_never_two_asks_for_one_instance_and_never_one_for_an_instance_already_asked(
    untracked, expired, pending, requests, blocks, ending_in
):
    """Whatever EC2 and the records say: an instance is in at most one teardown ask, never in an
    ask while a pending approval names it, and the sweep's only act on instances is an ask."""
    records, instances = {}, []
    for n in range(8):
        instance_id = f"i-{n}"
        request = requests[n]
        instances.append(live(instance_id, request=request))
        if instance_id in untracked:
            if n % 2:
                records[instance_id] = record(request or "r1", reconciled=True)
            continue
        records[instance_id] = in_block(request or "r1") if instance_id in blocks else record(request or "r1")
        if instance_id in expired:
            records[instance_id][LIFETIME_ATTRIBUTE] = (NOW - timedelta(days=1)).isoformat()
    approvals = [approval(f"t{n}", sorted(p)) for n, p in enumerate(pending)]
    result = assess(records=records, live_=instances, approvals=approvals, block_ends={BLOCK: NOW + timedelta(minutes=ending_in)})
    asked = [i for ask in result.teardowns for i in ask.instance_ids]
    assert len(asked) == len(set(asked))
    assert not set(asked) & {i for a in approvals for i in a.instance_ids}
    assert all(ask.execution_input()["action"] == "teardown" for ask in result.teardowns)
    assert len({ask.name for ask in result.teardowns}) == len(result.teardowns)
    assert set(asked) <= untracked | expired | (blocks if ending_in <= 60 else set())


def test_a_finding_and_the_summary_say_exactly_this():
    """The words a person reads, whole: the kind, the instances, the cost, the command."""
    expired = (NOW - timedelta(hours=1)).isoformat()
    records = {
        "i-1": record(**{LIFETIME_ATTRIBUTE: expired}),
        "i-2": record(**{LIFETIME_ATTRIBUTE: expired}, hourly_price=None),
        "i-3": record("r3", state="pending"),
    }
    instances = [live("i-1"), live("i-2", state="stopped"), live("i-3", request="r3", region="eu-west-1"), live("i-9", request=None)]
    late = approval("t9", ["i-3"], requested=NOW - timedelta(hours=3), deadline=NOW + timedelta(hours=1))
    result = assess(records=records, live_=instances, approvals=[late], executions={"r3": "SUCCEEDED"})
    untracked, expiry, waiting, ended = result.findings
    ask = result.teardowns[0]
    assert expiry == sweep.Finding(
        kind="expired", key=f"expired:r1:{sweep._digest(['i-1', 'i-2'])}", request_id="r1", instance_ids=["i-1", "i-2"],
        regions=["us-west-2"], hourly_cost=10.0,
        command=f"gpufill approve {ask.name}   (or: gpufill reject {ask.name})",
        message="2 instance(s) of request r1 past its max_lifetime with no teardown pending (10 USD/h): i-1, i-2",
    )
    assert ask == sweep.TeardownAsk(name=f"sweep-teardown-r1-{sweep._digest(['i-1', 'i-2'])}", finding="expired", instance_ids=["i-1", "i-2"])
    assert untracked.message == "1 instance(s) tagged for deployment dev but not recorded by any run (no request) (55 USD/h): i-9"
    assert untracked.command == "gpufill status; end them in the EC2 console (us-west-2) or tag them gpufill:request-id"
    assert waiting == sweep.Finding(
        kind="approval-waiting", key="approval-waiting:t9", instance_ids=["i-3"], hourly_cost=10.0,
        command="gpufill approve t9   (or: gpufill reject t9)",
        message=f"t9 asks for a teardown of 1 instance(s) and has waited past half its deadline ({late.deadline.isoformat(timespec='minutes')})",
    )
    assert (ended.key, ended.instance_ids, ended.hourly_cost) == ("run-ended:r3", ["i-3"], 10.0)
    assert ended.message == "run r3 ended SUCCEEDED but the records of 1 instance(s) still say pending"
    assert result.summary() == {
        "at": "2026-12-04T12:00:00+00:00", "running": 3, "hourly_cost": 75.0, "pending_approvals": 1,
        "found": {"untracked": 1, "expired": 2, "block-ending": 0, "approval-waiting": 1, "run-ended": 1},
        "notified": 4, "teardowns_asked": [ask.name],
        "findings": [{"kind": f.kind, "message": f.message, "command": f.command} for f in result.findings],
    }
    subject, body = sweep.notification(expiry, "dev")
    assert subject == "gpufill (dev) sweep: expired"
    assert body == "\n".join([
        expiry.message, "", "Cost: 10 USD per hour", f"To act: {expiry.command}", "Regions: us-west-2", "",
        "The sweep repeats this at most once a day while it lasts.",
    ])
    purchase = sweep.pending_approval({"status": "PENDING", "execution_name": "p1", "deadline": NOW.isoformat(),
                                       "approval_for": "capacity-block-purchase"})
    assert purchase == sweep.PendingApproval(execution_name="p1", requested_at=NOW, deadline=NOW, instance_ids=[], purchase=True)
    assert sweep.pending_approval({"status": "PENDING", "execution_name": "p1"}) is None
    assert sweep._moment("2026-12-04T12:00:00") == NOW and sweep._moment("2026-12-04T12:00:00Z") == NOW
    assert sweep._moment("soon") is None and sweep._moment(None) is None


def test_a_block_ending_within_the_hour_with_instances_is_one_finding_and_one_ask():
    records = {"i-1": in_block(), "i-2": in_block()}
    instances = [live("i-1"), live("i-2")]
    ends = {BLOCK: NOW + timedelta(minutes=50)}
    result = assess(records=records, live_=instances, block_ends=ends)
    [finding] = result.findings
    [ask] = result.teardowns
    assert (finding.kind, finding.request_id, finding.instance_ids) == ("block-ending", "r1", ["i-1", "i-2"])
    # Paid upfront: nothing accrues by the hour (not the On-Demand price of a record without one).
    assert finding.hourly_cost == 0.0 and result.hourly_cost == 0.0 and result.running == 2
    assert finding.message == (
        f"2 instance(s) of request r1 in Capacity Block {BLOCK} (upfront fee 1800 USD), which ends at "
        "2026-12-04T12:50+00:00, with no teardown pending; EC2 begins to terminate them 30 minutes before the end "
        "(0 USD/h): i-1, i-2"
    )
    assert ask == sweep.TeardownAsk(name=f"sweep-teardown-r1-{sweep._digest(['i-1', 'i-2'])}", finding="block-ending",
                                    instance_ids=["i-1", "i-2"])
    assert finding.command == f"gpufill approve {ask.name}   (or: gpufill reject {ask.name})"
    assert result.counts()["block-ending"] == 2 and result.notify == [finding]
    # Exactly an hour left is within the hour; a minute more is not yet.
    assert [f.kind for f in assess(records=records, live_=instances, block_ends={BLOCK: NOW + timedelta(hours=1)}).findings] == [
        "block-ending"]
    assert assess(records=records, live_=instances, block_ends={BLOCK: NOW + timedelta(minutes=61)}).findings == []
    # A block not read (another region, or not active) is no finding; nor are instances a teardown waits for.
    assert assess(records=records, live_=instances).findings == []
    waiting = assess(records=records, live_=instances, block_ends=ends, approvals=[approval("life-r1", ["i-1", "i-2"])])
    assert waiting.findings == [] and waiting.teardowns == []


def test_a_block_instance_past_its_lifetime_is_asked_for_once_as_block_ending():
    lifetime = {LIFETIME_ATTRIBUTE: (NOW - timedelta(hours=1)).isoformat()}
    records = {"i-1": in_block(**lifetime), "i-2": record(**lifetime)}
    result = assess(records=records, live_=[live("i-1"), live("i-2")], block_ends={BLOCK: NOW + timedelta(minutes=20)})
    assert [(f.kind, f.instance_ids) for f in result.findings] == [("expired", ["i-2"]), ("block-ending", ["i-1"])]
    assert sorted(i for a in result.teardowns for i in a.instance_ids) == ["i-1", "i-2"]
    # Later in the block's life the same instance is just expired, with the On-Demand price of nothing.
    [expired] = assess(records={"i-1": in_block(**lifetime)}, live_=[live("i-1")], block_ends={BLOCK: NOW + timedelta(days=1)}).findings
    assert (expired.kind, expired.hourly_cost) == ("expired", 0.0)


def test_only_this_deployments_running_block_instances_name_a_region_to_read():
    records = {"i-1": in_block(), "i-2": record(), "i-3": in_block(), "i-4": in_block(), "i-5": in_block(fee=None)}
    instances = [live("i-1", region="us-east-2"), live("i-2", region="us-west-2"), live("i-3", region="eu-west-1", deployment="prod"),
                 live("i-4", region="ap-south-1", state="terminated"), live("i-5", region="sa-east-1")]
    records["i-1"]["region"] = "us-east-2"
    assert sweep.block_regions(records, {i.instance_id: i for i in instances}, "dev") == ["us-east-2"]
    assert sweep.block_regions({"i-1": {**in_block(), "capacity_reservation_id": None}}, {"i-1": live("i-1")}, "dev") == []


# --- the edges: each rule at its boundary, and the words a person reads -----------------------


def test_each_grace_and_deadline_is_met_at_its_moment():
    grace = timedelta(seconds=SWEEP_GRACE_SECONDS)
    # An instance launched exactly the grace ago is a finding; a record's launch counts when EC2 says none.
    assert [f.kind for f in assess(live_=[live("i-1", launched=(NOW - grace).isoformat())], reconciled=["i-1"]).findings] == ["untracked"]
    recent = {"i-1": record(reconciled=True, launched_at=(NOW - grace / 2).isoformat())}
    assert assess(records=recent, live_=[live("i-1", launched=None)]).findings == []
    # The first instance inside its grace does not hide the next; an untracked one does not hide an expired one.
    young, old = live("i-1", launched=(NOW - grace / 2).isoformat()), live("i-2")
    assert [f.instance_ids for f in assess(live_=[young, old], reconciled=["i-1", "i-2"]).findings] == [["i-2"]]
    expired = {"i-2": record(**{LIFETIME_ATTRIBUTE: (NOW - grace).isoformat()})}  # exactly the grace past its lifetime
    assert [f.kind for f in assess(records=expired, live_=[live("i-1"), live("i-2")], reconciled=["i-1"]).findings] == [
        "untracked", "expired"]
    # An approval whose deadline is now has been answered no: its instances are asked for again.
    gone = approval("t1", ["i-2"], deadline=NOW)
    result = assess(records=expired, live_=[live("i-2")], approvals=[gone])
    assert result.pending_approvals == 0 and [a.instance_ids for a in result.teardowns] == [["i-2"]]
    # Half the deadline: at it, a finding; before it, none.
    at_half = approval("t2", ["i-3"], requested=NOW - timedelta(hours=1), deadline=NOW + timedelta(hours=1))
    before_half = approval("t3", ["i-3"], requested=NOW - timedelta(hours=1), deadline=NOW + timedelta(hours=2))
    assert [f.key for f in assess(approvals=[at_half, before_half]).findings] == ["approval-waiting:t2"]


def test_the_owner_is_the_record_s_request_before_the_tag():
    result = assess(records={"i-1": record("from-record", reconciled=True)}, live_=[live("i-1", request="from-tag")])
    [finding] = result.findings
    assert finding.request_id == "from-record" and "(request from-record)" in finding.message
    assert finding.key == f"untracked:from-record:{sweep._digest(['i-1'])}"


def test_untracked_groups_come_in_request_order_the_unattributed_first():
    result = assess(live_=[live("i-1", request="A1"), live("i-9", request=None)], reconciled=["i-1"])
    assert [(f.request_id, f.key.split(":")[1]) for f in result.findings] == [(None, "-"), ("A1", "A1")]
    two_regions = assess(live_=[live("i-8", request=None), live("i-9", request=None, region="eu-west-1")])
    assert "EC2 console (eu-west-1, us-west-2)" in two_regions.findings[0].command


def test_costs_keep_four_decimals_and_a_price_nobody_knows_is_zero():
    price = 1.234567
    records = {
        "i-1": record(hourly_price=price, **{LIFETIME_ATTRIBUTE: (NOW - timedelta(hours=1)).isoformat()}),
        "i-2": record("r2", hourly_price=price, state="pending"),
    }
    late = approval("t1", ["i-2"], requested=NOW - timedelta(hours=3), deadline=NOW + timedelta(hours=1))
    result = assess(records=records, live_=[live("i-1"), live("i-2", request="r2")], approvals=[late], executions={"r2": "FAILED"})
    assert [f.hourly_cost for f in result.findings] == [1.2346, 1.2346, 1.2346] and result.hourly_cost == 2.4691
    unknown = sweep.assess(
        records={}, live={"i-1": live("i-1")}, reconciled=["i-1"], deployment="dev", approvals=[], executions={},
        notified={}, now=NOW, price=lambda instance_type, region: None,
    )
    assert unknown.hourly_cost == 0.0 and unknown.findings[0].hourly_cost == 0.0


def test_a_long_list_of_instances_is_cut_at_ten_and_a_long_request_id_keeps_the_name_short():
    ids = [f"i-{n:02d}" for n in range(11)]
    result = assess(live_=[live(i) for i in ids], reconciled=ids)
    assert result.findings[0].message.endswith(", ".join(ids[:10]) + " ...")
    ten = assess(live_=[live(i) for i in ids[:10]], reconciled=ids[:10])
    assert ten.findings[0].message.endswith(", ".join(ids[:10]))
    long_id = "r" * 80
    [ask] = assess(live_=[live("i-1", request=long_id)], reconciled=["i-1"]).teardowns
    assert ask.name == f"sweep-teardown-{'r' * 48}-{sweep._digest(['i-1'])}"
    assert sweep._digest(["i-2", "i-1"]) == hashlib.sha256(b"i-1,i-2").hexdigest()[:10]


def test_a_waiting_purchase_says_so():
    purchase = sweep.PendingApproval(execution_name="p1", requested_at=NOW - timedelta(hours=3), deadline=NOW + timedelta(hours=1),
                                     purchase=True)
    [finding] = assess(approvals=[purchase]).findings
    assert finding.message.startswith("p1 asks for a Capacity Block purchase and has waited past half its deadline")


def test_ended_runs_are_each_looked_at_and_only_their_own_pending_records_named():
    records = {"i-1": record("r1", state="pending"), "i-2": record("r2", state="running"), "i-3": record("r3", state="pending")}
    assert sweep.requests_to_look_up(records) == ["r1", "r3"]
    result = assess(records=records, live_=[live("i-1"), live("i-2", request="r2"), live("i-3", request="r3")],
                    executions={"r0": "RUNNING", "r1": "SUCCEEDED", "r2": "FAILED", "r3": "ABORTED"})
    # r0 still runs and r2 holds no pending record: neither hides the runs after it.
    assert [(f.key, f.instance_ids) for f in result.findings] == [("run-ended:r1", ["i-1"]), ("run-ended:r3", ["i-3"])]
    assert result.counts() == {"untracked": 0, "expired": 0, "block-ending": 0, "approval-waiting": 0, "run-ended": 2}
    waiting = approval("t1", ["i-1", "i-3"], requested=NOW - timedelta(hours=3), deadline=NOW + timedelta(hours=1))
    assert assess(approvals=[waiting]).counts()["approval-waiting"] == 1  # an approval counts once, whatever it names


def test_a_notification_subject_stays_under_100_characters_and_names_every_region():
    finding = sweep.Finding(kind="untracked", key="k", regions=["eu-west-1", "us-west-2"], command="c", message="m")
    subject, body = sweep.notification(finding, "d" * 120)
    assert len(subject) == 99 and "Regions: eu-west-1, us-west-2" in body


def test_an_approval_item_is_pending_only_while_undecided_and_keeps_when_it_was_asked():
    item = {"status": "PENDING", "execution_name": "t1", "deadline": NOW.isoformat(),
            "requested_at": (NOW - timedelta(hours=2)).isoformat()}
    assert sweep.pending_approval(item).requested_at == NOW - timedelta(hours=2)
    assert sweep.pending_approval({**item, "decided_at": NOW.isoformat()}) is None  # answered, the status not yet written
    assert sweep.pending_approval({**item, "status": "APPROVED"}) is None


def test_moments_in_another_zone_are_the_same_instant(monkeypatch):
    assert sweep._moment("2026-12-04T13:00:00+01:00") == NOW
    # The block's end is told in UTC whatever the machine's zone.
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        [finding] = assess(records={"i-1": in_block()}, live_=[live("i-1")], block_ends={BLOCK: NOW + timedelta(minutes=30)}).findings
    finally:
        monkeypatch.undo()
        time.tzset()
    assert "which ends at 2026-12-04T12:30+00:00" in finding.message


def test_an_instance_ec2_says_runs_in_a_capacity_block_costs_nothing_by_the_hour_even_with_no_fee_recorded():
    """A block's instance found untracked, or recorded by a status run from EC2 (market capacity-block,
    no fee): its block was paid for once, so it adds nothing to HourlyCost or the spend alarm."""
    from gpufill.policy import spend

    block = live("i-1").model_copy(update={"capacity_block": True})
    assert block.market == "capacity-block" and live("i-2").market == "on-demand"
    assert live("i-3").model_copy(update={"spot": True}).market == "spot"
    assert assess(records={"i-1": record()}, live_=[block]).hourly_cost == 0.0
    assert assess(records={"i-1": record(market="capacity-block")}, live_=[live("i-1")]).hourly_cost == 0.0
    assert assess(records={"i-1": record()}, live_=[live("i-1")]).hourly_cost == 10.0
    assert spend.rate({"market": "capacity-block", "hourly_price": 3.5, "instance_type": "p5.48xlarge", "region": "us-west-2"}) == (0.0, False)


def test_a_finding_that_changes_kind_between_passes_asks_under_the_same_name():
    """Pass 1 finds block instances past their lifetime (expired) and starts a teardown; before its
    approval is recorded, pass 2 finds the block ending within the hour (block-ending): the ask is
    named from what it tears down, so Step Functions starts it once."""
    lifetime = {LIFETIME_ATTRIBUTE: (NOW - timedelta(hours=1)).isoformat()}
    records = {"i-1": in_block(**lifetime), "i-2": in_block(**lifetime)}
    instances = [live("i-1"), live("i-2")]
    first = assess(records=records, live_=instances, block_ends={BLOCK: NOW + timedelta(hours=2)})
    later = NOW + timedelta(minutes=15)
    second = assess(records=records, live_=instances, now=later, block_ends={BLOCK: NOW + timedelta(minutes=50)})
    [expired], [ending] = first.teardowns, second.teardowns
    assert (expired.finding, ending.finding) == ("expired", "block-ending")
    assert expired.name == ending.name == f"sweep-teardown-r1-{sweep._digest(['i-1', 'i-2'])}"
    # Other instances of the same request, or the same ids of another request, are another ask.
    assert expired.name != assess(records={"i-1": in_block(**lifetime)}, live_=[live("i-1")]).teardowns[0].name
