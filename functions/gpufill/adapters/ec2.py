"""EC2 calls: what a region offers, what spot costs there, and RunInstances."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError

from gpufill.adapters import clock
from gpufill.adapters.aws import TRANSPORT_ERRORS, TransientAwsError, attempts, client, is_transient
from gpufill.adapters.visibility import until_visible
from gpufill.constants import CAPACITY_BLOCK_TYPE, TAG_DEPLOYMENT, TAG_MANAGED, TAG_POOL, TAG_REQUEST_ID, TAG_STARTUP_STEP
from gpufill.models.run import Instance, LaunchResult, Pool
from gpufill.policy.errors import classify

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
        StartTime=clock.now(),
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
    """Everything RunInstances needs besides the pool and the batch; fixed before the first call."""

    image_id: str
    request_id: str
    deployment: str = ""
    user_tags: dict[str, str] = field(default_factory=dict)
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] = ()
    instance_profile_arn: str | None = None
    user_data: str | None = None
    root_volume_gib: int = 200
    kms_key_id: str | None = None
    # A same-az gang of EFA types: its cluster placement group (policy/gang.py).
    placement_group: str | None = None
    # capacity_reservations "none": On-Demand launches keep out of open reservations, which EC2
    # would otherwise fill first.
    reservations_off: bool = False


def instance_settings(spec: LaunchSpec) -> dict:
    """What every gpufill instance is launched with, by RunInstances or in a fleet's launch template."""
    ebs: dict = {"VolumeSize": spec.root_volume_gib, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}
    if spec.kms_key_id:
        ebs["KmsKeyId"] = spec.kms_key_id
    settings: dict = {
        "ImageId": spec.image_id,
        "InstanceInitiatedShutdownBehavior": "terminate",
        # Hop limit 1: the serving container needs no instance credentials, so it gets no route to them.
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1},
        "BlockDeviceMappings": [{"DeviceName": ROOT_DEVICE, "Ebs": ebs}],
    }
    if spec.security_group_ids:
        settings["SecurityGroupIds"] = list(spec.security_group_ids)
    if spec.instance_profile_arn:
        settings["IamInstanceProfile"] = {"Arn": spec.instance_profile_arn}
    if spec.user_data:
        settings["UserData"] = base64.b64encode(spec.user_data.encode()).decode()
    return settings


def launch_tags(spec: LaunchSpec, pool: Pool | None = None) -> dict[str, str]:
    """The tags teardown and status find an instance by; a fleet's instances share one set, without the pool."""
    tags = {**spec.user_tags, TAG_REQUEST_ID: spec.request_id, TAG_MANAGED: "true"}
    if pool is not None:
        tags[TAG_POOL] = pool.key
    tags[TAG_DEPLOYMENT] = spec.deployment
    return tags


def tag_specifications(tags: dict[str, str], kinds: tuple[str, ...] = ("instance", "volume")) -> list[dict]:
    return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]} for kind in kinds]


def run_instances(pool: Pool, *, min_count: int, max_count: int, client_token: str, spec: LaunchSpec) -> dict:
    params: dict = {
        **instance_settings(spec),
        "InstanceType": pool.instance_type,
        "MinCount": min_count,
        "MaxCount": max_count,
        "ClientToken": client_token,
        "TagSpecifications": tag_specifications(launch_tags(spec, pool)),
    }
    if spec.subnet_id:
        params["SubnetId"] = spec.subnet_id
    else:
        params["Placement"] = {"AvailabilityZone": pool.availability_zone}
    if spec.placement_group:
        params["Placement"] = {**params.get("Placement", {}), "GroupName": spec.placement_group}
    if pool.market == "spot":
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"},
        }
    elif pool.capacity_block:
        # A Capacity Block takes only launches that say so and name it.
        params["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
        params["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": pool.capacity_reservation_id}
        }
    elif pool.capacity_reservation_id:
        # Targeting the reservation by id works for open and targeted ones alike, and EC2 answers
        # ReservationCapacityExceeded rather than launching outside it.
        params["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": pool.capacity_reservation_id}
        }
    elif spec.reservations_off:
        params["CapacityReservationSpecification"] = {"CapacityReservationPreference": "none"}
    return client("ec2", pool.region).run_instances(**params)


def launch(pool: Pool, *, min_count: int, max_count: int, client_token: str, spec: LaunchSpec) -> LaunchResult:
    """One RunInstances for a pool, classified, launching at most once whatever fails.

    An answer that leaves it open whether EC2 launched (a lost reply, a 5xx after every retry,
    IdempotentParameterMismatch) is settled by looking the token up; if EC2 shows nothing yet,
    TransientAwsError makes the state machine send the identical call again later, which EC2
    answers with the first call's instances if there were any.
    """
    try:
        with attempts() as sent:
            # The placement group or security group created a moment ago may not be visible yet.
            reply = until_visible(
                lambda: run_instances(pool, min_count=min_count, max_count=max_count, client_token=client_token, spec=spec),
                f"RunInstances in {pool.region}",
            )
    except (EndpointConnectionError, ConnectTimeoutError) as error:
        if "reached" in sent:  # an earlier attempt may have launched and lost its reply
            return _settle_by_token(pool, client_token, error)
        # No attempt reached EC2: nothing launched, and the region is out of reach.
        return LaunchResult(outcome="error", reason=type(error).__name__, message=str(error))
    except ClientError as error:
        code = code_of(error)
        if code != "IdempotentParameterMismatch" and not is_transient(error):
            return LaunchResult(outcome=classify(code), reason=code, message=message_of(error))
        return _settle_by_token(pool, client_token, error)
    except TRANSPORT_ERRORS as error:
        return _settle_by_token(pool, client_token, error)
    return LaunchResult(outcome="launched", instances=_instances(pool, reply["Instances"]))


def _settle_by_token(pool: Pool, client_token: str, error: Exception) -> LaunchResult:
    try:
        found = instances_with_token(pool.region, client_token)
    except (ClientError, *TRANSPORT_ERRORS):
        found = []
    if found:
        return LaunchResult(
            outcome="launched",
            instances=_instances(pool, found),
            note=f"the launch answered {type(error).__name__}; its instances were found by ClientToken",
        )
    raise TransientAwsError(f"RunInstances in {pool.region} ended unsettled ({error}); the same call will be sent again")


def instances_with_token(region: str, client_token: str) -> list[dict]:
    pages = client("ec2", region).get_paginator("describe_instances").paginate(
        Filters=[{"Name": "client-token", "Values": [client_token]}]
    )
    return [i for page in pages for reservation in page["Reservations"] for i in reservation["Instances"]]


def _instances(pool: Pool, described: list[dict]) -> list[Instance]:
    return [
        Instance(
            instance_id=i["InstanceId"],
            region=pool.region,
            availability_zone=i.get("Placement", {}).get("AvailabilityZone", pool.availability_zone),
            instance_type=pool.instance_type,
            # EC2 bills an instance in a Capacity Block as neither: its block's fee was paid once.
            market=CAPACITY_BLOCK_TYPE if pool.capacity_block else pool.market,
            hourly_price=pool.price,
            # An On-Demand launch may land in an open reservation it did not name: EC2 says which.
            capacity_reservation_id=i.get("CapacityReservationId") or pool.capacity_reservation_id,
            capacity_block_fee=pool.upfront_fee if pool.capacity_block else None,
        )
        for i in described
    ]


def code_of(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "Unknown")


def message_of(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Message", "")


def root_snapshot_gib(region: str, image_id: str) -> int | None:
    """The size of the image's root snapshot: a root volume smaller than it is refused by EC2."""
    try:
        images = client("ec2", region).describe_images(ImageIds=[image_id])["Images"]
    except ClientError as error:
        if not code_of(error).startswith("InvalidAMIID"):
            raise
        return None  # the launch meets the same answer and resolves the image again
    if not images:
        return None
    root = images[0].get("RootDeviceName", ROOT_DEVICE)
    for mapping in images[0].get("BlockDeviceMappings", []):
        if mapping.get("DeviceName") == root and "Ebs" in mapping:
            return mapping["Ebs"].get("VolumeSize")
    return None


from gpufill.policy.boot import NOT_VISIBLE  # noqa: E402  (EC2 is eventually consistent)

FILTER_VALUES_MAX = 200  # DescribeInstances takes at most 200 values per filter


def instance_states(region: str, instance_ids: list[str]) -> dict[str, dict]:
    """instance id -> {"state", "private_ip", "startup_step"}; an id EC2 does not describe (yet) is NOT_VISIBLE.

    Only the run that just launched these instances asks, so an unknown id is one EC2 has not
    made visible yet (InvalidInstanceID.NotFound is documented for brand-new instances), not a
    lost one; terminated instances stay described for about an hour. They are asked by the
    instance-id filter, which leaves such an id out instead of failing the whole call (asked by
    InstanceIds, one new instance cost a call for each id), and the ids left out are asked once
    more at once: a moment later EC2 usually describes them, and a round saved is the watch's
    15 s pause.
    """
    seen = _described(region, instance_ids)
    missing = [iid for iid in instance_ids if iid not in seen]
    if missing:
        seen.update(_described(region, missing))
    return {iid: seen.get(iid, {"state": NOT_VISIBLE, "private_ip": None, "startup_step": None}) for iid in instance_ids}


def _described(region: str, instance_ids: list[str]) -> dict[str, dict]:
    """What DescribeInstances says of these ids, by the instance-id filter: one call per 200 ids (and per page)."""
    ec2 = client("ec2", region)
    seen: dict[str, dict] = {}
    for start in range(0, len(instance_ids), FILTER_VALUES_MAX):
        params: dict = {"Filters": [{"Name": "instance-id", "Values": instance_ids[start : start + FILTER_VALUES_MAX]}]}
        while True:
            # A filtered DescribeInstances may answer a page short, even empty, with a NextToken.
            reply = ec2.describe_instances(**params)
            for reservation in reply["Reservations"]:
                for i in reservation["Instances"]:
                    seen[i["InstanceId"]] = {
                        "state": i["State"]["Name"],
                        "private_ip": i.get("PrivateIpAddress"),
                        # What startup.sh reported of its progress (ready_timeout); absent until it reports.
                        "startup_step": next((t["Value"] for t in i.get("Tags", []) if t["Key"] == TAG_STARTUP_STEP), None),
                    }
            if not reply.get("NextToken"):
                break
            params = {**params, "NextToken": reply["NextToken"]}
    return seen


def zone_ids(region: str) -> dict[str, str]:
    """AZ name -> AZ id (names are shuffled per account; ids are what placement scores speak of)."""
    zones = client("ec2", region).describe_availability_zones(
        Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}]
    )["AvailabilityZones"]
    return {z["ZoneName"]: z["ZoneId"] for z in zones}
