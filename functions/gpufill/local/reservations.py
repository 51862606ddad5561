"""On-Demand Capacity Reservations in the simulated EC2 (moto 5.2.5 has none): the scenario's
`capacity_reservations`, DescribeCapacityReservations, and where a launch's instances run.

As on EC2:
- An instance in a reservation takes one of its slots while it is not terminated, and for
  SLOT_RELEASE_SECONDS of modelled time after: EC2 cleans a terminated instance up (it stays
  `shutting-down`) for several minutes before the slot shows as available again (EC2 user guide,
  "Launch instances using Capacity Blocks"). `AvailableInstanceCount` is the total less the slots
  held.
- A launch naming a reservation (`CapacityReservationTarget.CapacityReservationId`) runs there or
  nowhere: an unknown id answers InvalidCapacityReservationId.NotFound, another type or AZ
  InvalidParameterCombination, a reservation without the room for MinCount
  ReservationCapacityExceeded; it never takes the zone's ordinary On-Demand capacity.
- An On-Demand launch that names none and does not opt out (`CapacityReservationPreference`
  "none") fills a matching *open* reservation first (same type and AZ), the rest from the zone;
  a *targeted* reservation takes only launches that name it. Spot never runs in one.
- Reserved capacity comes on top of the zone's On-Demand stock; the instances still count toward
  the region's On-Demand vCPU quota.
- A reservation not `active` takes nothing and is described with its state.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

from moto.ec2.exceptions import EC2ClientError

from gpufill.constants import TAG_DEPLOYMENT
from gpufill.local.scenario import MarketScenario

LIVE_ENDED = ("terminated", "shutting-down")
# How long a terminated instance keeps its reservation slot: AWS says "several minutes"; five.
SLOT_RELEASE_SECONDS = 300.0


@dataclass
class Held:
    """One reservation the account holds, with the instances running in it."""

    id: str
    region: str
    zone: str
    instance_type: str
    total: int
    match: str
    state: str
    tags: dict[str, str]
    instances: list = field(default_factory=list)

    # What DescribeInstances says of an instance running here (InstanceLifecycle): nothing for an
    # On-Demand Capacity Reservation, "capacity-block" for a Capacity Block.
    lifecycle = None

    def described(self) -> dict:
        """What DescribeCapacityReservations adds for this kind of reservation (a Capacity Block its dates)."""
        return {}

    def no_room(self) -> EC2ClientError:
        """EC2's answer to a launch naming this reservation that it has no room for."""
        return EC2ClientError(
            "ReservationCapacityExceeded",
            f"The targeted Capacity Reservation {self.id} does not have enough available capacity "
            f"({self.available()} of {self.total} {self.instance_type} available).",
        )

    def available(self) -> int:
        if self.state != "active":
            return 0
        return self.total - sum(1 for i in self.instances if holds_slot(i))


def holds_slot(instance) -> bool:
    """Whether an instance still takes its reservation slot: live, or ended less than
    SLOT_RELEASE_SECONDS ago on the modelled clock (`ended` stamps it)."""
    if instance.state not in LIVE_ENDED:
        return True
    free_at, clock = getattr(instance, "gpufill_slot_free_at", None), getattr(instance, "gpufill_clock", None)
    return free_at is not None and clock is not None and clock() < free_at


def ended(instance, clock) -> None:
    """Stamp an instance as it ends (moto's Instance.terminate): its slot comes back later."""
    if getattr(instance, "gpufill_slot_free_at", None) is None:
        instance.gpufill_clock = clock
        instance.gpufill_slot_free_at = clock() + SLOT_RELEASE_SECONDS


def _id_for(n: int, zone: str, instance_type: str) -> str:
    return "cr-" + hashlib.sha256(f"{n}/{zone}/{instance_type}".encode()).hexdigest()[:17]


class Reservations:
    def __init__(self, scenario: MarketScenario, deployment: str = ""):
        self._lock = threading.RLock()
        self.held: dict[str, Held] = {}
        for n, r in enumerate(scenario.capacity_reservations):
            tags = dict(r.tags)
            if r.for_deployment:
                tags.setdefault(TAG_DEPLOYMENT, deployment)
            reservation_id = r.id or _id_for(n, r.zone, r.type)
            self.held[reservation_id] = Held(
                id=reservation_id, region=r.zone[:-1], zone=r.zone, instance_type=r.type, total=r.count,
                match=r.match, state=r.state, tags=tags,
            )

    def in_region(self, region: str) -> list[Held]:
        return [h for h in self.held.values() if h.region == region]

    # --- DescribeCapacityReservations ---------------------------------------------------------

    def describe(self, region: str, account: str, ids: list[str], filters: dict[str, list[str]]) -> list[dict]:
        found = self.in_region(region)
        if ids:
            unknown = [i for i in ids if i not in {h.id for h in found}]
            if unknown:
                raise EC2ClientError(
                    "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{unknown[0]}' does not exist"
                )
            found = [h for h in found if h.id in ids]
        return [self.shape(h, account) for h in found if self._matches(h, filters)]

    @staticmethod
    def _matches(held: Held, filters: dict[str, list[str]]) -> bool:
        values = {
            "state": held.state,
            "instance-type": held.instance_type,
            "availability-zone": held.zone,
            "instance-match-criteria": held.match,
            "tenancy": "default",
            "instance-platform": "Linux/UNIX",
        }
        for name, wanted in filters.items():
            if name.startswith("tag:"):
                if held.tags.get(name[4:]) not in wanted:
                    return False
            elif name == "tag-key":
                if not set(wanted) & set(held.tags):
                    return False
            elif name in values and values[name] not in wanted:
                return False
        return True

    def shape(self, held: Held, account: str) -> dict:
        return {
            "CapacityReservationId": held.id,
            "OwnerId": account,
            "CapacityReservationArn": f"arn:aws:ec2:{held.region}:{account}:capacity-reservation/{held.id}",
            "InstanceType": held.instance_type,
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": held.zone,
            "Tenancy": "default",
            "TotalInstanceCount": held.total,
            "AvailableInstanceCount": held.available(),
            "State": held.state,
            "EndDateType": "unlimited",
            "InstanceMatchCriteria": held.match,
            "ReservationType": "default",
            "Tags": [{"Key": k, "Value": v} for k, v in held.tags.items()],
            **held.described(),
        }

    # --- where a launch runs ------------------------------------------------------------------

    def targeted(self, region: str, reservation_id: str, zone: str | None, instance_type: str) -> Held:
        held = self.held.get(reservation_id)
        if held is None or held.region != region:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{reservation_id}' does not exist"
            )
        if held.instance_type != instance_type or (zone and held.zone != zone):
            raise EC2ClientError(
                "InvalidParameterCombination",
                f"The instance type or Availability Zone ({instance_type}, {zone}) does not match Capacity Reservation "
                f"{reservation_id} ({held.instance_type}, {held.zone}).",
            )
        return held

    def open_for(self, region: str, zone: str, instance_type: str) -> Held | None:
        """The open reservation an On-Demand launch of this type and AZ fills first, if any has room."""
        fits = [
            h for h in self.in_region(region)
            if h.match == "open" and h.zone == zone and h.instance_type == instance_type and h.available() > 0
        ]
        return max(fits, key=lambda h: (h.available(), h.id), default=None)

    @staticmethod
    def exceeded(held: Held) -> EC2ClientError:
        return held.no_room()

    def attach(self, held: Held, instances: list) -> None:
        with self._lock:
            for instance in instances:
                # moto's serializer answers an attribute of this name as the instance's CapacityReservationId.
                instance.capacity_reservation_id = held.id
                if held.lifecycle:  # moto answers `lifecycle` as the instance's InstanceLifecycle
                    instance.lifecycle = held.lifecycle
                held.instances.append(instance)
