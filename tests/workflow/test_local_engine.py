"""The local engine's own promises: pinned moto, Lambdas in-process, no real account, every example runs."""

import json
import os
import threading

import boto3
import moto
import pytest

from gpufill.local.engine import LocalEngine
from gpufill.local.scenario import MarketScenario
from tests.support import EXAMPLES


def test_moto_is_the_pinned_version_the_patches_were_written_for():
    assert moto.__version__ == "5.2.5"


def test_lambdas_run_in_process_with_dummy_credentials(monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "someones-real-profile")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREALKEY")
    threads_before = set(threading.enumerate())
    # Executions still running as the engine closes (a Ctrl-C) are stopped while every Lambda
    # invocation still runs in-process: after, moto's own invoke would probe for Docker and log
    # its FileNotFoundError on the user's terminal.
    from moto.awslambda.models import LambdaFunction

    moto_invoke, end_executions, in_process_at_end = LambdaFunction._invoke_lambda, LocalEngine._end_executions, []

    def ending(engine):
        in_process_at_end.append(LambdaFunction._invoke_lambda is not moto_invoke)
        end_executions(engine)

    monkeypatch.setattr(LocalEngine, "_end_executions", ending)
    with LocalEngine(MarketScenario.load(EXAMPLES / "markets/plenty.json")) as engine:
        assert os.environ["AWS_ACCESS_KEY_ID"] != "AKIAREALKEY" and "AWS_PROFILE" not in os.environ
        reply = boto3.client("lambda", region_name="us-east-1").invoke(
            FunctionName="gpufill-local-ScoreRegion",
            Payload=json.dumps({"request_id": "smoke", "region": "us-west-2", "instance_types": ["g6.xlarge"]}),
        )
        answer = json.loads(reply["Payload"].read())
        from gpufill.adapters import run_store

        facts = run_store.load_facts("smoke", ["us-west-2"])["us-west-2"]
        engine.run({"count": 1, "regions": ["us-west-2"]}, name="smoke")
    assert answer == {"region": "us-west-2", "types": []}  # the facts stay in the table, out of the state
    assert [z.availability_zone for z in facts.types[0].zones] == ["us-west-2a", "us-west-2b", "us-west-2c"]
    assert os.environ["AWS_ACCESS_KEY_ID"] == "AKIAREALKEY" and os.environ["AWS_PROFILE"] == "someones-real-profile"
    assert not [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]
    assert in_process_at_end == [True]


@pytest.fixture(scope="module")
def plenty():
    with LocalEngine(MarketScenario.load(EXAMPLES / "markets/plenty.json")) as engine:
        yield engine


def test_each_function_keeps_its_own_caches_as_in_its_own_execution_environments(plenty):
    """On Lambda a plan PrepareRegion read and cached is not in LaunchBatch's memory: LaunchBatch
    reads it from the table itself, and that GetItem is counted and judged by its own role.
    (Before the examples below, which take much of the market's stock.)"""
    start = len(plenty.calls.invocations)
    execution = plenty.run({"count": 1, "regions": ["us-west-2"]}, name="own-caches")
    assert execution.status == "SUCCEEDED", execution.cause
    reads = {i.handler: i.calls.count("dynamodb:GetItem") for i in plenty.calls.invocations[start:]
             if i.handler in ("prepare_region", "launch_batch")}
    assert reads == {"prepare_region": 1, "launch_batch": 1}


# Requests that launch into reservations alone need a market that holds some
# (examples/markets/reserved-capacity.json); the "only" cases of tests/workflow/test_capacity_reservations.py
# cover that path.
NEEDS_RESERVATIONS = {"provision-reservations-only.json"}
# A Capacity Block is bought from a market that offers one (examples/markets/capacity-blocks.json),
# after an approval; tests/workflow/test_capacity_blocks.py covers that path.
NEEDS_CAPACITY_BLOCKS = {"provision-capacity-block.json"}


@pytest.mark.parametrize("example", sorted(p.name for p in (EXAMPLES / "requests").glob("*.json") if p.name not in NEEDS_RESERVATIONS | NEEDS_CAPACITY_BLOCKS))
def test_every_example_request_runs_on_a_plentiful_market(plenty, example):
    request = json.loads((EXAMPLES / "requests" / example).read_text())
    execution = plenty.run(request, name=example.removesuffix(".json"))
    assert execution.status == "SUCCEEDED", execution.cause
    expected = "PLANNED" if request.get("action") == "plan" else "FULFILLED"
    assert execution.output["status"] == expected

