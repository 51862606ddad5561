"""wait_for_capacity on the real state machine: a run keeps what it launched, waits (modelled
time, no real sleeping), re-scores and tries again until the market restocks or the deadline
passes; a long wait continues as new executions that stay one request."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from gpufill.adapters import run_store
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario

ROOT = Path(__file__).resolve().parents[2]
RESTOCK = ROOT / "examples/markets/restock-after-2h.json"
TABLE = "GpuProvisioningInstances-local"
TWO_HOURS = 7200


def restocked_after(seconds: int) -> MarketScenario:
    """The same market, restocked sooner: for tests about the chain, not about the two hours."""
    market = json.loads(RESTOCK.read_text())
    market["restock"][0]["at_seconds"] = seconds
    return MarketScenario.model_validate(market)


def request(deadline: str, max_delay: str | None = "PT15M", **fields) -> dict:
    """The example request with this deadline. These tests are about the wait's chain, not its default
    backoff (tests/unit/test_waiting_policy.py pins that): the 15-minute cap keeps a two-hour wait
    to a dozen tries, each of which costs the engine wall time."""
    body = json.loads((ROOT / "examples/requests/provision-wait-for-capacity.json").read_text())
    wait = {"deadline": deadline, **({"max_delay": max_delay} if max_delay else {})}
    return {**body, "wait_for_capacity": wait, **fields}


def records(request_id: str) -> dict[str, dict]:
    table = boto3.resource("dynamodb", region_name="us-east-1").Table(TABLE)
    return {i["instance_id"]: i for i in table.scan()["Items"] if "kind" not in i and i.get("request_id") == request_id}


def running_in_ec2() -> dict[str, dict]:
    ec2 = boto3.client("ec2", region_name="us-west-2")
    ec2.describe_instances()  # EC2 shows a new instance to DescribeInstances after a lag (the engine models one call)
    reservations = ec2.describe_instances()["Reservations"]
    return {
        i["InstanceId"]: {t["Key"]: t["Value"] for t in i["Tags"]}
        for r in reservations
        for i in r["Instances"]
        if i["State"]["Name"] in ("pending", "running")
    }


def template_versions_left() -> list[int]:
    """The launch template's versions in us-west-2 once a run ended: its own are deleted, the base stays."""
    ec2 = boto3.client("ec2", region_name="us-west-2")
    return [v["VersionNumber"] for v in ec2.describe_launch_template_versions(LaunchTemplateName="gpufill-local")["LaunchTemplateVersions"]]


def tries_of(execution) -> list[int]:
    """The try number of each PlanNextTry, in order, from the history."""
    found = []
    for event in execution.history:
        details = event.get("stateExitedEventDetails") or {}
        if details.get("name") == "PlanNextTry":
            found.append(json.loads(details["output"])["run"]["wait"]["tries"])
    return found


def scheduled_tries(execution) -> list[str]:
    return [
        json.loads(e["stateExitedEventDetails"]["output"])["run"]["wait"]["next_try_at"]
        for e in execution.history
        if (e.get("stateExitedEventDetails") or {}).get("name") == "PlanNextTry"
        and json.loads(e["stateExitedEventDetails"]["output"])["run"]["next"] != "expired"
    ]


def test_capacity_restocked_after_two_hours_is_found_by_a_six_hour_wait():
    with LocalEngine(MarketScenario.load(RESTOCK)) as account:
        execution = account.run(request("PT6H"), name="waits-6h")
        elapsed = account.elapsed
        recorded = records("waits-6h")
        live = running_in_ec2()
        versions_left = template_versions_left()

    assert execution.status == "SUCCEEDED", execution.cause
    result = execution.output
    assert (result["status"], result["launched"], result["requested"]) == ("FULFILLED", 4, 4)
    zones = sorted(i["availability_zone"] for i in result["instances"])
    # The first try took the one instance us-west-2a had; the restock in us-west-2b gave the rest.
    assert zones == ["us-west-2a", "us-west-2b", "us-west-2b", "us-west-2b"]
    assert TWO_HOURS <= elapsed < TWO_HOURS + 900 + 60  # found at the first try after the restock
    tries = tries_of(execution)
    assert tries == list(range(1, len(tries) + 1)) and len(tries) >= 8
    # Every instance of every try is recorded and tagged with the request id.
    ids = {i["instance_id"] for i in result["instances"]}
    assert set(recorded) == ids
    assert all(live[i]["gpufill:request-id"] == "waits-6h" for i in ids)
    # One launch template version per region for every try's fleets, deleted when the run ended
    # (in a new deployment each region's first version call is refused: the template is made, then it).
    calls = execution.metrics["ec2_calls"]
    assert calls["CreateFleet"] > 3 * calls["CreateLaunchTemplate"] == 9
    assert (calls["CreateLaunchTemplateVersion"], calls["DeleteLaunchTemplateVersions"], versions_left) == (6, 3, [1]), calls


def test_a_one_hour_wait_expires_keeping_what_it_launched_and_naming_it():
    with LocalEngine(MarketScenario.load(RESTOCK)) as account:
        execution = account.run(request("PT1H"), name="waits-1h")
        elapsed = account.elapsed
        recorded = records("waits-1h")
        live = running_in_ec2()
        wait_item = run_store.load_wait("waits-1h")
        versions_left = template_versions_left()

    assert (execution.status, execution.error) == ("FAILED", "CAPACITY_WAIT_EXPIRED")
    cause = execution.cause
    assert (cause["requested"], cause["launched"]) == (4, 1)
    [kept] = cause["instances"]
    assert kept["pool"] == "spot/us-west-2/us-west-2a/g6.xlarge"
    # Kept: still running, recorded, tagged with the request; the cause says how to end it.
    assert kept["instance_id"] in live and live[kept["instance_id"]]["gpufill:request-id"] == "waits-1h"
    assert set(recorded) == {kept["instance_id"]}
    assert cause["teardown"] == {"action": "teardown", "request_id": "waits-1h"}
    assert "gpufill teardown waits-1h" in cause["hint"]
    assert {p["pool"] for p in cause["pools_tried"]} == {
        "spot/us-west-2/us-west-2a/g6.xlarge", "spot/us-west-2/us-west-2b/g6.xlarge",
        "spot/us-west-2/us-west-2c/g6.xlarge", "spot/us-east-1/us-east-1a/g6.xlarge",
        "spot/us-east-1/us-east-1b/g6.xlarge", "spot/ap-northeast-1/ap-northeast-1a/g6.xlarge",
    }
    assert cause["tries"] == tries_of(execution)[-1] and cause["tries"] >= 5
    # The waits add up to the hour (the rest of it passed in the tries themselves), and no try
    # was ever scheduled past the deadline.
    assert 3600 - 120 < elapsed <= 3600
    assert all(at <= cause["deadline"] for at in scheduled_tries(execution))
    assert (wait_item["phase"], wait_item["tries"]) == ("expired", cause["tries"])
    assert versions_left == [1]  # the expiry deleted the run's versions


def test_without_wait_for_capacity_the_same_market_ends_partial_at_once():
    with LocalEngine(MarketScenario.load(RESTOCK)) as account:
        body = request("PT1H")
        del body["wait_for_capacity"]
        execution = account.run(body, name="no-wait")
        elapsed = account.elapsed
    assert execution.status == "SUCCEEDED"
    assert (execution.output["status"], execution.output["launched"]) == ("PARTIAL", 1)
    assert "PlanNextTry" not in execution.entered() and elapsed < 600


def test_a_chain_that_continues_as_new_keeps_one_request(monkeypatch):
    monkeypatch.setenv("WAIT_TRIES_PER_EXECUTION", "2")
    with LocalEngine(restocked_after(1200)) as account:  # found at try 6: 60 + 120 + 240 + 480 + 900 s of waits
        execution = account.run(request("PT6H"), name="chained")
        recorded = records("chained")
        live = running_in_ec2()
        wait_item = run_store.load_wait("chained")
        status = account.run({"action": "status", "request_id": "chained"}, name="status-chained").output

    names = [e.name for e in execution.continued_from] + [execution.name]
    assert names[:3] == ["chained", "chained-c1", "chained-c2"] and len(names) >= 3
    for before, after in zip(execution.continued_from, names[1:]):
        assert before.status == "SUCCEEDED"
        assert (before.output["status"], before.output["continued_as"], before.output["request_id"]) == (
            "CONTINUED", after, "chained")
    assert execution.output["status"] == "FULFILLED" and execution.output["request_id"] == "chained"
    # The first instance (launched by the first execution) is carried to the end, and every
    # instance of every execution is recorded and tagged with the original request id.
    ids = {i["instance_id"] for i in execution.output["instances"]}
    assert len(ids) == 4 and set(recorded) == ids
    assert {live[i]["gpufill:request-id"] for i in ids} == {"chained"}
    # One status view: every instance of the chain under the one request id.
    assert {i["instance_id"] for i in status["instances"]} == ids
    # Tries are counted across the chain: two per execution, then the next one carries on.
    assert [tries_of(e) for e in execution.continued_from] == [[1, 2], [3, 4]]
    assert len(names) == 3 and tries_of(execution) == [5]
    assert wait_item["execution"] == names[-1]


@pytest.mark.parametrize(
    ("deadline", "problem"),
    [
        ("PT0S", "at least one second"),
        ("P8D", "at most 7 days"),
        ("6 hours", "ISO 8601 duration"),
        (21600, "ISO 8601 duration"),
    ],
)
def test_bad_deadlines_are_refused_naming_the_field(simulate, deadline, problem):
    execution = simulate(request(deadline), json.loads(RESTOCK.read_text()))
    assert (execution.status, execution.error) == ("FAILED", "InvalidRequest")
    [field] = execution.cause["fields"]
    assert field["field"] == "wait_for_capacity.deadline" and problem in field["problem"]
    assert "RunInstances" not in execution.metrics["ec2_calls"]


def test_wait_for_capacity_with_a_plan_is_refused(simulate):
    execution = simulate(request("PT1H", action="plan"), json.loads(RESTOCK.read_text()))
    assert execution.error == "InvalidRequest"
    assert [f["field"] for f in execution.cause["fields"]] == ["wait_for_capacity"]


def test_status_shows_a_waiting_request_its_deadline_next_try_and_tries():
    seen: dict = {}
    with LocalEngine(MarketScenario.load(RESTOCK)) as account:
        # Half an hour in, the request is between tries: ask for its status as a user would.
        account.at(1800, lambda: seen.update(account.run({"action": "status", "request_id": "watched"}, name="status-mid").output))
        execution = account.run(request("PT1H"), name="watched")
        after = account.run({"action": "status", "request_id": "watched"}, name="status-after").output

    assert execution.error == "CAPACITY_WAIT_EXPIRED"
    deadline = execution.cause["deadline"]
    line = seen["waiting"]
    assert line.startswith(f"waiting for capacity until {deadline}; next try at 20")
    tries = int(line.rsplit("; ", 1)[1].split()[0])
    assert 3 <= tries < execution.cause["tries"]
    assert [i["instance_id"] for i in seen["instances"]] == [i["instance_id"] for i in execution.cause["instances"]]
    assert after["waiting"] == (
        f"the wait for capacity expired at {deadline} after {execution.cause['tries']} tries (CAPACITY_WAIT_EXPIRED)"
    )


def test_a_teardown_ends_the_wait_at_its_next_try_without_launching_more():
    asked: dict = {}

    def tear_down():
        done = account.run({"action": "teardown", "request_id": "torn"}, name="teardown-torn", decision="approved")
        asked.update(done.output)

    with LocalEngine(MarketScenario.load(RESTOCK)) as account:
        account.at(1800, tear_down)
        execution = account.run(request("PT6H"), name="torn")
        elapsed = account.elapsed
        status = account.run({"action": "status", "request_id": "torn"}, name="status-torn").output

    assert asked["status"] == "TERMINATED" and asked["instance_count"] == 1
    assert "its wait ends at its next try" in asked["note"]
    assert execution.status == "SUCCEEDED", execution.cause
    assert (execution.output["status"], execution.output["launched"]) == ("WAIT_ENDED", 1)
    assert execution.entered()[-3:] == ["StartNextTry", "WhereToTryAgain", "WaitEndedByTeardown"]
    # Ended at the first try after the teardown, long before the restock at two hours.
    assert elapsed < 1800 + 900
    assert status["waiting"].startswith("the wait for capacity was ended by teardown teardown-torn after ")
    assert [i["state"] for i in status["instances"]] == ["terminated"]


# spot-then-on-demand passes every state the spot path does and the On-Demand ones; spot alone is
# left to `make test-all`.
@pytest.mark.parametrize("market", [pytest.param("spot", marks=pytest.mark.slow), "spot-then-on-demand"])
def test_the_event_bound_a_waiting_execution_carries_is_never_below_its_real_history(monkeypatch, market):
    """The continue-as-new threshold counts on policy/waiting.py's bound; check it against the
    history Step Functions (here the local engine) really keeps, try by try."""
    monkeypatch.setenv("WAIT_TRIES_PER_EXECUTION", "2")
    with LocalEngine(restocked_after(1200)) as account:
        execution = account.run(request("PT6H", market=market), name="counted")
    assert execution.output["status"] == "FULFILLED" and len(execution.continued_from) >= 2
    for run in [*execution.continued_from, execution]:
        for n, event in enumerate(run.history, 1):
            details = event.get("stateExitedEventDetails") or {}
            if details.get("name") == "PlanNextTry":
                bound = json.loads(details["output"])["run"]["wait"]["events_here"]
                assert n <= bound, (run.name, n, bound)


def test_a_hand_written_continuation_is_checked_like_a_request(simulate):
    carried = {
        "request": {"request_id": "forged", "action": "provision", "instance_types": ["g6.xlarge"], "count": 4,
                    "batch_max": 4, "launch_mode": "partial", "market": "spot", "on_demand_strategy": "cost",
                    "origin_region": "us-east-1", "regions": ["us-west-2"], "tags": {},
                    "wait_for_capacity_seconds": 3600},
        "run": {"batch": 4, "remaining": 4, "wait": {"deadline": "2030-01-01T00:00:00Z", "deadline_epoch": 1893456000,
                                                     "generation": 1}},
    }
    market = json.loads(RESTOCK.read_text())
    # Named as no predecessor would name it.
    misnamed = simulate({"gpufill_continuation": carried}, market, name="forged-c7")
    assert misnamed.error == "InvalidRequest"
    assert misnamed.cause["fields"][0]["field"] == "gpufill_continuation"
    assert "should be 'forged-c1'" in misnamed.cause["fields"][0]["problem"]
    # A request field no request may hold.
    carried["request"]["count"] = 251
    oversized = simulate({"gpufill_continuation": carried}, market, name="forged-c1")
    assert oversized.error == "InvalidRequest" and [f["field"] for f in oversized.cause["fields"]] == ["count"]
    assert "RunInstances" not in oversized.metrics["ec2_calls"]
    assert simulate({"gpufill_continuation": "nonsense"}, market, name="forged-c1").error == "InvalidRequest"


def test_a_run_may_not_take_a_name_kept_for_continued_executions(simulate):
    execution = simulate({"instance_type": "g6.xlarge"}, json.loads(RESTOCK.read_text()), name="train-c1")
    assert execution.error == "InvalidRequest"
    [field] = execution.cause["fields"]
    assert field["field"] == "(execution name)" and "'train-c1' ends like a continued execution's name" in field["problem"]


def test_a_lost_reply_to_the_hand_over_still_continues_once(monkeypatch):
    monkeypatch.setenv("WAIT_TRIES_PER_EXECUTION", "2")
    with LocalEngine(restocked_after(1200)) as account:
        # Once the run waits, the next StartExecution starts the successor but its reply is lost;
        # the step is tried again with the same name and input, which AWS answers as a success.
        account.at(30, lambda: account.faults.aws("stepfunctions", "StartExecution", error="InternalError", after=True))
        execution = account.run(request("PT6H"), name="lossy")
        injected = dict(account.faults.injected)
        names = [e["name"] for e in account.client("stepfunctions").list_executions(
            stateMachineArn=account.deployments[account.env_names[0]].state_machine_arn)["executions"]]
    assert injected == {"aws:sfn:StartExecution": 1}
    assert sorted(n for n in names if n.startswith("lossy")) == ["lossy", "lossy-c1", "lossy-c2"]
    assert execution.output["status"] == "FULFILLED" and execution.continued_from[0].output["continued_as"] == "lossy-c1"


def test_a_successor_that_already_exists_is_the_one_this_run_started(monkeypatch):
    """A retried hand-over whose successor has already ended is answered ExecutionAlreadyExists:
    no other run may hold that name, so the hand-over is done."""
    monkeypatch.setenv("WAIT_TRIES_PER_EXECUTION", "2")
    with LocalEngine(restocked_after(1200)) as account:
        account.at(30, lambda: account.faults.aws(
            "stepfunctions", "StartExecution", error="ExecutionAlreadyExists", after=True))
        execution = account.run(request("PT6H"), name="exists")
        assert dict(account.faults.injected) == {"aws:sfn:StartExecution": 1}
    first = execution.continued_from[0]
    assert (first.status, first.output["status"], first.output["continued_as"]) == ("SUCCEEDED", "CONTINUED", "exists-c1")
    assert execution.output["status"] == "FULFILLED" and len(execution.output["instances"]) == 4


def test_all_or_nothing_waits_holding_nothing_and_fills_the_whole_count_at_the_restock(monkeypatch):
    """Oregon's us-west-2a has one of the four at first: each try that cannot complete hands back what it
    launched, and while the run waits EC2 runs none of its instances; the restock fills all four at once."""
    from gpufill.handlers import wait_for_capacity

    held_at_waits: list[dict] = []
    plan = wait_for_capacity.plan

    def audited(step):  # PlanNextTry: the wait begins here, after RollBackGang; EC2 is asked as a person would
        with account.elsewhere():
            held_at_waits.append({
                region: held for region in ("us-west-2", "us-east-1", "ap-northeast-1")
                if (held := running_in(region, step.request.request_id))
            })
        return plan(step)

    monkeypatch.setattr(wait_for_capacity, "plan", audited)
    with LocalEngine(restocked_after(400)) as account:
        execution = account.run(request("PT6H", max_delay=None, all_or_nothing=True), name="whole-4")
        elapsed = account.elapsed
        recorded = records("whole-4")
        live = running_in("us-west-2", "whole-4")

    assert execution.status == "SUCCEEDED", execution.cause
    result = execution.output
    assert (result["status"], result["launched"], result["requested"]) == ("FULFILLED", 4, 4)
    # Filled at the first try after the restock (2 minutes apart at most); then the boot and the model servers.
    assert 400 <= elapsed < 400 + 120 + 300
    assert len(held_at_waits) >= 3 and held_at_waits == [{}] * len(held_at_waits)
    kept = {i["instance_id"] for i in result["instances"]}
    assert set(live) == kept
    # Each try before the restock took us-west-2a's one instance and handed it back (EC2 frees a terminated
    # instance's capacity, so the next try took it again), recorded with its reason; nothing else was launched.
    handed_back = sorted((r for r in recorded.values() if r.get("rolled_back")), key=lambda r: r["launched_at"])
    assert len(handed_back) == len(held_at_waits)
    assert {(r["state"], r["availability_zone"]) for r in handed_back} == {("terminated", "us-west-2a")}
    assert [r["rolled_back_reason"] for r in handed_back] == [
        f"all_or_nothing: try {n} launched 1 of 4 and could not complete; handed back before waiting for capacity"
        for n in range(1, len(handed_back) + 1)]
    assert set(recorded) == kept | {r["instance_id"] for r in handed_back}


def running_in(region: str, request_id: str) -> dict[str, str]:
    """The request's instances EC2 runs in a region (pending or running), by id: their AZs."""
    ec2 = boto3.client("ec2", region_name=region)
    ec2.describe_instances()  # EC2 shows a new instance to DescribeInstances after a lag (the engine models one call)
    return {
        i["InstanceId"]: i["Placement"]["AvailabilityZone"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] in ("pending", "running")
        and {"Key": "gpufill:request-id", "Value": request_id} in i.get("Tags", [])
    }
