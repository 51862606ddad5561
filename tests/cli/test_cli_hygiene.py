"""What a first-day user meets: one JSON document on stdout with --json, one-line errors naming the
file and the field (exit 2), Lambda log lines kept off stdout, Ctrl-C (exit 130), help."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from gpufill.cli import main
from gpufill.cli.common import fresh_name
from tests.support import EXAMPLES
from tests.support.child import DEADLINE_SECONDS, ENV, child

PROVISION = str(EXAMPLES / "requests/provision-spot.json")
PLENTY = str(EXAMPLES / "markets/plenty.json")
INVALID = {"count": 0, "market": "moon"}


def gpufill(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """The command as a user runs it: its own process, so stdout is the real stdout."""
    return subprocess.run(
        [sys.executable, "-m", "gpufill.cli", *args], capture_output=True, text=True, env=ENV, timeout=DEADLINE_SECONDS,
        **kwargs,
    )


def test_json_stdout_is_one_document_even_for_an_invalid_request(tmp_path):
    request = tmp_path / "bad.json"
    request.write_text(json.dumps(INVALID))
    done = gpufill("simulate", str(request), "--market", PLENTY, "--json")
    assert done.returncode == 1
    document = json.loads(done.stdout)  # raises on a log line before or after the document
    assert document["execution"]["error"] == "InvalidRequest"
    assert {f["field"] for f in document["execution"]["cause"]["fields"]} == {"count", "market"}
    assert '"request rejected"' in done.stderr  # the handler's warning is kept, on stderr


def test_log_file_takes_the_lambda_log_lines(tmp_path):
    request = tmp_path / "bad.json"
    request.write_text(json.dumps(INVALID))
    log = tmp_path / "lambda.log"
    done = gpufill("simulate", str(request), "--market", PLENTY, "--json", "--log-file", str(log))
    json.loads(done.stdout)
    assert '"request rejected"' in log.read_text()
    assert "request rejected" not in done.stderr


def test_progress_lines_have_no_log_lines_between_them(tmp_path, capsys):
    request = tmp_path / "bad.json"
    request.write_text(json.dumps(INVALID))
    assert main(["simulate", str(request), "--market", PLENTY]) == 1
    captured = capsys.readouterr()
    assert '"level"' not in captured.out
    assert "FAILED with InvalidRequest" in captured.out
    assert '"request rejected"' in captured.err


def test_verbose_shows_the_log_lines_as_they_happen(tmp_path, capsys):
    request = tmp_path / "bad.json"
    request.write_text(json.dumps(INVALID))
    assert main(["simulate", str(request), "--market", PLENTY, "--verbose"]) == 1
    assert '"request rejected"' in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, problem",
    [
        ('"provision 4 please"', "must hold a JSON object such as"),
        ("[1, 2]", "not a list"),
        ("{count: 4}", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    ],
)
def test_an_unusable_request_file_is_one_line_naming_it(tmp_path, capsys, content, problem):
    request = tmp_path / "request.json"
    request.write_text(content)
    assert main(["simulate", str(request), "--market", PLENTY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"request file {request}:" in err and problem in err


@pytest.mark.parametrize(
    "market, problem",
    [
        ({}, '"regions" is missing or empty'),
        ({"description": "typo", "region": {}}, '"regions" is missing or empty'),
        ({"regions": {"us-west-2": {"zones": {"us-west-2a": {"g6.xlarge": {"spot": -1}}}}}},
         "regions.us-west-2.zones.us-west-2a.g6.xlarge.spot: Input should be greater than or equal to 0"),
        ("not json", "not JSON"),
        ("[]", 'must hold a JSON object with "regions"'),
    ],
)
def test_an_unusable_market_file_is_one_line_naming_it_and_the_field(tmp_path, capsys, market, problem):
    path = tmp_path / "market.json"
    path.write_text(market if isinstance(market, str) else json.dumps(market))
    assert main(["simulate", PROVISION, "--market", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "errors.pydantic.dev" not in err
    assert f"market file {path}:" in err and problem in err


def test_a_missing_file_is_named(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "nope.json"), "--market", PLENTY]) == 2
    assert f"request file {tmp_path / 'nope.json'}: not found" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["has space", "dollar$", "x" * 81, ""])
def test_name_must_be_a_valid_execution_name(capsys, name):
    assert main(["simulate", PROVISION, "--market", PLENTY, "--name", name]) == 2
    assert "is not a valid execution name: use 1-80 characters from A-Z a-z 0-9 - _" in capsys.readouterr().err


def test_a_name_of_80_valid_characters_is_used_as_the_request_id(capsys):
    name = "a-Z_9" * 16
    assert main(["simulate", str(EXAMPLES / "requests/plan.json"), "--market", PLENTY, "--name", name, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["execution"]["output"]["request_id"] == name


def test_fresh_names_are_valid_even_from_odd_file_names():
    from gpufill.cli.common import EXECUTION_NAME

    for stem in ("provision spot (copy)", "ü" * 10, "x" * 200):
        assert EXECUTION_NAME.fullmatch(fresh_name(stem)), stem


def test_gpufill_alone_prints_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "simulate" in out and "teardown" in out and "local" in out


def test_an_unknown_verb_or_flag_is_one_line_exit_2(capsys):
    assert main(["simulte"]) == 2
    assert "invalid choice: 'simulte'" in capsys.readouterr().err
    assert main(["simulate", PROVISION, "--market", PLENTY, "--timeout", "-1"]) == 2
    assert "--timeout: '-1' must be more than 0 seconds" in capsys.readouterr().err


def test_timeout_stops_a_run_that_takes_too_long(tmp_path, capsys):
    request = tmp_path / "big.json"
    request.write_text(json.dumps({"count": 250, "batch_max": 1, "launch_mode": "exact"}))  # ~40 s of wall time
    started = time.monotonic()
    assert main(["simulate", str(request), "--market", PLENTY, "--timeout", "2", "--json"]) == 1
    assert time.monotonic() - started < 20
    # The engine stops it (its error name is the engine's: LocalTimeout as it settles on one).
    assert json.loads(capsys.readouterr().out)["execution"]["status"] != "SUCCEEDED"


def test_a_timeout_that_ends_before_the_run_starts_still_gives_one_json_document(tmp_path, capsys):
    # The stop comes while the execution is still being started: no traceback, the run is reported.
    request = tmp_path / "big.json"
    request.write_text(json.dumps({"count": 250, "batch_max": 1, "launch_mode": "exact"}))
    assert main(["simulate", str(request), "--market", PLENTY, "--timeout", "0.01", "--json"]) == 1
    captured = capsys.readouterr()
    execution = json.loads(captured.out)["execution"]
    assert (execution["status"], execution["error"]) == ("FAILED", "LocalTimeout")
    assert "Traceback" not in captured.err


def test_json_stays_one_document_when_a_metric_gathers_a_hundred_values(capsys):
    # Powertools prints a metric's values once it holds 100 of them, metrics disabled or not;
    # earlier runs in the same process leave values behind (here: 99), the next run's are the 100th.
    from gpufill.handlers.observability import metrics

    metrics.clear_metrics()  # whatever earlier tests of this process left: exactly 99 values now
    for _ in range(99):
        metrics.add_metric(name="InstancesServing", unit="Count", value=1)
    try:
        assert main(["simulate", PROVISION, "--market", PLENTY, "--json"]) == 0
        document = json.loads(capsys.readouterr().out)  # raises on an EMF line before the document
        assert document["execution"]["status"] == "SUCCEEDED"
    finally:
        metrics.clear_metrics()


def test_ctrl_c_stops_cleanly_with_exit_130(tmp_path):
    request = tmp_path / "big.json"
    request.write_text(json.dumps({"count": 250, "batch_max": 1, "launch_mode": "exact"}))
    with child("simulate", str(request), "--market", PLENTY) as run:
        # Once the run is under way (its first progress line), interrupt it as Ctrl-C does.
        assert run.line().startswith("gpufill simulate")
        run.line()
        before, started = run.cpu_seconds(), time.monotonic()
        run.send(signal.SIGINT)
        after = run.cpu_seconds_at_exit()
        out, err = run.finish()
    assert run.process.returncode == 130
    # It stops at once, not after its 250 launches (minutes): the child's CPU seconds after the
    # signal say so on a loaded machine too, where the wall clock stretches; elsewhere, the clock.
    if before is not None and after is not None:
        assert after - before < 3
    else:
        assert time.monotonic() - started < 10
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    # gpufill's own line alone: nothing of the engine's ending either (moto probing for Docker
    # when a running Task outlived the in-process Lambda invoker printed a FileNotFoundError).
    assert err.strip() == "gpufill: interrupted", err


@pytest.mark.parametrize(
    "args, code",
    [
        (["simulate", "nope.json", "--market", PLENTY, "--json"], 2),
        (["simulate", PROVISION, "--market", PLENTY, "--name", "a b", "--json"], 2),
        (["simulate", PROVISION, "--json"], 2),  # --market missing: argparse's own error
        (["status", "--json", "--region", "us-east-1", "--endpoint-url", "http://127.0.0.1:9"], 1),  # nothing listens
    ],
)
def test_json_stdout_is_one_document_when_the_verb_cannot_run(capsys, args, code):
    assert main(args) == code
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["error"]["exit_code"] == code
    assert document["error"]["message"] in captured.err


def test_approve_for_the_local_deployment_without_an_endpoint_says_how_to_reach_it(tmp_path, monkeypatch, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert main(["approve", "simulate-teardown", "--env", "local", "--region", "us-east-1"]) == 1
    err = capsys.readouterr().err
    assert "Unable to locate credentials" in err
    assert "add --endpoint-url with the endpoint it printed" in err and "Traceback" not in err


def test_a_loopback_endpoint_needs_no_region_or_credentials_configured(monkeypatch, tmp_path):
    from gpufill.cli.aws import session_for

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    session = session_for(None, "http://127.0.0.1:4566")
    assert session.region_name == "us-east-1" and session.get_credentials() is not None
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert session_for(None, "http://127.0.0.1:4566").region_name == "eu-central-1"


@pytest.mark.parametrize("url", ["127.0.0.1:4566", "localhost:4566", "ftp://127.0.0.1:4566", "http://127.0.0.1:99999"])
@pytest.mark.parametrize("verb", [["status"], ["approve", "some-teardown"], ["run", PROVISION, "--yes"]])
def test_an_endpoint_url_without_http_is_one_usage_line_and_one_json_document(capsys, url, verb):
    assert main([*verb, "--endpoint-url", url, "--json"]) == 2
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert f"argument --endpoint-url: {url!r} is not" in error["message"] or "has no valid port" in error["message"]
    assert "Traceback" not in captured.err and "no AWS region" not in captured.err
    if "://" not in url:
        assert f"did you mean http://{url}?" in error["message"]


@pytest.mark.parametrize("flag, example", [("--gpu", "give a GPU name"), ("--type", "--type is empty"),
                                           ("--regions", "--regions is empty")])
def test_an_empty_request_flag_is_refused_and_starts_nothing(capsys, flag, example):
    args = ["simulate", "--market", PLENTY, flag, ""] + (["--gpu", "L4"] if flag == "--regions" else [])
    assert main(args) == 2
    captured = capsys.readouterr()
    assert example in captured.err and captured.out == ""  # no plan, no run


def test_a_request_file_with_a_key_given_twice_is_refused_naming_the_key(tmp_path, capsys):
    request = tmp_path / "twice.json"
    request.write_text('{"count": 1, "instance_types": ["g6.xlarge"], "count": 8}')
    assert main(["simulate", str(request), "--market", PLENTY]) == 2
    assert f"request file {request}: the key 'count' appears twice in one object; keep one" in capsys.readouterr().err


@pytest.mark.parametrize("name, reserved", [("train-c3", "-c and a number"), ("train-expired", "max_lifetime keeps"),
                                            ("train-refill-i-0abc", "refills keep")])
def test_a_reserved_name_is_refused_before_anything_starts(capsys, name, reserved):
    # Nothing listens at the endpoint: the name is refused before any call is made.
    assert main(["run", PROVISION, "--name", name, "--yes", "--region", "us-east-1", "--endpoint-url", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "(execution name)" in err and reserved in err and "Nothing was started" in err


def test_a_successful_run_shows_no_metric_line(capsys):
    # ReportResult and LaunchBatch emit one-off metrics with their own dimensions (single_metric),
    # which Powertools prints itself: on the local engine they are kept with the run's metrics.
    assert main(["simulate", PROVISION, "--market", PLENTY]) == 0
    captured = capsys.readouterr()
    assert "FULFILLED" in captured.out
    assert '"_aws"' not in captured.out + captured.err
