"""Faults during a teardown: only approved instances end, and every approved one does."""

from tests.faults.conftest import EAST, REQUEST, live_instances


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
