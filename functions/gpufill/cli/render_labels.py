"""How an instance's or an attempt's market, pool and price read in every view of a run."""

from __future__ import annotations

from typing import Any

from gpufill.constants import CAPACITY_BLOCK_TYPE


def pool_label(item: dict, blocks: frozenset[str] = frozenset()) -> str:
    return f"{market_label(item, blocks):<9} {item['availability_zone']:<16} {item['instance_type']}"


def market_label(item: dict, blocks: frozenset[str] = frozenset()) -> str:
    """An instance's or attempt's market as a person reads it: `capacity-block` for one in a Capacity
    Block (it carries its block's fee, or launched into one of `blocks`, the run's bought blocks),
    which EC2 bills as neither spot nor On-Demand, though the launch record says on-demand."""
    if block_of(item, blocks):
        return CAPACITY_BLOCK_TYPE
    return item.get("market") or "-"


def block_of(item: dict, blocks: frozenset[str] = frozenset()) -> str | None:
    """The Capacity Block `item` runs in (its reservation id), None when it is in none."""
    reservation = item.get("capacity_reservation_id")
    if reservation and (isinstance(item.get("capacity_block_fee"), int | float) or reservation in blocks):
        return reservation
    return None


def run_blocks(run: dict | None) -> frozenset[str]:
    """The Capacity Block a run bought, as a set for market_label."""
    block = (run or {}).get("capacity_block")
    reservation = block.get("capacity_reservation_id") if isinstance(block, dict) else None
    return frozenset([reservation]) if reservation else frozenset()


def price_per_hour(value: Any) -> str:
    return f"${value:.4f}/h" if isinstance(value, (int, float)) else "price unknown"
