"""`maintain`: an instance EC2 reclaims is replaced by a refill run of the same request, in another
pool; nothing else EC2 reports starts one (a teardown, the idle watchdog, a request without
maintain, another deployment's instance). EC2's events reach StartRefill through the rules the
CDK app deploys, as the local engine delivers them."""

from __future__ import annotations

import json

import pytest

from gpufill import constants
from gpufill.adapters import instances_table, run_store
from gpufill.local import interruptions
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.support import zone

EAST, WEST = "us-east-1", "us-west-2"
# us-east-1a is the cheaper pool and ranks first; after a reclaim it must go last.
MARKET = {
    "regions": {
        EAST: {"zones": {"us-east-1a": zone(0.40, spot=4), "us-east-1b": zone(0.70, spot=4)}},
        WEST: {"zones": {"us-west-2a": zone(0.90, spot=4)}},
    },
}
REQUEST = {"instance_type": "g6.xlarge", "count": 1, "maintain": True, "regions": [EAST]}


def engine(interrupt: list[dict] | None = None, **kwargs) -> LocalEngine:
    scenario = {**MARKET, "interruptions": interrupt or []}
    return LocalEngine(MarketScenario.model_validate(scenario), regions_config={"regions": [EAST, WEST]}, **kwargs)


def refills(account: LocalEngine, env: str | None = None) -> list[str]:
    return [n for n in account.executions(env) if constants.REFILL_NAME_INFIX in n]


def answers(account: LocalEngine, instance_id: str) -> list[tuple[str, str]]:
    """How StartRefill answered each event about the instance: (what EC2 said, reason)."""
    found = []
    for delivery in account.event_deliveries:
        if delivery["event"]["detail"]["instance-id"] == instance_id:
            detail = delivery["event"]["detail"]
            found.append((detail.get("state") or "warning", delivery["answer"]["reason"]))
    return found


def record(instance_id: str) -> dict:
    return instances_table.records_by_ids([instance_id])[instance_id]


def tags(account: LocalEngine, region: str, instance_id: str) -> dict[str, str]:
    [reservation] = account.client("ec2", region).describe_instances(InstanceIds=[instance_id])["Reservations"]
    return {t["Key"]: t["Value"] for t in reservation["Instances"][0]["Tags"]}


def test_an_interrupted_instance_is_replaced_in_another_pool_and_its_record_says_so():
    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        first = account.run(REQUEST, name="serve")
        [old] = first.output["instances"]
        assert old["availability_zone"] == "us-east-1a"

        account.advance(600)  # the warning: the refill starts at once, two minutes before the end
        account.settle()
        [name] = refills(account)
        refill = account.follow(name)

        assert refill.status == "SUCCEEDED", refill.cause
        assert refill.output["status"] == "FULFILLED"
        [new] = refill.output["instances"]
        assert new["availability_zone"] == "us-east-1b"  # the reclaimed pool went last
        assert refill.output["request_id"] == "serve"
        assert refill.output["refill"] == {
            "run": f"serve-refill-{old['instance_id']}",
            "request_id": "serve",
            "replaces": [old["instance_id"]],
            "reclaimed_pool": "spot/us-east-1/us-east-1a/g6.xlarge",
        }
        before = record(old["instance_id"])
        assert before["state"] == "interrupted"
        assert before["interruption"] == "spot interruption warning"
        assert before["replaced_by"] == [new["instance_id"]]
        assert before["refill_run"] == name
        assert before["launched_at"] and before["client_token"]  # its history is kept
        after = record(new["instance_id"])
        assert after["request_id"] == "serve" and after["replaces"] == [old["instance_id"]] and after["maintain"] is True
        assert tags(account, EAST, new["instance_id"])[constants.TAG_REQUEST_ID] == "serve"

        account.advance(interruptions.SPOT_WARNING_SECONDS)  # EC2 ends the old one
        account.settle()
        status = account.run({"action": "status", "request_id": "serve"}, name="status-serve")
        assert status.output["running"] == 1
        states = {i["instance_id"]: i["state"] for i in status.output["instances"]}
        assert states == {old["instance_id"]: "terminated", new["instance_id"]: "running"}
        replaced = {i["instance_id"]: i.get("replaced_by") for i in status.output["instances"]}
        assert replaced == {old["instance_id"]: [new["instance_id"]], new["instance_id"]: None}
        from gpufill.cli.render_status import render_status

        assert f"Replaced (EC2 reclaimed them; maintain refilled): {old['instance_id']} -> {new['instance_id']}" in render_status(
            status.output
        )
        assert record(old["instance_id"])["state"] == "interrupted"  # the status run keeps the word


def test_the_warning_and_the_termination_start_one_refill():
    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        [old] = account.run(REQUEST, name="serve").output["instances"]
        account.advance(600)
        account.settle()
        [name] = refills(account)
        account.follow(name)
        account.advance(interruptions.SPOT_WARNING_SECONDS)  # EC2 ends the instance
        account.settle()

        assert refills(account) == [name]
        said = sorted(answers(account, old["instance_id"]))  # EventBridge promises no order
        assert said == [("shutting-down", "already-refilled"), ("terminated", "already-refilled"), ("warning", "reclaimed")]
        assert len(record(old["instance_id"])["replaced_by"]) == 1


def test_the_state_change_alone_starts_the_refill_and_a_repeat_is_the_same_run():
    """An on-demand instance gets no warning: EC2's state changes (Server.InternalError) start it."""
    on_demand = {**REQUEST, "market": "on-demand"}
    market = {"regions": {EAST: {"zones": {"us-east-1a": zone(0.4, on_demand=2), "us-east-1b": zone(0.7, on_demand=2)}}}}
    scenario = MarketScenario.model_validate({**market, "interruptions": [{"at_seconds": 60, "instance": 1}]})
    with LocalEngine(scenario, regions_config={"regions": [EAST]}) as account:
        [old] = account.run(on_demand, name="steady").output["instances"]
        account.advance(60)
        account.settle()

        [name] = refills(account)
        assert account.follow(name).output["status"] == "FULFILLED"
        said = dict(answers(account, old["instance_id"]))
        assert said["shutting-down"] == "reclaimed" or said["terminated"] == "reclaimed"
        # both may answer "reclaimed" (the same name and input: the same run), or the second sees it done
        assert set(said.values()) <= {"reclaimed", "already-refilled"}
        assert record(old["instance_id"])["interruption"] == "Server.InternalError"


def test_a_teardown_stops_maintenance():
    with engine([{"at_seconds": 900, "instance": 2}]) as account:
        account.run({**REQUEST, "count": 2}, name="pair")
        first, second = (account.market.launched_instance(n)[2].id for n in (1, 2))
        ended = account.run({"action": "teardown", "instance_ids": [first]}, name="shrink", decision="approved")
        assert ended.output["status"] == "TERMINATED"
        account.settle()

        account.advance(900)  # the other instance is reclaimed after the teardown
        account.settle()

        assert refills(account) == []
        assert answers(account, second)[0] == ("warning", "torn-down")
        # The teardown's own terminations are EC2 events too: they start nothing. (Had one arrived
        # before the teardown recorded it, EC2's Client.UserInitiatedShutdown says the same.)
        assert {reason for _, reason in answers(account, first)} <= {"teardown", "user-initiated"}
        assert len(answers(account, first)) == 2


def test_an_instance_that_shut_itself_down_is_not_replaced():
    with engine() as account:
        [old] = account.run(REQUEST, name="idle").output["instances"]
        interruptions.power_off(account, EAST, old["instance_id"])  # the idle watchdog
        account.settle()

        assert refills(account) == []
        assert sorted(answers(account, old["instance_id"])) == [("shutting-down", "instance-initiated"), ("terminated", "instance-initiated")]
        assert record(old["instance_id"]).get("state") != "interrupted"


def test_a_request_without_maintain_is_not_replaced():
    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        [old] = account.run({**REQUEST, "maintain": False}, name="once").output["instances"]
        account.advance(600 + interruptions.SPOT_WARNING_SECONDS)
        account.settle()

        assert refills(account) == []
        assert {reason for _, reason in answers(account, old["instance_id"])} == {"no-maintain"}


def test_another_deployments_instance_is_ignored():
    # "prod", the second deployment tests/engine and tests/faults deploy too: a cold run synthesizes it once.
    with engine([{"at_seconds": 600, "instance": 1}], env_names=("local", "prod")) as account:
        [theirs] = account.run(REQUEST, name="theirs", env="prod").output["instances"]
        account.advance(600)
        account.settle()

        [name] = refills(account, "prod")
        account.follow(name, env="prod")
        assert refills(account, "local") == []
        local = account.deployments["local"].function_arns["StartRefill"]
        mine = [d["answer"]["reason"] for d in account.event_deliveries
                if d["function"] == local and d["event"]["detail"]["instance-id"] == theirs["instance_id"]]
        assert mine and set(mine) == {"not-ours"}


def test_an_interruption_of_an_instance_never_launched_is_noted():
    with engine([{"at_seconds": 60, "instance": 3}]) as account:
        account.run(REQUEST, name="one")
        account.advance(60)
        account.settle()
        [reclaim] = account.reclaims
        assert reclaim.instance_id is None and reclaim.note == "no instance 3 was launched by then"
        assert refills(account) == []


@pytest.mark.parametrize("bad", [{"at_seconds": 60, "instance": 0}, {"at_seconds": -1, "instance": 1}, {"at_seconds": 5, "instance": "1"}])
def test_interruptions_in_a_scenario_are_checked(bad):
    with pytest.raises(ValueError, match="interruptions.0"):
        MarketScenario.model_validate({**MARKET, "interruptions": [bad]})


def test_simulate_advance_shows_the_interruption_and_the_refill_run(capsys):
    from gpufill.cli import main
    from tests.support import EXAMPLES

    code = main(["simulate", str(EXAMPLES / "requests/provision-maintain.json"),
                 "--market", str(EXAMPLES / "markets/interruption-at-10min.json"), "--advance", "3600"])
    out = capsys.readouterr().out
    assert code == 0
    assert "3600 s of modelled time pass" in out
    assert "t=600 s  EC2 reclaims instance 1 (i-" in out
    assert ", started by StartRefill" in out
    assert "Refill of request simulate-provision-maintain: replaces i-" in out
    assert "(reclaimed from spot/us-west-2/us-west-2a/g6.xlarge, tried last)" in out
    assert out.rstrip().splitlines()[-2] == "FULFILLED: 1 of 1 launched, $0.4500/h in all, 1 serving"


def test_simulate_advance_json_lists_every_run_and_the_interruptions(capsys):
    import json

    from gpufill.cli import main
    from tests.support import EXAMPLES

    code = main(["simulate", str(EXAMPLES / "requests/provision-maintain.json"),
                 "--market", str(EXAMPLES / "markets/interruption-at-10min.json"), "--advance", "700", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    first, refill = printed["runs"]
    assert printed["advanced_seconds"] == 700
    [reclaim] = printed["interruptions"]
    assert (reclaim["at_seconds"], reclaim["instance"], reclaim["market"]) == (600, 1, "spot")
    assert reclaim["instance_id"] == first["execution"]["output"]["instances"][0]["instance_id"]
    assert refill["execution"]["output"]["refill"]["replaces"] == [reclaim["instance_id"]]
    assert refill["execution"]["output"]["instances"][0]["availability_zone"] == "us-west-2b"


def test_simulate_advance_must_be_positive(capsys):
    from gpufill.cli import main
    from tests.support import EXAMPLES

    code = main(["simulate", str(EXAMPLES / "requests/provision-maintain.json"),
                 "--market", str(EXAMPLES / "markets/interruption-at-10min.json"), "--advance", "0"])
    assert code == 2
    assert "argument --advance: '0' must be more than 0 seconds" in capsys.readouterr().err


def test_an_instance_reclaimed_at_launch_is_refilled_when_the_request_maintains():
    """EC2 takes it back before it ever runs: the run reports it lost, and the refill replaces it."""
    market = {"regions": {EAST: {"zones": {"us-east-1a": {"g6.xlarge": {"spot_price": 0.4, "spot": 3, "reclaimed_at_launch": 1}},
                                            "us-east-1b": zone(0.7, spot=2)}}}}
    with LocalEngine(MarketScenario.model_validate(market), regions_config={"regions": [EAST]}) as account:
        first = account.run({**REQUEST, "count": 2}, name="bumpy")
        [lost] = first.output["lost"]
        account.settle()
        [name] = refills(account)
        assert name == f"bumpy-refill-{lost['instance_id']}"
        refill = account.follow(name)
        assert refill.output["status"] == "FULFILLED"
        assert record(lost["instance_id"])["replaced_by"] == [refill.output["instances"][0]["instance_id"]]


def test_a_replacement_is_guarded_by_the_requests_own_lifetime():
    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        first = account.run({**REQUEST, "ready_timeout": "PT0S", "max_lifetime": "PT8H"}, name="guarded")
        [old] = first.output["instances"]
        account.advance(600)
        account.settle()
        [name] = refills(account)
        refill = account.follow(name)
        assert refill.status == "SUCCEEDED", refill.cause
        [new] = refill.output["instances"]

        # The same moment as the request's, not eight hours from the refill: the spend guard's one
        # schedule ends the replacement with the rest.
        assert refill.output["expires_at"] == first.output["expires_at"]
        assert record(new["instance_id"])[constants.LIFETIME_ATTRIBUTE] == first.output["expires_at"]
        sched = account.client("scheduler")
        names = [s["Name"] for s in sched.list_schedules(GroupName=constants.schedule_group_name("local"))["Schedules"]]
        assert names == ["life-guarded"]


def _teardown_asked_as(account, when, by="serve-teardown"):
    """A teardown of the request asked at a chosen moment of its refill: the mark FindTeardownInstances
    writes first, written by the test where the two runs can interleave on AWS."""
    from unittest import mock

    from gpufill.adapters import executions, run_store

    if when == "before-launch":  # just after StartRefill decided to refill, before the run launches
        original = executions.start

        def start(name, body):
            run_store.end_maintenance(body["refill"]["request_id"], by=by)
            return original(name, body)

        return mock.patch.object(executions, "start", start)
    original = instances_table.record_launched  # after the refill recorded its instance

    def record_launched(instances, **kwargs):
        original(instances, **kwargs)
        if kwargs.get("replaces"):
            run_store.end_maintenance(kwargs["request_id"], by=by)

    return mock.patch.object(instances_table, "record_launched", record_launched)


@pytest.mark.parametrize("when", ["before-launch", "after-recording"])
def test_a_refill_racing_its_requests_teardown_leaves_no_instance_running(when):
    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        [old] = account.run(REQUEST, name="serve").output["instances"]
        with _teardown_asked_as(account, when):
            account.advance(600)
            account.settle()
            [name] = refills(account)
            refill = account.follow(name)

        assert refill.status == "SUCCEEDED", refill.cause
        assert (refill.output["status"], refill.output["request_id"], refill.output["launched"]) == ("REFILL_STOPPED", "serve", 0)
        assert refill.output["reason"].startswith(
            "teardown serve-teardown of request serve was asked while this refill ran: nothing more is launched"
        )
        second = account.market.launched_instance(2)
        if when == "before-launch":
            assert second is None  # nothing was launched at all
        else:
            new = second[2].id
            assert f"were terminated unused: {new}" in refill.output["reason"]
            assert record(new)["rolled_back"] is True and record(new)["state"] == "terminated"
            [reservation] = account.client("ec2", EAST).describe_instances(InstanceIds=[new])["Reservations"]
            assert reservation["Instances"][0]["State"]["Name"] in ("shutting-down", "terminated")


def test_a_refill_cannot_end_its_own_instances_without_the_grant():
    from tests.support.grants import remove_grant

    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        remove_grant(account, "LaunchBatch", "ec2:TerminateInstances", "instance/*")
        launch = next(f for f in account.functions.values() if f.task == "LaunchBatch")
        [old] = account.run(REQUEST, name="serve").output["instances"]
        with _teardown_asked_as(account, "after-recording"):
            account.advance(600)
            account.settle()
            [name] = refills(account)
            refill = account.follow(name)
        assert any(j.action == "ec2:TerminateInstances" and j.role_arn == launch.role.arn for j in account.iam.refusals)
        # The run ends on gpufill's own failure naming what it launched, never on a raw error name.
        assert refill.status == "FAILED" and refill.error == "PROVISIONING_FAILED"
        new = account.market.launched_instance(2)[2].id
        assert new in json.dumps(refill.cause) and record(new)["request_id"] == "serve"



def test_a_rejected_teardown_lets_the_request_refill_what_its_stopped_refill_terminated():
    """maintain → a reclaim starts a refill → the request's teardown is asked while the refill runs
    (its mark, written where FindTeardownInstances writes it first) → the refill terminates what it
    launched → the teardown is rejected: the request gets its maintenance back and the refill is
    started again, once, and the request holds its count."""
    from gpufill.policy import refill as refill_policy
    from tests.support.audit import audit, live_instances, recorded_instances

    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        [old] = account.run(REQUEST, name="serve").output["instances"]
        with _teardown_asked_as(account, "after-recording", by="serve-down"):
            account.advance(600)
            account.settle()
            [name] = refills(account)
            stopped = account.follow(name)
        short = live_instances("serve", regions=(EAST, WEST))

        teardown = account.run({"action": "teardown", "request_id": "serve"}, name="serve-down", decision="rejected")
        again = [n for n in refills(account) if n != name]
        refilled = account.follow(again[0]) if again else None
        seen = audit(account, refilled, request_id="serve", regions=(EAST, WEST))
        # A reclaimed instance's record keeps the word "interrupted" (its history, not a holding).
        recorded = {i for i in recorded_instances("serve") if record(i)["state"] != "interrupted"}
        replaced_by = record(old["instance_id"])["replaced_by"]
        restarted = record(old["instance_id"])

    # The request was short: its replacement terminated, the reclaimed instance in its last minutes.
    assert stopped.output["status"] == "REFILL_STOPPED" and short == {old["instance_id"]}
    assert teardown.output["status"] == "REJECTED"
    # Named after the refill it takes over from, never after the teardown rejected: a later rejection
    # cannot start a second refill for the same instance while this one runs.
    assert again == [refill_policy.execution_name("serve", old["instance_id"], after=name)]
    assert (restarted["refill_run"], restarted["refill_restarted_by"]) == (again[0], "serve-down")
    assert refilled.status == "SUCCEEDED" and refilled.output["status"] == "FULFILLED", refilled.cause
    [new] = refilled.output["instances"]
    assert seen.in_ec2 == recorded == seen.reported == {new["instance_id"]}  # its count again, each once
    assert new["instance_id"] in replaced_by and len(replaced_by) == 2  # the stopped one, then this one


@pytest.mark.parametrize("answer", ["rejected", "expired"])
def test_a_reclaim_while_the_requests_teardown_waits_is_refilled_when_that_teardown_ends_nothing(answer):
    """maintain → the request's teardown asks for approval → EC2 reclaims the instance meanwhile: no
    refill starts (the teardown may yet be approved) → the teardown is rejected, or nobody answers
    before the deadline (the expiry ends nothing, so it acts as a rejection for maintenance): the
    refill it held back starts, once, the request holds its count again, and the run's end says so."""
    import threading

    from gpufill.policy import refill as refill_policy
    from tests.support.audit import audit, recorded_instances

    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        [old] = account.run(REQUEST, name="serve").output["instances"]
        ended: dict = {}
        asking = threading.Thread(target=lambda: ended.setdefault("teardown", account.run(
            {"action": "teardown", "request_id": "serve"}, name="serve-down")))
        asking.start()
        account.wait_for_approval("serve-down")
        account.advance(600)  # the reclaim, while the approval waits
        account.settle()
        held = record(old["instance_id"])
        refills_while_waiting = refills(account)
        if answer == "rejected":
            account.answer_approval("serve-down", "rejected")
        else:
            account.expire_approval("serve-down")
        asking.join(60)
        [name] = refills(account)
        refilled = account.follow(name)
        seen = audit(account, refilled, request_id="serve", regions=(EAST, WEST))
        recorded = {i for i in recorded_instances("serve") if record(i)["state"] != "interrupted"}
        stopped_after = run_store.refills_stopped_by("serve")

    assert refills_while_waiting == [] and held["refill_held_by"] == "serve-down" and held["state"] == "interrupted"
    teardown = ended["teardown"]
    assert teardown.status == "SUCCEEDED" and teardown.output["status"] == answer.upper()
    assert teardown.output["approval"]["decision"] == answer
    assert name == refill_policy.execution_name("serve", old["instance_id"], after="serve-down")
    assert teardown.output["approval"]["note"] == f"request serve is maintained again; refill(s) started again: {name}"
    assert refilled.status == "SUCCEEDED" and refilled.output["status"] == "FULFILLED", refilled.cause
    [new] = refilled.output["instances"]
    assert seen.in_ec2 == recorded == seen.reported == {new["instance_id"]}  # its count again, each once
    assert stopped_after is None



def test_a_teardown_that_defers_to_one_answered_while_it_lists_restarts_the_held_refill():
    """maintain (2) → teardown serve-down asks → EC2 reclaims one instance (refill held) → a second
    teardown lists while serve-down still waits, so it defers to it and asks nobody; serve-down is
    rejected in between (its mark goes, the second's stands) → the second's ending removes the last
    mark and starts the held refill, once: the request holds its count again."""
    import threading

    from gpufill.policy import refill as refill_policy

    with engine([{"at_seconds": 600, "instance": 1}]) as account:
        [old, kept] = account.run({**REQUEST, "count": 2}, name="serve").output["instances"]
        ended: dict = {}
        asking = threading.Thread(target=lambda: ended.setdefault("first", account.run(
            {"action": "teardown", "request_id": "serve"}, name="serve-down")))
        asking.start()
        account.wait_for_approval("serve-down")
        account.advance(600)  # the reclaim, while the approval waits
        account.settle()

        def first_rejected():
            account.answer_approval("serve-down", "rejected")
            asking.join(60)

        # Between the second listing's read of the pending approvals and its giving back its mark.
        account.faults.meanwhile_at("dynamodb", "UpdateItem", task="FindTeardownInstances", skip=1, meanwhile=first_rejected)
        second = account.run({"action": "teardown", "request_id": "serve"}, name="serve-down-2")
        [name] = refills(account)
        refilled = account.follow(name)
        starters = {j.principal.rsplit("/", 1)[-1] for j in account.iam.seen if j.action == "states:StartExecution"}
        stops = run_store.maintenance_stops("serve")

    first = ended["first"]
    assert first.output["status"] == "REJECTED"
    assert first.output["approval"]["note"] == "request serve stays without refills while teardown(s) serve-down-2 stop it"
    assert second.output["status"] == "NOTHING_TO_TERMINATE" and not second.output["instances"]
    assert name == refill_policy.execution_name("serve", old["instance_id"], after="serve-down")
    assert f"refill(s) started again: {name}" in second.output["note"]
    assert refilled.status == "SUCCEEDED" and refilled.output["status"] == "FULFILLED", refilled.cause
    assert stops == frozenset() and kept["instance_id"] not in {i["instance_id"] for i in refilled.output["instances"]}
    assert any("FindTeardownInstances" in p for p in starters), starters  # under its own role
