"""Gang placement: instances that must land together, and what all_or_nothing does when they cannot.

`same-region` / `same-az`: the first instance that lands fixes the gang's place (its region, or
its region and AZ); every pool tried after it must be in that place. When that place runs out:

- without all_or_nothing, the run keeps what landed together and ends PARTIAL, as any fill
  that ran out of pools does;
- with all_or_nothing, the run terminates what it launched (rolled back), marks that place
  excluded, and starts the gang again from scratch in the next pool, in rank order, that it
  has not tried yet in this market; when no place is left the run ends GANG_NOT_PLACED.

`any` with all_or_nothing: the fill runs as usual (spot-then-on-demand keeps its spot
instances while the On-Demand path fills the rest) and only an incomplete end rolls back.

With wait_for_capacity as well, an incomplete end of a try does not end the run: what the try
launched is handed back (terminated, recorded `rolled_back` with its reason) and the run waits
holding nothing; the next try starts the whole count again, every place open again (capacity
may have come back anywhere meanwhile). Each try asks for the whole remaining count, as any
all_or_nothing fill does, so no try launches more than requested.
A same-region or same-az gang completes within one market: a spot-then-on-demand run rolls
back a spot gang it cannot complete before its On-Demand path starts a new one.
"""

from __future__ import annotations

import json

from gpufill import catalog
from gpufill.models.request import ResolvedRequest
from gpufill.policy.rules import FillRules
from gpufill.models.run import Attempt, Gang, Pool, Run

CAUSE_BUDGET = 30_000  # a Fail state's cause is capped at 32,768 characters
LISTED_ROLLED_BACK = 250  # ids in the cause; the records hold every one
MAX_GROUP_NAME = 255  # EC2's limit on a placement group name


def place(pool: Pool, placement: str) -> str | None:
    """The place a pool is in, at the gang's grain; None when the gang may spread."""
    if placement == "same-region":
        return pool.region
    if placement == "same-az":
        return f"{pool.region}/{pool.availability_zone}"
    return None


def allows(pool: Pool, gang: Gang | None, placement: str) -> bool:
    """May the fill try this pool: inside the gang's place, or (no place yet) outside every excluded one."""
    where = place(pool, placement)
    if gang is None or where is None:
        return True
    if gang.anchor is not None:
        return where == gang.anchor
    return excluded_key(pool.market, where) not in gang.excluded


def excluded_key(market: str, where: str) -> str:
    """A place is excluded in one market only: the other market's capacity there is untried."""
    return f"{market}:{where}"


def landed(run: Run, pool: Pool, request: FillRules) -> Run:
    """The first instance of a gang fixes its place; later landings change nothing."""
    where = place(pool, request.placement)
    gang = run.gang or Gang()
    if where is None or gang.anchor is not None:
        return run
    return run.model_copy(update={"gang": gang.model_copy(update={"anchor": where, "market": pool.market, "resume": run.cursor + 1})})


def cluster_group(request: ResolvedRequest, pool: Pool, deployment: str) -> str | None:
    """The cluster placement group a same-az gang of EFA types launches into, one per deployment,
    request and AZ (a cluster group lives in one AZ); None when the gang needs none."""
    if request.placement != "same-az" or not catalog.supports_efa(pool.instance_type):
        return None
    return f"gpufill-{deployment}-{request.request_id}-{pool.availability_zone}"[:MAX_GROUP_NAME]


def must_roll_back(run: Run, request: FillRules) -> bool:
    """Out of pools at the gang's place with the gang short: all_or_nothing starts it again elsewhere."""
    return request.all_or_nothing and run.launched > 0 and run.gang is not None and run.gang.anchor is not None


def for_next_market(gang: Gang | None) -> Gang | None:
    """The next market's pools are all untried: a rollback there starts from its top."""
    if gang is None:
        return None
    return gang.model_copy(update={"resume": 0})


# EC2 states of an instance a TerminateInstances has reached: it will not run again.
ENDING_STATES = frozenset({"shutting-down", "terminated"})


def rollback_settled(instance_ids: list[str], states: dict[str, str]) -> bool:
    """Whether EC2 shows every instance of a rollback ending (`states`: id -> EC2 state, as
    described). A TerminateInstances whose replies were lost may have ended them all; an id EC2
    does not describe (not visible yet) is not known to be ended."""
    return bool(instance_ids) and all(states.get(i) in ENDING_STATES for i in instance_ids)


def rolled_back(run: Run, request: ResolvedRequest, count: int) -> Run:
    """The run after its instances were terminated: nothing held, the gang's place excluded."""
    gang = run.gang or Gang()
    excluded = gang.excluded
    if gang.anchor is not None:
        excluded = [*excluded, excluded_key(gang.market or "spot", gang.anchor)]
    return run.model_copy(
        update={
            "instances": [],
            "launched": 0,
            "remaining": request.count,
            "hourly_cost": 0.0,
            # Terminated instances give their reservation slots back.
            "reserved_taken": {},
            "gang": gang.model_copy(update={"anchor": None, "excluded": excluded, "rolled_back": gang.rolled_back + count}),
        }
    )


def await_capacity(run: Run) -> Run:
    """A waiting all_or_nothing run after a try handed everything back: the next try starts
    afresh, so no place stays excluded and nothing is anchored (the count rolled back is kept)."""
    gang = run.gang or Gang()
    fresh = Gang(rolled_back=gang.rolled_back)
    return run.model_copy(update={"next": "await_capacity", "gang": fresh, "cursor": 0, "blocked": [], "launch": None})


def rollback_reason(run: Run, request: ResolvedRequest) -> str:
    """Why a rollback's instances were terminated, kept with each record."""
    where = run.gang.anchor if run.gang else None
    if run.next == "rollback" and where:
        return f"all_or_nothing: the gang could not complete in {where}; started again elsewhere"
    if run.wait is not None:
        return (
            f"all_or_nothing: try {run.wait.tries} launched {run.launched} of {request.count} and could not complete; "
            "handed back before waiting for capacity"
        )
    return f"all_or_nothing: the fill launched {run.launched} of {request.count} and could not complete"


def not_placed_cause(request: ResolvedRequest, attempts: list[Attempt], rolled: list[dict], excluded: list[str]) -> str:
    """GANG_NOT_PLACED's cause: every pool tried in each market, and every instance rolled back."""
    pools: dict[str, dict] = {}
    for a in attempts:
        key = f"{a.market}/{a.region}/{a.availability_zone}/{a.instance_type}"
        entry = pools.setdefault(key, {"pool": f"{a.region}/{a.availability_zone}/{a.instance_type}", "market": a.market,
                                       "launched": 0, "outcome": a.outcome, "reason": a.reason})
        entry["launched"] += a.launched
        entry["outcome"], entry["reason"] = a.outcome, a.reason
    together = {"same-az": "in one Availability Zone", "same-region": "in one region"}.get(request.placement, "")
    message = (
        f"The gang of {request.count} x {', '.join(request.instance_types)} could not be placed {together}".rstrip()
        + f" after trying {len(pools)} pool(s). "
        + (f"{len(rolled)} instance(s) this run launched were terminated (rolled back); nothing keeps running."
           if rolled else "Nothing was launched, so nothing was rolled back.")
    )
    if not pools:
        message = (
            f"No pool to try: none of the candidate regions ({', '.join(request.regions)}) offers "
            f"{', '.join(request.instance_types)} in any AZ, so the gang of {request.count} could not be placed. Nothing was launched."
        )
    cause = {
        "error": "GANG_NOT_PLACED",
        "message": message,
        "request_id": request.request_id,
        "requested": request.count,
        "placement": request.placement,
        "places_tried": excluded,
        "pools_tried": list(pools.values()),
        "rolled_back_count": len(rolled),
        "rolled_back": [_rolled(r) for r in sorted(rolled, key=lambda r: r["instance_id"])[:LISTED_ROLLED_BACK]],
        "hint": _hint(request),
    }
    text = json.dumps(cause)
    if len(text) > CAUSE_BUDGET:
        cause["rolled_back"] = [r["instance_id"] for r in cause["rolled_back"]]
        cause["pools_tried"] = [p["pool"] for p in cause["pools_tried"] if p["launched"]]
        cause["pools_note"] = f"{len(pools)} pools tried; only those that launched are listed (the execution history holds all)"
        text = json.dumps(cause)
    return text


def _rolled(record: dict) -> dict:
    return {k: record.get(k) for k in ("instance_id", "region", "availability_zone", "instance_type", "market") if record.get(k)}


def _hint(request: ResolvedRequest) -> str:
    hints = []
    if request.placement == "same-az":
        hints.append('"placement": "same-region" accepts a gang spread over one region\'s AZs')
    if request.market == "spot":
        hints.append('"market": "spot-then-on-demand" also tries On-Demand capacity')
    hints.append("more regions or instance types give the gang more places")
    hints.append('without "all_or_nothing" the run keeps a partial gang')
    return "; ".join(hints) + "."
