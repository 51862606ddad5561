"""The plan `run` and `up` show before asking to go ahead."""

from __future__ import annotations

from typing import Any

from gpufill.cli.render_labels import price_per_hour


PREVIEW_POOLS = 10


def render_plan_preview(request: dict, preview: Any) -> list[str]:
    """The plan `run` and `up` show before asking: what is bought, where first, what it costs."""
    from gpufill import catalog

    types = list(request.get("instance_types") or [request.get("instance_type") or "g6.xlarge"])
    carried = []
    for t in types:
        gpus, model = catalog.gpus(t), catalog.gpu_model(t)
        no_pool = "" if t in preview.types or preview.market == "capacity-block" else ", no pool in the plan"
        carried.append(f"{t} ({gpus} {model}{no_pool})" if gpus and model else t)
    lines = [
        "",
        f"Plan: {preview.count} instance(s), {preview.market} market, {request.get('launch_mode', 'fleet')} fill",
        f"  types in preference order: {', '.join(carried)}",
        f"  regions in rank order: {', '.join(preview.regions) or 'none'}",
        f"  pools in the order they are tried ({len(preview.pools)}):",
    ]
    for n, p in enumerate(preview.pools[:PREVIEW_POOLS], 1):
        lines.append(
            f"    {n:>2}  {p.get('availability_zone') or p['region']:<16} {p['instance_type']:<13} "
            f"{p.get('market', preview.market):<9} {price_per_hour(p.get('price'))}"
        )
    if len(preview.pools) > PREVIEW_POOLS:
        lines.append(f"    ... and {len(preview.pools) - PREVIEW_POOLS} more")
    if preview.expected_hourly is not None:
        lines.append(
            f"  expected: ${preview.expected_hourly:.4f}/h for {preview.count} instance(s) if the first pool has room; "
            f"up to ${preview.highest_hourly:.4f}/h"
        )
    elif not preview.capacity_block:
        lines.append("  expected: price unknown (the plan returned no priced pool)")
    lines.append(f"  if spot runs out: {preview.if_spot_runs_out}")
    if preview.capacity_block:
        lines.append(f"  Capacity Block: {preview.capacity_block}")
    return lines
