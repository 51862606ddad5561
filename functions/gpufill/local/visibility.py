"""EC2's eventual consistency after create, for the resources a launch references.

AWS documents that the EC2 API is eventually consistent: a resource just created may be unknown
to the next calls that name it, which answer the kind's NotFound code although the resource
exists ("Eventual consistency in the Amazon EC2 API"). The engine plays it only where a test asks
(`engine.faults.not_visible(kind, calls=N)`), so runs stay deterministic: the next resource of
that kind created is missed by the next N calls that reference it, then found.

Where each miss is answered, as EC2 answers a resource it does not know there:
- RunInstances: the whole call is refused (nothing launched, its ClientToken not spent).
- CreateFleet: an unknown launch template or version refuses the whole call; an unknown
  placement group or security group is answered per override in the fleet's Errors, as any
  launch refusal of an override is (local/fleet_api.py).
"""

from __future__ import annotations

from moto.ec2.exceptions import EC2ClientError

NOT_FOUND = {
    "launch-template": "InvalidLaunchTemplateId.NotFound",
    "launch-template-version": "InvalidLaunchTemplateId.VersionNotFound",
    "placement-group": "InvalidPlacementGroup.Unknown",
    "security-group": "InvalidGroup.NotFound",
}


def message(kind: str, key: str) -> str:
    if kind == "launch-template":
        return f"The specified launch template, with template ID {key}, does not exist."
    if kind == "launch-template-version":
        template, _, version = key.partition(":")
        return f"Could not find launch template version {version} for template {template}."
    if kind == "placement-group":
        return f"The Placement Group '{key}' is unknown."
    return f"The security group '{key}' does not exist"


def refusal(kind: str, key: str) -> EC2ClientError:
    return EC2ClientError(NOT_FOUND[kind], message(kind, key))


def check(faults, region: str, kind: str, key: str | None) -> None:
    """Raise the NotFound EC2 answers when this call misses a resource created a moment ago."""
    if faults is not None and key and faults.unseen(region, kind, key):
        raise refusal(kind, key)


def missed(faults, region: str, kind: str, key: str | None) -> tuple[str, str] | None:
    """(code, message) when this call misses the resource, for an answer listed per override."""
    if faults is not None and key and faults.unseen(region, kind, key):
        return NOT_FOUND[kind], message(kind, key)
    return None
