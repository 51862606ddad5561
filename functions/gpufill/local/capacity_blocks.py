"""Capacity Blocks for ML in the simulated EC2 (moto 5.2.5 has none): the scenario's
`capacity_blocks` offerings, DescribeCapacityBlockOfferings, PurchaseCapacityBlock, and the block
as a capacity reservation on the engine's modelled clock.

As on EC2 (User Guide, "Capacity Blocks for ML"; API reference):
- DescribeCapacityBlockOfferings needs InstanceType, InstanceCount and CapacityDurationHours and
  answers the offerings of exactly that type and count for that duration whose start falls between
  StartDateRange and EndDateRange (the end no later than EndDateRange), each with its id, AZ,
  StartDate, EndDate, CapacityBlockDurationHours + CapacityBlockDurationMinutes, UpfrontFee (a
  string) and CurrencyCode. Every block ends at 11:30 UTC, so an offering lasts hours plus minutes:
  here it ends at the first 11:30 UTC at or after its start + the asked duration. A count other
  than 1-64 in powers of two, or a duration AWS does not sell, is refused with InvalidParameterValue.
- PurchaseCapacityBlock takes CapacityBlockOfferingId, InstancePlatform and TagSpecifications
  (resource type capacity-reservation); it has no ClientToken: EC2 promises no idempotency, so a
  repeated purchase of another offering buys another block. A bought offering is no longer
  offered (InvalidCapacityBlockOfferingId.NotFound when bought again). The block is
  `payment-pending` while the upfront payment is processed, then `scheduled` (or `active` past its
  start); a payment that fails leaves it `payment-failed`, never usable (faults.payment_failed).
- The block is a targeted capacity reservation (ReservationType capacity-block) in the account
  that bought it, in the same store as the On-Demand Capacity Reservations
  (local/reservations.py), so DescribeCapacityReservations shows it: `scheduled` with no room
  before its start, `active` from its start, `expired` at its end.
- A launch into it names it (CapacityReservationTarget) with InstanceMarketOptions.MarketType
  `capacity-block`; it fits only while the block is active, only in the block's AZ and type; a
  capacity-block launch naming no block is refused (InvalidParameterCombination); an On-Demand or
  Spot launch naming a block, and a CreateFleet whose reserved capacity names one as an On-Demand
  Capacity Reservation, are refused with InvalidParameterValue (AWS documents MarketType
  capacity-block as what a launch into a block must say). Another account does not see the block
  (NotFound).
- Thirty minutes before the end EC2 begins to terminate the instances still running in it.

Offerings in a scenario are given relative to the engine's start (`start_in_hours`), so a scenario
file never goes stale; the simulated account's modelled clock places them.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from moto.ec2.exceptions import EC2ClientError

from gpufill.local.reservations import LIVE_ENDED, Held, Reservations
from gpufill.models.capacity_block_rules import ALLOWED_DURATIONS_HOURS, BLOCK_COUNTS

# EC2 begins to terminate a block's instances this long before its end.
ENDING_BEFORE = timedelta(minutes=30)
RESERVATION_TYPE = "capacity-block"
# Every Capacity Block ends at 11:30 UTC.
ENDS_AT = (11, 30)
# How long the modelled upfront payment stays `payment-pending` before the block is scheduled.
PAYMENT_TAKES = timedelta(minutes=1)
PAYMENT_PENDING, PAYMENT_FAILED = "payment-pending", "payment-failed"


@dataclass
class Block(Held):
    """A bought Capacity Block: a capacity reservation with a start, an end and an owner."""

    start: datetime | None = None
    end: datetime | None = None
    account: str = ""
    offering_id: str = ""
    upfront_fee: float = 0.0
    ended_instances: list = field(default_factory=list)
    # When the payment settles, and whether it fails there (`payment-failed`) instead of scheduling the block.
    settles_at: datetime | None = None
    payment_fails: bool = False
    # EC2 describes an instance in a block with InstanceLifecycle "capacity-block".
    lifecycle = RESERVATION_TYPE

    def no_room(self) -> EC2ClientError:
        """A Capacity Block answers a launch beyond its room with insufficient capacity (AWS's EC2
        Fleet tutorial for Capacity Blocks: "Insufficient Capacity" for what exceeds the block)."""
        return EC2ClientError(
            "InsufficientInstanceCapacity",
            f"There is not enough capacity in Capacity Block {self.id} ({self.available()} of {self.total} "
            f"{self.instance_type} available).",
        )

    def described(self) -> dict:
        return {
            "ReservationType": RESERVATION_TYPE,
            "StartDate": self.start,
            "EndDate": self.end,
            "EndDateType": "limited",
            "CapacityBlockId": "cb-" + self.id[3:],
        }


@dataclass(frozen=True)
class Offer:
    offering_id: str
    region: str
    zone: str
    instance_type: str
    count: int
    start: datetime
    end: datetime
    hours: int  # the duration it is offered for (CapacityDurationHours asked)
    fee: float

    @property
    def lasts(self) -> tuple[int, int]:
        """(hours, minutes) from its start to its 11:30 UTC end, as EC2 states them."""
        hours, minutes = divmod(int((self.end - self.start).total_seconds() // 60), 60)
        return hours, minutes

    def shape(self) -> dict:
        return {
            "CapacityBlockOfferingId": self.offering_id,
            "InstanceType": self.instance_type,
            "AvailabilityZone": self.zone,
            "InstanceCount": self.count,
            "StartDate": self.start,
            "EndDate": self.end,
            "CapacityBlockDurationHours": self.lasts[0],
            "CapacityBlockDurationMinutes": self.lasts[1],
            "UpfrontFee": f"{self.fee:.2f}",
            "CurrencyCode": "USD",
            "Tenancy": "default",
        }


def ends_at_1130(at_least: datetime) -> datetime:
    """The first 11:30 UTC at or after `at_least`: when a block lasting at least that long ends."""
    end = at_least.astimezone(UTC).replace(hour=ENDS_AT[0], minute=ENDS_AT[1], second=0, microsecond=0)
    return end if end >= at_least else end + timedelta(days=1)


def _offering_id(n: int, zone: str, instance_type: str) -> str:
    return "cb-" + hashlib.sha256(f"offering/{n}/{zone}/{instance_type}".encode()).hexdigest()[:17]


def _reservation_id(offering_id: str) -> str:
    return "cr-" + hashlib.sha256(f"block/{offering_id}".encode()).hexdigest()[:17]


class CapacityBlocks:
    """The account's Capacity Block market and the blocks it bought. `now()` is the modelled clock,
    `seconds_from_now(moment)` how many modelled seconds until a moment (the engine's schedule)."""

    def __init__(self, scenario, reservations: Reservations, *, now, anchor: datetime):
        self._lock = threading.RLock()
        self.reservations = reservations
        self.now = now
        self.offers: dict[str, Offer] = {}
        self.purchases: list[tuple[str, str]] = []  # (region, offering id), every purchase EC2 accepted
        for n, o in enumerate(scenario.capacity_blocks):
            start = anchor + timedelta(hours=o.start_in_hours)
            offer = Offer(
                offering_id=o.id or _offering_id(n, o.zone, o.type), region=o.zone[:-1], zone=o.zone, instance_type=o.type,
                count=o.count, start=start, end=ends_at_1130(start + timedelta(hours=o.duration_hours)), hours=o.duration_hours,
                fee=o.upfront_fee,
            )
            self.offers[offer.offering_id] = offer
        # Set by the market: schedule(modelled second, action), elapsed(), end(region, account, instance ids).
        self.schedule = lambda seconds, action: None
        self.elapsed = lambda: 0.0
        self.terminate = lambda region, account, instance_ids: None
        # Set by the market: the engine's fault rule for the next payment, or None (it succeeds).
        self.payment_fault = lambda: None
        # Set by the market from its faults (block_late): how long after its start a block turns
        # active, and what a launch that meets it still scheduled reports.
        self.late_seconds = lambda: 0.0
        self.met_late = lambda: None

    # --- DescribeCapacityBlockOfferings -------------------------------------------------------

    def describe(self, region: str, instance_type: str | None, count, hours, start_range, end_range) -> list[dict]:
        if not instance_type or count is None or hours is None:
            raise EC2ClientError(
                "MissingParameter", "InstanceType, InstanceCount and CapacityDurationHours are required."
            )
        count, hours = int(count), int(hours)
        if count not in BLOCK_COUNTS:
            raise EC2ClientError("InvalidParameterValue", f"The instance count {count} is not valid for a Capacity Block.")
        if hours not in ALLOWED_DURATIONS_HOURS:
            raise EC2ClientError("InvalidParameterValue", f"The capacity duration {hours} hours is not valid for a Capacity Block.")
        now = self.now()
        earliest = max(_moment(start_range) or now, now)
        latest_end = _moment(end_range)
        with self._lock:
            found = [
                o for o in self.offers.values()
                if o.region == region and o.instance_type == instance_type and o.count == count and o.hours == hours
                and o.start >= earliest and (latest_end is None or o.end <= latest_end)
            ]
        return [o.shape() for o in sorted(found, key=lambda o: (o.start, o.zone, o.offering_id))]

    # --- PurchaseCapacityBlock ----------------------------------------------------------------

    def purchase(self, region: str, account: str, offering_id: str, platform: str | None, tags: dict[str, str]) -> dict:
        if not offering_id or not platform:
            raise EC2ClientError("MissingParameter", "CapacityBlockOfferingId and InstancePlatform are required.")
        with self._lock:
            offer = self.offers.get(offering_id)
            if offer is None or offer.region != region or offer.start < self.now():
                raise EC2ClientError(
                    "InvalidCapacityBlockOfferingId.NotFound", f"The Capacity Block offering '{offering_id}' does not exist."
                )
            del self.offers[offering_id]
            self.purchases.append((region, offering_id))
            fault = self.payment_fault()
            now = self.now()
            block = Block(
                id=_reservation_id(offering_id), region=region, zone=offer.zone, instance_type=offer.instance_type,
                total=offer.count, match="targeted", state=PAYMENT_PENDING, tags=dict(tags), start=offer.start,
                end=offer.end, account=account, offering_id=offering_id, upfront_fee=offer.fee,
                settles_at=now + (timedelta(minutes=fault.calls) if fault else PAYMENT_TAKES), payment_fails=fault is not None,
            )
            self.reservations.held[block.id] = block
        self._on_the_clock(block)
        return self.reservations.shape(block, account)

    def _on_the_clock(self, block: Block) -> None:
        """scheduled -> active at the start; instances ended 30 minutes before the end; expired at
        the end. Scheduled on the engine's clock, and settled again whenever EC2 is asked about
        blocks (refresh), since the modelled clock also moves with the wall clock between steps."""
        base = self.elapsed() - self.now().timestamp()
        late = timedelta(seconds=self.late_seconds())
        for moment in (block.settles_at, block.start + late, block.end - ENDING_BEFORE, block.end):
            self.schedule(base + moment.timestamp(), self.refresh)

    def refresh(self) -> None:
        now = self.now()
        with self._lock:
            blocks = [b for b in self.reservations.held.values() if isinstance(b, Block)]
        for block in blocks:
            if block.state == PAYMENT_PENDING and block.settles_at is not None and now >= block.settles_at:
                block.state = PAYMENT_FAILED if block.payment_fails else "scheduled"
            if block.state in (PAYMENT_PENDING, PAYMENT_FAILED):
                continue  # no capacity before the payment went through, and none after it failed
            if block.state == "scheduled" and now >= block.start + timedelta(seconds=self.late_seconds()):
                block.state = "active"
            if now >= block.end - ENDING_BEFORE:
                live = [i for i in block.instances if i.state not in LIVE_ENDED]
                if live:
                    block.ended_instances.extend(i.id for i in live)
                    self.terminate(block.region, block.account, [i.id for i in live])
            if now >= block.end:
                block.state = "expired"

    # --- launches -----------------------------------------------------------------------------

    def is_block(self, reservation_id: str | None) -> bool:
        return isinstance(self.reservations.held.get(reservation_id or ""), Block)

    def check_launch(self, region: str, account: str, market_type: str | None, target: str | None) -> None:
        """EC2's refusals of a launch that names a block, or asks for the capacity-block market."""
        self.refresh()
        block = self.reservations.held.get(target or "")
        if market_type == RESERVATION_TYPE and not isinstance(block, Block):
            raise EC2ClientError(
                "InvalidParameterCombination",
                "A launch with MarketType capacity-block must target a Capacity Block reservation "
                "(CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId).",
            )
        if not isinstance(block, Block):
            return
        if block.account != account or block.region != region:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{target}' does not exist"
            )
        if market_type != RESERVATION_TYPE:
            raise not_this_market(target)
        if block.state != "active":
            if block.state == "scheduled" and self.now() >= block.start:
                self.met_late()
            # AWS documents an insufficient capacity answer for a launch into a block not started yet.
            raise EC2ClientError(
                "InsufficientInstanceCapacity",
                f"The Capacity Block {target} is {block.state} (from {_iso(block.start)} to {_iso(block.end)}): "
                "instances launch into it only while it is active.",
            )


def not_this_market(reservation_id: str) -> EC2ClientError:
    """A launch into a Capacity Block that does not say MarketType capacity-block."""
    return EC2ClientError(
        "InvalidParameterValue",
        f"The Capacity Reservation {reservation_id} is a Capacity Block. To launch instances into it, "
        "specify capacity-block as the market type (InstanceMarketOptions.MarketType).",
    )


def _moment(value) -> datetime | None:
    if value in (None, ""):
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _iso(moment: datetime | None) -> str:
    return moment.isoformat().replace("+00:00", "Z") if moment else "?"


def for_market(market) -> CapacityBlocks:
    """The Capacity Block market of a SimulatedMarket, on its modelled clock (set by the engine
    after the market is made, so read when a block is bought)."""
    from moto.ec2.models import ec2_backends

    from gpufill.adapters import clock

    # AWS's blocks start at set times of day; the simulated ones on a whole minute after the engine starts.
    anchor = (clock.now() + timedelta(minutes=1)).replace(second=0, microsecond=0)
    blocks = CapacityBlocks(market.scenario, market.reservations, now=clock.now, anchor=anchor)
    blocks.schedule = lambda seconds, action: market.schedule(seconds, action)
    blocks.elapsed = lambda: market.elapsed()
    blocks.terminate = lambda region, account, ids: ec2_backends[account][region].terminate_instances(ids)
    blocks.payment_fault = lambda: market.faults.for_payment() if market.faults else None
    blocks.late_seconds = lambda: market.faults.block_late_seconds if market.faults is not None else 0.0
    blocks.met_late = lambda: market.faults.block_still_scheduled() if market.faults is not None else None
    return blocks


def _tag_specifications(querystring: dict) -> dict[str, dict[str, str]]:
    """TagSpecification.N.ResourceType / .Tag.M.Key / .Tag.M.Value, per resource type."""
    specs: dict[str, dict] = {}
    for key, value in querystring.items():
        parts = key.split(".")
        value = value[0] if isinstance(value, list) and value else value
        if parts[0] != "TagSpecification" or len(parts) < 3:
            continue
        spec = specs.setdefault(parts[1], {"type": None, "tags": {}})
        if parts[2] == "ResourceType":
            spec["type"] = value
        elif parts[2] == "Tag" and len(parts) == 5:
            spec["tags"].setdefault(parts[3], {})[parts[4]] = value
    return {
        spec["type"] or "": {t.get("Key", ""): t.get("Value", "") for t in spec["tags"].values()}
        for spec in specs.values()
    }


def api(blocks: CapacityBlocks) -> dict:
    """The EC2Response methods moto lacks."""
    from moto.core.responses import ActionResult

    from gpufill.local.limits import check_tags

    def describe_capacity_block_offerings(response) -> ActionResult:
        found = blocks.describe(
            response.region,
            response._get_param("InstanceType"),
            response._get_param("InstanceCount"),
            response._get_param("CapacityDurationHours"),
            response._get_param("StartDateRange"),
            response._get_param("EndDateRange"),
        )
        return ActionResult({"CapacityBlockOfferings": found, "NextToken": None})

    def purchase_capacity_block(response) -> ActionResult:
        specs = _tag_specifications(response.querystring)
        wrong = [kind for kind in specs if kind != "capacity-reservation"]
        if wrong:
            raise EC2ClientError("InvalidParameterValue", f"'{wrong[0]}' is not a valid taggable resource type for this operation.")
        check_tags(specs)
        made = blocks.purchase(
            response.region, response.current_account, response._get_param("CapacityBlockOfferingId"),
            response._get_param("InstancePlatform"), specs.get("capacity-reservation", {}),
        )
        return ActionResult({"CapacityReservation": made})

    return {
        "describe_capacity_block_offerings": describe_capacity_block_offerings,
        "purchase_capacity_block": purchase_capacity_block,
    }
