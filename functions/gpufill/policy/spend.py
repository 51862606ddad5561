"""What each request costs now and has cost so far, from a status view (no AWS calls).

The rate of an instance is the price recorded at launch; an instance found without a record has
none, and is counted at the catalog's on-demand price for its type and region (the most it can
cost), marked as estimated. Spend so far is rate x time since launch for the instances still
billed, and rate x time from launch to end for the ended ones whose end gpufill saw (`ended_at`:
a teardown, a rollback, EC2's reclaim); an instance that vanished unseen (`gone`) has no known end
and is not counted.

An instance in a Capacity Block costs nothing by the hour: the block's upfront fee was its price,
paid once when it was bought. A request's spend counts each of its blocks' fees once, whether its
instances run, ended or have not started yet (`capacity_blocks` of the view: a block bought and
waited for, before anything runs in it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gpufill import catalog
from gpufill.constants import CAPACITY_BLOCK_TYPE

BILLED_STATES = frozenset({"running"})
# Still on the bill (launch to now): an instance starting or stopping is paid for as it runs.
ACCRUING_STATES = frozenset({"pending", "running", "stopping", "shutting-down"})
ENDED_STATES = frozenset({"terminated", "gone"})


def rate(instance: Mapping) -> tuple[float | None, bool]:
    """The instance's $/h and whether it is the catalog's estimate rather than its recorded price."""
    if block_fee(instance) is not None or instance.get("market") == CAPACITY_BLOCK_TYPE:
        return 0.0, False  # paid upfront with its block (EC2 says so even where no fee is recorded)
    price = instance.get("hourly_price")
    if isinstance(price, (int, float)):
        return float(price), False
    if instance.get("instance_type") and instance.get("region"):
        listed = catalog.on_demand_price(instance["instance_type"], instance["region"])
        if listed is not None:
            return listed, True
    return None, False


def requests(status: Mapping, now: datetime | None = None) -> list[dict]:
    """One entry per request of the status view: instances by state, $/h now, spend so far,
    first launch, and whether all its instances have ended. Counts come from `by_request`
    (every instance); rates and spend from the listed instances."""
    now = now or _parse(status.get("generated_at")) or datetime.now().astimezone()
    entries: dict[str, dict] = {}
    for request_id, counts in (status.get("by_request") or {}).items():
        entries[request_id] = _entry(request_id, dict(counts))
    for held in status.get("capacity_blocks") or []:
        # Bought, its instances perhaps not launched yet: the request holds it until its end.
        entry = entries.setdefault(held["request_id"], _entry(held["request_id"], {}))
        entry["blocks"][held["capacity_reservation_id"]] = float(held["upfront_fee"])
        entry["holds_block"] = True
    for instance in status.get("instances") or []:
        request_id = instance.get("request_id") or "?"
        entry = entries.setdefault(request_id, _entry(request_id, {}))
        if request_id not in (status.get("by_request") or {}):
            entry["counts"][instance["state"]] = entry["counts"].get(instance["state"], 0) + 1
        fee = block_fee(instance)
        if fee is not None:
            entry["blocks"][instance["capacity_reservation_id"]] = fee
        price, estimated = rate(instance)
        if instance["state"] in BILLED_STATES and price is not None:
            entry["hourly_cost"] += price
        spent = _spent(instance, price, now)
        entry["spent"] += spent
        if instance["state"] in BILLED_STATES and price is None:
            entry["price_unknown"] += 1
        entry["estimated"] = entry["estimated"] or (estimated and (instance["state"] in ACCRUING_STATES or spent > 0))
        launched_at = instance.get("launched_at")
        if launched_at and (entry["first_launch"] is None or launched_at < entry["first_launch"]):
            entry["first_launch"] = launched_at
    for entry in entries.values():
        entry["counts"] = dict(sorted(entry["counts"].items()))
        entry["running"] = entry["counts"].get("running", 0)
        entry["hourly_cost"] = round(entry["hourly_cost"], 4)
        entry["spent"] = round(entry["spent"] + sum(entry["blocks"].values()), 4)
        entry["capacity_blocks"] = [{"capacity_reservation_id": block, "upfront_fee": fee}
                                    for block, fee in sorted(entry.pop("blocks").items())]
        holds_block = entry.pop("holds_block")
        entry["ended"] = not holds_block and all(state in ENDED_STATES for state in entry["counts"])
    return sorted(entries.values(), key=lambda e: (e["ended"], -e["hourly_cost"], e["request_id"]))


def block_fee(instance: Mapping) -> float | None:
    """The upfront fee of the Capacity Block the instance runs in (None: not in a block)."""
    fee = instance.get("capacity_block_fee")
    if isinstance(fee, (int, float)) and instance.get("capacity_reservation_id"):
        return float(fee)
    return None


def _spent(instance: Mapping, price: float | None, now: datetime) -> float:
    """$ so far: launch to now while billed, launch to its end once ended (0 without the times;
    0 in a Capacity Block, whose rate is 0)."""
    launched = _parse(instance.get("launched_at"))
    if price is None or launched is None:
        return 0.0
    if instance["state"] in ACCRUING_STATES:
        until = now
    elif instance["state"] in ENDED_STATES:
        until = _parse(instance.get("ended_at"))
        if until is None:
            return 0.0
    else:
        return 0.0  # stopped: an instance's EBS volumes bill on, but not at its hourly price
    return price * max((until - launched).total_seconds(), 0.0) / 3600


def _entry(request_id: str, counts: dict) -> dict:
    return {"request_id": request_id, "counts": counts, "hourly_cost": 0.0, "spent": 0.0, "first_launch": None,
            "estimated": False, "price_unknown": 0, "blocks": {}, "holds_block": False}


def _parse(timestamp: str | None) -> datetime | None:
    if not timestamp:
        return None
    try:
        parsed = datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.astimezone()
