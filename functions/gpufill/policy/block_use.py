"""A bought Capacity Block is used or accounted for, never silently lost (docs/capacity-blocks.md).

The block is paid upfront and not refundable, so:
- at its start a capacity answer is not the end: EC2 can show a block `active` minutes late, so the
  launch is tried again with backoff (a Wait state between tries, durable and free) until EC2
  starts ending the block's instances, 30 minutes before its end;
- every end of the run after the purchase, a success or a failure, names the block (reservation,
  AZ, start, end, fee, paid) and says what became of it, and `gpufill status` says the same.

`held` is the block as PurchaseCapacityBlock reported it (capacity_reservation_id, region,
availability_zone, instance_type, instance_count, start, end, upfront_fee).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

from gpufill.constants import (
    BLOCK_MAX_TRIES,
    BLOCK_RETRY_FIRST_DELAY_SECONDS,
    BLOCK_RETRY_MAX_DELAY_SECONDS,
    BLOCK_USABLE_UNTIL_END_SECONDS,
)

UNUSED_ERROR = "CAPACITY_BLOCK_UNUSED"
# The wait item's phase once the run that bought the block has ended without it running there.
ENDED_PHASE = "capacity-block-ended"
# ... and while it waits to launch into the block again.
TRYING_PHASE = "capacity-block-trying"


def moment(text: str) -> datetime:
    found = datetime.fromisoformat(text)  # Python 3.11 reads a trailing "Z"
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def usable_until(held: dict) -> datetime:
    """The last moment a launch into the block is worth making: EC2 then begins to end its instances."""
    return moment(held["end"]) - timedelta(seconds=BLOCK_USABLE_UNTIL_END_SECONDS)


def retry_delay(tries: int, held: dict) -> int:
    """Seconds before try `tries + 1`: 60 s doubling to 15 minutes, stretched for a long block so
    that BLOCK_MAX_TRIES tries reach its end (one execution's history stays bounded). No jitter:
    one run launches into a block, so there is no herd to spread."""
    span = (usable_until(held) - moment(held["start"])).total_seconds()
    ceiling = max(BLOCK_RETRY_MAX_DELAY_SECONDS, math.ceil(span / BLOCK_MAX_TRIES))
    return min(ceiling, BLOCK_RETRY_FIRST_DELAY_SECONDS * 2 ** min(max(tries - 1, 0), 20))


def next_try(now: datetime, tries: int, held: dict) -> int | None:
    """The delay before the next launch into the block, or None when the next try would come after
    the block is usable (or past the try bound): the run then ends, naming the block."""
    if tries >= BLOCK_MAX_TRIES:
        return None
    delay = retry_delay(tries, held)
    if now + timedelta(seconds=delay) > usable_until(held):
        return None
    return delay


def summary(held: dict) -> dict:
    """The block as every end shows it (`capacity_block` in the result and in a failure's cause)."""
    shown = {k: held[k] for k in ("capacity_reservation_id", "region", "availability_zone", "instance_type",
                                  "instance_count", "start", "end", "upfront_fee",
                                  # who approved the spend, as AWS authenticated them (AnswerApproval)
                                  "approved_by", "approved_at", "approval_reason") if k in held}
    return {**shown, "paid": True}


def sentence(held: dict) -> str:
    fee = held.get("upfront_fee")
    paid = f"${fee:,.2f} paid upfront, not refundable" if isinstance(fee, int | float) else "paid upfront, not refundable"
    return (
        f"Capacity Block {held['capacity_reservation_id']} ({held.get('instance_count')} x {held.get('instance_type')} "
        f"in {held.get('availability_zone')}, {held.get('start')} to {held.get('end')}): {paid}."
    )


def became(held: dict, launched: int) -> str:
    """What became of the block when the run ends without filling it."""
    until = usable_until(held).isoformat().replace("+00:00", "Z")
    if launched:
        return f"{launched} instance(s) run in it; the rest of it stays unused until {until}."
    return (
        f"Nothing runs in it: it stays yours, unused, until {until} (launch into it with "
        f"InstanceMarketOptions.MarketType capacity-block and its reservation id as the target)."
    )


def with_block(cause: str, held: dict, launched: int) -> str:
    """A failure's JSON cause with the block named: in its message (what the text output shows)
    and as `capacity_block` (what --json shows)."""
    found = json.loads(cause)
    found["message"] = f"{found.get('message', '')} {sentence(held)} {became(held, launched)}".strip()
    found["capacity_block"] = summary(held)
    return json.dumps(found)


def unused_cause(request_id: str, requested: int, held: dict, tries: int, last_reason: str | None) -> str:
    """CAPACITY_BLOCK_UNUSED: the block was tried until its end - 30 min and took none of the count."""
    cause = {
        "error": UNUSED_ERROR,
        "message": (
            f"The Capacity Block answered no room to {tries} launch(es) from its start until EC2 begins ending its "
            f"instances{f' (last answer: {last_reason})' if last_reason else ''}."
        ),
        "request_id": request_id,
        "requested": requested,
        "launched": 0,
        "tries": tries,
    }
    return with_block(json.dumps(cause), held, 0)


def ended_view(held: dict, *, execution: str, error: str, launched: int) -> dict:
    """The wait item (run_store.save_wait) once the run has ended without the block in use, so
    `gpufill status` no longer says it will launch into it."""
    return {
        "phase": ENDED_PHASE,
        "execution": execution,
        "error": error,
        "launched": launched,
        "next_try_at": None,
        **{k: held.get(k) for k in ("capacity_reservation_id", "availability_zone", "instance_type", "instance_count",
                                    "start", "end", "upfront_fee")},
    }


def trying_view(held: dict, *, execution: str, tries: int, next_try_at: str, launched: int) -> dict:
    """The wait item between two launches into the block (TryBlockAgain)."""
    return {
        "phase": TRYING_PHASE, "execution": execution, "tries": tries, "next_try_at": next_try_at, "launched": launched,
        "usable_until": usable_until(held).isoformat().replace("+00:00", "Z"),
        **{k: held.get(k) for k in ("capacity_reservation_id", "availability_zone", "start", "end", "upfront_fee")},
    }


def trying_line(view: dict) -> str:
    return (
        f"holds Capacity Block {view.get('capacity_reservation_id')} ({view.get('availability_zone')}) from "
        f"{view.get('start')} to {view.get('end')}; EC2 answered no room to {view.get('tries')} launch(es) into it "
        f"({view.get('launched') or 0} running); {view.get('execution')} tries again at {view.get('next_try_at')}, "
        f"until {view.get('usable_until')}"
    )


def ended_line(view: dict) -> str:
    """`gpufill status REQUEST` for a request whose run ended after it bought a block."""
    fee = view.get("upfront_fee")
    paid = f"${float(fee):,.2f} paid" if fee is not None else "paid"
    launched = int(view.get("launched") or 0)
    held = f"{launched} instance(s) launched into it" if launched else "nothing launched into it"
    return (
        f"held Capacity Block {view.get('capacity_reservation_id')} ({view.get('instance_count')} x "
        f"{view.get('instance_type')} in {view.get('availability_zone')}) from {view.get('start')} to "
        f"{view.get('end')}, {paid}; {view.get('execution')} ended {view.get('error')} with {held}"
    )
