"""`run` and `up` show the deployment's plan for the request (pools in rank order, the expected
$/h, what happens if spot runs out) and ask [y/N] before launching; --yes skips it, --json
needs --yes. Flags (--count, --gpu, --type, --market, --regions, --model) override the file or
make the request without one."""

from __future__ import annotations

import io
import json
import sys

import pytest

from gpufill.cli import main
from tests.cli.test_local_endpoint import executions
from tests.support import EXAMPLES

PROVISION = str(EXAMPLES / "requests/provision-spot.json")
MARKET = EXAMPLES / "markets/first-az-sold-out.json"


def answering(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


def test_up_shows_the_plan_and_a_no_launches_nothing(endpoint, deployment, monkeypatch, capsys):
    answering(monkeypatch, "n\n")
    before = executions(endpoint)
    assert main(["up", PROVISION, "--name", "pc-no", *deployment]) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "Plan: 4 instance(s), spot market, fleet fill" in out
    assert "types in preference order: g6.xlarge (1 L4)" in out
    assert "regions in rank order: us-west-2, us-east-1, ap-northeast-1" in out
    # The sold-out us-west-2b is still a pool of the plan (the plan does not launch); 0.4264 is us-west-2a.
    assert "     1  us-west-2a       g6.xlarge     spot      $0.4264/h" in out
    assert "expected: $1.7056/h for 4 instance(s) if the first pool has room; up to $2.5600/h" in out
    assert "if spot runs out: it keeps what it launched (PARTIAL, or ALL_SPOT_EXHAUSTED if none); nothing is bought on-demand" in out
    assert out.rstrip().endswith("Start it? [y/N]")
    assert ("nothing was started. To start it without the question: gpufill up "
            f"{PROVISION} --name pc-no --env local") in captured.err and captured.err.rstrip().endswith("--yes")
    started = sorted(set(executions(endpoint)) - set(before))
    assert len(started) == 1 and started[0].startswith("plan-provision-spot-")  # the plan only


def test_no_answer_at_all_is_a_no(endpoint, deployment, monkeypatch, capsys):
    answering(monkeypatch, "")  # stdin closed
    before = executions(endpoint)
    assert main(["run", PROVISION, "--name", "pc-eof", *deployment]) == 1
    assert "pc-eof" not in executions(endpoint) and len(executions(endpoint)) == len(before) + 1
    assert "nothing was started" in capsys.readouterr().err


def test_a_yes_starts_the_run_with_the_flags_written_over_the_file(deployment, monkeypatch, capsys):
    answering(monkeypatch, "y\n")
    assert main(["run", PROVISION, "--count", "2", "--regions", "us-east-1", "--name", "pc-yes", "--watch", *deployment]) == 0
    out = capsys.readouterr().out
    assert "Plan: 2 instance(s), spot market" in out and "regions in rank order: us-east-1\n" in out
    assert "expected: $0.9400/h for 2 instance(s)" in out
    assert "gpufill run " + PROVISION + ": pc-yes on local" in out
    assert "FULFILLED: 2 of 2 launched" in out and "us-west-2" not in out.split("Start it?")[1]


def test_json_without_yes_is_refused_before_anything_starts(endpoint, deployment, capsys):
    before = executions(endpoint)
    assert main(["up", PROVISION, "--json", *deployment]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["message"].startswith("--json never asks before launching: add --yes")
    assert executions(endpoint) == before


def test_yes_starts_at_once_without_a_plan_run(endpoint, deployment, capsys):
    before = executions(endpoint)
    assert main(["run", "--gpu", "L4", "--count", "1", "--regions", "us-west-2", "--name", "pc-flags", "--yes", "--json",
                 *deployment]) == 0
    assert json.loads(capsys.readouterr().out)["execution"]["name"] == "pc-flags"
    assert sorted(set(executions(endpoint)) - set(before)) == ["pc-flags"]


def test_a_plan_or_status_request_runs_without_a_question(deployment, capsys):
    assert main(["run", str(EXAMPLES / "requests/plan.json"), "--name", "pc-plan", "--watch", *deployment]) == 0
    assert "Start it?" not in capsys.readouterr().out


def test_spot_then_on_demand_says_what_the_rest_costs(deployment, monkeypatch, capsys):
    answering(monkeypatch, "no\n")
    assert main(["run", "--gpu", "L4", "--count", "3", "--market", "spot-then-on-demand", "--regions", "us-west-2,us-east-1",
                 *deployment]) == 1
    out = capsys.readouterr().out
    assert "Plan: 3 instance(s), spot-then-on-demand market" in out
    # g6.2xlarge and g6.4xlarge come with --gpu L4 too; the market offers only g6.xlarge.
    assert "types in preference order: g6.xlarge (1 L4), g6.2xlarge (1 L4, no pool in the plan)" in out
    assert "if spot runs out: the rest is bought on-demand (cheapest on-demand region first, up to $" in out


POOLS = {"pools": [
    {"region": "us-west-2", "availability_zone": "us-west-2a", "instance_type": "g6.xlarge", "market": "spot", "price": 0.43},
    {"region": "us-east-1", "availability_zone": "us-east-1a", "instance_type": "g6.xlarge", "market": "spot", "price": 0.47},
]}


@pytest.mark.parametrize("request_fields, expected", [
    ({}, "it keeps what it launched (PARTIAL, or ALL_SPOT_EXHAUSTED if none); nothing is bought on-demand"),
    ({"wait_for_capacity": {"deadline": "PT6H"}},
     "it waits up to PT6H for capacity (re-scoring and retrying), keeping what it launched; then it keeps what it "
     "launched (PARTIAL, or ALL_SPOT_EXHAUSTED if none); nothing is bought on-demand"),
    ({"all_or_nothing": True, "placement": "same-az"},
     "it terminates what it launched itself and ends GANG_NOT_PLACED: all 3 or none"),
    ({"all_or_nothing": True, "wait_for_capacity": {"deadline": "PT6H"}},
     "each try that cannot launch all 3 terminates what it launched itself, and the run waits up to PT6H holding "
     "nothing (re-scoring and retrying); then it ends CAPACITY_WAIT_EXPIRED: all 3 or none"),
    ({"market": "on-demand"},
     "no spot is used; if on-demand capacity runs out, it keeps what it launched (PARTIAL, or ALL_ON_DEMAND_FAILED if none)"),
    # The catalog's on-demand g6.xlarge: 0.984 in both regions.
    ({"market": "spot-then-on-demand", "on_demand_strategy": "latency"},
     "the rest is bought on-demand (lowest-latency region first, up to $0.9840/h each)"),
])
def test_the_plan_says_what_happens_when_spot_runs_out(request_fields, expected):
    from gpufill.cli.confirm import preview

    shown = preview({"count": 3, **request_fields}, POOLS)
    assert shown.if_spot_runs_out == expected
    assert shown.expected_hourly == 1.29 and shown.regions == ["us-west-2", "us-east-1"]
    assert shown.highest_hourly == (2.952 if request_fields.get("market") == "spot-then-on-demand" else 1.41)


def test_a_gpu_no_region_sells_is_refused_with_each_regions_reason(endpoint, deployment, capsys):
    assert main(["up", "--gpu", "H100", "--name", "pc-h100", *deployment]) == 1
    err = capsys.readouterr().err
    assert "the plan found no pool to try for this request: ap-northeast-1 p5.4xlarge: type not offered in any zone; " in err
    assert "us-west-2 p5.4xlarge: type not offered in any zone; nothing was started" in err
    assert err.rstrip().endswith("nothing was started. Try other --regions or instance types")
    assert "pc-h100" not in executions(endpoint)


def test_ctrl_c_while_the_plan_runs_stops_the_plan_and_says_so(endpoint, deployment, monkeypatch, capsys):
    import boto3

    from gpufill.cli import confirm

    def interrupted(deployment, arn):
        raise KeyboardInterrupt

    monkeypatch.setattr(confirm, "_finish", interrupted)
    before = set(executions(endpoint))
    assert main(["up", PROVISION, "--name", "pc-ctrl-c", *deployment]) == 130
    assert "interrupted: the plan execution plan-provision-spot-" in capsys.readouterr().err
    (plan,) = set(executions(endpoint)) - before
    sfn = boto3.client("stepfunctions", region_name="us-east-1", endpoint_url=endpoint.url,
                       aws_access_key_id="x", aws_secret_access_key="x")
    arn = next(e["executionArn"] for e in sfn.list_executions(stateMachineArn=endpoint.outputs()["StateMachineArn"])["executions"]
               if e["name"] == plan)
    assert sfn.describe_execution(executionArn=arn)["status"] == "ABORTED"


BLOCK = {"max_upfront_usd": 2000, "duration_hours": 24, "start_within": "P7D"}


@pytest.mark.parametrize(("market", "when"), [
    ("spot-then-on-demand", "only if spot and On-Demand cannot fill"),
    ("capacity-block", "instead of spot or On-Demand"),
])
def test_a_request_that_may_buy_a_block_shows_its_upper_bound_before_the_question(market, when):
    from gpufill.cli.confirm import preview
    from gpufill.cli.render_plan import render_plan_preview

    asked = {"count": 2, "instance_types": ["p5.48xlarge"], "regions": ["us-east-2", "us-east-1"], "market": market,
             "capacity_block": BLOCK}
    shown = preview(asked, POOLS)
    lines = render_plan_preview(asked, shown)
    assert f"  Capacity Block: {when}, one block of 2 x p5.48xlarge for 24 h starting within P7D: up to $2,000.00 upfront, " \
           "non-refundable, asked for approval before it is bought" in lines
    if market == "capacity-block":  # no spot or On-Demand pool is tried, so none is priced
        assert shown.pools == [] and shown.expected_hourly is None and shown.regions == ["us-east-2", "us-east-1"]
        assert not any(line.startswith("  expected:") for line in lines)
        assert "(8 H100)" in lines[2] and "no pool in the plan" not in lines[2]
    assert preview({"count": 2}, POOLS).capacity_block is None
