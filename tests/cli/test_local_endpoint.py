"""`gpufill local serve`'s endpoint, driven as a user drives a deployment: gpufill's AWS verbs
(boto3 over HTTP, --endpoint-url) and the real AWS CLI, end to end: provision, status, teardown
with approval."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from gpufill import constants
from gpufill.cli import aws, main
from tests.support import EXAMPLES
from tests.support.child import DEADLINE_SECONDS, child

PROVISION = str(EXAMPLES / "requests/provision-spot.json")
MARKET = EXAMPLES / "markets/first-az-sold-out.json"


def test_the_endpoint_listens_on_loopback_only(endpoint):
    assert endpoint.url.startswith("http://127.0.0.1:")
    assert endpoint._server.server_address[0] == "127.0.0.1"


def test_up_status_teardown_approve_against_the_endpoint(deployment, capsys):
    assert main(["up", PROVISION, "--name", "ep-run", "--yes", *deployment]) == 0
    out = capsys.readouterr().out
    assert "> LaunchBatch" in out and "FULFILLED: 4 of 4 launched" in out
    assert out.count("gpufill connect i-") == 4
    assert "When done: gpufill teardown ep-run --env local --region us-east-1 --endpoint-url http://127.0.0.1:" in out

    assert main(["status", "ep-run", "--json", *deployment]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["running"] == 4 and {i["request_id"] for i in status["instances"]} == {"ep-run"}

    assert main(["teardown", "ep-run", "--requested-by", "ana", *deployment]) == 0
    out = capsys.readouterr().out
    assert "asks to terminate 4 instance(s)" in out
    approval = next(line.split()[2] for line in out.splitlines() if line.strip().startswith("gpufill approve"))
    teardown = approval.removeprefix("teardown:")

    assert main(["approve", approval, "--reason", "done", *deployment]) == 0
    assert f"approved teardown {teardown}" in capsys.readouterr().out
    assert main(["watch", teardown, "--json", *deployment]) == 0
    result = json.loads(capsys.readouterr().out)["execution"]["output"]
    assert result["status"] == "TERMINATED"
    assert sum(len(r["terminated"]) for r in result["terminated"]) == 4
    assert main(["approve", teardown, *deployment]) == 1  # answered once only
    assert "already" in capsys.readouterr().err


def test_run_without_watch_returns_at_once_and_watch_follows(deployment, capsys):
    assert main(["run", str(EXAMPLES / "requests/plan.json"), "--name", "ep-plan", "--json", *deployment]) == 0
    started = json.loads(capsys.readouterr().out)["execution"]
    assert started["name"] == "ep-plan" and started["arn"].endswith(":execution:gpufill-provisioner-local:ep-plan")
    assert main(["watch", started["arn"], *deployment]) == 0
    assert "Plan:" in capsys.readouterr().out


def test_a_bad_request_is_refused_before_any_execution_starts(endpoint, deployment, tmp_path, capsys):
    request = tmp_path / "bad.json"
    request.write_text(json.dumps({"count": 0, "instance_type": "g6.xlarg"}))
    before = executions(endpoint)
    assert main(["run", str(request), "--watch", "--json", *deployment]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert {f["field"] for f in error["fields"]} == {"count", "instance_type"}
    assert "did you mean 'g6.xlarge'?" in error["message"] and error["message"].endswith("Nothing was started.")
    assert main(["up", str(request), *deployment]) == 2
    assert "count: must be greater than or equal to 1" in capsys.readouterr().err
    assert executions(endpoint) == before


def test_a_run_of_a_teardown_that_asks_for_a_count_is_refused_naming_both_fields(endpoint, deployment, tmp_path, capsys):
    request = tmp_path / "teardown.json"
    request.write_text(json.dumps({"action": "teardown", "request_id": "ep-run", "count": 3, "market": "spot"}))
    before = executions(endpoint)
    assert main(["run", str(request), *deployment]) == 2
    err = capsys.readouterr().err
    assert "count: only goes with action 'provision' or 'plan' (this request's action is 'teardown')" in err
    assert "market: only goes with action 'provision' or 'plan'" in err and "Nothing was changed." in err
    assert executions(endpoint) == before


def executions(endpoint) -> list[str]:
    import boto3

    sfn = boto3.client("stepfunctions", region_name="us-east-1", endpoint_url=endpoint.url,
                       aws_access_key_id="x", aws_secret_access_key="x")
    machine = endpoint.outputs()[constants.OUTPUT_STATE_MACHINE_ARN]
    return sorted(e["name"] for e in sfn.list_executions(stateMachineArn=machine)["executions"])


def test_an_unknown_deployment_is_named(deployment, capsys):
    assert main(["status", *deployment[2:], "--env", "prod"]) == 1
    assert "no gpufill deployment 'prod' in us-east-1" in capsys.readouterr().err


def test_connect_without_the_plugin_prints_the_command(deployment, capsys, monkeypatch):
    from gpufill.cli import connect

    monkeypatch.setattr(connect.shutil, "which", lambda name: None)
    assert main(["run", PROVISION, "--name", "ep-connect", "--watch", "--json", "--yes", *deployment]) == 0
    instance = json.loads(capsys.readouterr().out)["execution"]["output"]["instances"][0]
    assert main(["connect", instance["instance_id"], *deployment]) == 1
    out = capsys.readouterr().out
    assert "session-manager-plugin" in out and connect.PLUGIN_INSTALL in out
    assert f"aws ssm start-session --region {instance['region']} --target {instance['instance_id']}" in out
    assert main(["connect", "i-0000000000000dead", *deployment]) == 1
    assert "is not an instance of deployment 'local'" in capsys.readouterr().err


# The AWS CLI pinned in the dev dependencies (the venv's), else one on PATH.
_VENV_AWS = Path(sys.executable).with_name("aws")
AWS_CLI = str(_VENV_AWS) if _VENV_AWS.exists() else shutil.which("aws")


@pytest.mark.skipif(AWS_CLI is None, reason="the AWS CLI is not installed")
def test_the_real_aws_cli_provisions_and_answers_an_approval(endpoint, tmp_path):
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "gpufill-local", "AWS_SECRET_ACCESS_KEY": "gpufill-local",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_PAGER": ""}

    def cli(*args: str) -> dict:
        done = subprocess.run([AWS_CLI, *args, "--endpoint-url", endpoint.url, "--output", "json"],
                              capture_output=True, text=True, env=env, timeout=DEADLINE_SECONDS)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else {}

    # The waits poll with boto3 in this process: an AWS CLI process a poll (about a second of CPU
    # each) would slow the run it waits for; every call the test makes of the CLI is made once.
    local = boto3.Session(aws_access_key_id="gpufill-local", aws_secret_access_key="gpufill-local",
                          region_name="us-east-1")

    def finished(arn: str) -> dict:
        sfn = local.client("stepfunctions", endpoint_url=endpoint.url)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while sfn.describe_execution(executionArn=arn)["status"] == "RUNNING":
            assert time.monotonic() < deadline, f"{arn} still running"
            time.sleep(0.1)
        return cli("stepfunctions", "describe-execution", "--execution-arn", arn)

    stack = cli("cloudformation", "describe-stacks", "--stack-name", "gpufill-local")["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    machine = outputs[constants.OUTPUT_STATE_MACHINE_ARN]
    run = cli("stepfunctions", "start-execution", "--state-machine-arn", machine, "--name", "cli-run",
              "--input", f"file://{PROVISION}")["executionArn"]
    assert json.loads(finished(run)["output"])["launched"] == 4
    events = cli("stepfunctions", "get-execution-history", "--execution-arn", run)["events"]
    assert "LaunchBatch" in {e.get("stateEnteredEventDetails", {}).get("name") for e in events}

    request = tmp_path / "teardown.json"
    request.write_text(json.dumps({"action": "teardown", "request_id": "cli-run", "requested_by": "ana"}))
    teardown = cli("stepfunctions", "start-execution", "--state-machine-arn", machine, "--name", "cli-teardown",
                   "--input", f"file://{request}")["executionArn"]
    key = {"instance_id": {"S": constants.approval_key("cli-teardown")}}
    table = outputs[constants.OUTPUT_INSTANCES_TABLE]
    dynamodb, deadline = local.client("dynamodb", endpoint_url=endpoint.url), time.monotonic() + DEADLINE_SECONDS
    while "task_token" not in dynamodb.get_item(TableName=table, Key=key).get("Item", {}):
        assert time.monotonic() < deadline, "the teardown never asked for approval"
        time.sleep(0.1)
    item = cli("dynamodb", "get-item", "--table-name", table, "--key", json.dumps(key))
    cli("stepfunctions", "send-task-success", "--task-token", item["Item"]["task_token"]["S"],
        "--task-output", json.dumps({"decision": "approved", "approver": "ana"}))
    assert json.loads(finished(teardown)["output"])["status"] == "TERMINATED"


def test_gpufill_local_serve_prints_a_ready_command_and_needs_no_credentials(tmp_path, monkeypatch, capsys):
    with child("local", "serve", "--market", str(MARKET), "--port", "0") as serve:
        printed = []
        while not printed or not printed[-1].startswith("Ctrl-C"):
            line = serve.line()
            assert line, f"serve ended before it was ready: {serve.finish()[1]}"
            printed.append(line.strip())
        url = printed[0].rsplit(" at ", 1)[1]
        assert url.startswith("http://127.0.0.1:")
        ready = next(line for line in printed if line.startswith("aws stepfunctions start-execution"))
        assert f"--endpoint-url {url} --state-machine-arn arn:aws:states:us-east-1:123456789012:stateMachine:" \
               "gpufill-provisioner-local --name my-run --input file://examples/requests/provision-spot.json" in ready

        # A laptop with no AWS profile at all still reaches it.
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setattr(aws, "POLL_SECONDS", 0.05)
        assert main(["status", "--json", "--env", "local", "--region", "us-east-1", "--endpoint-url", url]) == 0
        assert json.loads(capsys.readouterr().out)["running"] == 0
        serve.send(signal.SIGINT)
        out, err = serve.finish()
    # Serving ends only by being interrupted, and says so as every interrupted verb does.
    assert serve.process.returncode == 130 and "Traceback" not in err
    assert "stopped" in out


def test_teardown_all_asks_for_every_instance_of_the_deployment(endpoint, deployment, capsys):
    main(["teardown", "--all", "--json", *deployment])  # its outcome is the state machine's to decide
    name = json.loads(capsys.readouterr().out)["execution"]["name"]
    assert name.startswith("teardown-all-")
    import boto3

    sfn = boto3.client("stepfunctions", region_name="us-east-1", endpoint_url=endpoint.url)
    arn = aws.Deployment("local", "us-east-1", endpoint.url, None, endpoint.outputs()).execution_arn(name)
    sent = json.loads(sfn.describe_execution(executionArn=arn)["input"])
    assert sent["action"] == "teardown" and sent["all"] is True
    assert "request_id" not in sent and "instance_ids" not in sent and sent["requested_by"]


def test_a_teardown_of_a_request_nobody_knows_is_an_error_and_starts_nothing(endpoint, deployment, capsys):
    before = executions(endpoint)
    assert main(["teardown", "ep-rnu", *deployment]) == 1
    err = capsys.readouterr().err
    assert "no request 'ep-rnu' is known to deployment 'local' in us-east-1: no execution of that name and no " \
           "instance record names it; nothing was started" in err
    assert "gpufill status --env local --region us-east-1 --endpoint-url http://127.0.0.1:" in err
    assert executions(endpoint) == before


def test_status_lists_a_pending_teardown_with_who_answers_and_how(deployment, capsys):
    assert main(["run", PROVISION, "--name", "ep-pending", "--watch", "--json", "--yes", *deployment]) == 0
    capsys.readouterr()
    assert main(["teardown", "ep-pending", "--requested-by", "ana", "--json", *deployment]) == 0
    teardown = json.loads(capsys.readouterr().out)["execution"]["name"]

    assert main(["status", "ep-pending", *deployment]) == 0
    out = capsys.readouterr().out
    # (A teardown --all an earlier test left waiting concerns this request too, and is listed.)
    assert "waiting for an answer (nothing is terminated until one is approved)" in out
    assert f"  teardown:{teardown}: 4 instance(s), of request ep-pending, asked by ana at " in out
    assert "who answers: the subscribers of gpufill-approvals-local" in out
    assert f"gpufill approve teardown:{teardown} --env local --region us-east-1 --endpoint-url http://127.0.0.1:" in out
    assert main(["status", "--json", *deployment]) == 0
    pending = {p["execution"]: p for p in json.loads(capsys.readouterr().out)["pending_teardowns"]}
    assert pending[teardown]["target"] == {"request_id": "ep-pending"} and pending[teardown]["instance_count"] == 4

    # Answered (with a reason typed without quotes), it is no longer pending.
    assert main(["reject", teardown, "--reason", "still", "training", "--json", *deployment]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["decision"] == "rejected" and answer["reason"] == "still training" and len(answer["instance_ids"]) == 4
    assert answer["follow"].startswith(f"gpufill watch {teardown} --env local --region us-east-1 --endpoint-url ")
    assert main(["status", "ep-pending", "--json", *deployment]) == 0
    assert teardown not in {p["execution"] for p in json.loads(capsys.readouterr().out)["pending_teardowns"]}


def test_teardown_wait_shows_how_to_answer_then_follows_to_the_end(deployment, capsys):
    import threading

    assert main(["run", PROVISION, "--name", "ep-wait", "--watch", "--json", "--yes", *deployment]) == 0
    capsys.readouterr()
    codes: list[int] = []
    waiting = threading.Thread(target=lambda: codes.append(main(["teardown", "ep-wait", "--wait", *deployment])))
    waiting.start()
    try:
        for _ in range(400):
            pending = [p for p in status_pending(deployment, capsys) if p["target"].get("request_id") == "ep-wait"]
            if pending:
                break
            time.sleep(0.05)
        assert pending, "the teardown never asked for approval"
        assert main(["approve", pending[0]["execution"], "--reason", "done", "with", "it", *deployment]) == 0
    finally:
        waiting.join(timeout=60)
    assert codes == [0]
    out = capsys.readouterr().out
    asked = out.index(f"gpufill approve {pending[0]['approval_id']} --env local --region us-east-1 --endpoint-url")
    assert "Following it until it is answered or expires" in out
    assert out.index("TERMINATED: 4 instance(s) terminated") > asked


def status_pending(deployment, capsys) -> list[dict]:
    from gpufill.cli.status import pending_teardowns

    return pending_teardowns(aws.find(main_args(deployment))) or []


def main_args(deployment):
    import argparse

    return argparse.Namespace(env="local", region="us-east-1", endpoint_url=deployment[-1])


def test_a_region_without_the_local_deployment_says_where_it_is(deployment, capsys):
    assert main(["status", "--json", *deployment, "--region", "eu-west-1"]) == 1
    message = json.loads(capsys.readouterr().out)["error"]["message"]
    assert message.startswith("no gpufill deployment 'local' in eu-west-1 at http://127.0.0.1:")
    assert message.endswith("gpufill local serve's deployment is in us-east-1")


def test_local_clock_advance_lets_a_lifetime_pass_and_its_teardown_is_asked(endpoint, deployment, capsys):
    lifetime = str(EXAMPLES / "requests/provision-max-lifetime.json")
    assert main(["run", lifetime, "--count", "1", "--name", "lc-short", "--yes", "--watch", "--json", *deployment]) == 0
    capsys.readouterr()
    assert main(["local", "clock", "--endpoint-url", endpoint.url, "--json"]) == 0
    before = json.loads(capsys.readouterr().out)["elapsed_seconds"]

    assert main(["local", "clock", "advance", "P2D", "--endpoint-url", endpoint.url]) == 0
    assert capsys.readouterr().out.startswith("advanced P2D; modelled time ")
    assert main(["local", "clock", "--endpoint-url", endpoint.url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["elapsed_seconds"] >= before + 2 * 86400

    assert main(["status", "lc-short", "--json", *deployment]) == 0
    pending = json.loads(capsys.readouterr().out)["pending_teardowns"]
    # Its own lifetime's teardown (a teardown of everything asked earlier in this module waits too).
    assert [p["execution"] for p in pending if p["target"].get("request_id") == "lc-short"] == ["lc-short-expired"]


@pytest.mark.parametrize("args, problem", [(["advance"], "give an ISO 8601 duration"), (["advance", "2h"], "not '2h'"),
                                           (["advance", "PT0S"], "no time at all"), (["PT2H"], "invalid choice: 'PT2H' (choose from 'advance')")])
def test_local_clock_refuses_what_is_not_a_duration(endpoint, capsys, args, problem):
    assert main(["local", "clock", *args, "--endpoint-url", endpoint.url]) == 2
    assert problem in capsys.readouterr().err


def test_the_start_of_an_id_stands_for_it_in_every_verb_and_an_ambiguous_one_lists_them(endpoint, deployment, capsys):
    assert main(["run", PROVISION, "--name", "pfx-alpha-20261202", "--watch", "--json", "--yes", *deployment]) == 0
    launched = [i["instance_id"] for i in json.loads(capsys.readouterr().out)["execution"]["output"]["instances"]]
    assert main(["run", str(EXAMPLES / "requests/plan.json"), "--name", "pfx-beta", "--watch", "--json", *deployment]) == 0
    capsys.readouterr()
    before = executions(endpoint)
    for verb in (["status", "pfx-"], ["watch", "pfx-"], ["teardown", "pfx-"]):
        assert main([*verb, *deployment]) == 2, verb
        assert "'pfx-' is the start of 2 " in capsys.readouterr().err
    assert executions(endpoint) == before

    assert main(["status", "pfx-al", "--json", *deployment]) == 0
    assert {i["request_id"] for i in json.loads(capsys.readouterr().out)["instances"]} == {"pfx-alpha-20261202"}
    assert main(["watch", "pfx-b", *deployment]) == 0 and "Plan:" in capsys.readouterr().out
    assert main(["connect", launched[0][:9], "--json", *deployment]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["instance_id"] == launched[0]

    # A teardown of one instance by the start of its id, answered by the start of the teardown's name.
    assert main(["teardown", "--instances", launched[1][:8], "--json", *deployment]) == 0
    started = json.loads(capsys.readouterr().out)
    assert [i["instance_id"] for i in started["asks"]] == [launched[1]]
    assert main(["reject", started["execution"]["name"][:-4], "--reason", "kept", *deployment]) == 0
    assert f"rejected teardown {started['execution']['name']}" in capsys.readouterr().out
    # A teardown by the start of the request id; its approval then answered by that start too.
    assert main(["teardown", "pfx-al", "--json", *deployment]) == 0
    name = json.loads(capsys.readouterr().out)["execution"]["name"]
    assert name.startswith("teardown-pfx-alpha-20261202-")
    assert main(["reject", "pfx-alp", "--json", *deployment]) == 0
    assert json.loads(capsys.readouterr().out)["execution"] == name
