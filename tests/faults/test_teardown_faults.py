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
