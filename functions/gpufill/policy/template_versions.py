"""The lifetime of a run's launch template versions (launch_mode "fleet").

A run makes one version per region and contents (AMI, user data, root volume, security group,
the reservation preference), the first time a fleet of the run launches there; every later fleet of
the run in that region (the next try of a wait, a retry for pools EC2 was too busy for, the
On-Demand fleet after the Spot one when the contents are the same) launches from it without a
call. The per-fleet parts (the launch token each instance is tagged with) travel in CreateFleet's
own tags, so nothing in the version differs between fleets.

The versions are deleted when the run ends, whichever way it ends: by the step that decides the
end (`ends_after`: the state machine's WhereNext and WhatAfterThisMarket choices, read the same
way), by PlanNextTry when the wait expires, by ReportResult and by ReportFailure. A version
deleted is never asked for again by the run: its ClientToken names the run, so another run (a
refill, the next request) makes its own.
"""

from __future__ import annotations

from gpufill.models.request import ResolvedRequest
from gpufill.models.run import MarketName, Run, TemplateVersion

# run.next after a step, and the state WhereNext sends it to: an ending with no task after it.
ENDING_MOVES = frozenset({"rejected", "not_placed", "stopped"})
# ... and a state that launches again or reaches a task that deletes the versions at the end.
GOING_ON_MOVES = frozenset({"done", "launch", "prepare", "refresh", "rollback", "await_capacity"})


def known(run: Run, region: str, token: str) -> TemplateVersion | None:
    """The version the run made in `region` with `token` (the same contents), if any."""
    return next((v for v in run.template_versions if v.region == region and v.token == token), None)


def remember(run: Run, version: TemplateVersion | None) -> Run:
    """The run holding `version` (once), so its later fleets reuse it and its end deletes it."""
    if version is None or known(run, version.region, version.token) is not None:
        return run
    return run.model_copy(update={"template_versions": [*run.template_versions, version]})


def to_delete(run: Run) -> dict[str, list[TemplateVersion]]:
    """The versions the run's end deletes, by region; a template's default version stays."""
    by_region: dict[str, list[TemplateVersion]] = {}
    for version in run.template_versions:
        if not version.default:
            by_region.setdefault(version.region, []).append(version)
    return by_region


def forget(run: Run) -> Run:
    return run.model_copy(update={"template_versions": []})


def ends_after(run: Run, request: ResolvedRequest, market: MarketName, scoring: str) -> bool:
    """Whether the state machine ends the run, with no task after it, once a PrepareRegion,
    LaunchBatch or RollBackGang step leaves it as `run` (WhereNext, then WhatAfterThisMarket for
    a market with nothing left; statemachine/provisioner.asl.json holds the same choices).

    A run that goes on (another launch, the boot and ReportResult, a rollback, the wait, the
    On-Demand market, a Capacity Block) is not ending: its versions are kept for what follows."""
    if run.next in ENDING_MOVES:
        return True
    if run.next in GOING_ON_MOVES:
        return False
    if market == "spot" and request.market == "spot-then-on-demand":
        return False  # On-Demand next
    if request.all_or_nothing or run.wait is not None:
        return False  # the gang's rollback, or the wait for capacity
    if scoring == "capacity-block" and run.remaining > 0:
        return False  # a bought block tried again
    if request.capacity_reservations == "only" and run.launched == 0:
        return True  # NO_RESERVATION_ROOM
    if request.capacity_block is not None and scoring != "capacity-block":
        return False  # a Capacity Block looked for next
    # What was launched boots and is reported; nothing launched ends ALL_SPOT_EXHAUSTED or ALL_ON_DEMAND_FAILED.
    return run.launched == 0
