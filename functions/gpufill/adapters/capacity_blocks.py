"""Capacity Blocks for ML: DescribeCapacityBlockOfferings per region, and PurchaseCapacityBlock
made exactly once.

PurchaseCapacityBlock has no ClientToken: EC2 promises no idempotency. gpufill buys exactly once
by two facts it can check: the block it buys is tagged at purchase (TagSpecifications, atomic with
the purchase) with the deployment, the request and the offering id, and an offering can be bought
only once (EC2 no longer offers it). So before buying, and after any unsettled answer (a lost
reply, a 5xx, the offering "not found" because the first try bought it), the purchase step looks
for a reservation carrying those tags; only when none exists does it buy, and it only ever buys
the one offering the person approved. A retried step therefore finds the block its first try
bought instead of buying another.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from gpufill.adapters.aws import TRANSPORT_ERRORS, client
from gpufill.adapters.visibility import until_visible
from gpufill.constants import CAPACITY_BLOCK_TYPE, TAG_DEPLOYMENT, TAG_MANAGED, TAG_MANAGED_VALUE, TAG_REQUEST_ID
from gpufill.policy.capacity_blocks import LONGER_BY_AT_MOST, Offering

logger = Logger(child=True)

# The offering a block was bought from: how a retried purchase recognises its own block.
TAG_OFFERING = "gpufill:capacity-block-offering"
PLATFORM = "Linux/UNIX"


class RegionNotAnswering(Exception):
    """DescribeCapacityBlockOfferings failed in a region (a refusal, an unreachable endpoint)."""


def offerings(
    region: str, instance_types: list[str], count: int, duration_hours: int, start_from: datetime, start_by: datetime
) -> list[Offering]:
    """Every offering of each type for exactly `count` instances and about `duration_hours` (AWS answers
    hours plus minutes to the block's 11:30 UTC end), starting in the window."""
    ec2 = client("ec2", region)
    found: list[Offering] = []
    for instance_type in instance_types:
        try:
            pages = ec2.get_paginator("describe_capacity_block_offerings").paginate(
                InstanceType=instance_type,
                InstanceCount=count,
                CapacityDurationHours=duration_hours,
                StartDateRange=start_from,
                # EndDateRange bounds the end: a block starting by start_by ends by start_by + duration,
                # or up to a day later, since every block ends at 11:30 UTC (policy/capacity_blocks.py).
                EndDateRange=start_by + timedelta(hours=duration_hours) + LONGER_BY_AT_MOST,
            )
            answered = [o for page in pages for o in page.get("CapacityBlockOfferings", [])]
        except (ClientError, *TRANSPORT_ERRORS) as error:
            code = error.response["Error"]["Code"] if isinstance(error, ClientError) else type(error).__name__
            raise RegionNotAnswering(f"{code}: {error}") from error
        found += [
            Offering(
                offering_id=o["CapacityBlockOfferingId"],
                region=region,
                availability_zone=o["AvailabilityZone"],
                instance_type=o["InstanceType"],
                instance_count=int(o["InstanceCount"]),
                start=o["StartDate"],
                end=o["EndDate"],
                duration_hours=int(o["CapacityBlockDurationHours"]),
                duration_minutes=int(o.get("CapacityBlockDurationMinutes") or 0),
                upfront_fee=float(o["UpfrontFee"]),
                currency=o.get("CurrencyCode", "USD"),
            )
            for o in answered
        ]
    return found


def block_tags(*, deployment: str, request_id: str, offering_id: str) -> dict[str, str]:
    return {
        TAG_MANAGED: TAG_MANAGED_VALUE,
        TAG_DEPLOYMENT: deployment,
        TAG_REQUEST_ID: request_id,
        TAG_OFFERING: offering_id,
    }


def bought(region: str, tags: dict[str, str]) -> dict | None:
    """The capacity reservation this request bought from this offering, if any. EC2 documents no
    tag filter for DescribeCapacityReservations, so the tags are read from the answer."""
    pages = client("ec2", region).get_paginator("describe_capacity_reservations").paginate(
        Filters=[{"Name": "instance-match-criteria", "Values": ["targeted"]}]
    )
    for page in pages:
        for r in page.get("CapacityReservations", []):
            have = {t.get("Key"): t.get("Value") for t in r.get("Tags", [])}
            if all(have.get(k) == v for k, v in tags.items()):
                return r
    return None


def active_ends(region: str) -> dict[str, datetime]:
    """Each active Capacity Block in `region` and its end (reservation id -> EndDate), for the sweep.
    Blocks are targeted reservations; ReservationType tells them from an On-Demand Capacity
    Reservation. A region that cannot answer shows no block: the next pass looks again."""
    try:
        pages = client("ec2", region).get_paginator("describe_capacity_reservations").paginate(
            Filters=[{"Name": "state", "Values": ["active"]}, {"Name": "instance-match-criteria", "Values": ["targeted"]}]
        )
        found = [r for page in pages for r in page.get("CapacityReservations", [])]
    except (ClientError, *TRANSPORT_ERRORS) as error:
        logger.warning("capacity blocks not read", extra={"region": region, "error": str(error)})
        return {}
    # botocore reads EndDate (a timestamp) into an aware datetime in UTC.
    return {
        r["CapacityReservationId"]: r["EndDate"]
        for r in found
        if r.get("ReservationType") == CAPACITY_BLOCK_TYPE and r.get("EndDate")
    }


def purchase_once(region: str, offering_id: str, *, deployment: str, request_id: str) -> tuple[dict, bool]:
    """The block bought from `offering_id` for this request: found if an earlier try bought it,
    else bought now. Returns (the reservation, whether this call bought it)."""
    tags = block_tags(deployment=deployment, request_id=request_id, offering_id=offering_id)
    earlier = bought(region, tags)
    if earlier is not None:
        logger.info("capacity block already bought", extra={"reservation": earlier["CapacityReservationId"]})
        return earlier, False
    try:
        answer = client("ec2", region).purchase_capacity_block(
            CapacityBlockOfferingId=offering_id,
            InstancePlatform=PLATFORM,
            TagSpecifications=[
                {"ResourceType": "capacity-reservation", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        )
        return answer["CapacityReservation"], True
    except (ClientError, *TRANSPORT_ERRORS) as error:
        # Unsettled: the reply may be lost after EC2 bought it, or the first try bought it already
        # (the offering is then gone). Only the tagged reservation can say; it may take a moment to show.
        logger.warning("capacity block purchase unsettled", extra={"offering": offering_id, "error": str(error)})
        refused = isinstance(error, ClientError) and error.response["Error"]["Code"] not in _UNSETTLED
        try:
            if refused:  # EC2 said no: one look, in case an earlier try bought it
                return _bought_or_not_found(region, tags), False
            return until_visible(lambda: _bought_or_not_found(region, tags), f"capacity block from {offering_id}",
                                 also=frozenset({NOT_BOUGHT_YET})), False
        except ClientError:
            raise error from None


def _bought_or_not_found(region: str, tags: dict[str, str]) -> dict:
    found = bought(region, tags)
    if found is None:
        raise ClientError(
            {"Error": {"Code": NOT_BOUGHT_YET, "Message": "no block tagged for this purchase yet"}},
            "DescribeCapacityReservations",
        )
    return found


# No block tagged for this purchase shows yet: a block bought a moment ago may take seconds to show.
NOT_BOUGHT_YET = "InvalidCapacityReservationId.NotFound"
# Answers after which the purchase may have happened (the rest are EC2 refusing it outright,
# which still gets one look before the refusal stands).
_UNSETTLED = {
    "InvalidCapacityBlockOfferingId.NotFound",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestLimitExceeded",
}
