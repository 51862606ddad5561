"""A function's own AWS calls made with DryRun, for `gpufill doctor --probe`: nothing changes.

A function invoked through its probe alias (constants.PROBE_ALIAS) with the one-key event
`{"gpufill_probe": {"regions": {"<region>": {"image_id": "ami-…"}}}}` runs `answer` instead of its
handler (handlers/observability.py routes it). For every call the function makes
(catalog/iam_needs.json, what its runs were granted) it makes the EC2 ones with `DryRun=True`, as
itself, in every region the event names, and lists the others as not probeable. EC2 decides with
the function's real role, in the user's own account: the one proof of the grants before a run.

A probe never runs a handler: invoked through the alias without a probe event, or with a probe
event any other way, the function refuses (ProbeRefused) and does nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from botocore.exceptions import ClientError

from gpufill.adapters.aws import client
from gpufill.adapters.ec2 import LaunchSpec, instance_settings, tag_specifications
from gpufill.adapters.fleet_launch import BASE_TEMPLATE, template_name
from gpufill.constants import (
    ENV_DEPLOYMENT,
    ENV_INSTANCE_PROFILE_ARN,
    PROBE_ALIAS,
    PROBE_EVENT_KEY,
    TAG_DEPLOYMENT,
    TAG_MANAGED,
    TAG_MANAGED_VALUE,
    TAG_REQUEST_ID,
)
from gpufill.policy import probe as verdicts

NEEDS = Path(__file__).resolve().parents[1] / "catalog" / "iam_needs.json"
# Stand-ins for what a probe names but does not own: EC2 answers NotFound for them (unproven).
PLACEHOLDER_IMAGE = "ami-00000000000000000"
PLACEHOLDER_INSTANCE = "i-00000000000000000"
PROBE_REQUEST_ID = "gpufill-probe"
PROBE_INSTANCE_TYPE = "g6.xlarge"


class ProbeRefused(RuntimeError):
    """A probe event outside the probe alias, or the probe alias without a probe event."""


def requested(event: object, context: object) -> bool:
    """Whether this invocation is a probe's: through the probe alias, or carrying the probe key.
    Either alone is refused by `answer`, so a run's event never reaches the probe and a probe never
    reaches a handler."""
    through_alias = str(getattr(context, "invoked_function_arn", "")).endswith(f":{PROBE_ALIAS}")
    return through_alias or (isinstance(event, dict) and PROBE_EVENT_KEY in event)


def answer(event: dict, context: object) -> dict:
    through_alias = str(getattr(context, "invoked_function_arn", "")).endswith(f":{PROBE_ALIAS}")
    if not through_alias:
        raise ProbeRefused(f"a probe event is answered only through the {PROBE_ALIAS!r} alias")
    if not isinstance(event, dict) or set(event) != {PROBE_EVENT_KEY} or not isinstance(event[PROBE_EVENT_KEY], dict):
        raise ProbeRefused(f"the {PROBE_ALIAS!r} alias answers only {{{PROBE_EVENT_KEY!r}: {{...}}}}")
    regions = event[PROBE_EVENT_KEY].get("regions")
    if not isinstance(regions, dict) or not all(isinstance(r, str) and isinstance(f, dict) for r, f in regions.items()):
        raise ProbeRefused(f"{PROBE_EVENT_KEY}.regions: a mapping of region to its facts ({{'us-west-2': {{'image_id': 'ami-…'}}}})")
    task = task_of(str(getattr(context, "function_name", "")))
    return {"function": task, "calls": probe(task, regions)}


def task_of(function_name: str) -> str:
    """`gpufill-dev-LaunchBatch` -> `LaunchBatch` (task names hold no hyphen)."""
    return function_name.rsplit("-", 1)[-1]


def needs(task: str) -> list[str]:
    """The actions a function's runs were granted, as `make iam-report` recorded them."""
    principals = json.loads(NEEDS.read_text())["principals"]
    return sorted({call["action"] for call in principals.get(task, [])})


def probe(task: str, regions: dict[str, dict]) -> list[dict]:
    rows: list[dict] = []
    for action in needs(task):
        operation = action.split(":", 1)[1]
        if not verdicts.dry_runnable(action):
            rows.append(_row(action, "*", verdicts.NOT_PROBEABLE, verdicts.not_probeable(action)))
            continue
        builder = PARAMS.get(operation)
        if builder is None:  # tests/unit/test_probe.py keeps every EC2 call gpufill makes in PARAMS
            rows.append(_row(action, "*", verdicts.UNPROVEN, "no probe call for it"))
            continue
        for region, facts in sorted(regions.items()):
            rows.append(dry_run(action, region, builder(region, facts)))
    return rows


def dry_run(action: str, region: str, params: dict) -> dict:
    operation = action.split(":", 1)[1]
    method = getattr(client("ec2", region), _snake(operation))
    try:
        method(DryRun=True, **params)
    except ClientError as error:
        body = error.response.get("Error", {})
        result, detail = verdicts.classify(body.get("Code"), body.get("Message", ""))
        row = _row(action, region, result, detail)
        if result == verdicts.REFUSED and (encoded := verdicts.encoded_message(body.get("Message", ""))):
            row["encoded"] = encoded
        return row
    result, detail = verdicts.classify(None)
    return _row(action, region, result, detail)


def _row(action: str, region: str, result: str, detail: str) -> dict:
    return {"call": action, "region": region, "result": result, "detail": detail}


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")


# --- each call as the function makes it ---------------------------------------------------------


def _deployment() -> str:
    return os.environ.get(ENV_DEPLOYMENT, "")


def _tags() -> dict[str, str]:
    return {TAG_REQUEST_ID: PROBE_REQUEST_ID, TAG_MANAGED: TAG_MANAGED_VALUE, TAG_DEPLOYMENT: _deployment()}


def _spec(facts: dict) -> LaunchSpec:
    return LaunchSpec(image_id=facts.get("image_id") or PLACEHOLDER_IMAGE, request_id=PROBE_REQUEST_ID,
                      deployment=_deployment(), instance_profile_arn=os.environ.get(ENV_INSTANCE_PROFILE_ARN))


def _run_instances(region: str, facts: dict) -> dict:
    return {**instance_settings(_spec(facts)), "InstanceType": PROBE_INSTANCE_TYPE, "MinCount": 1, "MaxCount": 1,
            "TagSpecifications": tag_specifications(_tags())}


def _create_fleet(region: str, facts: dict) -> dict:
    return {
        "Type": "instant",
        "LaunchTemplateConfigs": [{"LaunchTemplateSpecification": {"LaunchTemplateName": template_name(_deployment()),
                                                                   "Version": "$Default"},
                                   "Overrides": [{"InstanceType": PROBE_INSTANCE_TYPE}]}],
        "TargetCapacitySpecification": {"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "spot"},
        "TagSpecifications": [*tag_specifications(_tags(), ("instance",)), *tag_specifications(_tags(), ("fleet",))],
    }


def _create_launch_template(region: str, facts: dict) -> dict:
    return {"LaunchTemplateName": template_name(_deployment()), "LaunchTemplateData": BASE_TEMPLATE,
            "TagSpecifications": tag_specifications(_tags(), ("launch-template",))}


def _launch_template_version(region: str, facts: dict) -> dict:
    return {"LaunchTemplateName": template_name(_deployment()),
            "LaunchTemplateData": {**instance_settings(_spec(facts)), "TagSpecifications": tag_specifications(_tags())}}


def _delete_launch_template_versions(region: str, facts: dict) -> dict:
    return {"LaunchTemplateName": template_name(_deployment()), "Versions": ["1"]}


def _terminate_instances(region: str, facts: dict) -> dict:
    """One of this deployment's instances in the region when there is one (the grant is judged on
    its tags), else a placeholder EC2 cannot judge."""
    return {"InstanceIds": [facts.get("instance_id") or _own_instance(region) or PLACEHOLDER_INSTANCE]}


def _own_instance(region: str) -> str | None:
    try:
        reply = client("ec2", region).describe_instances(
            Filters=[{"Name": f"tag:{TAG_DEPLOYMENT}", "Values": [_deployment()]},
                     {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}],
            MaxResults=5,
        )
    except ClientError:
        return None  # the DescribeInstances row says why
    return next((i["InstanceId"] for r in reply.get("Reservations", []) for i in r.get("Instances", [])), None)


def _create_security_group(region: str, facts: dict) -> dict:
    return {"GroupName": f"gpufill-{_deployment()}-probe", "Description": "gpufill doctor --probe (DryRun: never made)",
            "TagSpecifications": [{"ResourceType": "security-group", "Tags": [{"Key": TAG_MANAGED, "Value": TAG_MANAGED_VALUE}]}]}


def _purchase_capacity_block(region: str, facts: dict) -> dict:
    return {"CapacityBlockOfferingId": "cb-00000000000000000", "InstancePlatform": "Linux/UNIX",
            "TagSpecifications": tag_specifications(_tags(), ("capacity-reservation",))}


def _nothing(region: str, facts: dict) -> dict:
    return {}


PARAMS: dict[str, Callable[[str, dict], dict]] = {
    "RunInstances": _run_instances,
    "CreateFleet": _create_fleet,
    "CreateLaunchTemplate": _create_launch_template,
    "CreateLaunchTemplateVersion": _launch_template_version,
    "DeleteLaunchTemplateVersions": _delete_launch_template_versions,
    "TerminateInstances": _terminate_instances,
    "CreateSecurityGroup": _create_security_group,
    "PurchaseCapacityBlock": _purchase_capacity_block,
    "GetSpotPlacementScores": lambda region, facts: {
        "InstanceTypes": [PROBE_INSTANCE_TYPE], "TargetCapacity": 1, "RegionNames": [region]},
    "DescribeCapacityBlockOfferings": lambda region, facts: {
        "InstanceType": "p5.48xlarge", "InstanceCount": 1, "CapacityDurationHours": 24},
    "DescribeSpotPriceHistory": lambda region, facts: {"InstanceTypes": [PROBE_INSTANCE_TYPE], "MaxResults": 1},
    **{op: _nothing for op in (
        "DescribeInstances", "DescribeInstanceTypeOfferings", "DescribeImages", "DescribeVpcs", "DescribeSubnets",
        "DescribeSecurityGroups", "DescribeCapacityReservations", "DescribePlacementGroups", "DescribeFleets",
        "DescribeLaunchTemplates", "DescribeLaunchTemplateVersions", "DescribeInstanceTypes",
        "DescribeAvailabilityZones", "DescribeRegions", "DescribeTags")},
}
