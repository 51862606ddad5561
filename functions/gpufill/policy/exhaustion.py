"""The cause a run fails with when a market has nothing left: every pool tried, and what to do next."""

from __future__ import annotations

import json

from gpufill import catalog
from gpufill.models.request import ResolvedRequest
from gpufill.models.run import Attempt, MarketName, ReservationSeen, Run
from gpufill.policy import block_use

# A Fail state's cause is capped at 32,768 characters; keep headroom for the JSON framing.
CAUSE_BUDGET = 30_000


def on_demand_hint(request: ResolvedRequest) -> str:
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


def exhaustion_cause(run: Run, attempts: list[Attempt], request: ResolvedRequest, market: MarketName) -> str:
    tried = [a for a in attempts if a.market == market]
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
    busy = [p for p in pools.values() if p["outcome"] == "throttled"]
    if busy and pools:
        # Only capacity answers are exhaustion: a pool EC2 was too busy to answer for is named apart.
        message += (
            f" {len(busy)} of them EC2 did not answer for ({', '.join(sorted({p['reason'] or 'busy' for p in busy}))}):"
            " their capacity is unknown, a later run may find some."
        )
    if not pools:
        # Nothing to try at all: say so, rather than "none had capacity".
        message = (
            f"No {market} pool to try: none of the candidate regions ({', '.join(request.regions)}) "
            f"offers {', '.join(request.instance_types)} in any AZ, or every region was dropped while scoring. "
            "Nothing was launched."
        )
        hint = "Add regions that offer these types, or other instance types; a plan run (\"action\": \"plan\") shows what each region offers."
    cause = {
        "error": error,
        "message": message,
        "request_id": request.request_id,
        "requested": request.count,
        "launched": run.launched,
        "pools_tried": list(pools.values()),
        "hint": hint,
        "attempts": [a.model_dump(mode="json", exclude_none=True) for a in attempts],
    }
    return _within_budget(cause, attempts)


def no_reservation_room_cause(
    run: Run, attempts: list[Attempt], request: ResolvedRequest, seen: list[ReservationSeen]
) -> str:
    """capacity_reservations "only" and the reservations could not take the request: what the run
    found, reservation by reservation, and why none (or not enough) took it."""
    tried = [a for a in attempts if a.capacity_reservation_id]
    if not seen:
        message = (
            f"No On-Demand Capacity Reservation of this deployment holds {', '.join(request.instance_types)} "
            f"in {', '.join(request.regions)}: none is active and tagged gpufill:deployment for it, or named in "
            "capacity_reservation_ids. Nothing was launched."
        )
    else:
        usable = sum(s.planned for s in seen)
        message = (
            f"The capacity reservations found had room for {usable} of {request.count} "
            f"{', '.join(request.instance_types)}; {run.launched} launched into them."
        )
    cause = {
        "error": "NO_RESERVATION_ROOM",
        "message": message,
        "request_id": request.request_id,
        "requested": request.count,
        "launched": run.launched,
        "reservations_found": [s.model_dump(mode="json", exclude_none=True) for s in seen],
        "hint": (
            'Free room in a reservation (end instances running in it), create or extend one, or rerun with '
            '"capacity_reservations": "open" to go on to Spot and On-Demand when the reservations are full.'
        ),
        "attempts": [a.model_dump(mode="json", exclude_none=True) for a in tried],
    }
    return json.dumps(cause)


def rejection_cause(run: Run, request: ResolvedRequest) -> str:
    """EC2 refused the launch itself: quote it, say what to change, and what already runs."""
    refused = run.step_attempts[-1]
    change = REJECTION_ADVICE.get(refused.reason or "", REJECTION_ADVICE_DEFAULT)
    cause = {
        "error": "LAUNCH_REJECTED",
        "message": f"EC2 refused the launch in {refused.region}/{refused.availability_zone} with {refused.reason}: "
        f"{refused.note or ''}".rstrip(": "),
        "request_id": request.request_id,
        "code": refused.reason,
        "what_to_change": change,
        "requested": request.count,
        "launched": run.launched,
        "instances": [i.instance_id for i in run.instances],
        "teardown": {"action": "teardown", "request_id": request.request_id} if run.instances else None,
        "attempts": [a.model_dump(mode="json", exclude_none=True) for a in run.step_attempts],
    }
    return json.dumps({k: v for k, v in cause.items() if v is not None})


REJECTION_ADVICE_DEFAULT = "Fix the launch settings named in EC2's message; every pool would refuse the same call."
REJECTION_ADVICE = {
    "UnauthorizedOperation": "The LaunchBatch role may not launch with these settings: check its IAM policy and any SCP.",
    "InvalidBlockDeviceMapping": "Raise root_volume_gib to at least the AMI's root snapshot size, or use another AMI.",
    "InvalidParameterValue": "A launch parameter is not valid for this account: check the regions config overrides and the request.",
    "VersionLimitExceeded": (
        "The region's launch template gpufill-<env> holds EC2's maximum of 10,000 versions. Delete the versions no fleet "
        "runs from (aws ec2 delete-launch-template-versions, up to 200 a call) or the whole template with "
        "aws ec2 delete-launch-template (the next fleet recreates it), then run the request again."
    ),
}


def _within_budget(cause: dict, attempts: list[Attempt]) -> str:
    text = json.dumps(cause)
    if len(text) > CAUSE_BUDGET:
        cause["attempts"] = f"{len(attempts)} attempts; the result of `gpufill status` and the execution history hold them"
        text = json.dumps(cause)
    if len(text) > CAUSE_BUDGET:
        # Thousands of pools: one line per region and type, with the AZs tried and their outcomes.
        grouped: dict[str, dict] = {}
        for pool in cause["pools_tried"]:
            region, zone, itype = pool["pool"].split("/")
            entry = grouped.setdefault(f"{region}/{itype}", {"pools": f"{region}/{itype}", "zones": [], "outcomes": {}})
            entry["zones"].append(zone.removeprefix(region))
            entry["outcomes"][pool["outcome"]] = entry["outcomes"].get(pool["outcome"], 0) + 1
        cause["pools_tried"] = list(grouped.values())
        text = json.dumps(cause)
    return text


def step_end(run: Run, request: ResolvedRequest, attempts: list[Attempt], market: MarketName,
             reservations: list[ReservationSeen]) -> tuple[Run, dict | None]:
    """The run at the end of a PrepareRegion or LaunchBatch step, its stop explained (`attempts`:
    the run's whole attempt log, read when it is exhausted; `reservations`: those the plan saw),
    and the view of a paid Capacity Block the run leaves, to be kept for `gpufill status` (None:
    nothing to keep)."""
    if run.next == "exhausted":
        if request.capacity_reservations == "only":
            return run.model_copy(update={"cause": no_reservation_room_cause(run, attempts, request, reservations)}), None
        return run.model_copy(update={"cause": exhaustion_cause(run, attempts, request, market)}), None
    if run.next == "rejected":
        cause = rejection_cause(run, request)
        if run.capacity_block is None:
            return run.model_copy(update={"cause": cause}), None
        # A paid block the run leaves: named, here and in `gpufill status`.
        cause = block_use.with_block(cause, run.capacity_block, run.launched)
        view = block_use.ended_view(run.capacity_block, execution=request.request_id, error="LAUNCH_REJECTED", launched=run.launched)
        return run.model_copy(update={"cause": cause}), view
    return run, None
