"""The status view on the real state machine: every instance of this deployment, live state and
cost, with what the table and EC2 disagree on (reconciled, gone). Every instance gpufill launched
is in the view within one status run, whatever failed: an unrecorded one is recorded when seen."""

from __future__ import annotations

from gpufill import constants
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.workflow.planting import (
    EAST, MARKET, PRICE, WEST, ZONE, add_launch_region, launch, put_intent, put_record, record, states,
)


def test_status_reports_running_reconciled_and_gone():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        running = launch(account, WEST, count=2, request_id="run-s")
        other = launch(account, EAST, request_id="run-t")
        unrecorded = launch(account, EAST, request_id="run-s", record=False)
        unmanaged = launch(account, WEST, managed=False, record=False)  # not gpufill's: not listed at all
        theirs = launch(account, WEST, request_id="run-s", deployment="dev", record=False)  # another deployment's
        gone = "i-0fedcba9876543210"
        put_record(account, gone, WEST, "run-s")

        execution = account.run({"action": "status"}, name="status-all")

        assert execution.status == "SUCCEEDED", execution.cause
        report = execution.output
        found = {i["instance_id"]: (i["state"], i["finding"]) for i in report["instances"]}
        assert found == {
            running[0]: ("running", "recorded"),
            running[1]: ("running", "recorded"),
            other[0]: ("running", "recorded"),
            unrecorded[0]: ("running", "reconciled"),
            gone: ("gone", "gone"),
        }
        assert unmanaged[0] not in found and theirs[0] not in found
        assert (report["reconciled"], report["unrecorded"], report["gone"]) == (unrecorded, [], [gone])
        written = record(account, unrecorded[0])
        assert (written["request_id"], written["region"], written["availability_zone"]) == ("run-s", EAST, ZONE[EAST])
        assert written["reconciled"] is True and written["launched_at"] and written["instance_type"] == "g6.xlarge"
        assert report["running"] == 4
        assert report["hourly_cost"] == round(3 * PRICE, 4)  # the unrecorded one's price is unknown
        assert report["regions"] == [EAST, WEST]
        entry = next(i for i in report["instances"] if i["instance_id"] == running[0])
        assert (entry["region"], entry["availability_zone"], entry["instance_type"], entry["market"]) == (
            WEST, ZONE[WEST], "g6.xlarge", "on-demand")
        assert entry["hourly_price"] == PRICE and entry["launched_at"] and entry["hours_running"] >= 0

        only = account.run({"action": "status", "request_id": "run-s"}, name="status-s").output
        assert sorted(i["instance_id"] for i in only["instances"]) == sorted(running + unrecorded + [gone])
        assert only["reconciled"] == []  # recorded by the first status run
        assert {i["instance_id"]: i["finding"] for i in only["instances"]}[unrecorded[0]] == "recorded"

        account.run({"action": "teardown", "request_id": "run-s"}, name="teardown-s", decision="approved")
        after = account.run({"action": "status", "request_id": "run-s"}, name="status-s-after").output
        states_after = {i["instance_id"]: i["state"] for i in after["instances"]}
        assert {states_after[i] for i in running + unrecorded} <= {"terminated", "shutting-down"}
        assert after["running"] == 0 and after["hourly_cost"] == 0
        assert after["gone"] == [gone]  # never gpufill's to end: still reported
        assert states(account, WEST, theirs) == {theirs[0]: "running"}  # another deployment's: untouched


def test_a_run_that_chose_its_own_region_and_lost_its_records_is_found_by_its_intent():
    """The deployed regions config names only us-east-1; the run launched in us-west-2 and its
    record write never happened. Its intent names the region, so one status run finds and records it."""
    with LocalEngine(MarketScenario.model_validate(MARKET), regions_config={"regions": [EAST]}) as account:
        lost = launch(account, WEST, count=2, request_id="run-own", record=False)
        put_intent(account, "run-own", WEST)

        report = account.run({"action": "status", "request_id": "run-own"}, name="status-own").output

        assert sorted(report["reconciled"]) == sorted(lost)
        assert WEST in report["regions"]
        assert {record(account, i)["request_id"] for i in lost} == {"run-own"}
        teardown = account.run({"action": "teardown", "request_id": "run-own"}, name="teardown-own", decision="approved")
        assert teardown.output["status"] == "TERMINATED"
        assert set(states(account, WEST, lost).values()) == {"terminated"}


def test_an_unfiltered_status_searches_every_region_a_launch_was_attempted_in():
    with LocalEngine(MarketScenario.model_validate(MARKET), regions_config={"regions": [EAST]}) as account:
        lost = launch(account, WEST, request_id="run-far", record=False)
        add_launch_region(account, WEST)

        report = account.run({"action": "status"}, name="status-far").output

        assert report["reconciled"] == lost and report["regions"] == [EAST, WEST]
        assert record(account, lost[0])[constants.INSTANCES_TABLE_KEY] == lost[0]


def test_a_status_run_gives_records_of_instances_that_ended_elsewhere_their_expiry():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        reclaimed = launch(account, WEST, request_id="run-gone")  # ends without a teardown (spot, idle shutdown)
        account.client("ec2", WEST).terminate_instances(InstanceIds=reclaimed)
        assert constants.INSTANCES_TTL_ATTRIBUTE not in record(account, reclaimed[0])

        report = account.run({"action": "status"}, name="status-expiry").output

        item = record(account, reclaimed[0])
        assert item["state"] == "terminated" and item[constants.INSTANCES_TTL_ATTRIBUTE] > 0
        assert report["counts"] == {"terminated": 1} and report["running"] == 0
