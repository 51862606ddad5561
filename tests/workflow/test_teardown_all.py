"""`{"action": "teardown", "all": true}`: every live instance of this deployment, of every
request and every region it ever launched in, behind one approval; nothing of another deployment."""

from __future__ import annotations

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.workflow.planting import (
    EAST, MARKET, WEST, add_launch_region, launch, put_record, record, states, terminated_ids,
)


def test_teardown_all_asks_once_and_ends_only_this_deployments_instances():
    # The deployed regions config names only us-east-1; us-west-2 was a run's own choice.
    with LocalEngine(MarketScenario.model_validate(MARKET), regions_config={"regions": [EAST]}) as account:
        mine = launch(account, WEST, count=2, request_id="run-1") + launch(account, EAST, request_id="run-2")
        lost = launch(account, WEST, request_id="run-3", record=False)  # its record write never happened
        add_launch_region(account, WEST)
        theirs = launch(account, WEST, request_id="run-1", deployment="dev", record=False)
        unmanaged = launch(account, EAST, managed=False, record=False)
        ended = launch(account, EAST, request_id="run-0")
        account.client("ec2", EAST).terminate_instances(InstanceIds=ended)
        account.run({"action": "status"}, name="status-before")  # a status run before: reconciles `lost`
        put_record(account, "i-0123456789abcdef0", WEST, "run-9")  # a record whose instance is gone

        execution = account.run(
            {"action": "teardown", "all": True, "requested_by": "ana@example.com"}, name="teardown-everything",
            decision="approved",
        )

        assert execution.status == "SUCCEEDED", execution.cause
        assert execution.output["status"] == "TERMINATED"
        assert terminated_ids(execution) == sorted(mine + lost)
        assert execution.entered().count("AwaitTeardownApproval") == 1
        [note] = execution.notifications
        assert "EVERY live instance of this deployment" in note["message"]
        assert execution.output["target"]["all"] is True
        assert set(states(account, WEST, mine[:2] + lost).values()) == {"terminated"}
        assert states(account, EAST, [mine[2]]) == {mine[2]: "terminated"}
        assert states(account, WEST, theirs) == {theirs[0]: "running"}
        assert states(account, EAST, unmanaged) == {unmanaged[0]: "running"}
        assert record(account, lost[0])["state"] == "terminated"
        # ended before (marked by the status run) is history, not a candidate; the gone record is refused
        assert {r["instance_id"]: r["reason"] for r in execution.output["refused"]} == {"i-0123456789abcdef0": "gone"}
        assert ended[0] not in {i["instance_id"] for i in execution.output["instances"]}


def test_teardown_all_rejected_ends_nothing():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        mine = launch(account, WEST, request_id="run-1")
        execution = account.run({"action": "teardown", "all": True}, name="teardown-all-no", decision="rejected")
        assert execution.output["status"] == "REJECTED"
        assert states(account, WEST, mine) == {mine[0]: "running"}
