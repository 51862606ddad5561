"""EC2 reclaiming instances, and EventBridge carrying the news, in the simulated account.

The engine deploys the rules the CDK app deploys (every deployed region forwards to the home
region's default bus; the home region's rules invoke StartRefill), puts EC2's events on the
instance's region's default bus as EC2 does, and lets moto's rules match them. moto forwards to
an event bus (but rebuilds the event, losing its region) and cannot invoke a Lambda target, so
those two target kinds are delivered here: the envelope unchanged, as EventBridge does, and the
Lambda invoked the way an asynchronous invoke is (local/lambdas.py: queued, off the caller's thread, up to
three tries).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from unittest import mock

from gpufill import constants
from gpufill.adapters import clock
from gpufill.local.iam import event_delivery

# EC2 warns two minutes before it reclaims a spot instance.
SPOT_WARNING_SECONDS = 120
SPOT_REASON = ("Server.SpotInstanceTermination", "Server.SpotInstanceTermination: Spot instance termination")
# EC2 does not reclaim on-demand instances; one that fails underneath is ended by EC2 itself.
HARDWARE_REASON = ("Server.InternalError", "Server.InternalError: Internal error on the host")


@dataclass
class Reclaim:
    """What the engine did with one scheduled interruption (for tests and `simulate`)."""

    at_seconds: float
    instance: int
    instance_id: str | None = None
    region: str | None = None
    market: str | None = None
    note: str = ""


def patches(engine):
    """EC2 emits state changes for TerminateInstances; EventBridge delivers to Lambda and
    event-bus targets (see the module docstring)."""
    from contextlib import ExitStack

    from moto.ec2.models.instances import InstanceBackend
    from moto.events.models import Rule, events_backends
    from moto.utilities.arns import parse_arn

    terminate_instances = InstanceBackend.terminate_instances

    def terminated_with_events(backend, instance_ids):
        ended = terminate_instances(backend, instance_ids)
        for instance, previous in ended:
            if previous.name == "terminated":
                continue
            if previous.name != "shutting-down":
                detail = {"instance-id": instance.id, "state": "shutting-down"}
                put_ec2_event(engine, backend.region_name, constants.INSTANCE_STATE_CHANGE, detail, instance.id)
            detail = {"instance-id": instance.id, "state": "terminated"}
            put_ec2_event(engine, backend.region_name, constants.INSTANCE_STATE_CHANGE, detail, instance.id)
        return ended

    def send_to_targets(rule, event, transform_input=True):
        if not rule.event_pattern.matches_event(event):
            return
        for target in rule.targets:
            arn = parse_arn(target["Arn"])
            if arn.service == "lambda":
                if not event_delivery.may_invoke(engine, target["Arn"], rule.arn):
                    engine.event_deliveries.append({"function": target["Arn"], "event": event, "failed": True,
                                                    "answer": {"error": "AccessDeniedException: no resource policy lets this rule invoke it"}})
                    continue
                engine.invoke_async(target["Arn"], event)
            elif arn.service == "events" and arn.resource_type == "event-bus":
                if arn.region != rule.region_name and not target.get("RoleArn"):
                    continue  # EventBridge needs a role to put events on another region's bus
                if arn.region != rule.region_name and not event_delivery.may_put(engine, target.get("RoleArn"), target["Arn"], arn.region, rule.arn):
                    continue  # the role EventBridge assumes may not put events there
                bus = events_backends[arn.account][arn.region].event_buses[arn.resource_id]
                for other in list(bus.rules.values()):
                    other.send_to_targets(event)
            else:
                raise NotImplementedError(f"the local engine delivers to Lambda and event-bus targets only, not {target['Arn']}")

    stack = ExitStack()
    stack.enter_context(mock.patch.object(Rule, "send_to_targets", send_to_targets))
    stack.enter_context(mock.patch.object(InstanceBackend, "terminate_instances", terminated_with_events))
    return stack


def put_ec2_event(engine, region: str, detail_type: str, detail: dict, instance_id: str) -> None:
    """An event EC2 emits, on `region`'s default bus, in EventBridge's envelope."""
    from moto.events.models import events_backends

    event = {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": constants.EVENT_SOURCE_EC2,
        "account": engine.account,
        "time": datetime.fromtimestamp(clock.epoch(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:ec2:{region}:{engine.account}:instance/{instance_id}"],
        "detail": detail,
    }
    engine.events_sent.append(event)
    for rule in list(events_backends[engine.account][region].event_buses["default"].rules.values()):
        rule.send_to_targets(event)


def reclaim(engine, reclaim: Reclaim) -> None:
    """EC2 takes the n-th instance launched in the account away: a spot instance after the
    two-minute warning, an on-demand one at once (a host failure). One that has already ended,
    or was never launched, is noted and left."""
    from moto.ec2.models.instances import StateReason

    engine.reclaims.append(reclaim)
    launched = engine.market.launched_instance(reclaim.instance)
    if launched is None:
        reclaim.note = f"no instance {reclaim.instance} was launched by then"
        return
    region, market, instance = launched
    reclaim.instance_id, reclaim.region, reclaim.market = instance.id, region, market
    if instance.state in ("shutting-down", "terminated"):
        reclaim.note = "it had already ended"
        return
    code, message = SPOT_REASON if market == "spot" else HARDWARE_REASON

    def end() -> None:
        if instance.state in ("shutting-down", "terminated"):
            return  # ended meanwhile (a teardown): nothing left to reclaim
        # EC2 shows the reason from the moment the instance starts shutting down.
        instance.state_reason = StateReason(message, code)
        instance._state.name, instance._state.code = "shutting-down", 32
        put_ec2_event(engine, region, constants.INSTANCE_STATE_CHANGE, {"instance-id": instance.id, "state": "shutting-down"}, instance.id)
        instance.terminate()
        instance.state_reason = StateReason(message, code)  # terminate() writes a user-initiated reason
        put_ec2_event(engine, region, constants.INSTANCE_STATE_CHANGE, {"instance-id": instance.id, "state": "terminated"}, instance.id)

    if market == "spot":
        reclaim.note = "spot interruption: warned, terminated two minutes later"
        put_ec2_event(
            engine, region, constants.SPOT_INTERRUPTION_WARNING,
            {"instance-id": instance.id, "instance-action": "terminate"}, instance.id,
        )
        engine.at(engine.elapsed + SPOT_WARNING_SECONDS, end)
    else:
        reclaim.note = "on-demand host failure: terminated by EC2"
        end()


def drain(engine, drained) -> None:
    """Other accounts take a pool's spot capacity (the scenario's `drain`); short of it, EC2 reclaims
    this account's newest spot instance there that is not already warned, as a spot interruption."""
    warned = {r.instance_id for r in engine.reclaims if r.instance_id}
    number = engine.market.drain(drained.zone, drained.type, drained.spot, spared=warned)
    if number is not None:
        reclaim(engine, Reclaim(at_seconds=drained.at_seconds, instance=number))


def power_off(engine, region: str, instance_id: str) -> None:
    """The instance shuts itself down (the idle watchdog's `shutdown -h`); gpufill launches with
    instance-initiated shutdown set to terminate, so EC2 terminates it."""
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    instance = ec2_backends[engine.account][region].get_instance(instance_id)
    reason = StateReason("Client.InstanceInitiatedShutdown: Instance initiated shutdown", "Client.InstanceInitiatedShutdown")
    instance.state_reason = reason
    instance._state.name, instance._state.code = "shutting-down", 32
    put_ec2_event(engine, region, constants.INSTANCE_STATE_CHANGE, {"instance-id": instance_id, "state": "shutting-down"}, instance_id)
    instance.terminate()
    instance.state_reason = reason
    put_ec2_event(engine, region, constants.INSTANCE_STATE_CHANGE, {"instance-id": instance_id, "state": "terminated"}, instance_id)
