"""Capacity Blocks for ML: which offering a run buys.

What a request may ask for (counts, durations, a start within 8 weeks) is AWS's rule, kept with
the request model in models/capacity_block_rules.py. What is offered differs from what is asked:
every block ends at 11:30 UTC, so an offering lasts hours plus minutes
  (CapacityBlockDurationHours + CapacityBlockDurationMinutes): for an asked duration AWS offers
  blocks slightly shorter and slightly longer. A block fits when it lasts at least the asked
  duration and less than a day more.

The pick: among the offerings that fit (a requested type, the block's count, the duration, a start
inside the request's window, an upfront fee in US dollars within `max_upfront_usd`), the lowest
upfront fee; a tie goes to the earliest start, then to the request's type and region order.
Everything offered is kept with the reason it was not picked, for the NO_CAPACITY_BLOCK cause and
the approval message. Pure Python: the offerings come from adapters/capacity_blocks.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from gpufill.constants import BLOCK_PAYMENT_FAILED, BLOCK_PAYMENT_PENDING, PURCHASE_FAILED
from gpufill.models.capacity_block_rules import BLOCK_COUNTS

# An offering may last this much longer than asked (it ends at the next 11:30 UTC) and still fit.
LONGER_BY_AT_MOST = timedelta(days=1)
# What a NO_CAPACITY_BLOCK cause lists at most (a state's output stays far under 256 KB).
MAX_LISTED = 40


def block_count(needed: int) -> int | None:
    """The smallest block that holds `needed` instances (a run that filled part of its count buys
    for the rest), or None when no block is that large."""
    return next((c for c in BLOCK_COUNTS if c >= needed), None)


@dataclass(frozen=True)
class Offering:
    """One offering as DescribeCapacityBlockOfferings tells it."""

    offering_id: str
    region: str
    availability_zone: str
    instance_type: str
    instance_count: int
    start: datetime
    end: datetime
    duration_hours: int
    upfront_fee: float
    currency: str = "USD"
    # The minutes in addition to duration_hours (CapacityBlockDurationMinutes): blocks end at 11:30 UTC.
    duration_minutes: int = 0

    @property
    def lasts(self) -> timedelta:
        return timedelta(hours=self.duration_hours, minutes=self.duration_minutes)


@dataclass(frozen=True)
class Ask:
    """What the run asks for: the block's count and duration, the window its start must fall in,
    and the budget."""

    instance_types: tuple[str, ...]
    regions: tuple[str, ...]
    count: int
    duration_hours: int
    earliest_start: datetime
    latest_start: datetime
    max_upfront_usd: float


@dataclass(frozen=True)
class Seen:
    """An offering and why it was not picked (None: it was)."""

    offering: Offering
    why_not: str | None


@dataclass(frozen=True)
class Choice:
    picked: Offering | None
    seen: tuple[Seen, ...]


def why_not(o: Offering, ask: Ask) -> str | None:
    """Why an offering does not fit the ask, or None when it does."""
    if o.instance_type not in ask.instance_types:
        return f"holds {o.instance_type}, not a requested type"
    if o.region not in ask.regions:
        return f"in {o.region}, not a candidate region"
    if o.instance_count != ask.count:
        return f"holds {o.instance_count} instances, the run needs a block of {ask.count}"
    if o.end - o.start != o.lasts:
        # One block is one span of time; an answer whose dates and duration disagree describes
        # capacity in several pieces, which gpufill cannot launch into as one block.
        return (
            f"runs in several segments: {_iso(o.start)} to {_iso(o.end)} spans {_span(o.end - o.start)} "
            f"but it holds {_span(o.lasts)} of capacity"
        )
    asked = timedelta(hours=ask.duration_hours)
    if o.lasts < asked:
        return f"lasts {_span(o.lasts)}, less than the {ask.duration_hours} hours asked"
    if o.lasts - asked >= LONGER_BY_AT_MOST:
        return f"lasts {_span(o.lasts)}, a day or more beyond the {ask.duration_hours} hours asked"
    if o.start < ask.earliest_start:
        return f"starts {_iso(o.start)}, before the run could use it"
    if o.start > ask.latest_start:
        return f"starts {_iso(o.start)}, after start_within (by {_iso(ask.latest_start)})"
    if o.currency != "USD":
        return f"priced in {o.currency}, max_upfront_usd is in US dollars"
    if o.upfront_fee > ask.max_upfront_usd:
        return f"upfront fee ${o.upfront_fee:,.2f} is above max_upfront_usd ${ask.max_upfront_usd:,.2f}"
    return None


def choose(offerings: list[Offering], ask: Ask) -> Choice:
    """The fitting offering with the lowest upfront fee (ties: earliest start, then the request's
    type and region order, then the offering id), and every offering with why it was not picked."""
    unique = list({o.offering_id: o for o in offerings}.values())
    fitting = [o for o in unique if why_not(o, ask) is None]
    picked = min(fitting, key=lambda o: _order(o, ask), default=None)
    seen = []
    for o in sorted(unique, key=lambda o: _order(o, ask)):
        reason = why_not(o, ask)
        if reason is None and o is not picked:
            reason = (
                f"fits, but ${picked.upfront_fee:,.2f} in {picked.availability_zone} starting {_iso(picked.start)} "
                "was picked (lower fee or earlier start)"
            )
        seen.append(Seen(o, reason))
    return Choice(picked, tuple(seen))


def _order(o: Offering, ask: Ask) -> tuple:
    def index(items: tuple[str, ...], item: str) -> int:
        return items.index(item) if item in items else len(items)

    return (o.upfront_fee, o.start, index(ask.instance_types, o.instance_type), index(ask.regions, o.region), o.offering_id)


def shown(o: Offering) -> dict:
    """An offering as a cause, a result or an approval message shows it."""
    found = asdict(o)
    found["start"] = _iso(o.start)
    found["end"] = _iso(o.end)
    return found


def no_capacity_block_cause(choice: Choice, ask: Ask, *, request_id: str, regions_failed: dict[str, str] | None = None) -> str:
    """NO_CAPACITY_BLOCK: what was asked, and every offering seen with why it did not fit."""
    seen = list(choice.seen)
    if not seen:
        message = (
            f"No Capacity Block of {ask.count} x {' or '.join(ask.instance_types)} for {ask.duration_hours} hours "
            f"was offered in {', '.join(ask.regions)} starting by {_iso(ask.latest_start)}. Nothing was bought."
        )
    else:
        cheapest = min(s.offering.upfront_fee for s in seen)
        message = (
            f"{len(seen)} Capacity Block offering(s) seen, none fits: the cheapest was ${cheapest:,.2f} "
            f"against max_upfront_usd ${ask.max_upfront_usd:,.2f}, and each one's reason is listed. Nothing was bought."
        )
    cause = {
        "error": "NO_CAPACITY_BLOCK",
        "message": message,
        "request_id": request_id,
        "asked": {
            "instance_types": list(ask.instance_types),
            "regions": list(ask.regions),
            "instance_count": ask.count,
            "duration_hours": ask.duration_hours,
            "start_by": _iso(ask.latest_start),
            "max_upfront_usd": ask.max_upfront_usd,
        },
        "offered": [{**shown(s.offering), "why_not": s.why_not} for s in seen[:MAX_LISTED]],
        "offered_not_listed": max(0, len(seen) - MAX_LISTED),
        "regions_not_answering": dict(regions_failed or {}),
        "hint": (
            "Raise max_upfront_usd to at least the fee of an offering listed, widen start_within (up to P56D), "
            "choose another duration, or add regions and instance types."
        ),
    }
    return json.dumps(cause)


def _span(length: timedelta) -> str:
    """A block's length as EC2 counts it: hours and minutes ("25 h 30 min", "24 h")."""
    minutes = int(length.total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def ask_for(request, *, now: datetime, launched: int = 0) -> Ask | None:
    """What a run asks the block market for: a block for what is still missing (None when no block
    is that large), starting between now and start_within from now."""
    block = request.capacity_block
    count = block_count(max(1, request.count - launched))
    if block is None or count is None:
        return None
    return Ask(
        instance_types=tuple(request.instance_types),
        regions=tuple(request.regions),
        count=count,
        duration_hours=block.duration_hours,
        earliest_start=now,
        latest_start=now + timedelta(seconds=block.start_within_seconds),
        max_upfront_usd=block.max_upfront_usd,
    )


def from_shown(found: dict) -> Offering:
    """An offering as shown() wrote it, back (the state carries it between tasks)."""
    fields = {k: found[k] for k in Offering.__dataclass_fields__ if k in found}
    fields["start"] = datetime.fromisoformat(str(fields["start"]).replace("Z", "+00:00"))
    fields["end"] = datetime.fromisoformat(str(fields["end"]).replace("Z", "+00:00"))
    return Offering(**fields)


def describe_block(o: dict) -> str:
    return (
        f"{o['instance_count']} x {o['instance_type']} in {o['availability_zone']} ({o['region']}), "
        f"from {o['start']} to {o['end']} ({_span(timedelta(hours=o['duration_hours'], minutes=o.get('duration_minutes', 0)))}), upfront fee ${o['upfront_fee']:,.2f}"
    )


def purchase_message(block: dict, *, request_id: str, commands: dict[str, str], expires: datetime) -> tuple[str, str]:
    """(subject, body) of the purchase approval published to the approval topic."""
    subject = f"gpufill: approve buying a Capacity Block ${block['upfront_fee']:,.0f} for {request_id}"[:99]
    lines = [
        f"Request {request_id} asks to BUY a Capacity Block for ML, paid upfront and not refundable:",
        f"  region:         {block['region']}",
        f"  zone:           {block['availability_zone']}",
        f"  instance type:  {block['instance_type']}",
        f"  instances:      {block['instance_count']}",
        f"  start:          {block['start']}",
        f"  end:            {block['end']}",
        f"  upfront fee:    ${block['upfront_fee']:,.2f} {block.get('currency', 'USD')}",
        f"  offering:       {block['offering_id']}",
        f"This approval expires at {expires.isoformat(timespec='seconds')}; after that nothing is bought.",
        "",
        "To approve:",
        f"  {commands['approve']}",
        "To reject:",
        f"  {commands['reject']}",
    ]
    return subject, "\n".join(lines)


def purchase_ended_cause(error: str, block: dict, *, request_id: str) -> str:
    """PURCHASE_REJECTED / PURCHASE_EXPIRED: what was proposed, and that nothing was bought."""
    said = "the purchase approval was answered with something other than \"approved\"" if error == "PURCHASE_REJECTED" else (
        "nobody answered the purchase approval before its deadline"
    )
    return json.dumps(
        {
            "error": error,
            "message": f"{said}: nothing was bought. Proposed: {describe_block(block)}.",
            "request_id": request_id,
            "proposed": block,
            "hint": "Run the request again to be asked again (offerings change); approve with gpufill approve EXECUTION.",
        }
    )


def payment(state: str | None) -> str:
    """What a bought block's state says of its upfront payment: "pending" (look again later),
    "failed" (EC2 releases the block: PURCHASE_FAILED), or "paid" (scheduled, active, or any later
    state: the run waits for its start)."""
    if state == BLOCK_PAYMENT_PENDING:
        return "pending"
    if state == BLOCK_PAYMENT_FAILED:
        return "failed"
    return "paid"


def purchase_failed_cause(held: dict, *, request_id: str, kept: list[dict]) -> str:
    """PURCHASE_FAILED: the block bought (named), its payment failed, nothing launched into it;
    any instance launched before the block is listed with the teardown that ends it."""
    block = (
        f"Capacity Block {held['capacity_reservation_id']} ({held['instance_count']} x {held['instance_type']} in "
        f"{held['availability_zone']}, from {held['start']} to {held['end']}, upfront fee ${held['upfront_fee']:,.2f})"
    )
    still = (
        f" The {len(kept)} instance(s) launched before the block still run: end them with gpufill teardown {request_id}."
        if kept else ""
    )
    return json.dumps(
        {
            "error": PURCHASE_FAILED,
            "message": (
                f"The upfront payment for {block} failed (payment-failed): EC2 releases the block, "
                f"and nothing was launched into it.{still}"
            ),
            "request_id": request_id,
            "capacity_block": {**held, "payment": "failed"},
            "instances": kept,
            "hint": "Check the account's payment method and limits for Capacity Blocks, then run the request again.",
        }
    )
