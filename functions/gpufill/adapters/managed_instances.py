"""EC2 calls of teardown and status: find gpufill's instances as they are now, and terminate them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from gpufill.adapters.aws import TransientAwsError, client, is_transient
import os

from gpufill.constants import CAPACITY_BLOCK_TYPE, ENV_DEPLOYMENT, TAG_DEPLOYMENT, TAG_MANAGED, TAG_MANAGED_VALUE, TAG_REQUEST_ID
from gpufill.models.teardown import LiveInstance

FILTER_VALUES_MAX = 200  # DescribeInstances takes at most 200 values per filter
TERMINATE_BATCH = 1000  # TerminateInstances takes up to 1000 ids a call


# Every state but terminated: what a status run or a teardown can still find billing or ending.
LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


def deployment() -> str:
    """This deployment's name (cdk context `env`), the value of the gpufill:deployment tag it launches with."""
    return os.environ[ENV_DEPLOYMENT]


def tagged(region: str, request_id: str | None = None) -> dict[str, LiveInstance]:
    """Every instance in `region` not yet terminated and tagged gpufill:managed=true and
    gpufill:deployment=<this deployment> (and with the request id, when given). Another
    deployment's instances in the same account are never returned."""
    filters = [
        {"Name": f"tag:{TAG_MANAGED}", "Values": [TAG_MANAGED_VALUE]},
        {"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [deployment()]},
        {"Name": "instance-state-name", "Values": LIVE_STATES},
    ]
    if request_id is not None:
        filters.append({"Name": f"tag:{TAG_REQUEST_ID}", "Values": [request_id]})
    return _describe(region, filters)


def by_ids(region: str, instance_ids: list[str]) -> dict[str, LiveInstance]:
    """The instances of `region` among these ids, tagged or not. An id EC2 does not know is
    simply absent: the instance-id filter answers without the InvalidInstanceID.NotFound error."""
    found: dict[str, LiveInstance] = {}
    for start in range(0, len(instance_ids), FILTER_VALUES_MAX):
        chunk = instance_ids[start : start + FILTER_VALUES_MAX]
        found.update(_describe(region, [{"Name": "instance-id", "Values": chunk}]))
    return found


def terminate(region: str, instance_ids: list[str]) -> dict[str, str]:
    """instance id -> the state it was in. The Lambda's role may only terminate instances
    tagged gpufill:managed=true, so even a wrong id here cannot end someone else's instance.

    Terminating is idempotent (an instance already shutting down answers with its state), so
    a throttled or failed call is raised as TransientAwsError and the whole step is retried."""
    previous: dict[str, str] = {}
    ec2 = client("ec2", region)
    with retryable(f"TerminateInstances in {region}"):
        for start in range(0, len(instance_ids), TERMINATE_BATCH):
            reply = ec2.terminate_instances(InstanceIds=instance_ids[start : start + TERMINATE_BATCH])
            for change in reply["TerminatingInstances"]:
                previous[change["InstanceId"]] = change["PreviousState"]["Name"]
    return previous


def state_reason(region: str, instance_id: str) -> str | None:
    """EC2's state-reason code for the instance's last state change (Server.SpotInstanceTermination,
    Client.InstanceInitiatedShutdown, ...), or None when EC2 shows no reason or no instance."""
    with retryable(f"DescribeInstances in {region}"):
        reply = client("ec2", region).describe_instances(Filters=[{"Name": "instance-id", "Values": [instance_id]}])
    for reservation in reply["Reservations"]:
        for i in reservation["Instances"]:
            return (i.get("StateReason") or {}).get("Code") or None
    return None


@contextmanager
def retryable(what: str) -> Iterator[None]:
    """Throttling, 5xx and lost connections (after botocore's own retries) become TransientAwsError,
    which every task of the state machine retries; anything else is a real failure and stays one."""
    try:
        yield
    except Exception as error:
        if is_transient(error):
            raise TransientAwsError(f"{what}: {error}") from error
        raise


def _describe(region: str, filters: list[dict]) -> dict[str, LiveInstance]:
    found: dict[str, LiveInstance] = {}
    with retryable(f"DescribeInstances in {region}"):
        for page in client("ec2", region).get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                for i in reservation["Instances"]:
                    found[i["InstanceId"]] = _live(region, i)
    return found


def _live(region: str, i: dict) -> LiveInstance:
    launched = i.get("LaunchTime")
    return LiveInstance(
        instance_id=i["InstanceId"],
        region=region,
        availability_zone=(i.get("Placement") or {}).get("AvailabilityZone"),
        instance_type=i.get("InstanceType"),
        state=(i.get("State") or {}).get("Name", "unknown"),
        tags={t["Key"]: t["Value"] for t in i.get("Tags") or []},
        launch_time=launched.isoformat(timespec="seconds") if isinstance(launched, datetime) else launched,
        spot=i.get("InstanceLifecycle") == "spot",
        capacity_block=i.get("InstanceLifecycle") == CAPACITY_BLOCK_TYPE,
        client_token=i.get("ClientToken") or None,
    )
