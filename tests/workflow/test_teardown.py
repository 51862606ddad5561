"""Teardown behind a human approval, and the status view, run on the real state machine (local engine).

Instances are put into the simulated account the way a provisioning run leaves them
(tagged at launch, recorded in the table), so each test can also plant what must never
be touched: instances of another request, instances without the managed tag, forged
records, records whose instance is gone.
"""

from __future__ import annotations

import json

import pytest

from gpufill import constants
from gpufill.approve import AlreadyDecided, ApprovalExpired, NoPendingApproval
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.workflow.planting import (
    DEPLOYMENT, EAST, MARKET, PRICE, WEST, in_background, launch, put_record, record, states, tags, terminated_ids,
)


@pytest.fixture(scope="module")
def engine():
    """One simulated account for the module: each test plants under its own request ids."""
    with LocalEngine(MarketScenario.model_validate(MARKET)) as account:
        yield account


# --- approve, reject, expire ------------------------------------------------------------------


def test_approved_teardown_terminates_exactly_the_requests_instances(engine):
    mine = launch(engine, WEST, count=2, request_id="run-a") + launch(engine, EAST, request_id="run-a")
    other = launch(engine, WEST, request_id="run-b")
    unmanaged = launch(engine, WEST, managed=False, record=False)

    execution = engine.run(
        {"action": "teardown", "request_id": "run-a", "requested_by": "ana@example.com"},
        name="teardown-a",
        decision="approved",
    )

    assert execution.status == "SUCCEEDED", execution.cause
    result = execution.output
    assert result["status"] == "TERMINATED"
    assert terminated_ids(execution) == sorted(mine)
    assert sorted(r["region"] for r in result["terminated"]) == [EAST, WEST]  # one Map branch per region
    assert set(states(engine, WEST, mine[:2]).values()) == {"terminated"}
    assert set(states(engine, EAST, mine[2:]).values()) == {"terminated"}
    assert states(engine, WEST, other + unmanaged) == {other[0]: "running", unmanaged[0]: "running"}
    for instance_id in mine:
        item = record(engine, instance_id)
        assert item["state"] == "terminated" and item["terminated_at"] and item["terminated_by"] == "teardown-a"
        assert item[constants.INSTANCES_TTL_ATTRIBUTE] > 0
    assert record(engine, other[0])["state"] == "running"
    assert result["hourly_cost"] == round(3 * PRICE, 4)
    entered = execution.entered()
    story = ["FindTeardownInstances", "AwaitTeardownApproval", "RecordApprovalDecision", "TerminateInstances", "Terminated",
             "TeardownResult"]
    assert [name for name in entered if name in story] == story
    assert entered.count("TerminateRegionInstances") == 2


def test_the_approval_is_recorded_and_asked_for_with_the_exact_commands(engine):
    launch(engine, WEST, request_id="run-rec")
    execution = engine.run(
        {"action": "teardown", "request_id": "run-rec", "requested_by": "ana@example.com", "approval_timeout_seconds": 3600},
        name="teardown-rec",
        decision="approved",
    )
    item = execution.approval
    assert item["instance_id"] == "approval#teardown-rec"
    assert item["execution_arn"] == execution.arn and item["task_token"]
    assert item["requested_by"] == "ana@example.com" and len(item["instance_ids"]) == 1
    assert (item["decision"], item["status"]) == ("approved", "APPROVED")
    assert item["approver"].endswith("(local)") and item["decided_reason"]
    assert item["expires_at"] > 0 and item["deadline"] > item["requested_at"]
    [note] = execution.notifications
    assert "teardown-rec" in note["subject"]
    assert f"gpufill approve {execution.arn}" in note["message"]
    assert f"gpufill reject {execution.arn}" in note["message"]
    assert "aws stepfunctions send-task-success --region us-east-1 --task-token" in note["message"]
    assert item["task_token"] in note["message"]
    assert execution.output["approval"]["decision"] == "approved"


def test_rejected_teardown_terminates_nothing(engine):
    mine = launch(engine, WEST, count=2, request_id="run-rej")
    execution = engine.run({"action": "teardown", "request_id": "run-rej"}, name="teardown-rej", decision="rejected")
    assert execution.output["status"] == "REJECTED"
    assert execution.output["terminated"] == []
    assert set(states(engine, WEST, mine).values()) == {"running"}
    assert {record(engine, i)["state"] for i in mine} == {"running"}
    assert execution.approval["decision"] == "rejected"
    assert "Rejected" in execution.entered() and "TerminateInstances" not in execution.entered()


@pytest.mark.parametrize("answer", [{"decision": "Approved"}, {"decision": "yes"}, {"approved": True}, "approved"])
def test_any_answer_other_than_exactly_approved_is_a_rejection(engine, answer):
    mine = launch(engine, WEST, request_id="run-raw")
    name = f"teardown-raw-{len(engine.approval_messages())}"
    with in_background(engine, {"action": "teardown", "request_id": "run-raw"}, name) as finished:
        token = engine.wait_for_approval(name)["task_token"]
        engine.client("stepfunctions").send_task_success(taskToken=token, output=json.dumps(answer))
        execution = finished()
    assert execution.output["status"] == "REJECTED"
    assert states(engine, WEST, mine) == {mine[0]: "running"}
    # leave the account as it was for the next parametrized case
    engine.client("ec2", WEST).terminate_instances(InstanceIds=mine)


def test_the_record_keeps_the_raw_answer_that_was_rejected(engine):
    mine = launch(engine, WEST, request_id="run-space")
    with in_background(engine, {"action": "teardown", "request_id": "run-space"}, "teardown-space") as finished:
        token = engine.wait_for_approval("teardown-space")["task_token"]
        engine.client("stepfunctions").send_task_success(taskToken=token, output=json.dumps({"decision": "approved "}))
        execution = finished()
    assert execution.output["status"] == "REJECTED"
    item = engine.approval("teardown-space")
    assert (item["decision"], item["answer_raw"]) == ("rejected", "approved ")
    assert execution.output["approval"]["answer_raw"] == "approved "
    assert states(engine, WEST, mine) == {mine[0]: "running"}


def test_an_80_character_execution_name_still_publishes_its_approval(engine):
    launch(engine, EAST, request_id="run-long-name")
    name = "teardown-" + "x" * 71
    execution = engine.run({"action": "teardown", "request_id": "run-long-name"}, name=name, decision="rejected")
    assert execution.status == "SUCCEEDED", execution.cause
    [note] = execution.notifications
    assert len(note["subject"]) < 100 and note["subject"].endswith("...)")


def test_raw_send_task_success_approves_and_records_the_approver(engine):
    mine = launch(engine, EAST, request_id="run-cli-raw")
    with in_background(engine, {"action": "teardown", "request_id": "run-cli-raw"}, "teardown-cli-raw") as finished:
        token = engine.wait_for_approval("teardown-cli-raw")["task_token"]
        engine.client("stepfunctions").send_task_success(
            taskToken=token, output=json.dumps({"decision": "approved", "approver": "ops@example.com", "reason": "done"})
        )
        execution = finished()
    assert terminated_ids(execution) == mine
    item = engine.approval("teardown-cli-raw")
    assert (item["decision"], item["approver"], item["decided_reason"]) == ("approved", "ops@example.com", "done")


def test_no_answer_before_the_timeout_expires_and_terminates_nothing(engine):
    mine = launch(engine, WEST, request_id="run-exp")
    execution = engine.run({"action": "teardown", "request_id": "run-exp"}, name="teardown-exp", decision="timeout")
    assert execution.status == "SUCCEEDED"
    assert execution.output["status"] == "EXPIRED"
    assert execution.output["terminated"] == []
    assert states(engine, WEST, mine) == {mine[0]: "running"}
    assert execution.approval["decision"] == "expired"
    assert any(e["type"] == "TaskTimedOut" for e in execution.history)
    assert execution.entered()[-3:] == ["RecordApprovalExpiry", "ApprovalExpired", "TeardownResult"]
    # answering afterwards is refused and changes nothing
    with pytest.raises(ApprovalExpired, match="expired"):
        engine.answer_approval("teardown-exp", "approved")
    assert engine.approval("teardown-exp")["decision"] == "expired"
    assert states(engine, WEST, mine) == {mine[0]: "running"}


def test_approved_rejected_and_expired_teardowns_answer_in_one_shape(engine):
    """Whatever the answer, a caller reads the same fields: only the status and what was terminated differ."""
    outputs = {}
    for decision in ("approved", "rejected", "timeout"):
        launch(engine, WEST, request_id=f"run-shape-{decision}")
        execution = engine.run({"action": "teardown", "request_id": f"run-shape-{decision}"},
                               name=f"teardown-shape-{decision}", decision=decision)
        assert execution.entered()[-1] == "TeardownResult"
        outputs[execution.output["status"]] = execution.output
    assert set(outputs) == {"TERMINATED", "REJECTED", "EXPIRED"}
    shapes = {status: sorted(output) for status, output in outputs.items()}
    assert shapes["TERMINATED"] == shapes["REJECTED"] == shapes["EXPIRED"]
    assert [len(o["terminated"]) for o in outputs.values()] == [1, 0, 0]
    assert {o["approval"]["decision"] for o in outputs.values()} == {"approved", "rejected", "expired"}


# --- what must never be touched ---------------------------------------------------------------


def test_given_ids_without_the_managed_tag_unknown_or_with_a_mismatched_record_are_refused(engine):
    mine = launch(engine, WEST, request_id="run-ids")
    other = launch(engine, WEST, request_id="run-other")
    forged = launch(engine, WEST, request_id="run-other", record_as="run-ids")  # record says run-ids, tag says run-other
    unmanaged = launch(engine, WEST, request_id="run-ids", managed=False)  # recorded, but not gpufill's tag
    unrecorded = launch(engine, EAST, request_id="run-ids", record=False)  # gpufill holds no record of it
    gone = "i-0123456789abcdef0"
    put_record(engine, gone, WEST, "run-ids")
    given = mine + other + forged + unmanaged + unrecorded + [gone]

    execution = engine.run({"action": "teardown", "instance_ids": given}, name="teardown-ids", decision="approved")

    assert execution.output["status"] == "TERMINATED"
    # `other` is recorded and tagged as run-other: named by id, it is gpufill's and its record agrees
    assert terminated_ids(execution) == sorted(mine + other)
    refused = {r["instance_id"]: r["reason"] for r in execution.output["refused"]}
    assert refused == {
        forged[0]: "other-request",
        unmanaged[0]: "not-managed",
        unrecorded[0]: "unknown",
        gone: "gone",
    }
    assert states(engine, WEST, forged + unmanaged) == {forged[0]: "running", unmanaged[0]: "running"}
    assert states(engine, EAST, unrecorded) == {unrecorded[0]: "running"}


def test_a_request_teardown_refuses_records_that_point_at_other_instances(engine):
    mine = launch(engine, WEST, request_id="run-req")
    theirs = launch(engine, WEST, request_id="run-theirs", record_as="run-req")  # a record claims it for run-req
    unmanaged = launch(engine, EAST, managed=False, record_as="run-req")
    execution = engine.run({"action": "teardown", "request_id": "run-req"}, name="teardown-req", decision="approved")
    assert terminated_ids(execution) == mine
    assert {r["instance_id"]: r["reason"] for r in execution.output["refused"]} == {
        theirs[0]: "other-request",
        unmanaged[0]: "not-managed",
    }
    assert states(engine, WEST, theirs) == {theirs[0]: "running"}
    assert states(engine, EAST, unmanaged) == {unmanaged[0]: "running"}


def test_a_request_teardown_includes_its_tagged_but_unrecorded_instances(engine):
    recorded = launch(engine, WEST, request_id="run-lost")
    lost = launch(engine, EAST, request_id="run-lost", record=False)  # its record write never happened
    execution = engine.run({"action": "teardown", "request_id": "run-lost"}, name="teardown-lost", decision="approved")
    assert terminated_ids(execution) == sorted(recorded + lost)
    assert {i["instance_id"]: i["recorded"] for i in execution.output["instances"]} == {recorded[0]: True, lost[0]: False}
    assert record(engine, lost[0])["state"] == "terminated"  # now on record, as terminated


def test_instances_retagged_while_waiting_for_approval_are_left_alone(engine):
    mine = launch(engine, WEST, count=2, request_id="run-retag")
    with in_background(engine, {"action": "teardown", "request_id": "run-retag"}, "teardown-retag") as finished:
        engine.wait_for_approval("teardown-retag")
        engine.client("ec2", WEST).delete_tags(Resources=[mine[1]], Tags=[{"Key": constants.TAG_MANAGED}])
        engine.answer_approval("teardown-retag", "approved")
        execution = finished()
    assert terminated_ids(execution) == [mine[0]]
    [region] = execution.output["terminated"]
    assert [(s["instance_id"], s["reason"]) for s in region["skipped"]] == [(mine[1], "not-managed")]
    assert states(engine, WEST, [mine[1]]) == {mine[1]: "running"}


def test_another_deployments_instances_are_never_seen_or_ended_even_with_the_same_request_name(engine):
    mine = launch(engine, WEST, request_id="run-shared")
    theirs = launch(engine, WEST, request_id="run-shared", deployment="dev", record=False)  # dev's run of the same name
    untagged = launch(engine, EAST, request_id="run-shared", deployment=None, record=False)
    claimed = launch(engine, EAST, request_id="run-shared", deployment="dev")  # a record in our table points at it

    by_request = engine.run({"action": "teardown", "request_id": "run-shared"}, name="teardown-shared", decision="approved")
    assert terminated_ids(by_request) == mine
    assert {r["instance_id"]: r["reason"] for r in by_request.output["refused"]} == {claimed[0]: "other-deployment"}
    by_ids = engine.run({"action": "teardown", "instance_ids": claimed}, name="teardown-shared-ids", decision="approved")
    assert by_ids.output["status"] == "NOTHING_TO_TERMINATE"
    assert [r["reason"] for r in by_ids.output["refused"]] == ["other-deployment"]
    assert states(engine, WEST, theirs) == {theirs[0]: "running"}
    assert states(engine, EAST, untagged + claimed) == {untagged[0]: "running", claimed[0]: "running"}


# --- answering twice, answering nothing ---------------------------------------------------------


def test_a_second_answer_is_refused_clearly_and_changes_nothing(engine):
    mine = launch(engine, WEST, request_id="run-twice")
    with in_background(engine, {"action": "teardown", "request_id": "run-twice"}, "teardown-twice") as finished:
        engine.wait_for_approval("teardown-twice")
        engine.answer_approval("teardown-twice", "approved", approver="ana")
        with pytest.raises(AlreadyDecided, match="already"):
            engine.answer_approval("teardown-twice", "rejected", approver="bob")
        execution = finished()
    assert terminated_ids(execution) == mine
    with pytest.raises(AlreadyDecided, match="already approved by ana"):
        engine.answer_approval("teardown-twice", "approved", approver="bob")
    item = engine.approval("teardown-twice")
    assert (item["decision"], item["approver"], item["answered_by"]) == ("approved", "ana", "ana")


def test_answering_a_teardown_that_asked_nothing_is_refused(engine):
    with pytest.raises(NoPendingApproval, match="no approval is on record"):
        engine.answer_approval("no-such-teardown", "approved")


def test_a_teardown_of_nothing_asks_no_approval(engine):
    execution = engine.run({"action": "teardown", "request_id": "never-ran"}, name="teardown-nothing")
    assert execution.status == "SUCCEEDED"
    assert execution.output["status"] == "NOTHING_TO_TERMINATE"
    assert execution.output["instances"] == []
    assert "AwaitTeardownApproval" not in execution.entered()
    assert execution.notifications == [] and execution.approval is None


def test_a_teardown_of_only_refused_ids_asks_no_approval(engine):
    unmanaged = launch(engine, WEST, managed=False, record=False)
    execution = engine.run({"action": "teardown", "instance_ids": unmanaged}, name="teardown-refused")
    assert execution.output["status"] == "NOTHING_TO_TERMINATE"
    assert [r["reason"] for r in execution.output["refused"]] == ["unknown"]
    assert states(engine, WEST, unmanaged) == {unmanaged[0]: "running"}


def test_a_malformed_teardown_names_the_field_and_touches_nothing(engine):
    execution = engine.run(
        {"action": "teardown", "request_id": "run-x", "instance_ids": ["i-0123456789abcdef0"]}, name="teardown-bad"
    )
    assert (execution.status, execution.error) == ("FAILED", "InvalidRequest")
    assert [f["field"] for f in execution.cause["fields"]] == ["instance_ids"]


def test_provision_then_tear_down_in_the_same_account(engine):
    provisioned = engine.run({"count": 3, "regions": [WEST]}, name="run-e2e")
    assert provisioned.status == "SUCCEEDED", provisioned.cause
    launched = sorted(i["instance_id"] for i in provisioned.output["instances"])
    assert len(launched) == 3
    assert tags(engine, WEST, launched[0])[constants.TAG_DEPLOYMENT] == DEPLOYMENT
    teardown = engine.run({"action": "teardown", "request_id": "run-e2e"}, name="teardown-e2e", decision="approved")
    assert terminated_ids(teardown) == launched
    assert set(states(engine, WEST, launched).values()) == {"terminated"}
