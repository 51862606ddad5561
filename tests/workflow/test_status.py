"""The status view on the real state machine: every managed instance, live state and cost,
with what the table and EC2 disagree on (unrecorded, gone)."""

from __future__ import annotations

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.workflow.planting import EAST, MARKET, PRICE, WEST, ZONE, launch, put_record


def test_status_reports_running_unrecorded_and_gone():
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        running = launch(account, WEST, count=2, request_id="run-s")
        other = launch(account, EAST, request_id="run-t")
        unrecorded = launch(account, EAST, request_id="run-s", record=False)
        unmanaged = launch(account, WEST, managed=False, record=False)  # not gpufill's: not listed at all
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
            unrecorded[0]: ("running", "unrecorded"),
            gone: ("gone", "gone"),
        }
        assert unmanaged[0] not in found
        assert (report["unrecorded"], report["gone"]) == (unrecorded, [gone])
        assert report["running"] == 4
        assert report["hourly_cost"] == round(3 * PRICE, 4)  # the unrecorded one's price is unknown
        assert report["regions"] == [EAST, WEST]
        entry = next(i for i in report["instances"] if i["instance_id"] == running[0])
        assert (entry["region"], entry["availability_zone"], entry["instance_type"], entry["market"]) == (
            WEST, ZONE[WEST], "g6.xlarge", "on-demand")
        assert entry["hourly_price"] == PRICE and entry["launched_at"] and entry["hours_running"] >= 0

        only = account.run({"action": "status", "request_id": "run-s"}, name="status-s").output
        assert sorted(i["instance_id"] for i in only["instances"]) == sorted(running + unrecorded + [gone])

        account.run({"action": "teardown", "request_id": "run-s"}, name="teardown-s", decision="approved")
        after = account.run({"action": "status", "request_id": "run-s"}, name="status-s-after").output
        states_after = {i["instance_id"]: i["state"] for i in after["instances"]}
        assert {states_after[i] for i in running + unrecorded} <= {"terminated", "shutting-down"}
        assert after["running"] == 0 and after["hourly_cost"] == 0
        assert after["gone"] == [gone]  # never gpufill's to end: still reported
