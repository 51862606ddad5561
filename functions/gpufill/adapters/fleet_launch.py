"""EC2 Fleet launches (launch_mode "fleet"): one CreateFleet of type instant per region and market.

Instances launched by a fleet are described by a launch template: one per deployment and
region (`gpufill-<deployment>`), created on first use, with a version per run, region and
contents that holds what RunInstances would send (AMI, user data, root volume, tags). Both are
created with ClientTokens derived from their contents (a version's also from the request and the
run), so a retried step finds the same template and version instead of adding new ones. Every
fleet of the run in the region launches from that one version (policy/template_versions.py): what
differs per fleet, the launch token each instance is tagged with, goes in CreateFleet's own
instance tags, which EC2 takes for instant fleets. The CreateFleet itself carries the step's
ClientToken: EC2 answers a token it has seen with the first call's fleet id and launches nothing
more.

A template holds at most 10,000 versions, so the run's versions are deleted when the run ends
(`retire_versions`); the template's first (default) version stays.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError

from gpufill.adapters import clock
from gpufill.adapters.aws import TRANSPORT_ERRORS, TransientAwsError, attempts, client, is_transient
from gpufill.adapters.ec2 import LaunchSpec, code_of, instance_settings, launch_tags, message_of, tag_specifications
from gpufill.adapters.visibility import PAUSES, until_visible
from gpufill.adapters.visibility import seconds_left as visibility_time_left
from gpufill.constants import TAG_DEPLOYMENT, TAG_LAUNCH_TOKEN, TAG_MANAGED, TAG_MANAGED_VALUE
from gpufill.models.run import FleetAnswer, Instance, LaunchResult, Pool, PoolAnswer, TemplateVersion
from gpufill.policy.errors import classify

TEMPLATE_NOT_FOUND = frozenset({"InvalidLaunchTemplateName.NotFoundException", "InvalidLaunchTemplateId.NotFound"})
TEMPLATE_EXISTS = "InvalidLaunchTemplateName.AlreadyExistsException"
# EC2's answer when a template already holds its quota of versions (10,000).
VERSION_LIMIT = "VersionLimitExceeded"
# A template's own first version: the metadata rule every gpufill instance keeps. Each request
# launches from its own version, never from this one.
BASE_TEMPLATE = {"MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1}}
# A pool whose AZ has no subnet to launch into is left out of the call and answered so.
NO_SUBNET = "NoSubnet"
# A pool a fleet short of its target named no answer for: not tried, so worth asking again.
NOT_ANSWERED = "NotAnswered"

logger = Logger(child=True)


@dataclass(frozen=True)
class FleetCall:
    """One region's fleet: the pools it may launch in (their plan indices), what it asks for, how EC2 picks."""

    region: str
    market: str
    pools: list[tuple[int, Pool]]
    target: int
    strategy: str
    subnets: dict[str, str]
    single_zone: bool = False
    min_target: int | None = None
    # A same-az gang of EFA types: each AZ's cluster placement group.
    placement_groups: dict[str, str] = field(default_factory=dict)
    # The On-Demand Capacity Reservation the fleet launches into, and nothing else.
    capacity_reservation_id: str | None = None


def template_name(deployment: str) -> str:
    return f"gpufill-{deployment or 'default'}"[:128]


def _token(prefix: str, *parts: object) -> str:
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:48]
    return f"gpufill-{prefix}-{digest}"


def version_data(spec: LaunchSpec) -> dict:
    """What the run's version in a region holds: the same for every fleet of the run there."""
    data = {**instance_settings(spec), "TagSpecifications": tag_specifications(launch_tags(spec))}
    if spec.reservations_off:
        # An On-Demand fleet of a request that keeps out of reservations: EC2 would otherwise put
        # its instances in any matching open reservation.
        data["CapacityReservationSpecification"] = {"CapacityReservationPreference": "none"}
    return data


def version_token(region: str, spec: LaunchSpec, run_id: str) -> str:
    """The version's ClientToken: the request, the run (`run_id`, this execution's request id) and
    the contents, so a retried step finds the version it made, and another run (a refill) never
    finds one an earlier run deleted."""
    return _token("lt", spec.deployment, spec.request_id, run_id, region, version_data(spec))


def template_version(region: str, spec: LaunchSpec, run_id: str) -> TemplateVersion:
    """The run's version in `region` for `spec`, created once: a retried step sends the same token
    and is answered with the version it made."""
    ec2 = client("ec2", region)
    name = template_name(spec.deployment)
    data = version_data(spec)
    token = version_token(region, spec, run_id)
    try:
        version = ec2.create_launch_template_version(LaunchTemplateName=name, ClientToken=token, LaunchTemplateData=data)
    except ClientError as error:
        if code_of(error) not in TEMPLATE_NOT_FOUND:
            raise
        _create_template(ec2, name, spec.deployment)
        # The template created a moment ago may not be visible by its name yet.
        version = until_visible(
            lambda: ec2.create_launch_template_version(LaunchTemplateName=name, ClientToken=token, LaunchTemplateData=data),
            f"CreateLaunchTemplateVersion in {region}",
        )
    made = version["LaunchTemplateVersion"]
    return TemplateVersion(
        region=region, token=token, template_id=made["LaunchTemplateId"], version=str(made["VersionNumber"]),
        default=bool(made.get("DefaultVersion")),
    )


def retire_versions(region: str, versions: list[TemplateVersion]) -> None:
    """The run's versions in `region`, deleted at its end (one call per template). Never fails the
    run: a version left behind only counts toward the template's 10,000 (docs/fleet.md)."""
    by_template: dict[str, list[str]] = {}
    for version in versions:
        by_template.setdefault(version.template_id, []).append(version.version)
    for template_id, numbers in sorted(by_template.items()):
        try:
            reply = client("ec2", region).delete_launch_template_versions(LaunchTemplateId=template_id, Versions=numbers)
        except (ClientError, *TRANSPORT_ERRORS) as error:
            logger.warning(
                "launch template version not deleted",
                extra={"region": region, "template": template_id, "version": ",".join(numbers), "error": str(error)},
            )
            continue
        for failed in reply.get("UnsuccessfullyDeletedLaunchTemplateVersions") or []:
            logger.warning(
                "launch template version not deleted",
                extra={"region": region, "template": template_id, "version": str(failed.get("VersionNumber")),
                       "error": failed.get("ResponseError")},
            )


def _create_template(ec2, name: str, deployment: str) -> None:
    tags = {TAG_MANAGED: TAG_MANAGED_VALUE, TAG_DEPLOYMENT: deployment}
    try:
        ec2.create_launch_template(
            LaunchTemplateName=name,
            ClientToken=_token("template", deployment, name),
            LaunchTemplateData=BASE_TEMPLATE,
            TagSpecifications=tag_specifications(tags, ("launch-template",)),
        )
    except ClientError as error:
        if code_of(error) != TEMPLATE_EXISTS:  # another run of this deployment made it first
            raise


def create_fleet_params(call: FleetCall, template: tuple[str, str], spec: LaunchSpec, client_token: str) -> dict:
    overrides = []
    for priority, (_, pool) in enumerate(_launchable(call)):
        override: dict = {"InstanceType": pool.instance_type, "SubnetId": call.subnets[pool.availability_zone]}
        if call.strategy == "prioritized":
            override["Priority"] = float(priority)
        group = call.placement_groups.get(pool.availability_zone)
        if group:
            override["Placement"] = {"GroupName": group}
        overrides.append(override)
    options: dict = {"AllocationStrategy": call.strategy}
    if call.market == "spot":
        options["InstanceInterruptionBehavior"] = "terminate"
    if call.single_zone:
        options["SingleAvailabilityZone"] = True
    if call.min_target:
        options["MinTargetCapacity"] = call.min_target
    capacity_type = "spot" if call.market == "spot" else "on-demand"
    market_options = {("SpotOptions" if call.market == "spot" else "OnDemandOptions"): options}
    if call.capacity_reservation_id:
        # EC2 Fleet's reserved capacity names the reservation itself (open or targeted alike) and,
        # without fallback options, launches nothing outside it. use-capacity-reservations-first
        # would spill past the reservations into plain On-Demand ahead of Spot, and reaches a
        # targeted reservation only through a resource group.
        capacity_type = "reserved-capacity"
        market_options = {
            "ReservedCapacityOptions": {
                "ReservationTypes": ["on-demand-capacity-reservation"],
                "CapacityReservationTarget": {"CapacityReservationIds": [call.capacity_reservation_id]},
            }
        }
    return {
        "Type": "instant",
        "ClientToken": client_token,
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template[0], "Version": template[1]},
                "Overrides": overrides,
            }
        ],
        "TargetCapacitySpecification": {"TotalTargetCapacity": call.target, "DefaultTargetCapacityType": capacity_type},
        **market_options,
        "TagSpecifications": [
            *tag_specifications({**launch_tags(spec), TAG_LAUNCH_TOKEN: client_token}, ("instance",)),
            *tag_specifications(launch_tags(spec), ("fleet",)),
        ],
    }


def _launchable(call: FleetCall) -> list[tuple[int, Pool]]:
    return [(i, p) for i, p in call.pools if p.availability_zone in call.subnets]


def launch(call: FleetCall, spec: LaunchSpec, client_token: str, *, run_id: str,
           versions: list[TemplateVersion] = ()) -> FleetAnswer:
    """One CreateFleet, its answer mapped back onto the plan's pools; launches at most once whatever fails.

    EC2 answers a ClientToken it has seen with the fleet's id and nothing else ("succeeds without
    performing any further actions"), so every answer that may be a replay, and every call left
    unsettled, is settled by reading the fleet: DescribeFleets by its id, or, when no id came back,
    the instances tagged with the token.
    (`versions`: those the run made so far; one for this region and contents is launched from
    without asking EC2 again.)
    """
    missing = [PoolAnswer(index=i, result=_no_subnet(p)) for i, p in call.pools if p.availability_zone not in call.subnets]
    if not _launchable(call):
        return FleetAnswer(answers=missing)
    token = version_token(call.region, spec, run_id)
    known = next((v for v in versions if v.region == call.region and v.token == token), None)
    try:
        made = known or template_version(call.region, spec, run_id)
    except (EndpointConnectionError, ConnectTimeoutError) as error:
        return FleetAnswer(failure=LaunchResult(outcome="error", reason=type(error).__name__, message=str(error)))
    except ClientError as error:
        if is_transient(error):
            raise TransientAwsError(f"the launch template in {call.region} could not be prepared ({error})") from error
        return FleetAnswer(failure=LaunchResult(outcome=classify(code_of(error)), reason=code_of(error), message=message_of(error)))
    answered = _launch(call, spec, client_token, (made.template_id, made.version))
    return answered.model_copy(update={"template_version": made, "answers": [*missing, *answered.answers]})


def _launch(call: FleetCall, spec: LaunchSpec, client_token: str, template: tuple[str, str]) -> FleetAnswer:
    params = create_fleet_params(call, template, spec, client_token)
    try:
        with attempts() as sent:
            # The template and its version, created a moment ago, may not be visible yet: a refused
            # call launched nothing, so the same call (the same token) is sent again.
            reply = until_visible(lambda: client("ec2", call.region).create_fleet(**params), f"CreateFleet in {call.region}")
    except (EndpointConnectionError, ConnectTimeoutError) as error:
        if "reached" not in sent:
            # No attempt reached EC2: nothing launched, and the region is out of reach.
            return FleetAnswer(failure=LaunchResult(outcome="error", reason=type(error).__name__, message=str(error)))
        # An earlier attempt may have launched and lost its reply: what carries the token tells.
        reply = _by_token(call, client_token, error)
    except ClientError as error:
        if code_of(error) == "IdempotentParameterMismatch":
            # The token was used before with other settings (the step retried after a deploy):
            # that earlier call happened, and its instances carry the token, if it launched any.
            reply = _earlier_call(call, client_token, error)
            if reply is None:
                return FleetAnswer(answers=[PoolAnswer(index=i, result=_token_spent(error)) for i, _ in _launchable(call)])
        elif not is_transient(error):
            return FleetAnswer(failure=LaunchResult(outcome=classify(code_of(error)), reason=code_of(error), message=message_of(error)))
        else:
            reply = _again(call, params, client_token, error)
    except TRANSPORT_ERRORS as error:
        reply = _again(call, params, client_token, error)
    if _may_be_replay(reply):
        reply = _described(call, reply["FleetId"])
    return FleetAnswer(answers=_answers(call, reply))


def _may_be_replay(reply: dict) -> bool:
    """A fleet that names neither an instance nor an error: EC2's answer to a token it has seen."""
    return bool(reply.get("FleetId")) and not reply.get("Instances") and not reply.get("Errors")


def _again(call: FleetCall, params: dict, client_token: str, error: Exception) -> dict:
    """The identical call once more: EC2 answers a ClientToken it has seen with that call's fleet id."""
    try:
        return client("ec2", call.region).create_fleet(**params)
    except ClientError as again:
        if code_of(again) == "IdempotentParameterMismatch":
            return _by_token(call, client_token, again)
        raise _unsettled(call, error, again) from again
    except TRANSPORT_ERRORS as again:
        raise _unsettled(call, error, again) from again


def _unsettled(call: FleetCall, error: Exception, again: Exception | None = None) -> TransientAwsError:
    then = f"; then {again}" if again is not None else ""
    return TransientAwsError(f"CreateFleet in {call.region} ended unsettled ({error}{then}); the same call will be sent again")


def _described(call: FleetCall, fleet_id: str) -> dict:
    """What an instant fleet launched and could not launch, read back by its id."""
    try:
        fleets = client("ec2", call.region).describe_fleets(FleetIds=[fleet_id])["Fleets"]
    except (ClientError, *TRANSPORT_ERRORS) as error:
        raise TransientAwsError(f"fleet {fleet_id} in {call.region} could not be read back ({error})") from error
    if not fleets:  # not visible yet: the retried step asks again
        raise TransientAwsError(f"fleet {fleet_id} in {call.region} is not described yet")
    return {"FleetId": fleet_id, "Instances": fleets[0].get("Instances") or [], "Errors": fleets[0].get("Errors") or []}


def _earlier_call(call: FleetCall, client_token: str, error: Exception) -> dict | None:
    """What the earlier call with this token launched, or None when it launched nothing.

    EC2 shows a new instance to DescribeInstances within seconds; the earlier call was made at
    least a step retry ago, and the token tag is looked for again over the same short pauses as a
    resource created a moment ago (adapters/visibility.py) before "nothing" is believed. Without
    the time for that, the step is retried instead."""
    for pause in (*PAUSES, None):
        try:
            return _by_token(call, client_token, error)
        except TransientAwsError as unsettled:
            left = visibility_time_left()
            if unsettled.__cause__ is not None or (pause is not None and left is not None and left < pause):
                raise  # the look-up failed, or no time to look again: the step is retried
            if pause is None:
                logger.info("the earlier call with this token launched nothing", extra={"region": call.region})
                return None
            clock.pause(pause)
    raise AssertionError("unreachable")


def _token_spent(error: ClientError) -> LaunchResult:
    """EC2 holds this token for an earlier call that launched nothing: the pools were not asked,
    and the next fleet asks them with a token of its own."""
    return LaunchResult(
        outcome="throttled",
        reason="IdempotentParameterMismatch",
        message=f"{message_of(error)} The earlier call with this token launched nothing; a new call is made with a new token.",
    )


def _by_token(call: FleetCall, client_token: str, error: Exception) -> dict:
    """The fleet's instances found by the token tag, shaped as CreateFleet answers them.

    None found may be EC2 not showing them yet: the step is retried with the same token."""
    try:
        pages = client("ec2", call.region).get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{TAG_LAUNCH_TOKEN}", "Values": [client_token]}]
        )
        found = [i for page in pages for reservation in page["Reservations"] for i in reservation["Instances"]]
    except (ClientError, *TRANSPORT_ERRORS) as lookup:
        raise _unsettled(call, error, lookup) from lookup
    if not found:
        raise _unsettled(call, error)
    by_override: dict[tuple[str, str | None], list[str]] = {}
    for instance in found:
        by_override.setdefault((instance["InstanceType"], instance.get("SubnetId")), []).append(instance["InstanceId"])
    return {
        "Instances": [
            {"LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": itype, "SubnetId": subnet}}, "InstanceIds": ids}
            for (itype, subnet), ids in by_override.items()
        ],
        "Errors": [],
        "settled_by": f"the launch answered {type(error).__name__}; its instances were found by the token tag",
    }


def _answers(call: FleetCall, reply: dict) -> list[PoolAnswer]:
    """An answer per pool EC2 answered for. A pool EC2 named no answer for gets one only when the
    fleet fell short: "try again" (an error EC2 gave for the whole fleet, else NotAnswered), never
    an invented capacity answer."""
    by_override = {(p.instance_type, call.subnets[p.availability_zone]): (i, p) for i, p in _launchable(call)}
    launched: dict[int, list[str]] = {}
    errors: dict[int, tuple[str, str]] = {}
    unnamed: list[tuple[str, str]] = []
    for item in reply.get("Instances") or []:
        key = _override_key(item)
        if key in by_override:
            launched.setdefault(by_override[key][0], []).extend(item.get("InstanceIds") or [])
    for item in reply.get("Errors") or []:
        code, message = item.get("ErrorCode") or "Unknown", item.get("ErrorMessage") or ""
        key = _override_key(item)
        if key in by_override:
            errors.setdefault(by_override[key][0], (code, message))
        elif not (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides"):
            unnamed.append((code, message))
    answers = []
    for index, pool in _launchable(call):
        ids = launched.get(index, [])
        if ids:
            note = f"the fleet also answered {errors[index][0]} here" if index in errors else reply.get("settled_by")
            instances = [_instance(pool, instance_id) for instance_id in ids]
            answers.append(PoolAnswer(index=index, result=LaunchResult(outcome="launched", instances=instances, note=note)))
        elif index in errors:
            code, message = errors[index]
            answers.append(PoolAnswer(index=index, result=LaunchResult(outcome=classify(code), reason=code, message=message)))
    if sum(len(ids) for ids in launched.values()) < call.target:
        answered = {a.index for a in answers}
        for index, _ in _launchable(call):
            if index not in answered:
                answers.append(PoolAnswer(index=index, result=_unanswered(unnamed)))
    return answers


def _unanswered(unnamed: list[tuple[str, str]]) -> LaunchResult:
    """A pool the fleet did not name. An error EC2 gave for the whole fleet applies to it, except a
    capacity code, which names no pool EC2 looked at (so it is not remembered as one found empty)."""
    if not unnamed:
        return LaunchResult(outcome="throttled", reason=NOT_ANSWERED, message="EC2 named no answer for this pool")
    code, message = unnamed[0]
    outcome = classify(code)
    return LaunchResult(outcome="error" if outcome == "capacity" else outcome, reason=code, message=message)


def _override_key(item: dict) -> tuple[str | None, str | None]:
    overrides = (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
    return overrides.get("InstanceType") or item.get("InstanceType"), overrides.get("SubnetId")


def _instance(pool: Pool, instance_id: str) -> Instance:
    return Instance(
        instance_id=instance_id,
        region=pool.region,
        availability_zone=pool.availability_zone,
        instance_type=pool.instance_type,
        market=pool.market,
        hourly_price=pool.price,
        capacity_reservation_id=pool.capacity_reservation_id,
    )


def _no_subnet(pool: Pool) -> LaunchResult:
    return LaunchResult(outcome="error", reason=NO_SUBNET, message=f"no subnet to launch into in {pool.availability_zone}")
