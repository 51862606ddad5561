"""Where instances go on the network: the default VPC's subnet for an AZ, and a security group with no inbound rules.

Instances are reached only through SSM Session Manager, which needs outbound HTTPS and
nothing inbound, so gpufill's own group has zero ingress rules.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from gpufill.adapters import container
from gpufill.adapters.aws import client
from gpufill.constants import INSTANCE_SECURITY_GROUP_NAME, TAG_MANAGED


class NetworkSetupError(Exception):
    """The region has no default VPC (or subnet for the AZ) and the regions config names none."""


@container.cached()
def default_vpc(region: str) -> str:
    vpcs = client("ec2", region).describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise NetworkSetupError(f"{region} has no default VPC; name subnets and a security group in the regions config")
    return vpcs[0]["VpcId"]


@container.cached()
def default_subnet(region: str, zone: str) -> str:
    subnets = client("ec2", region).describe_subnets(
        Filters=[
            {"Name": "vpc-id", "Values": [default_vpc(region)]},
            {"Name": "availability-zone", "Values": [zone]},
            {"Name": "default-for-az", "Values": ["true"]},
        ]
    )["Subnets"]
    if not subnets:
        raise NetworkSetupError(f"the default VPC of {region} has no default subnet in {zone}")
    return subnets[0]["SubnetId"]


@container.cached()
def instance_security_group(region: str) -> str:
    """gpufill's zero-ingress group in the default VPC: found by name and tag, created the first time."""
    ec2 = client("ec2", region)
    vpc = default_vpc(region)
    found = _find_group(ec2, vpc)
    if found:
        return found
    try:
        return ec2.create_security_group(
            GroupName=INSTANCE_SECURITY_GROUP_NAME,
            Description="gpufill GPU instances: no inbound rules, reached through SSM Session Manager",
            VpcId=vpc,
            TagSpecifications=[{"ResourceType": "security-group", "Tags": [{"Key": TAG_MANAGED, "Value": "true"}]}],
        )["GroupId"]
    except ClientError as error:
        # Another run created it between our look and our create: use theirs.
        if error.response.get("Error", {}).get("Code") != "InvalidGroup.Duplicate":
            raise
        found = _find_group(ec2, vpc, tagged=False)
        if not found:
            raise
        return found


def _find_group(ec2, vpc: str, *, tagged: bool = True) -> str | None:
    filters = [{"Name": "vpc-id", "Values": [vpc]}, {"Name": "group-name", "Values": [INSTANCE_SECURITY_GROUP_NAME]}]
    if tagged:
        filters.append({"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]})
    groups = ec2.describe_security_groups(Filters=filters)["SecurityGroups"]
    return groups[0]["GroupId"] if groups else None


def forget() -> None:
    default_vpc.cache_clear()
    default_subnet.cache_clear()
    instance_security_group.cache_clear()
