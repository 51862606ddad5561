"""The fault catalogue's checks (tests/faults): what EC2 holds, what gpufill recorded, what the run said.

Every fault test ends with `audit`, which holds gpufill to its promise: every instance it
started is known and counted once, whatever failed.
"""

from __future__ import annotations

from dataclasses import dataclass

import boto3

from gpufill import constants
from tests.support import zone
from tests.support.workflow_ends import fail_errors

WEST, EAST = "us-west-2", "us-east-1"
# Room for everything in two regions; the top AZ of Oregon first.
MARKET = {"regions": {
    WEST: {"advisor_tier": {"g6.xlarge": 0}, "zones": {
        "us-west-2a": zone(0.40, spot=3, on_demand=10), "us-west-2b": zone(0.42, spot=10, on_demand=10)}},
    EAST: {"advisor_tier": {"g6.xlarge": 3}, "zones": {
        "us-east-1a": zone(0.60, spot=10, on_demand=10), "us-east-1b": zone(0.62, spot=10, on_demand=10)}},
}}
# RunInstances, one pool at a time: the launch path most of the catalogue exercises (fleets: test_fleet_faults.py).
REQUEST = {"count": 4, "regions": [WEST, EAST], "launch_mode": "partial"}
# Every way a run may end: the errors of the workflow's Fail states, each documented (a docs test
# holds that); a raw error name is none of them.
DOCUMENTED_ENDS = fail_errors()


@dataclass
class Audit:
    in_ec2: set[str]
    recorded: set[str]
    reported: set[str]
    untracked_after_status: set[str]


def live_instances(request_id: str, regions=(WEST, EAST), deployment: str | None = None) -> set[str]:
    """The ground truth: what the simulated EC2 holds, read from its backend (no eventual
    consistency, no injected fault in the way)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    found = set()
    for region in regions:
        for instance in ec2_backends[DEFAULT_ACCOUNT_ID][region].all_instances():
            tags = {t["key"]: t["value"] for t in instance.get_tags()}
            if tags.get(constants.TAG_REQUEST_ID) != request_id or instance.state not in ("pending", "running"):
                continue
            if deployment and tags.get(constants.TAG_DEPLOYMENT) != deployment:
                continue
            found.add(instance.id)
    return found


def table_items(request_id: str, env: str = "local") -> list[dict]:
    """The request's instance records (approvals, intents and run items left out)."""
    table = boto3.resource("dynamodb", region_name="us-east-1").Table(constants.instances_table_name(env))
    return [i for i in table.scan()["Items"] if "kind" not in i and i.get("request_id") == request_id]


def recorded_instances(request_id: str, env: str = "local") -> set[str]:
    """The instances the records say may still run (a record of an end is history, not a holding)."""
    return {i["instance_id"] for i in table_items(request_id, env) if i.get("state") not in ("terminated", "shutting-down")}


def reported_instances(execution) -> set[str]:
    if execution.status == "SUCCEEDED":
        return {i["instance_id"] for i in execution.output["instances"]}
    listed = (execution.cause or {}).get("instances") or []
    return {i if isinstance(i, str) else i["instance_id"] for i in listed}


def ends_documented(execution) -> bool:
    if execution.status == "SUCCEEDED":
        return execution.output.get("status") in ("FULFILLED", "PARTIAL", "PLANNED")
    return execution.error in DOCUMENTED_ENDS


def audit(engine, execution, *, env: str = "local", request_id: str | None = None, regions=(WEST, EAST)) -> Audit:
    """The four counts the catalogue holds gpufill to, after one status run of the request
    (`request_id`: the request a continued execution runs, when not its own name)."""
    request_id = request_id or execution.name
    in_ec2 = live_instances(request_id, regions, deployment=env)
    recorded_before = recorded_instances(request_id, env)
    engine.run({"action": "status", "request_id": request_id}, name=f"status-{request_id}"[:80], env=env)
    return Audit(
        in_ec2=in_ec2,
        recorded=recorded_before,
        reported=reported_instances(execution),
        untracked_after_status=in_ec2 - recorded_instances(request_id, env),
    )


def assert_exactly_once(
    engine, execution, *, launched: int | None = None, env: str = "local", request_id: str | None = None,
    regions=(WEST, EAST),
) -> Audit:
    assert ends_documented(execution), (execution.status, execution.error, execution.cause)
    seen = audit(engine, execution, env=env, request_id=request_id, regions=regions)
    assert seen.in_ec2 == seen.recorded == seen.reported, seen
    assert not seen.untracked_after_status
    assert len(seen.in_ec2) <= REQUEST["count"] or launched is None
    if launched is not None:
        assert len(seen.in_ec2) == launched, seen
    return seen


def assert_purchases_approved(engine, env: str = "local") -> list[str]:
    """Every Capacity Block EC2 sold is an offering a person approved, bought once."""
    import json

    table = boto3.resource("dynamodb", region_name="us-east-1").Table(constants.instances_table_name(env))
    approved = {
        json.loads(i["purchase"])["offering_id"]
        for i in table.scan()["Items"]
        if i.get("approval_for") == "capacity-block-purchase" and i.get("decision") == "approved"
    }
    bought = [offering for _, offering in engine.market.blocks.purchases]
    assert len(bought) == len(set(bought)), bought
    assert set(bought) <= approved, (bought, approved)
    return bought
