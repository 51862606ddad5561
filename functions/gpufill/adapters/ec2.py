"""EC2 calls: what a region offers, what spot costs there, and RunInstances."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import UTC, datetime

from botocore.exceptions import ClientError

from gpufill.adapters.aws import client
from gpufill.constants import TAG_MANAGED, TAG_POOL, TAG_REQUEST_ID
from gpufill.models.run import Instance, LaunchResult, Pool
from gpufill.policy.errors import classify, is_stale_ami

ROOT_DEVICE = "/dev/sda1"  # the Ubuntu DLAMI's root device


def zones_offering(region: str, instance_types: list[str]) -> dict[str, list[str]]:
    """instance type -> the AZs of `region` that offer it."""
    pages = client("ec2", region).get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": instance_types}],
    )
    zones: dict[str, list[str]] = {t: [] for t in instance_types}
    for page in pages:
        for offer in page["InstanceTypeOfferings"]:
            zones.setdefault(offer["InstanceType"], []).append(offer["Location"])
    return {t: sorted(z) for t, z in zones.items()}


def spot_prices(region: str, instance_types: list[str]) -> dict[tuple[str, str], float]:
    """(instance type, AZ) -> the current Linux/UNIX spot price."""
    pages = client("ec2", region).get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=instance_types,
        ProductDescriptions=["Linux/UNIX"],
        StartTime=datetime.now(UTC),
    )
    prices: dict[tuple[str, str], float] = {}
    for page in pages:
        for entry in page["SpotPriceHistory"]:
            key = (entry["InstanceType"], entry["AvailabilityZone"])
            price = float(entry["SpotPrice"])
            prices[key] = min(price, prices.get(key, price))
    return prices


@dataclass(frozen=True)
class LaunchSpec:
    """Everything RunInstances needs besides the pool and the batch."""

    image_id: str
    request_id: str
    user_tags: dict[str, str] = field(default_factory=dict)
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] = ()
    instance_profile_arn: str | None = None
    user_data: str | None = None
    root_volume_gib: int = 40


def run_instances(pool: Pool, *, min_count: int, max_count: int, client_token: str, spec: LaunchSpec) -> dict:
    ec2 = client("ec2", pool.region)
    tags = {**spec.user_tags, TAG_REQUEST_ID: spec.request_id, TAG_MANAGED: "true", TAG_POOL: pool.key}
    params: dict = {
        "ImageId": spec.image_id,
        "InstanceType": pool.instance_type,
        "MinCount": min_count,
        "MaxCount": max_count,
        "ClientToken": client_token,
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 2},
        "BlockDeviceMappings": [
            {
                "DeviceName": ROOT_DEVICE,
                "Ebs": {
                    "VolumeSize": spec.root_volume_gib,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeleteOnTermination": True,
                },
            }
        ],
        "TagSpecifications": [
            {"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            for kind in ("instance", "volume")
        ],
    }
    if spec.subnet_id:
        params["SubnetId"] = spec.subnet_id
    else:
        params["Placement"] = {"AvailabilityZone": pool.availability_zone}
    if spec.security_group_ids:
        params["SecurityGroupIds"] = list(spec.security_group_ids)
    if spec.instance_profile_arn:
        params["IamInstanceProfile"] = {"Arn": spec.instance_profile_arn}
    if spec.user_data:
        params["UserData"] = base64.b64encode(spec.user_data.encode()).decode()
    if pool.market == "spot":
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    return ec2.run_instances(**params)


def launch(pool: Pool, *, min_count: int, max_count: int, client_token: str, spec: LaunchSpec, resolve_ami) -> LaunchResult:
    """One RunInstances for a pool, classified. `resolve_ami(region)` gives a fresh AMI once if ours went stale."""
    note = None
    try:
        try:
            reply = run_instances(pool, min_count=min_count, max_count=max_count, client_token=client_token, spec=spec)
        except ClientError as error:
            if not is_stale_ami(_code(error)):
                raise
            fresh = resolve_ami(pool.region)
            note = f"AMI {spec.image_id} was stale; resolved {fresh} and retried"
            spec = LaunchSpec(**{**spec.__dict__, "image_id": fresh})
            reply = run_instances(
                pool, min_count=min_count, max_count=max_count, client_token=f"{client_token[:62]}-r", spec=spec
            )
    except ClientError as error:
        code = _code(error)
        return LaunchResult(outcome=classify(code), reason=code, note=note)
    instances = [
        Instance(
            instance_id=i["InstanceId"],
            region=pool.region,
            availability_zone=i.get("Placement", {}).get("AvailabilityZone", pool.availability_zone),
            instance_type=pool.instance_type,
            market=pool.market,
            hourly_price=pool.price,
        )
        for i in reply["Instances"]
    ]
    return LaunchResult(outcome="launched", instances=instances, note=note)


def _code(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "Unknown")


def instance_states(region: str, instance_ids: list[str]) -> dict[str, dict]:
    """instance id -> {"state", "private_ip"}; an id EC2 no longer knows is reported as terminated."""
    ec2 = client("ec2", region)
    try:
        reply = ec2.describe_instances(InstanceIds=instance_ids)
    except ClientError as error:
        if _code(error) != "InvalidInstanceID.NotFound" or len(instance_ids) == 1:
            if _code(error) == "InvalidInstanceID.NotFound":
                return {instance_ids[0]: {"state": "terminated", "private_ip": None}}
            raise
        # One unknown id fails the whole call: ask for each on its own.
        return {k: v for iid in instance_ids for k, v in instance_states(region, [iid]).items()}
    seen = {
        i["InstanceId"]: {"state": i["State"]["Name"], "private_ip": i.get("PrivateIpAddress")}
        for reservation in reply["Reservations"]
        for i in reservation["Instances"]
    }
    return {iid: seen.get(iid, {"state": "terminated", "private_ip": None}) for iid in instance_ids}


def zone_ids(region: str) -> dict[str, str]:
    """AZ name -> AZ id (names are shuffled per account; ids are what placement scores speak of)."""
    zones = client("ec2", region).describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
    )["AvailabilityZones"]
    return {z["ZoneName"]: z["ZoneId"] for z in zones}
