"""ready_timeout on the local engine: the run waits for each model server, and the result says per
instance whether it serves and, when not, the last startup step it reached; status shows the step."""

from gpufill.cli.render_status import render_status
from gpufill.cli.render_summary import render_summary

# us-west-2a's instances never get past syncing the model; us-west-2b's serve after 5 minutes.
STALLS = {"serving_after_seconds": 300, "stalls_at": "syncing model"}
MARKET = {
    "startup": {"serving_after_seconds": 300},
    "regions": {"us-west-2": {"zones": {
        "us-west-2a": {"g6.xlarge": {"spot_price": 0.40, "spot": 2, "startup": STALLS}},
        "us-west-2b": {"g6.xlarge": {"spot_price": 0.42, "spot": 2}},
    }}},
}
REQUEST = {"count": 4, "regions": ["us-west-2"], "ready_timeout": "PT10M"}


def verdicts(execution) -> dict[str, list[tuple]]:
    """zone -> [(serving, startup_step, reason)] of the result's instances."""
    found: dict[str, list[tuple]] = {}
    for i in execution.output["instances"]:
        found.setdefault(i["availability_zone"], []).append((i["serving"], i["startup_step"], i.get("serving_reason")))
    return found


def test_an_instance_that_never_serves_is_reported_with_its_last_step_and_the_others_serve(local_account):
    with local_account(MARKET) as engine:
        execution = engine.run(REQUEST, name="stalls")
        status = engine.run({"action": "status", "request_id": "stalls"}, name="status-of-stalls")
    assert execution.status == "SUCCEEDED" and execution.output["status"] == "FULFILLED"
    stuck = (False, "syncing model", "still at startup step 'syncing model' when ready_timeout PT10M ran out")
    assert verdicts(execution) == {"us-west-2a": [stuck, stuck], "us-west-2b": [(True, "serving", None)] * 2}
    assert execution.output["instances_serving"] == 2
    # The run waited the whole ready_timeout (from when the instances ran), checking once a minute.
    assert 600 <= execution.metrics["modelled_seconds"] < 600 + 60
    # The time to fill ends with the last launch step: the capacity was had in seconds.
    assert 0 < execution.metrics["fill_seconds"] < 30
    assert execution.entered().count("CheckServing") == 11
    # The status view reads the same tag: where each instance's startup got to.
    steps = {i["availability_zone"]: i["startup_step"] for i in status.output["instances"]}
    assert steps == {"us-west-2a": "syncing model", "us-west-2b": "serving"}
    shown = [line for line in render_status(status.output) if line.startswith("  i-")]
    assert sorted(line.rsplit("  ", 1)[-1] for line in shown) == ["startup: serving"] * 2 + ["startup: syncing model"] * 2


def test_the_wait_ends_as_soon_as_every_server_answers(local_account):
    with local_account({**MARKET, "regions": {"us-west-2": {"zones": {
            "us-west-2b": {"g6.xlarge": {"spot_price": 0.42, "spot": 4}}}}}}) as engine:
        execution = engine.run({**REQUEST, "ready_timeout": "PT2H"}, name="serves")
    assert verdicts(execution) == {"us-west-2b": [(True, "serving", None)] * 4}
    assert execution.output["instances_serving"] == 4
    assert 300 <= execution.metrics["modelled_seconds"] < 300 + 60 + 30, "not the two hours ready_timeout allowed"


def test_a_server_slower_than_ready_timeout_is_not_serving_and_one_within_it_is(local_account):
    market = {"startup": {"serving_after_seconds": 300},
              "regions": {"us-west-2": {"zones": {"us-west-2b": {"g6.xlarge": {"spot_price": 0.42, "spot": 2}}}}}}
    with local_account(market) as engine:
        short = engine.run({"count": 1, "regions": ["us-west-2"], "ready_timeout": "PT4M"}, name="short")
        long = engine.run({"count": 1, "regions": ["us-west-2"], "ready_timeout": "PT6M"}, name="long")
    assert verdicts(short) == {"us-west-2b": [
        (False, "loading model", "still at startup step 'loading model' when ready_timeout PT4M ran out")]}
    assert verdicts(long) == {"us-west-2b": [(True, "serving", None)]}


def test_a_failed_startup_ends_the_wait_early_with_the_step_it_failed_at(local_account):
    market = {"startup": {"serving_after_seconds": 300, "fails_at": "loading model"},
              "regions": {"us-west-2": {"zones": {"us-west-2b": {"g6.xlarge": {"spot_price": 0.42, "spot": 1}}}}}}
    with local_account(market) as engine:
        execution = engine.run({"count": 1, "regions": ["us-west-2"]}, name="fails")
    assert verdicts(execution) == {"us-west-2b": [(
        False, "failed: loading model",
        "startup.sh stopped: failed: loading model (its log: /var/log/gpufill-startup.log)")]}
    assert execution.metrics["modelled_seconds"] < 400, "the default PT30M was not waited out"


def test_ready_timeout_zero_does_not_wait_and_reports_serving_unknown(local_account):
    with local_account(MARKET) as engine:
        execution = engine.run({**REQUEST, "ready_timeout": "PT0S"}, name="no-wait")
    assert execution.output["status"] == "FULFILLED" and execution.output["launched"] == 4
    assert "CheckServing" not in execution.entered()
    assert "instances_serving" not in execution.output
    assert all("serving" not in i and "startup_step" not in i for i in execution.output["instances"])
    assert execution.metrics["modelled_seconds"] < 60


def test_a_request_with_every_tag_it_may_add_still_reports_its_steps(local_account):
    tags = {f"team-{n}": "gpu" for n in range(45)}
    market = {"startup": {"serving_after_seconds": 120},
              "regions": {"us-west-2": {"zones": {"us-west-2b": {"g6.xlarge": {"spot_price": 0.42, "spot": 1}}}}}}
    with local_account(market) as engine:
        execution = engine.run({"count": 1, "regions": ["us-west-2"], "tags": tags}, name="tagged")
    assert verdicts(execution) == {"us-west-2b": [(True, "serving", None)]}


def test_simulate_shows_each_check_and_every_verdict(local_account):
    with local_account(MARKET) as engine:
        execution = engine.run(REQUEST, name="shown")
    text = render_summary(execution)
    assert text.count("  not serving: still at startup step 'syncing model' when ready_timeout PT10M ran out") == 2
    assert text.count("/h  serving") == 2
    assert "FULFILLED: 4 of 4 launched, $" in text and "/h in all, 2 serving" in text


def test_a_check_that_keeps_failing_still_reports_what_was_launched(local_account):
    with local_account(MARKET) as engine:
        engine.faults.lambda_invoke("CheckServing", error="Lambda.ServiceException", times=None)
        execution = engine.run(REQUEST, name="check-fails")
    assert execution.status == "SUCCEEDED"
    assert (execution.output["status"], execution.output["launched"]) == ("FULFILLED", 4)
    assert "instances_serving" not in execution.output, "serving unknown, not guessed"
    assert all("serving" not in i for i in execution.output["instances"])
