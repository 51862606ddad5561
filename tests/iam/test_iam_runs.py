"""Runs on the local engine with every call judged by the CDK app's IAM policies."""

from __future__ import annotations

from tests.support import zone

ONE_REGION = {"regions": {"us-west-2": {"zones": {"us-west-2a": zone(0.40, spot=4), "us-west-2b": zone(0.50, spot=4)}}}}


def request(**fields):
    return {"regions": ["us-west-2"], "scoring": "classic", "count": 2, **fields}


def test_a_fleet_launch_is_authorized_by_the_deployed_policies(judged_account):
    with judged_account(ONE_REGION) as (engine, judgements):
        execution = engine.run(request(launch_mode="fleet"), name="judged-fleet")
    assert not judgements.refusals, judgements.refusals[:5]
    assert execution.output["status"] == "FULFILLED", execution.cause


def test_a_run_instances_launch_is_authorized_by_the_deployed_policies(judged_account):
    with judged_account(ONE_REGION) as (engine, judgements):
        execution = engine.run(request(launch_mode="partial"), name="judged-partial")
    assert not judgements.refusals, judgements.refusals[:5]
    assert execution.output["status"] == "FULFILLED", execution.cause


def test_status_and_teardown_are_authorized_by_the_deployed_policies(judged_account):
    with judged_account(ONE_REGION) as (engine, judgements):
        launched = engine.run(request(launch_mode="fleet"), name="judged-launch")
        status = engine.run({"action": "status", "request_id": "judged-launch"}, name="judged-status")
        name = "judged-teardown"
        teardown = engine.run({"action": "teardown", "request_id": "judged-launch"}, name=name, decision="approved")
    assert not judgements.refusals, judgements.refusals[:5]
    assert launched.output["status"] == "FULFILLED", launched.cause
    assert status.status == "SUCCEEDED", status.cause
    assert teardown.status == "SUCCEEDED", teardown.cause
