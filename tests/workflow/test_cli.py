"""`gpufill simulate`: the documented JSON shape, exit codes and the human summary."""

import json

from gpufill.cli import main
from tests.support import EXAMPLES


def test_simulate_json_matches_the_documented_shape(capsys):
    code = main(["simulate", str(EXAMPLES / "requests/provision-spot.json"),
                 "--market", str(EXAMPLES / "markets/first-az-sold-out.json"), "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0
    assert printed["execution"]["status"] == "SUCCEEDED"
    output = printed["execution"]["output"]
    assert (output["status"], output["launched"]) == ("FULFILLED", 4)
    # the scenario by hand: one fleet over Oregon; us-west-2a is sold out, and of the pools that
    # can hold all 4 EC2 takes the cheapest, 2b (2c is cheaper but has only 2)
    assert [(a["availability_zone"], a["launched"]) for a in output["attempts"]] == [("us-west-2a", 0), ("us-west-2b", 4)]
    assert output["hourly_cost"] == round(4 * 0.45, 4)
    assert set(printed["metrics"]) >= {"state_transitions", "lambda_invocations", "ec2_calls", "modelled_seconds"}
    assert printed["metrics"]["ec2_calls"]["CreateFleet"] == printed["metrics"]["launch_calls"] == 1


def test_simulate_exits_1_when_the_run_fails_and_explains_it(capsys):
    code = main(["simulate", str(EXAMPLES / "requests/provision-spot.json"),
                 "--market", str(EXAMPLES / "markets/all-spot-sold-out.json")])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED with ALL_SPOT_EXHAUSTED" in out
    assert '"market": "on-demand"' in out
    assert "> LaunchBatch" in out  # progress while it ran


def test_simulate_exits_2_for_unusable_files(tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert main(["simulate", str(broken), "--market", str(EXAMPLES / "markets/plenty.json")]) == 2
    assert main(["simulate", str(EXAMPLES / "requests/provision-spot.json"), "--market", str(tmp_path / "none.json")]) == 2
    bad_market = tmp_path / "market.json"
    bad_market.write_text(json.dumps({"regions": {"us-west-2": {"zones": {"eu-west-1a": {}}}}}))
    assert main(["simulate", str(EXAMPLES / "requests/provision-spot.json"), "--market", str(bad_market)]) == 2
    assert "not an availability zone of us-west-2" in capsys.readouterr().err
