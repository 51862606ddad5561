"""Faults during a teardown: only approved instances end, and every approved one does."""

from tests.support.audit import EAST, REQUEST, WEST, audit, ends_documented, live_instances, table_items


def test_a_throttled_terminate_is_retried_until_every_approved_instance_ends(account):
    with account() as engine:
        run = engine.run(REQUEST, name="to-end")
        other = engine.run({"count": 2, "regions": [EAST]}, name="to-keep")
        engine.faults.aws("ec2", "TerminateInstances", error="RequestLimitExceeded", times=7)
        teardown = engine.run({"action": "teardown", "request_id": "to-end"}, name="end-it", decision="approved")
        assert teardown.output["status"] == "TERMINATED"
        assert not live_instances("to-end")
        # Nothing outside the approved set ended.
        assert live_instances("to-keep") == {i["instance_id"] for i in other.output["instances"]}
    assert len(run.output["instances"]) == 4


def test_a_status_that_aws_keeps_failing_ends_by_name_and_changes_nothing(account):
    with account() as engine:
        engine.run(REQUEST, name="seen-later")
        engine.faults.aws("ec2", "DescribeInstances", error="RequestLimitExceeded", times=None)
        status = engine.run({"action": "status", "request_id": "seen-later"}, name="status-throttled")
        assert len(live_instances("seen-later")) == 4
    assert (status.status, status.error) == ("FAILED", "STATUS_UNAVAILABLE")


def test_a_teardown_that_cannot_find_its_instances_terminates_nothing_and_says_so(account):
    with account() as engine:
        run = engine.run(REQUEST, name="kept")
        engine.faults.aws("ec2", "DescribeInstances", error="RequestLimitExceeded", times=None)
        teardown = engine.run({"action": "teardown", "request_id": "kept"}, name="end-kept", decision="approved")
        assert live_instances("kept") == {i["instance_id"] for i in run.output["instances"]}
    assert (teardown.status, teardown.error) == ("FAILED", "TEARDOWN_NOT_STARTED")


def test_a_teardown_that_lands_while_a_killed_launch_step_awaits_its_retry_stays_on_the_records(account):
    """The launch step dies between RunInstances and its records; before its retry, a teardown of
    the request finds the instances by their tags, records and terminates them. The retry's token
    brings the same instances back: its records must not take the teardown's back."""
    with account() as engine:
        torn: dict = {}

        def tear_down():
            for region in (WEST, EAST):
                engine.market.hidden_now(region)  # seconds old by now: EC2 describes them
            torn["run"] = engine.run({"action": "teardown", "request_id": "raced"}, name="end-raced", decision="approved")

        engine.faults.kill_at("dynamodb", "UpdateItem", task="LaunchBatch", meanwhile=tear_down)
        execution = engine.run(REQUEST, name="raced")
        assert engine.faults.total == 1
        ended = {i["instance_id"] for i in torn["run"].output["instances"]}
        records = {i["instance_id"]: i for i in table_items("raced")}
        seen = audit(engine, execution)
    assert torn["run"].output["status"] == "TERMINATED" and len(ended) == 3
    assert {i: (records[i]["state"], records[i].get("terminated_by")) for i in ended} == {
        i: ("terminated", "end-raced") for i in ended}
    # What the retried step knew and the teardown's record lacked is added: the price it launched at.
    assert all(records[i].get("hourly_price") for i in ended)
    assert ends_documented(execution)
    live_records = {i for i, r in records.items() if r["state"] != "terminated"}
    assert seen.in_ec2 == live_records == seen.reported and not seen.in_ec2 & ended
    assert not seen.untracked_after_status


def test_an_approval_request_the_topic_refuses_still_waits_and_is_answered(account):
    """The approval topic refuses Publish (its policy denies): the teardown's approval is recorded
    and waits all the same, answerable as `gpufill approve` answers it; the run ends as the answer
    says, and no instance is lost; the approval item records that the approvers were not told."""
    with account() as engine:
        run = engine.run(REQUEST, name="quiet")
        engine.faults.aws("sns", "Publish", error="AuthorizationError", times=None)
        teardown = engine.run({"action": "teardown", "request_id": "quiet"}, name="end-quiet", decision="approved")
        refused = engine.faults.injected
        left = live_instances("quiet")
    assert teardown.status == "SUCCEEDED" and teardown.output["status"] == "TERMINATED", teardown.cause
    assert sorted(teardown.output["terminated"][0]["terminated"]) == sorted(i["instance_id"] for i in run.output["instances"])
    assert not left and refused["aws:sns:Publish"] >= 1  # the count and its alarm: tests/unit, tests/infra
    assert teardown.output["approval"]["decision"] == "approved"
    # The approval item says nobody was told, and why, as the topic answered (gpufill status shows it).
    item = teardown.approval
    assert (item["notification"], item["notification_by"]) == ("failed", "approval request")
    assert item["notification_error"].startswith("AuthorizationError")
