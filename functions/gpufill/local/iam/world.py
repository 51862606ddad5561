"""Facts the authorization builder needs, read from moto's state: tags and attributes of existing
EC2 resources, launch templates, the roles behind an instance profile, default networking."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gpufill.local.iam.authorizations import Ec2Resource, Template

# (region, name) -> {"strategy": ..., "tags": {...}} or None: moto 5.2.5 keeps no placement groups.
PlacementGroups = Callable[[str, str], dict[str, Any] | None]


# (region, id) -> the simulated account's capacity reservation (local/reservations.py) or None.
CapacityReservations = Callable[[str, str], Any]


class MotoWorld:
    def __init__(
        self,
        account: str,
        partition: str = "aws",
        placement_groups: PlacementGroups | None = None,
        capacity_reservations: CapacityReservations | None = None,
    ):
        self.account = account
        self.partition = partition
        self._placement_groups = placement_groups or (lambda region, name: None)
        self._capacity_reservations = capacity_reservations or (lambda region, reservation_id: None)

    def _ec2(self, region: str):
        from moto.ec2.models import ec2_backends

        return ec2_backends[self.account][region]

    def _arn(self, region: str, resource: str) -> str:
        return f"arn:{self.partition}:ec2:{region}:{self.account}:{resource}"

    def ec2_resource(self, region: str, kind: str, resource_id: str) -> Ec2Resource | None:
        reader = getattr(self, f"_{kind.replace('-', '_')}", None)
        if reader is None:
            raise LookupError(f"no reader for EC2 {kind}")
        try:
            return reader(region, resource_id)
        except Exception as error:  # moto's NotFound errors: the resource is not there
            if type(error).__name__.startswith(("Invalid", "NotFound")) or isinstance(error, KeyError):
                return None
            raise

    def _tags(self, region: str, resource_id: str) -> dict[str, str]:
        return dict(self._ec2(region).tags.get(resource_id, {}))

    def _instance(self, region: str, instance_id: str) -> Ec2Resource:
        instance = self._ec2(region).get_instance(instance_id)
        attributes = {
            "ec2:InstanceType": instance.instance_type,
            "ec2:AvailabilityZone": getattr(instance.placement, "zone", None) or instance.placement,
            "ec2:InstanceID": instance.id,
            "ec2:RootDeviceType": "ebs",
            "ec2:Tenancy": "default",
            "ec2:InstanceMarketType": "spot" if getattr(instance, "lifecycle", None) == "spot" else "on-demand",
        }
        return Ec2Resource(self._tags(region, instance_id), attributes)

    def _subnet(self, region: str, subnet_id: str) -> Ec2Resource:
        subnet = self._ec2(region).get_subnet(subnet_id)
        attributes = {
            "ec2:AvailabilityZone": subnet.availability_zone,
            "ec2:SubnetID": subnet.id,
            "ec2:Vpc": self._arn(region, f"vpc/{subnet.vpc_id}"),
        }
        return Ec2Resource(self._tags(region, subnet_id), attributes)

    def _security_group(self, region: str, group_id: str) -> Ec2Resource | None:
        group = self._ec2(region).get_security_group_from_id(group_id)
        if group is None:
            return None
        attributes = {"ec2:SecurityGroupID": group.id, "ec2:Vpc": self._arn(region, f"vpc/{group.vpc_id}")}
        return Ec2Resource(self._tags(region, group_id), attributes)

    def _image(self, region: str, image_id: str) -> Ec2Resource | None:
        image = self._ec2(region).amis.get(image_id)
        if image is None:
            return None
        owner = image.owner_alias or image.owner_id
        attributes = {
            "ec2:ImageID": image.id,
            "ec2:Owner": owner,
            "ec2:Public": str(bool(image.is_public)).lower(),
            "ec2:ImageType": "machine",
            "ec2:RootDeviceType": image.root_device_type,
        }
        return Ec2Resource(self._tags(region, image_id), attributes)

    def _vpc(self, region: str, vpc_id: str) -> Ec2Resource | None:
        vpc = self._ec2(region).vpcs.get(vpc_id)
        return None if vpc is None else Ec2Resource(self._tags(region, vpc_id), {"ec2:VpcID": vpc_id, "ec2:Tenancy": "default"})

    def _launch_template(self, region: str, template_id: str) -> Ec2Resource | None:
        template = self._ec2(region).launch_templates.get(template_id)
        return None if template is None else Ec2Resource(self._tags(region, template_id))

    def _placement_group(self, region: str, name: str) -> Ec2Resource | None:
        group = self._placement_groups(region, name)
        if group is None:
            return None
        attributes = {"ec2:PlacementGroupName": name}
        if group.get("strategy"):
            attributes["ec2:PlacementGroupStrategy"] = group["strategy"]
        return Ec2Resource(dict(group.get("tags") or {}), attributes)

    def _capacity_reservation(self, region: str, reservation_id: str) -> Ec2Resource | None:
        held = self._capacity_reservations(region, reservation_id)
        if held is None:
            return None
        attributes = {
            "ec2:InstanceType": held.instance_type,
            "ec2:AvailabilityZone": held.zone,
            "ec2:InstanceMatchCriteria": held.match,
            "ec2:Tenancy": "default",
        }
        return Ec2Resource(dict(held.tags), attributes)

    def _key_pair(self, region: str, name: str) -> Ec2Resource | None:
        return Ec2Resource({}, {"ec2:KeyPairName": name}) if name in self._ec2(region).keypairs else None

    def launch_template(self, region: str, template_id: str | None, name: str | None, version: str | None) -> Template | None:
        backend = self._ec2(region)
        template_id = template_id or backend.launch_template_name_to_ids.get(name or "")
        template = backend.launch_templates.get(template_id or "")
        if template is None:
            return None
        try:
            chosen = template.get_version(version) if version else template.default_version()
        except Exception:  # noqa: BLE001 (an unknown version: EC2 refuses the launch for it)
            return None
        return Template(template.id, self._tags(region, template.id), dict(chosen.data))

    def roles_of_instance_profile(self, profile: str) -> list[str]:
        from moto.iam.models import iam_backends

        name = profile.rsplit("/", 1)[-1]
        found = iam_backends[self.account][self.partition].instance_profiles.get(name)
        if found is None:
            for candidate in iam_backends[self.account][self.partition].instance_profiles.values():
                if candidate.name == name or candidate.arn == profile:
                    found = candidate
                    break
        return [role.arn for role in found.roles] if found is not None else []

    def default_subnet(self, region: str, zone: str | None) -> str | None:
        backend = self._ec2(region)
        for subnet in backend.describe_subnets():
            if subnet.default_for_az and (zone is None or subnet.availability_zone == zone):
                return subnet.id
        return None

    def resource_policy(self, arn: str) -> dict | None:
        """The policy of the SNS topic or S3 bucket `arn` names (an object's ARN names its bucket's),
        as deployed in moto; None for any other resource, or one without a policy."""
        parts = arn.split(":", 5)
        if len(parts) < 6:
            return None
        service, region, resource = parts[2], parts[3], parts[5]
        if service == "sns":
            from moto.sns.models import sns_backends

            topic = sns_backends[self.account][region].topics.get(arn)
            return None if topic is None else json.loads(topic.policy)
        if service == "s3":
            from moto.s3.models import s3_backends

            bucket = s3_backends[self.account][self.partition].buckets.get(resource.split("/", 1)[0])
            policy = getattr(bucket, "policy", None)
            return json.loads(policy) if policy else None
        return None

    def default_security_group(self, region: str, vpc_id: str | None) -> str | None:
        group = self._ec2(region).get_default_security_group(vpc_id)
        return group.id if group is not None else None


def engine_world(engine) -> MotoWorld:
    """The world of a running LocalEngine: moto's state plus the engine's cluster placement groups."""

    def placement_group(region: str, name: str) -> dict[str, Any] | None:
        return engine.market.groups._groups.get((region, name))

    def capacity_reservation(region: str, reservation_id: str):
        held = engine.market.reservations.held.get(reservation_id)
        return held if held is not None and held.region == region else None

    return MotoWorld(engine.account, placement_groups=placement_group, capacity_reservations=capacity_reservation)
