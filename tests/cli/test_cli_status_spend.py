"""`gpufill status` answers "what am I paying for": one line per request (instances by state,
$/h now, spend so far), the teardowns waiting for an answer with the commands that answer them,
ended requests hidden unless --all. `approve`/`reject` take the request id as well as the
teardown's execution name; an id nothing knows exits 1."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from gpufill.cli import main
from gpufill.policy import spend
from tests.support import EXAMPLES

PROVISION = str(EXAMPLES / "requests/provision-spot.json")
MARKET = EXAMPLES / "markets/first-az-sold-out.json"


def provision(deployment, name: str, count: int, capsys) -> None:
    assert main(["run", PROVISION, "--count", str(count), "--name", name, "--yes", "--watch", "--json", *deployment]) == 0
    capsys.readouterr()


def ask_teardown(deployment, request_id: str, capsys) -> str:
    assert main(["teardown", request_id, "--requested-by", "ana", "--json", *deployment]) == 0
    return json.loads(capsys.readouterr().out)["execution"]["name"]


def request_line(out: str, request_id: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"  {request_id} "))


def test_status_prints_one_line_per_request_with_its_rate_and_spend(deployment, capsys):
    provision(deployment, "sp-four", 4, capsys)
    provision(deployment, "sp-two", 2, capsys)
    teardown = ask_teardown(deployment, "sp-four", capsys)
    # Asking again about the same instances is refused, naming the pending teardown (status lists one).
    assert main(["teardown", "sp-four", "--requested-by", "bob", *deployment]) == 1
    out = capsys.readouterr().out
    assert "NOTHING_TO_TERMINATE: refused, 4 instance(s) already wait in another teardown's approval" in out
    assert f"gpufill approve teardown:{teardown}" in out

    assert main(["status", *deployment]) == 0
    out = capsys.readouterr().out
    # The first AZ of us-west-2 is sold out: sp-four fills us-west-2b at 0.45, sp-two us-west-2c at 0.438.
    four, two = request_line(out, "sp-four"), request_line(out, "sp-two")
    assert re.search(r"4 running +1\.8000 +\d+\.\d{4}  20\d\d-", four)
    assert f"teardown waiting for an answer: teardown:{teardown}" in four
    assert re.search(r"2 running +0\.8760 ", two) and "teardown waiting" not in two
    assert "i-" not in out.split("Pending teardowns")[0]  # no per-instance rows unless --instances
    assert "Paying now: 6 running instance(s), $2.6760/h; spent so far by the requests shown: $" in out
    pending = out.split("Pending teardowns: 1, waiting for an answer")[1]
    assert f"gpufill approve teardown:{teardown} --env local --region us-east-1 --endpoint-url http://127.0.0.1:" in pending
    assert f"gpufill reject teardown:{teardown} --env local" in pending

    assert main(["status", "--instances", *deployment]) == 0
    out = capsys.readouterr().out
    assert out.count(" sp-four ") == 1 + 4 and "Managed instances (every request" in out


def test_status_json_carries_the_same_lines(deployment, capsys):
    assert main(["status", "--json", *deployment]) == 0
    document = json.loads(capsys.readouterr().out)
    lines = {r["request_id"]: r for r in document["requests"]}
    assert lines["sp-two"]["counts"] == {"running": 2} and lines["sp-two"]["hourly_cost"] == 0.876
    assert lines["sp-two"]["spent"] > 0 and lines["sp-two"]["ended"] is False
    assert lines["sp-four"]["teardown_waiting"] == document["pending_teardowns"][0]["approval_id"]
    assert document["ended_hidden"] == 0 and document["running"] == 6


def test_approve_takes_the_request_id_and_ended_requests_are_hidden_then(deployment, capsys):
    teardown = next(p["execution"] for p in pending(deployment, capsys) if p["target"].get("request_id") == "sp-four")
    assert main(["approve", "sp-four", "--reason", "done", "with", "it", *deployment]) == 0
    out = capsys.readouterr().out
    assert f"approved teardown {teardown} as " in out and "its 4 instance(s) will now be terminated" in out
    assert main(["watch", teardown, "--json", *deployment]) == 0
    assert json.loads(capsys.readouterr().out)["execution"]["output"]["status"] == "TERMINATED"

    assert main(["status", *deployment]) == 0
    out = capsys.readouterr().out
    assert "  sp-four " not in out and "(1 ended request(s) hidden; --all shows them)" in out
    assert "Pending teardowns" not in out
    assert main(["status", "--all", *deployment]) == 0
    # What it cost from launch to the teardown stays on the line once nothing is paid for by the hour.
    assert re.search(r"4 terminated +0\.0000 +\d+\.\d{4}", request_line(capsys.readouterr().out, "sp-four"))
    assert main(["status", "sp-four", "--json", *deployment]) == 0
    [ended] = json.loads(capsys.readouterr().out)["requests"]
    assert ended["hourly_cost"] == 0 and ended["spent"] > 0 and ended["ended"] is True
    assert main(["status", "sp-four", "--json", *deployment]) == 0  # asked for by id: shown though ended
    assert [r["request_id"] for r in json.loads(capsys.readouterr().out)["requests"]] == ["sp-four"]


def test_reject_by_request_id_and_a_second_answer_is_refused(deployment, capsys):
    teardown = ask_teardown(deployment, "sp-two", capsys)
    assert main(["reject", "sp-two", "--json", *deployment]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["execution"] == teardown and answer["decision"] == "rejected"
    assert main(["approve", "sp-two", *deployment]) == 1
    assert f"teardown:{teardown} was already rejected by " in capsys.readouterr().err


def test_a_teardown_of_everything_marks_every_live_request_and_is_answered_by_its_name_only(deployment, capsys):
    assert main(["teardown", "--all", "--requested-by", "ana", "--json", *deployment]) == 0
    everything = json.loads(capsys.readouterr().out)["execution"]["name"]
    assert main(["status", "--json", *deployment]) == 0
    lines = {r["request_id"]: r for r in json.loads(capsys.readouterr().out)["requests"]}
    assert list(lines) == ["sp-two"] and lines["sp-two"]["teardown_waiting"] == f"teardown:{everything}"
    assert main(["approve", "sp-two", *deployment]) == 1
    assert (f"request 'sp-two' has no approval of its own waiting; teardown:{everything} (every instance of the "
            "deployment) waits for an answer: answer it by its id") in capsys.readouterr().err
    # The teardown of everything names no request: a mistyped id is still unknown, not shown as waiting.
    assert main(["status", "sp-no-such-request", *deployment]) == 1
    assert "no request 'sp-no-such-request' is known to deployment" in capsys.readouterr().err
    assert main(["reject", everything, *deployment]) == 0
    capsys.readouterr()


def test_a_teardown_whose_instances_ended_elsewhere_leaves_status_and_is_answered_nothing_to_do(deployment, capsys):
    import boto3

    provision(deployment, "sp-gone", 1, capsys)
    teardown = ask_teardown(deployment, "sp-gone", capsys)
    assert main(["status", "sp-gone", "--json", *deployment]) == 0
    [instance] = json.loads(capsys.readouterr().out)["instances"]
    url = deployment[deployment.index("--endpoint-url") + 1]
    boto3.client("ec2", region_name=instance["region"], endpoint_url=url).terminate_instances(
        InstanceIds=[instance["instance_id"]])  # ended by hand, outside gpufill
    assert main(["status", "--all", *deployment]) == 0  # this status run sees it ended
    assert f"teardown:{teardown}" not in capsys.readouterr().out
    assert main(["approve", "sp-gone", *deployment]) == 0
    assert f"nothing to do: all 1 instance(s) of teardown {teardown} had already ended" in capsys.readouterr().out


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_an_unknown_id_exits_1_and_says_so(deployment, capsys, verb):
    assert main([verb, "no-such-run", "--json", *deployment]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["message"].startswith("no approval is on record for 'no-such-run', neither as an approval id, a "
                                       "teardown's or a run's execution name, nor as the request")
    assert error["exit_code"] == 1


def pending(deployment, capsys) -> list[dict]:
    assert main(["status", "--json", *deployment]) == 0
    return json.loads(capsys.readouterr().out)["pending_teardowns"]


def test_spend_counts_an_unpriced_instance_at_the_catalog_price_and_ended_ones_from_launch_to_end():
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    two_hours_ago = (now - timedelta(hours=2)).isoformat()
    view = {
        "generated_at": now.isoformat(),
        "by_request": {"r1": {"running": 2}, "old": {"terminated": 1}},
        "instances": [
            {"request_id": "r1", "state": "running", "hourly_price": 0.5, "launched_at": two_hours_ago,
             "instance_type": "g6.xlarge", "region": "us-west-2"},
            {"request_id": "r1", "state": "running", "hourly_price": None, "launched_at": two_hours_ago,
             "instance_type": "g6.xlarge", "region": "us-west-2"},
            {"request_id": "old", "state": "terminated", "hourly_price": 0.5, "launched_at": two_hours_ago,
             "ended_at": (now - timedelta(minutes=30)).isoformat(), "instance_type": "g6.xlarge", "region": "us-west-2"},
            # Ended unseen (EC2 no longer shows it, nothing recorded its end): no known spend.
            {"request_id": "old", "state": "gone", "hourly_price": 0.5, "launched_at": two_hours_ago,
             "instance_type": "g6.xlarge", "region": "us-west-2"},
        ],
    }
    r1, old = spend.requests(view)
    # 0.984 $/h: the catalog's on-demand price of g6.xlarge in us-west-2.
    assert (r1["hourly_cost"], r1["spent"], r1["estimated"]) == (1.484, 2.968, True)
    # 1.5 h at 0.5 $/h until the teardown; nothing is paid for by the hour once it ended.
    assert (old["hourly_cost"], old["spent"], old["ended"], old["estimated"]) == (0.0, 0.75, True, False)


def test_an_ended_unpriced_instance_is_spend_at_the_catalog_price_and_marked_estimated():
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    view = {"generated_at": now.isoformat(), "instances": [
        {"request_id": "r", "state": "terminated", "hourly_price": None, "instance_type": "g6.xlarge", "region": "us-west-2",
         "launched_at": (now - timedelta(hours=3)).isoformat(), "ended_at": (now - timedelta(hours=2)).isoformat()},
    ]}
    [entry] = spend.requests(view)
    assert (entry["spent"], entry["estimated"], entry["ended"]) == (0.984, True, True)


def test_a_name_already_taken_is_refused_before_the_plan_and_the_question(deployment, capsys):
    provision(deployment, "sp-taken", 1, capsys)
    assert main(["up", PROVISION, "--name", "sp-taken", *deployment]) == 2
    captured = capsys.readouterr()
    assert "--name 'sp-taken': the execution sp-taken already exists (succeeded); choose another --name" in captured.err
    assert "gpufill watch sp-taken --env local" in captured.err
    assert "[y/N]" not in captured.out and "pools in the order" not in captured.out


def test_status_of_a_request_nobody_knows_exits_1_and_says_so(deployment, capsys):
    assert main(["status", "sp-no-such-request", "--json", *deployment]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["message"].startswith("no request 'sp-no-such-request' is known to deployment local")


def test_a_long_request_id_is_shown_whole_in_every_view(deployment, capsys):
    long_id = "sp-a-request-named-after-a-long-file-name-of-the-team-" + "x" * 12
    provision(deployment, long_id, 1, capsys)
    assert main(["status", "--instances", *deployment]) == 0
    out = capsys.readouterr().out
    assert request_line(out, long_id)  # the requests table
    assert sum(f" {long_id} " in line for line in out.splitlines() if " i-" in line) == 1  # the instances table
