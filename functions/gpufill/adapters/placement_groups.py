"""Cluster placement groups for same-az gangs of EFA types: created once, deleted when empty.

A group is named for its deployment, request and AZ (policy/gang.py), so creating it again
(a retried step, the next batch) finds the same group. It carries gpufill's tags: the role
may only create groups with them and only delete groups that have them.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from gpufill.adapters.aws import client
from gpufill.adapters.managed_instances import retryable
from gpufill.constants import TAG_DEPLOYMENT, TAG_MANAGED, TAG_MANAGED_VALUE, TAG_REQUEST_ID

# EC2's answers: the name is taken (by this request's own group), no such group, instances still in it.
DUPLICATE = "InvalidPlacementGroup.Duplicate"
UNKNOWN = "InvalidPlacementGroup.Unknown"
IN_USE = "InvalidPlacementGroup.InUse"


def ensure(region: str, name: str, *, request_id: str, deployment: str) -> None:
    tags = {TAG_MANAGED: TAG_MANAGED_VALUE, TAG_DEPLOYMENT: deployment, TAG_REQUEST_ID: request_id}
    try:
        with retryable(f"CreatePlacementGroup in {region}"):
            client("ec2", region).create_placement_group(
                GroupName=name,
                Strategy="cluster",
                TagSpecifications=[
                    {"ResourceType": "placement-group", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                ],
            )
    except ClientError as error:
        if _code(error) != DUPLICATE:
            raise


def remove_empty(region: str, deployment: str, request_ids: set[str] | None = None) -> list[str]:
    """Delete this deployment's groups in `region` (of these requests, when given) that hold no
    instance; a group whose instances are still shutting down stays for a later teardown."""
    filters = [
        {"Name": f"tag:{TAG_MANAGED}", "Values": [TAG_MANAGED_VALUE]},
        {"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [deployment]},
    ]
    ec2 = client("ec2", region)
    with retryable(f"DescribePlacementGroups in {region}"):
        groups = ec2.describe_placement_groups(Filters=filters)["PlacementGroups"]
    deleted = []
    for group in groups:
        tags = {t["Key"]: t["Value"] for t in group.get("Tags") or []}
        if request_ids is not None and tags.get(TAG_REQUEST_ID) not in request_ids:
            continue
        try:
            with retryable(f"DeletePlacementGroup in {region}"):
                ec2.delete_placement_group(GroupName=group["GroupName"])
        except ClientError as error:
            if _code(error) in (IN_USE, UNKNOWN):
                continue
            raise
        deleted.append(group["GroupName"])
    return deleted


def _code(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "")
