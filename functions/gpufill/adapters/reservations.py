"""On-Demand Capacity Reservations a run may launch into: DescribeCapacityReservations per region."""

from __future__ import annotations

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from gpufill.adapters.aws import TRANSPORT_ERRORS, client
from gpufill.constants import TAG_DEPLOYMENT
from gpufill.policy.reservations import Reservation

logger = Logger(child=True)


def in_region(region: str, instance_types: list[str], deployment: str) -> list[Reservation]:
    """The active reservations of the requested types in `region`. One call finds both the ones
    tagged for this deployment and the ones a request names (EC2 has no filter by id that spares
    an unknown id's error), so the tag is read from the answer rather than filtered on.

    A region that cannot answer (a refusal, an unreachable endpoint) offers no reservation: the
    run goes on with Spot and On-Demand, and the log says why."""
    try:
        pages = client("ec2", region).get_paginator("describe_capacity_reservations").paginate(
            Filters=[
                {"Name": "state", "Values": ["active"]},
                {"Name": "instance-type", "Values": instance_types},
            ]
        )
        found = [r for page in pages for r in page.get("CapacityReservations", [])]
    except (ClientError, *TRANSPORT_ERRORS) as error:
        logger.warning("capacity reservations not read", extra={"region": region, "error": str(error)})
        return []
    return [
        Reservation(
            capacity_reservation_id=r["CapacityReservationId"],
            region=region,
            availability_zone=r["AvailabilityZone"],
            instance_type=r["InstanceType"],
            available=int(r.get("AvailableInstanceCount", 0)),
            match=r.get("InstanceMatchCriteria", "open"),
            state=r.get("State", "active"),
            for_deployment=any(t.get("Key") == TAG_DEPLOYMENT and t.get("Value") == deployment for t in r.get("Tags", [])),
            # A Capacity Block carries the deployment's tag too: its type keeps it out of the plan.
            reservation_type=r.get("ReservationType", "default"),
        )
        for r in found
    ]
