"""`gpufill simulate --decision/--then` and `gpufill approve|reject` against the local engine."""

from __future__ import annotations

import json

import pytest

from gpufill.cli import main
from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from gpufill.local.server import LocalEndpoint
from tests.support import EXAMPLES
from tests.workflow.planting import MARKET, WEST, in_background, launch, states

PROVISION = str(EXAMPLES / "requests/provision-spot.json")
TEARDOWN = str(EXAMPLES / "teardown.json")
MARKET_FILE = str(EXAMPLES / "markets/first-az-sold-out.json")


def test_provision_then_teardown_in_one_simulate(capsys):
    code = main(["simulate", PROVISION, "--market", MARKET_FILE, "--then", TEARDOWN, "--decision", "approved", "--json"])
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert code == 0
    launched = sorted(i["instance_id"] for i in runs[0]["execution"]["output"]["instances"])
    teardown = runs[1]["execution"]["output"]
    assert teardown["status"] == "TERMINATED"
    assert teardown["target"]["request_id"] == "simulate-provision-spot"  # "$previous" filled in
    assert sorted(i for r in teardown["terminated"] for i in r["terminated"]) == launched
    assert runs[1]["approval"]["decision"] == "approved" and runs[1]["approval"]["requested_by"] == "ana@example.com"
    assert runs[1]["metrics"]["ec2_calls"]["TerminateInstances"] == 1


@pytest.mark.parametrize("decision, status", [("rejected", "REJECTED"), ("timeout", "EXPIRED")])
def test_simulate_answers_the_approval_as_told(capsys, decision, status):
    code = main(["simulate", PROVISION, "--market", MARKET_FILE, "--then", TEARDOWN, "--decision", decision])
    out = capsys.readouterr().out
    assert code == 0
    assert f"{status}: nothing terminated" in out or f"{status}: nobody answered" in out
    assert "gpufill approve arn:aws:states:us-east-1:123456789012:execution:gpufill-provisioner-local:simulate-teardown" in out


def test_simulate_needs_a_decision_for_a_teardown_and_previous_only_after_a_run(capsys):
    assert main(["simulate", PROVISION, "--market", MARKET_FILE, "--then", TEARDOWN]) == 2
    assert "--decision approved|rejected|timeout" in capsys.readouterr().err
    assert main(["simulate", TEARDOWN, "--market", MARKET_FILE, "--decision", "approved"]) == 2
    assert "use it in the request given to --then" in capsys.readouterr().err


def test_gpufill_approve_and_reject_answer_once_and_refuse_twice(capsys):
    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine, LocalEndpoint(engine) as endpoint:
        mine = launch(engine, WEST, count=2, request_id="run-cli")
        request = {"action": "teardown", "request_id": "run-cli"}
        with in_background(engine, request, "teardown-cli") as finished:
            engine.wait_for_approval("teardown-cli")
            args = ["--env", "local", "--region", "us-east-1", "--endpoint-url", endpoint.url]
            # The function fails before it answers: the URL says 502, the approval item records no
            # answer, and the command says nothing was sent (never an answer that was not made).
            engine.faults.lambda_invoke("AnswerApproval")
            assert main(["approve", "teardown-cli", *args]) == 1
            err = capsys.readouterr().err
            assert "approval function failed (502" in err and "nothing was sent and nothing changed. Answer again" in err
            assert "answered_at" not in engine.approval("teardown-cli")
            # The function answers, then its reply is lost (it times out): the URL says 502, and the
            # command reads the approval item and the execution before it says anything.
            engine.faults.lambda_invoke("AnswerApproval", after_handler=True)
            assert main(["approve", "teardown-cli", *args, "--reason", "done with it"]) == 0
            captured = capsys.readouterr()
            assert "approved teardown teardown-cli" in captured.out
            assert "approval function failed (502" in captured.err and "the approval item records the answer" in captured.err
            assert main(["reject", "teardown-cli", *args]) == 1
            assert "already" in capsys.readouterr().err
            execution = finished()
        assert execution.output["status"] == "TERMINATED"
        assert set(states(engine, WEST, mine).values()) == {"terminated"}
        item = engine.approval("teardown-cli")
        # The approver is the caller AWS authenticated at the function URL, not what the CLI says.
        assert item["approver"] == "arn:aws:iam::123456789012:user/local-operator" and item["decided_reason"] == "done with it"
        assert main(["approve", "teardown-cli", *args]) == 1
        assert "already approved by arn:aws:" in capsys.readouterr().err

        # by ARN: region and env come from it; a rejection terminates nothing
        kept = launch(engine, WEST, request_id="run-cli-2")
        with in_background(engine, {"action": "teardown", "request_id": "run-cli-2"}, "teardown-cli-2") as finished:
            arn = engine.wait_for_approval("teardown-cli-2")["execution_arn"]
            assert main(["reject", arn, "--endpoint-url", endpoint.url, "--reason", "still training"]) == 0
            assert finished().output["status"] == "REJECTED"
        assert states(engine, WEST, kept) == {kept[0]: "running"}
        assert main(["approve", "no-such-teardown", *args]) == 1
        assert "no approval is on record for 'no-such-teardown'" in capsys.readouterr().err


def test_separate_approver_refuses_who_started_the_teardown_as_cloudtrail_recorded_it():
    """AnswerApproval behind its URL, as AWS runs it: the starter is read from CloudTrail, which has
    no record for the first minutes (refused, try again), then names the starter (refused); another
    principal with the approver policy answers, and is the approver on record and in the result."""
    import boto3

    from gpufill import constants
    from gpufill.cli import approval_url

    with LocalEngine(MarketScenario.model_validate(MARKET)) as engine:
        function = engine.deployments["local"].app.home.functions[constants.ANSWER_APPROVAL_TASK]
        lambda_ = engine.client("lambda")
        variables = lambda_.get_function_configuration(FunctionName=function.name)["Environment"]["Variables"]
        # As `npx cdk deploy -c separate_approver=true` sets it.
        lambda_.update_function_configuration(
            FunctionName=function.name, Environment={"Variables": {**variables, constants.ENV_SEPARATE_APPROVER: "true"}})
        bea = engine.add_person("bea", policies=engine.approver_policies())
        operator = boto3.Session(region_name="us-east-1")  # the engine's own key: local-operator started the run
        as_bea = boto3.Session(bea.access_key, bea.secret_key, region_name="us-east-1")
        url = engine.function_url(constants.ANSWER_APPROVAL_TASK)
        answer = {"approval": "teardown-sep", "decision": "approved", "reason": "done"}

        launch(engine, WEST, request_id="run-sep")
        with in_background(engine, {"action": "teardown", "request_id": "run-sep"}, "teardown-sep") as finished:
            engine.wait_for_approval("teardown-sep")
            early = approval_url.send(operator, url, answer)
            assert early.status == 403 and "try again shortly" in early.body["message"]
            engine.advance(300)  # CloudTrail has delivered the StartExecution event
            own = approval_url.send(operator, url, answer)
            assert own.status == 403 and "user/local-operator started 'teardown-sep' and may not answer it" in own.body["message"]
            assert "answered_at" not in engine.approval("teardown-sep")
            accepted = approval_url.send(as_bea, url, answer)
            assert accepted.status == 200 and accepted.body["answered_by"] == bea.arn
            execution = finished()
        assert execution.output["status"] == "TERMINATED" and execution.output["approval"]["approver"] == bea.arn
        assert engine.approval("teardown-sep")["answered_by"] == bea.arn
