"""The cause a run fails with when a market has nothing left: every pool tried, and what to do next."""

from __future__ import annotations

import json

from gpufill import catalog
from gpufill.models.request import ProvisionRequest
from gpufill.models.run import MarketName, Run

# A Fail state's cause is capped at 32,768 characters; keep headroom for the JSON framing.
CAUSE_BUDGET = 30_000


def on_demand_hint(request: ProvisionRequest) -> str:
    """Name the cheapest on-demand region and the lowest-latency one, for the rerun command."""
    choices = [
        (price, catalog.latency_ms(request.origin_region, region), region, instance_type)
        for instance_type in request.instance_types[:1]
        for region in request.regions
        if (price := catalog.on_demand_price(instance_type, region)) is not None
    ]
    rerun = 'Rerun with "market": "on-demand"'
    if not choices:
        return f'{rerun} and "on_demand_strategy": "cost" or "latency".'
    cheapest = min(choices, key=lambda c: (c[0], c[1] if c[1] is not None else 1e9, c[2]))
    nearest = min(choices, key=lambda c: (c[1] if c[1] is not None else 1e9, c[0], c[2]))
    return (
        f'{rerun}: "on_demand_strategy": "cost" starts in {cheapest[2]} '
        f"({cheapest[3]} at ${cheapest[0]:.4f}/h); "
        f'"on_demand_strategy": "latency" starts in {nearest[2]} '
        f"({nearest[1]} ms from {request.origin_region}, ${nearest[0]:.4f}/h)."
    )


def exhaustion_cause(run: Run, request: ProvisionRequest, market: MarketName) -> str:
    tried = [a for a in run.attempts if a.market == market]
    pools: dict[str, dict] = {}
    for a in tried:
        key = f"{a.region}/{a.availability_zone}/{a.instance_type}"
        pools[key] = {"pool": key, "market": a.market, "outcome": a.outcome, "reason": a.reason}
    if market == "spot":
        error = "ALL_SPOT_EXHAUSTED"
        message = f"Every spot pool was tried ({len(pools)}); none had capacity for {', '.join(request.instance_types)}."
        hint = on_demand_hint(request)
    else:
        error = "ALL_ON_DEMAND_FAILED"
        message = f"Every on-demand pool was tried ({len(pools)}); none could launch {', '.join(request.instance_types)}."
        hint = "Try more regions or instance types, ask for a quota increase where the outcome is 'quota', or retry later."
    cause = {
        "error": error,
        "message": message,
        "request_id": request.request_id,
        "requested": request.count,
        "launched": run.launched,
        "pools_tried": list(pools.values()),
        "hint": hint,
        "attempts": [a.model_dump(mode="json", exclude_none=True) for a in run.attempts],
    }
    text = json.dumps(cause)
    if len(text) > CAUSE_BUDGET:
        cause["attempts"] = f"{len(run.attempts)} attempts; the full list is in the execution history"
        text = json.dumps(cause)
    return text
