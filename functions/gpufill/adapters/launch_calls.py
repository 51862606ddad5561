"""The launch step's calls, as policy/launch_step.py decided them: the cluster placement groups
ensured, the intent recorded, then the one CreateFleet (adapters/fleet_launch.py) or RunInstances
(adapters/ec2.py), each settling a lost reply by its ClientToken.

The intent (`intent#<token>`, naming the region) is written right before the call, so a function
that dies between the call and the records leaves the region to reconcile. A RunInstances for a
pool whose AZ has no subnet is not sent: it is answered NoSubnet, with no group and no intent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpufill.adapters import ec2, fleet_launch, placement_groups, run_store
from gpufill.adapters.ec2 import LaunchSpec
from gpufill.models.run import FleetAnswer, LaunchResult, Run
from gpufill.policy import template_versions
from gpufill.policy.launch_step import CREATE_FLEET, LaunchStep

NO_SUBNET = fleet_launch.NO_SUBNET


@dataclass(frozen=True)
class Answer:
    """What AWS answered the call: a fleet's answer per pool, or one RunInstances result; and the
    region where the call made sure of cluster placement groups (None: it needed none)."""

    answer: FleetAnswer | LaunchResult
    grouped: str | None = None


def make(step: LaunchStep, spec: LaunchSpec) -> Answer:
    """The step's call, sent once (`spec`: what every instance of the step is launched with)."""
    call = step.call
    if call is None:
        raise ValueError("the step decided no call")
    if call.api != CREATE_FLEET and not call.subnets:
        [(_, pool)] = call.pools
        return Answer(LaunchResult(outcome="error", reason=NO_SUBNET, message=f"no subnet to launch into in {pool.availability_zone}"))
    for group in call.placement_groups.values():  # one per AZ, in the order of the call's pools
        placement_groups.ensure(call.region, group, request_id=step.records.request_id, deployment=spec.deployment)
    grouped = call.region if call.placement_groups else None
    run_store.record_intent(request_id=step.records.owner_id, region=call.region, client_token=call.token)
    if call.api == CREATE_FLEET:
        fleet = fleet_launch.FleetCall(
            region=call.region,
            market=call.market,
            pools=list(call.pools),
            target=call.target,
            strategy=str(call.strategy),
            subnets=call.subnets,
            single_zone=call.single_zone,
            min_target=call.min_target,
            placement_groups=dict(call.placement_groups),
            capacity_reservation_id=call.capacity_reservation_id,
        )
        spec = replace(spec, reservations_off=call.reservations_off)
        answer = fleet_launch.launch(
            fleet, spec, call.token, run_id=step.records.request_id, versions=list(step.run.template_versions)
        )
        return Answer(answer, grouped)
    [(_, pool)] = call.pools
    return Answer(
        ec2.launch(
            pool,
            min_count=call.min_target or call.target,
            max_count=call.target,
            client_token=call.token,
            spec=replace(
                spec,
                subnet_id=call.subnets[pool.availability_zone],
                placement_group=call.placement_groups.get(pool.availability_zone),
                reservations_off=call.reservations_off,
            ),
        ),
        grouped,
    )


def retire(run: Run) -> Run:
    """The run's launch template versions deleted at its end (policy/template_versions.py), and
    the run that no longer holds them. Never fails: a version left behind is logged."""
    for region, versions in sorted(template_versions.to_delete(run).items()):
        fleet_launch.retire_versions(region, versions)
    return template_versions.forget(run)
