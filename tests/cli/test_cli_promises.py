"""What the command line promises and a new user checks first: one JSON document with --json
even when stopped, SIGTERM as Ctrl-C, --verbose that shows something, one-line errors for a
market region, a busy port or a bogus region, hints that run as printed, --version."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from gpufill.cli import aws, main
from gpufill.cli.common import program

from tests.support import EXAMPLES, ROOT
from tests.support.child import DEADLINE_SECONDS, ENV, child

PROVISION = str(EXAMPLES / "requests/provision-spot.json")
PLAN = str(EXAMPLES / "requests/plan.json")
PLENTY = str(EXAMPLES / "markets/plenty.json")


def test_a_market_naming_a_region_gpufill_does_not_know_is_one_line_and_json_stays_a_document(tmp_path):
    market = tmp_path / "moon.json"
    market.write_text(json.dumps({"regions": {"xx-moon-1": {"zones": {"xx-moon-1a": {"g6.xlarge": {"spot": 4}}}}}}))
    done = subprocess.run([sys.executable, "-m", "gpufill.cli", "simulate", PROVISION, "--market", str(market), "--json"],
                          capture_output=True, text=True, env=ENV, timeout=DEADLINE_SECONDS)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["message"].startswith(f"market file {market}: regions: 'xx-moon-1' is not a region gpufill knows; use one of")
    assert "us-west-2" in error["message"] and done.stderr.count("\n") == 1


# SIGTERM takes Ctrl-C's path (Terminated is a KeyboardInterrupt); its exit 143 is checked by `make test-all`.
@pytest.mark.parametrize(
    "sig, code, kind",
    [(signal.SIGINT, 130, "interrupted"), pytest.param(signal.SIGTERM, 143, "terminated", marks=pytest.mark.slow)],
)
def test_a_json_run_stopped_by_a_signal_prints_one_json_document(tmp_path, sig, code, kind):
    request = tmp_path / "big.json"
    request.write_text(json.dumps({"count": 250, "batch_max": 1, "launch_mode": "exact"}))
    with child("simulate", str(request), "--market", PLENTY, "--json", "--verbose") as run:
        # --verbose: the handlers' lines on stderr say the run is under way (well into its launches).
        launches = 0
        while launches < 3:
            line = run.line("stderr")
            assert line, "the run ended before it was stopped"
            launches += '"launch' in line or "launched" in line
        run.send(sig)
        out, err = run.finish()
    assert run.process.returncode == code
    assert json.loads(out) == {"error": {"kind": kind, "message": kind, "exit_code": code}}
    assert "Traceback" not in err and err.rstrip().endswith(f"gpufill: {kind}")


def test_verbose_shows_a_successful_runs_log_lines_and_log_file_keeps_them(tmp_path, capsys):
    assert main(["simulate", PROVISION, "--market", PLENTY, "--verbose", "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert '"message":"request accepted"' in captured.err and '"message":"model servers checked"' in captured.err
    log = tmp_path / "lambda.log"
    assert main(["simulate", PROVISION, "--market", PLENTY, "--log-file", str(log)]) == 0
    assert '"message":"request accepted"' in log.read_text()
    assert "request accepted" not in capsys.readouterr().err
    # Without either, a run that goes well prints no log line at all.
    assert main(["simulate", PLAN, "--market", PLENTY]) == 0
    assert '"level"' not in capsys.readouterr().err


def test_local_serve_refuses_a_busy_port_in_one_line_before_building_anything(capsys):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        started = time.monotonic()
        assert main(["local", "serve", "--market", PLENTY, "--port", str(port), "--json"]) == 2
        assert time.monotonic() - started < 2  # the simulated account was never built
    finally:
        holder.close()
    captured = capsys.readouterr()
    message = f"--port {port}: another program listens on 127.0.0.1:{port}; stop it or pick another port (--port 0 picks a free one)"
    assert json.loads(captured.out)["error"]["message"] == message
    assert captured.err == f"gpufill: {message}\n"


def test_local_serve_json_prints_one_line_to_read_the_endpoint_from_and_sigterm_ends_it():
    with child("local", "serve", "--market", PLENTY, "--port", "0", "--json") as serve:
        ready = json.loads(serve.line())
        assert ready["url"].startswith("http://127.0.0.1:") and ready["region"] == "us-east-1" and ready["env"] == "local"
        assert ready["state_machine_arn"].endswith(":stateMachine:gpufill-provisioner-local")
        assert ready["outputs"]["StateMachineArn"] == ready["state_machine_arn"]
        serve.send(signal.SIGTERM)
        out, err = serve.finish()
    assert serve.process.returncode == 143 and out == "" and "Traceback" not in err
    assert "stopped; the simulated account is gone" in err


@pytest.mark.parametrize("region", ["bogus", "US-EAST-1", "us_east_1"])
def test_a_region_that_is_no_region_name_is_refused_in_one_line(capsys, region):
    assert main(["status", "--region", region, "--endpoint-url", "http://127.0.0.1:9", "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"]["message"] == f"--region {region!r} is not a region name (like us-east-1)"
    assert main(["approve", "teardown-x", "--region", region]) == 2


def test_an_html_error_page_is_reported_by_its_status_line():
    page = "500: <!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n<h1>Internal Server Error</h1>"
    assert aws.readable(page) == "the endpoint answered 500 Internal Server Error (its own log says why)"
    assert aws.readable("Throttling: Rate exceeded") == "Throttling: Rate exceeded"


@pytest.mark.parametrize("action", ["teardown", "status", "plan"])
def test_up_provisions_only_and_says_which_verb_takes_the_request(tmp_path, capsys, action):
    request = tmp_path / "other.json"
    request.write_text(json.dumps({"action": action, **({"request_id": "my-run"} if action == "teardown" else {})}))
    assert main(["up", str(request), "--region", "us-east-1", "--endpoint-url", "http://127.0.0.1:9", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["fields"] == [{"field": "action", "problem": f"gpufill up takes action 'provision' only, not {action!r}"}]
    assert f"this request's action is {action!r}; nothing was started" in error["message"]


def test_hints_name_the_gpufill_that_was_run(tmp_path, monkeypatch):
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "gpufill"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script)])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert program() == ".venv/bin/gpufill"  # no venv activated: the path typed, relative to here
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin")
    assert program() == "gpufill"  # what PATH finds is this one
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("PATH")
    assert program() == str(script)  # elsewhere: the whole path
    main_module = ROOT / "functions/gpufill/cli/__main__.py"
    monkeypatch.setattr(sys, "argv", [str(main_module)])
    assert program().endswith(" -m gpufill.cli")


def test_watch_stopped_says_how_to_follow_again_with_the_same_deployment(monkeypatch, capsys):
    deployment = aws.Deployment("local", "us-east-1", "http://127.0.0.1:9", None,
                                {"StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:gpufill-provisioner-local"})
    monkeypatch.setattr(aws, "find", lambda args: deployment)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(aws, "wait_for_end", interrupted)
    monkeypatch.setattr(deployment, "client", lambda service: None)
    from gpufill.cli import ids

    monkeypatch.setattr(ids, "execution_name", lambda deployment, given: given)  # no Step Functions to ask
    assert main(["watch", "my-run", "--env", "local", "--endpoint-url", "http://127.0.0.1:9"]) == 130
    err = capsys.readouterr().err
    assert ("stopped watching; the run goes on. Follow it again: gpufill watch my-run --env local --region us-east-1 "
            "--endpoint-url http://127.0.0.1:9") in err


def test_connect_json_gives_the_forward_command_and_what_is_missing(monkeypatch, capsys):
    from gpufill.cli import connect

    monkeypatch.setattr(aws, "find", lambda args: None)
    monkeypatch.setattr(connect, "instance_region", lambda deployment, instance_id: "us-west-2")
    monkeypatch.setattr(connect.shutil, "which", lambda name: None)
    assert main(["connect", "i-0123456789abcdef0", "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["region"] == "us-west-2" and document["url"] == "http://localhost:8000/v1/models"
    assert document["command"].startswith("aws ssm start-session --region us-west-2 --target i-0123456789abcdef0")
    assert document["forwarding"] is False and document["missing"] == ["aws", "session-manager-plugin"]


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("gpufill ")
