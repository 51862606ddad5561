"""EC2 CreateFleet of type instant in the simulated market, and launch-template idempotency.

`FleetApi` is the moto glue: it reads a CreateFleet request, asks the market how the fleet
spreads (local/fleet_allocation.py, the pure model), launches the instances in moto as
RunInstances would, and answers in EC2's shape.

A CreateFleet sent again with a ClientToken EC2 has seen "succeeds without performing any
further actions" (EC2's idempotency promise): the answer is the first fleet's FleetId, with no
Instances and no Errors. What the fleet launched is read with DescribeFleets(FleetIds=[...]),
which describes an instant fleet only when its id is named, as on EC2.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError

from gpufill import catalog
from gpufill.local import visibility
from gpufill.local.capacity_blocks import not_this_market
from gpufill.local.ec2_errors import FLEET_ERRORS
from gpufill.local.fleet_allocation import CAPACITY, ON_DEMAND_STRATEGIES, QUOTA, SPOT_STRATEGIES, UNTRIED, Pool, allocate
from gpufill.local.limits import check_launch_values, check_tags

DEFAULT_STRATEGY = {"spot": "price-capacity-optimized", "on-demand": "lowest-price"}
FLEET_ID_TAG = "aws:ec2:fleet-id"
TEMPLATE_ID_TAG = "aws:ec2launchtemplate:id"
TEMPLATE_VERSION_TAG = "aws:ec2launchtemplate:version"
ERROR_CODES = {
    ("spot", CAPACITY): "InsufficientInstanceCapacity",
    ("on-demand", CAPACITY): "InsufficientInstanceCapacity",
    ("spot", QUOTA): "MaxSpotInstanceCountExceeded",
    ("on-demand", QUOTA): "VcpuLimitExceeded",
    ("spot", UNTRIED): "UnfulfillableCapacity",
    ("on-demand", UNTRIED): "UnfulfillableCapacity",
}


# --- the moto glue -------------------------------------------------------------------------------


def _number(value: Any) -> Any:
    try:
        return float(value) if "." in str(value) else int(value)
    except (TypeError, ValueError):
        return value


def _flag(value: Any) -> bool:
    return str(value).lower() == "true"


def _tags(specs: list[dict] | None) -> dict[str, dict[str, str]]:
    """{resource type: {key: value}} from TagSpecifications."""
    found: dict[str, dict[str, str]] = {}
    for spec in specs or []:
        for tag in spec.get("Tags") or spec.get("Tag") or []:
            found.setdefault(spec.get("ResourceType"), {})[tag.get("Key", "")] = tag.get("Value", "")
    return found


def _fingerprint(response) -> tuple:
    return tuple(
        sorted(
            (k, tuple(v) if isinstance(v, list) else v)
            for k, v in response.querystring.items()
            if k not in ("Action", "Version", "ClientToken")
        )
    )


def _mismatch(token: str) -> EC2ClientError:
    return EC2ClientError(
        "IdempotentParameterMismatch",
        f"Arguments on this idempotent request are inconsistent with arguments used in previous request(s) with client token {token}.",
    )


class FleetApi:
    """CreateFleet (instant), CreateLaunchTemplate and CreateLaunchTemplateVersion answered by the market."""

    def __init__(self, market):
        self.market = market
        self._tokens: dict[tuple[str, str, str], tuple[tuple, Any]] = {}  # (action, region, token) -> (fingerprint, answer)
        self._lock = threading.RLock()
        self._instant: dict[tuple[str, str], dict] = {}  # (region, fleet id) -> DescribeFleets' FleetData

    def _idempotent(self, response, action: str, create, replay=None):
        """EC2's ClientToken: the same token and parameters answer the first call again (as
        `replay` makes of it), other parameters are refused."""
        token = response._get_param("ClientToken")
        if not token:
            return create()
        fingerprint = _fingerprint(response)
        with self._lock:
            seen = self._tokens.get((action, response.region, token))
            if seen is not None:
                if seen[0] != fingerprint:
                    raise _mismatch(token)
                return replay(seen[1]) if replay else seen[1]
            answer = create()
            self._tokens[(action, response.region, token)] = (fingerprint, answer)
            return answer

    def api(self, original_fleet, original_template, original_version, original_describe) -> dict[str, Any]:
        fleets = self

        def create_launch_template(response) -> ActionResult:
            def create() -> ActionResult:
                made = original_template(response)
                fleets._created(response.region, "launch-template", made.result["LaunchTemplate"]["LaunchTemplateId"])
                return made

            return fleets._idempotent(response, "CreateLaunchTemplate", create)

        def create_launch_template_version(response) -> ActionResult:
            def create() -> ActionResult:
                fleets._template_seen(response)
                made = original_version(response)
                version = made.result["LaunchTemplateVersion"]
                fleets._created(response.region, "launch-template-version", f"{version['LaunchTemplateId']}:{version['VersionNumber']}")
                return made

            return fleets._idempotent(response, "CreateLaunchTemplateVersion", create)

        def create_fleet(response) -> ActionResult:
            if response._get_param("Type", "maintain") != "instant":
                # EC2 tags instances at launch from CreateFleet's own tags only for instant fleets;
                # a maintain or request fleet takes them from its launch template.
                if "instance" in _tags(response._get_param("TagSpecifications", [])):
                    raise EC2ClientError(
                        "InvalidParameterValue",
                        "The resource type instance is supported in TagSpecifications only for fleets of type instant.",
                    )
                return original_fleet(response)
            return ActionResult(
                fleets._idempotent(
                    response,
                    "CreateFleet",
                    lambda: fleets.create_instant(response),
                    replay=lambda first: {"FleetId": first["FleetId"], "Errors": [], "Instances": []},
                )
            )

        def describe_fleets(response) -> ActionResult:
            asked = response._get_param("FleetIds", [])
            instant = [fleets._instant[(response.region, f)] for f in asked if (response.region, f) in fleets._instant]
            others = [f for f in asked if (response.region, f) not in fleets._instant]
            if asked and not others:
                return ActionResult({"Fleets": instant})
            # moto's own fleets (maintain, request); an instant fleet only when named.
            described = original_describe(response)
            return ActionResult({"Fleets": [*instant, *described.result.get("Fleets", [])]}) if instant else described

        return {
            "create_launch_template": create_launch_template,
            "create_launch_template_version": create_launch_template_version,
            "create_fleet": create_fleet,
            "describe_fleets": describe_fleets,
        }

    # --- eventual consistency after create (local/visibility.py) --------------------------------

    def _created(self, region: str, kind: str, key: str) -> None:
        if self.market.faults is not None:
            self.market.faults.created(region, kind, key)

    def _template_seen(self, response) -> None:
        """A new version names its template, which may not be visible yet by its name or id."""
        name, template_id = response._get_param("LaunchTemplateName"), response._get_param("LaunchTemplateId")
        if template_id:
            visibility.check(self.market.faults, response.region, "launch-template", template_id)
            return
        try:
            template = response.ec2_backend.get_launch_template_by_name(name)
        except Exception:  # noqa: BLE001  (moto's own answer for an unknown name follows)
            return
        if visibility.missed(self.market.faults, response.region, "launch-template", template.id):
            raise EC2ClientError(
                "InvalidLaunchTemplateName.NotFoundException",
                "At least one of the launch templates specified in the request does not exist.",
            )

    # --- CreateFleet, type instant -------------------------------------------------------------

    def create_instant(self, response) -> dict[str, Any]:
        backend, region = response.ec2_backend, response.region
        capacity = response._get_param("TargetCapacitySpecification", {})
        total = int(capacity.get("TotalTargetCapacity") or 0)
        if total < 1:
            raise EC2ClientError("InvalidParameterValue", "The target capacity (TotalTargetCapacity) must be greater than 0.")
        default_market = capacity.get("DefaultTargetCapacityType")
        if default_market not in ("spot", "on-demand", "reserved-capacity"):
            raise EC2ClientError("InvalidParameterValue", "DefaultTargetCapacityType must be spot, on-demand or reserved-capacity.")
        reserved_ids = self._reserved_target(response, default_market)
        targets = {"on-demand": int(capacity.get("OnDemandTargetCapacity") or 0), "spot": int(capacity.get("SpotTargetCapacity") or 0)}
        if sum(targets.values()) > total:
            raise EC2ClientError("InvalidParameterValue", "OnDemandTargetCapacity plus SpotTargetCapacity exceeds TotalTargetCapacity.")
        if default_market != "reserved-capacity":
            targets[default_market] += total - sum(targets.values())
        options = {"spot": response._get_param("SpotOptions", {}), "on-demand": response._get_param("OnDemandOptions", {})}
        for market, opts in options.items():
            strategy = opts.get("AllocationStrategy") or DEFAULT_STRATEGY[market]
            allowed = SPOT_STRATEGIES if market == "spot" else ON_DEMAND_STRATEGIES
            if strategy not in allowed:
                raise EC2ClientError("InvalidParameterValue", f"The {market} allocation strategy {strategy} is not valid for this fleet.")
            if opts.get("MinTargetCapacity") and not (_flag(opts.get("SingleAvailabilityZone")) or _flag(opts.get("SingleInstanceType"))):
                raise EC2ClientError(
                    "InvalidParameterCombination",
                    "MinTargetCapacity requires SingleAvailabilityZone or SingleInstanceType to be set.",
                )
        fleet_tags = _tags(response._get_param("TagSpecifications", []))
        check_tags(fleet_tags)

        overrides = []  # (spec as answered, override as answered, zone, type, data, template, version)
        configs = response._get_param("LaunchTemplateConfigs", [])
        if not configs:
            raise EC2ClientError("InvalidParameterValue", "LaunchTemplateConfigs must name a launch template.")
        for config in configs:
            spec = config.get("LaunchTemplateSpecification", {})
            if spec.get("LaunchTemplateId"):
                template = backend.get_launch_template(spec["LaunchTemplateId"])
            elif spec.get("LaunchTemplateName"):
                template = backend.get_launch_template_by_name(spec["LaunchTemplateName"])
            else:
                raise EC2ClientError("MissingParameter", "The request must contain the parameter LaunchTemplateId or LaunchTemplateName.")
            visibility.check(self.market.faults, region, "launch-template", template.id)
            wanted = str(spec.get("Version") or "$Default")
            if wanted.lower() not in ("$latest", "$default") and not (wanted.isdigit() and 1 <= int(wanted) <= len(template.versions)):
                from moto.ec2.exceptions import InvalidLaunchTemplateVersionNotFound

                raise InvalidLaunchTemplateVersionNotFound(version=wanted, template_id=template.id)
            version = template.get_version(wanted)
            visibility.check(self.market.faults, region, "launch-template-version", f"{template.id}:{version.number}")
            data = version.data
            if data.get("InstanceMarketOptions"):
                raise EC2ClientError(
                    "InvalidFleetConfiguration",
                    "Launch template market options (InstanceMarketOptions) are not supported for EC2 Fleet; use SpotOptions.",
                )
            answered_spec = {k: spec[k] for k in ("LaunchTemplateId", "LaunchTemplateName", "Version") if spec.get(k)}
            sent = config.get("Overrides") or []
            if not sent:
                if not data.get("InstanceType"):
                    raise EC2ClientError(
                        "InvalidFleetConfiguration", "The launch template has no instance type and the fleet sets no overrides."
                    )
                sent = [{}]
            for override in sent:
                answered = {k: _number(v) if k in ("Priority", "WeightedCapacity") else v for k, v in override.items()}
                itype = override.get("InstanceType") or data.get("InstanceType")
                subnet = override.get("SubnetId") or next((n.get("SubnetId") for n in data.get("NetworkInterfaces") or [] if n.get("SubnetId")), None)
                zone = override.get("AvailabilityZone") or (data.get("Placement") or {}).get("AvailabilityZone")
                if subnet:
                    zone = backend.get_subnet(subnet).availability_zone
                group = (override.get("Placement") or {}).get("GroupName") or (data.get("Placement") or {}).get("GroupName")
                overrides.append({"spec": answered_spec, "override": answered, "zone": zone, "type": itype,
                                  "subnet": subnet, "data": data, "template": template, "version": version,
                                  "group": group})

        fleet_id = "fleet-" + str(uuid.uuid4())
        instances, errors = [], []
        fault = self.market.faults.for_fleet(region) if self.market.faults is not None else None
        # The overrides EC2 answers the injected error for instead of trying them.
        faulted: set[int] = set()
        if fault is not None:
            faulted = set(range(len(overrides) if fault.overrides is None else min(fault.overrides, len(overrides))))
        # Each resource the overrides name, looked up once for the call as EC2 does.
        unknown = self._unknown_references(region, overrides)
        with self.market._lock:
            if reserved_ids is not None:
                self._launch_reserved(backend, region, overrides, reserved_ids, total, fleet_id, fleet_tags, instances, errors)
                targets = {"on-demand": 0, "spot": 0}
            for market in ("on-demand", "spot"):  # EC2 Fleet launches the on-demand part first
                if targets[market] == 0:
                    continue
                opts = options[market]
                strategy = opts.get("AllocationStrategy") or DEFAULT_STRATEGY[market]
                pools, refused = [], {}
                if faulted:
                    if fault.unnamed:
                        errors.append({"Lifecycle": market, "ErrorCode": fault.error, "ErrorMessage": FLEET_ERRORS[fault.error]})
                    else:
                        errors.extend(self._error(overrides[n], market, fault.error, FLEET_ERRORS[fault.error]) for n in sorted(faulted))
                for n, o in enumerate(overrides):
                    if n in faulted:
                        continue
                    zone = o["zone"] or self.market.roomiest_zone(region, o["type"], market)
                    o["placed"] = zone
                    if n in unknown:
                        refused[n] = unknown[n]
                        continue
                    try:  # what EC2 refuses in a RunInstances request, it refuses for each override
                        check_launch_values(
                            backend,
                            image_id=o["data"].get("ImageId"),
                            user_data=o["data"].get("UserData"),
                            tags={**_tags(o["data"].get("TagSpecifications")), "instance": self._instance_tags(o, fleet_tags)},
                            volumes=[(b.get("DeviceName"), (b.get("Ebs") or {}).get("VolumeSize")) for b in o["data"].get("BlockDeviceMappings") or []],
                        )
                    except EC2ClientError as refusal:
                        refused[n] = (refusal.code, refusal.message)
                        continue
                    o["open_reservation"] = self._open_reservation(region, zone, o, market)
                    open_room = o["open_reservation"].available() if o["open_reservation"] is not None else 0
                    left = self.market.left(region, zone, o["type"], market) + open_room
                    if o["group"]:  # a cluster group holds what one network segment has free
                        left = min(left, self.market.groups.room(region, o["group"], zone, o["type"]))
                    pools.append(
                        Pool(
                            key=n,
                            left=left,
                            price=self.market.price(region, zone, o["type"], market),
                            priority=_number(o["override"]["Priority"]) if "Priority" in o["override"] else None,
                            vcpus=catalog.vcpus(o["type"]) or self.market.default_vcpus,
                            zone=zone,
                            instance_type=o["type"],
                        )
                    )
                allocation = allocate(
                    pools,
                    targets[market],
                    strategy,
                    quota_vcpus=self.market.quota_room_vcpus(region, market),
                    single_zone=_flag(opts.get("SingleAvailabilityZone")),
                    single_type=_flag(opts.get("SingleInstanceType")),
                    min_target=int(opts["MinTargetCapacity"]) if opts.get("MinTargetCapacity") else None,
                )
                for n, count in allocation.counts.items():
                    o = overrides[n]
                    held = o.get("open_reservation")
                    ids = self._launch(
                        backend, region, o, market, count, fleet_id, fleet_tags,
                        reservation=held, reserved=min(count, held.available()) if held is not None else 0,
                    )
                    instances.append(
                        {
                            "LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": o["spec"], "Overrides": o["override"]},
                            "Lifecycle": market,
                            "InstanceIds": ids,
                            "InstanceType": o["type"],
                        }
                    )
                for n, (code, message) in sorted(refused.items()):
                    errors.append(self._error(overrides[n], market, code, message))
                for n, kind in allocation.errors.items():
                    o = overrides[n]
                    if kind == UNTRIED:
                        message = FLEET_ERRORS["UnfulfillableCapacity"]
                    elif kind == CAPACITY and o["group"]:
                        message = (
                            f"We currently do not have sufficient {o['type']} capacity in the Availability Zone you requested "
                            f"({o['placed']}) for placement group {o['group']}. Our system will be working on provisioning "
                            "additional capacity."
                        )
                    elif kind == CAPACITY:
                        message = (
                            f"We currently do not have sufficient {o['type']} capacity in the Availability Zone you requested "
                            f"({o['placed']}). Our system will be working on provisioning additional capacity."
                        )
                    else:
                        message = (
                            f"You have requested more vCPU capacity than your current {market} vCPU limit of "
                            f"{self.market.quota_limit(region, market)} allows for {region}."
                        )
                    errors.append(self._error(o, market, ERROR_CODES[(market, kind)], message))
        answer = {"FleetId": fleet_id, "Errors": errors, "Instances": instances}
        self._instant[(region, fleet_id)] = {
            "FleetId": fleet_id,
            "FleetState": "active",
            "ActivityStatus": "fulfilled" if sum(len(i["InstanceIds"]) for i in instances) >= total else "error",
            "ClientToken": response._get_param("ClientToken") or "",
            "Type": "instant",
            "TargetCapacitySpecification": {"TotalTargetCapacity": total, "DefaultTargetCapacityType": default_market},
            "Instances": instances,
            "Errors": errors,
            "Tags": [{"Key": k, "Value": v} for k, v in fleet_tags.get("fleet", {}).items()],
        }
        return answer

    def _unknown_references(self, region: str, overrides: list[dict]) -> dict[int, tuple[str, str]]:
        """Override index -> (code, message) for each override naming a placement group or security
        group EC2 does not know (or, just created, does not show yet)."""
        answers: dict[tuple[str, str], tuple[str, str] | None] = {}
        for o in overrides:
            if o["group"]:
                answers.setdefault(("placement-group", o["group"]), None)
            for group_id in o["data"].get("SecurityGroupIds") or []:
                answers.setdefault(("security-group", group_id), None)
        for kind, key in answers:
            answers[(kind, key)] = visibility.missed(self.market.faults, region, kind, key)
            if kind == "placement-group" and answers[(kind, key)] is None and key not in self.market.groups.names(region):
                answers[(kind, key)] = (visibility.NOT_FOUND[kind], visibility.message(kind, key))
        unknown = {}
        for n, o in enumerate(overrides):
            named = [("placement-group", o["group"])] if o["group"] else []
            named += [("security-group", g) for g in o["data"].get("SecurityGroupIds") or []]
            found = next((answers[k] for k in named if answers[k] is not None), None)
            if found:
                unknown[n] = found
        return unknown

    def _reserved_target(self, response, default_market: str) -> list[str] | None:
        """The reservations a fleet of reserved capacity may launch into (None: not such a fleet).
        The engine models On-Demand Capacity Reservations named by id, without fallback."""
        options = response._get_param("ReservedCapacityOptions", {}) or {}
        if default_market != "reserved-capacity":
            if options:
                raise EC2ClientError(
                    "InvalidParameterCombination",
                    "ReservedCapacityOptions requires DefaultTargetCapacityType reserved-capacity.",
                )
            return None
        types = options.get("ReservationTypes") or ["on-demand-capacity-reservation"]
        ids = (options.get("CapacityReservationTarget") or {}).get("CapacityReservationIds") or []
        if "on-demand-capacity-reservation" not in types or not ids:
            raise EC2ClientError(
                "InvalidParameterValue",
                "The local engine models reserved capacity as On-Demand Capacity Reservations named in "
                "CapacityReservationTarget.CapacityReservationIds.",
            )
        blocks = [i for i in ids if self.market.blocks.is_block(i)]
        if blocks:  # a block is launched into with MarketType capacity-block, not as an ODCR
            raise not_this_market(blocks[0])
        if options.get("ReservedCapacityFallbackOptions"):
            raise EC2ClientError("InvalidParameterValue", "The local engine does not model ReservedCapacityFallbackOptions.")
        return list(ids)

    def _launch_reserved(self, backend, region, overrides, ids, total, fleet_id, fleet_tags, instances, errors) -> None:
        """Each override launches into the named reservations of its type and AZ, up to their room,
        until the target is met; an override none of them has room for is answered
        ReservationCapacityExceeded. Nothing launches outside the reservations."""
        reservations = self.market.reservations
        wanted = total
        for o in overrides:
            zone = o["zone"]
            fits = [reservations.held[i] for i in ids if i in reservations.held]
            fits = [h for h in fits if h.region == region and h.instance_type == o["type"] and (zone is None or h.zone == zone)]
            o["placed"] = zone or (fits[0].zone if fits else None)
            launched = 0
            for held in fits:
                take = min(held.available(), wanted)
                if take <= 0:
                    continue
                o["placed"] = held.zone
                ids_made = self._launch(backend, region, o, "on-demand", take, fleet_id, fleet_tags, reservation=held)
                instances.append(
                    {
                        "LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": o["spec"], "Overrides": o["override"]},
                        "Lifecycle": "on-demand",
                        "InstanceIds": ids_made,
                        "InstanceType": o["type"],
                    }
                )
                wanted -= len(ids_made)
                launched += len(ids_made)
            if not launched and wanted > 0:
                named = ", ".join(h.id for h in fits) or "none of the named reservations"
                errors.append(
                    self._error(
                        o, "on-demand", "ReservationCapacityExceeded",
                        f"The targeted Capacity Reservations ({named}) do not have available capacity for {o['type']} in {o['placed']}.",
                    )
                )

    @staticmethod
    def _error(o: dict, market: str, code: str, message: str) -> dict:
        return {
            "LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": o["spec"], "Overrides": o["override"]},
            "Lifecycle": market,
            "ErrorCode": code,
            "ErrorMessage": message,
        }

    @staticmethod
    def _instance_tags(o: dict, fleet_tags: dict) -> dict[str, str]:
        return {**_tags(o["data"].get("TagSpecifications")).get("instance", {}), **fleet_tags.get("instance", {})}

    def _open_reservation(self, region: str, zone: str | None, o: dict, market: str):
        """The open reservation an On-Demand override fills first, as RunInstances does, unless its
        launch template opts out (CapacityReservationPreference none)."""
        preference = (o["data"].get("CapacityReservationSpecification") or {}).get("CapacityReservationPreference")
        if market != "on-demand" or zone is None or preference == "none":
            return None
        return self.market.reservations.open_for(region, zone, o["type"])

    def _launch(
        self, backend, region: str, o: dict, market: str, count: int, fleet_id: str, fleet_tags: dict,
        reservation=None, reserved: int | None = None,
    ) -> list[str]:
        """`reserved` of the instances (all by default) run in `reservation`."""
        """The instances in moto, as RunInstances makes them, then counted by the market as its own launches."""
        from moto.ec2.utils import parse_user_data

        data = o["data"]
        user_data = data.get("UserData")
        mappings = [
            {
                "DeviceName": b.get("DeviceName"),
                "VirtualName": b.get("VirtualName"),
                "NoDevice": b.get("NoDevice"),
                "Ebs": {
                    "SnapshotId": (b.get("Ebs") or {}).get("SnapshotId"),
                    "VolumeSize": _number((b.get("Ebs") or {}).get("VolumeSize")),
                    "DeleteOnTermination": _flag((b.get("Ebs") or {}).get("DeleteOnTermination")),
                    "VolumeType": (b.get("Ebs") or {}).get("VolumeType"),
                    "Iops": (b.get("Ebs") or {}).get("Iops"),
                    "Encrypted": _flag((b.get("Ebs") or {}).get("Encrypted")),
                    "KmsKeyId": (b.get("Ebs") or {}).get("KmsKeyId"),
                },
            }
            for b in data.get("BlockDeviceMappings") or []
        ]
        kwargs: dict[str, Any] = {
            "instance_type": o["type"],
            "is_instance_type_default": False,
            "placement": o["placed"],
            "region_name": region,
            "subnet_id": o["subnet"],
            "security_group_ids": list(data.get("SecurityGroupIds") or []),
            "tags": {
                "instance": self._instance_tags(o, fleet_tags),
                "volume": _tags(data.get("TagSpecifications")).get("volume", {}),
            },
            "instance_market_options": "spot" if market == "spot" else {},
            "instance_initiated_shutdown_behavior": data.get("InstanceInitiatedShutdownBehavior"),
            "metadata_options": data.get("MetadataOptions") or {},
            "client_token": "ABCDE",
        }
        if mappings:
            kwargs["block_device_mappings"] = mappings
        launched = backend.run_instances(
            data.get("ImageId"),
            count,
            parse_user_data(user_data) if user_data else None,
            list(data.get("SecurityGroups") or []),
            **kwargs,
        )
        ids = [i.id for i in launched.instances]
        profile = (data.get("IamInstanceProfile") or {})
        for instance_id in ids:
            if profile.get("Arn"):
                backend.associate_iam_instance_profile(instance_id=instance_id, iam_instance_profile_arn=profile["Arn"])
            elif profile.get("Name"):
                backend.associate_iam_instance_profile(instance_id=instance_id, iam_instance_profile_name=profile["Name"])
        # EC2's own tags on a fleet's instances; `aws:` keys are refused from callers, not from EC2.
        backend.create_tags(
            ids,
            {FLEET_ID_TAG: fleet_id, TEMPLATE_ID_TAG: o["template"].id, TEMPLATE_VERSION_TAG: str(o["version"].number)},
        )
        reserved = 0 if reservation is None else len(launched.instances) if reserved is None else reserved
        if reserved:
            self.market.reservations.attach(reservation, launched.instances[:reserved])
        if o["group"]:
            self.market.groups.joined(region, o["group"], launched.instances)
        self.market.admit(backend, region, o["placed"], o["type"], market, launched.instances, reserved=reserved)
        return ids
