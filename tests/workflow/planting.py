"""Planting instances in the simulated account the way a provisioning run leaves them
(tagged at launch, recorded in the table), and reading back what a teardown did."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from decimal import Decimal

from gpufill import constants
from gpufill.local.deploy.images import LOCAL_AMI
from gpufill.local.engine import ENV_NAME

from tests.support.child import DEADLINE_SECONDS

WEST, EAST = "us-west-2", "us-east-1"
ZONE = {WEST: "us-west-2a", EAST: "us-east-1b"}
MARKET = {
    "description": "room for everything the tests plant",
    "regions": {
        region: {"zones": {zone: {"g6.xlarge": {"spot_price": 0.43, "spot": 200, "on_demand": 200}}}}
        for region, zone in ZONE.items()
    },
}
PRICE = 0.43
DEPLOYMENT = ENV_NAME  # the deployment the local engine plays


def put_intent(engine, request_id, region, token="tok-1"):
    """The intent a launch writes before RunInstances (constants: KIND_INTENT)."""
    engine_table(engine).put_item(
        Item={
            "instance_id": f"{constants.INTENT_KEY_PREFIX}{token}",
            "kind": constants.KIND_INTENT,
            "request_id": request_id,
            "region": region,
            "client_token": token,
            "deployment": DEPLOYMENT,
            "created_at": "2026-01-01T00:00:00+00:00",
            "expires_at": 2_000_000_000,
        }
    )


def add_launch_region(engine, region):
    """What every launch adds to the deployment's launch-regions set."""
    engine_table(engine).update_item(
        Key={"instance_id": constants.LAUNCH_REGIONS_KEY},
        UpdateExpression="ADD regions :r",
        ExpressionAttributeValues={":r": {region}},
    )


def launch(
    engine, region, *, count=1, request_id=None, managed=True, record_as=None, record=True, deployment=DEPLOYMENT
) -> list[str]:
    """Launch `count` instances; tag them like gpufill does (or not; `deployment=None` leaves the
    deployment tag off, another name plays another deployment in the same account); record them
    under `record_as` (default: their own request id) unless record=False."""
    tags = [{"Key": "team", "Value": "ml"}]
    if managed:
        tags.append({"Key": constants.TAG_MANAGED, "Value": "true"})
    if deployment is not None:
        tags.append({"Key": constants.TAG_DEPLOYMENT, "Value": deployment})
    if request_id is not None:
        tags.append({"Key": constants.TAG_REQUEST_ID, "Value": request_id})
    reply = engine.client("ec2", region).run_instances(
        ImageId=LOCAL_AMI,
        InstanceType="g6.xlarge",
        MinCount=count,
        MaxCount=count,
        Placement={"AvailabilityZone": ZONE[region]},
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )
    ids = [i["InstanceId"] for i in reply["Instances"]]
    _until_visible(engine, region, ids)
    if record:
        for instance_id in ids:
            put_record(engine, instance_id, region, record_as or request_id)
    return ids


def _until_visible(engine, region, ids) -> None:
    """Planted instances play ones launched long ago: wait out EC2's visibility lag for new instances."""
    ec2 = engine.client("ec2", region)
    for _ in range(10):
        try:
            for start in range(0, len(ids), 1000):
                ec2.describe_instances(InstanceIds=ids[start : start + 1000])
            return
        except ec2.exceptions.ClientError as error:
            if error.response["Error"]["Code"] != "InvalidInstanceID.NotFound":
                raise


def put_record(engine, instance_id, region, request_id):
    table = engine_table(engine)
    table.put_item(
        Item={
            "instance_id": instance_id,
            "request_id": request_id,
            "region": region,
            "availability_zone": ZONE[region],
            "instance_type": "g6.xlarge",
            "market": "on-demand",
            "hourly_price": Decimal(str(PRICE)),
            "state": "running",
            "launched_at": "2026-01-01T00:00:00+00:00",
        }
    )


def engine_table(engine):
    import boto3

    return boto3.resource("dynamodb", region_name=EAST).Table(constants.instances_table_name("local"))


def states(engine, region, ids) -> dict[str, str]:
    reply = engine.client("ec2", region).describe_instances(InstanceIds=ids)
    return {i["InstanceId"]: i["State"]["Name"] for r in reply["Reservations"] for i in r["Instances"]}


def record(engine, instance_id) -> dict:
    return engine_table(engine).get_item(Key={"instance_id": instance_id})["Item"]


def terminated_ids(execution) -> list[str]:
    return sorted(i for region in execution.output["terminated"] for i in region["terminated"])


def tags(engine, region, instance_id) -> dict[str, str]:
    reply = engine.client("ec2", region).describe_instances(InstanceIds=[instance_id])
    return {t["Key"]: t["Value"] for r in reply["Reservations"] for i in r["Instances"] for t in i.get("Tags", [])}


@contextmanager
def in_background(engine, request, name):
    """Run an execution in another thread, leaving its approval to the test."""
    box: dict = {}
    # One generous deadline (tests/support/child.py's): a loaded machine stretches a run's wall
    # time many times over, and the run stops itself at it (LocalTimeout, then a 5 s grace).
    thread = threading.Thread(target=lambda: box.setdefault("execution", engine.run(request, name=name, timeout=DEADLINE_SECONDS)))
    thread.start()
    try:
        yield lambda: (thread.join(DEADLINE_SECONDS + 30), box["execution"])[1]
    finally:
        if thread.is_alive():  # a failed assertion: let the run end so the engine can close
            item = engine.approval(name)
            if item and not item.get("decided_at"):
                engine.expire_approval(name)
            thread.join(DEADLINE_SECONDS + 30)
