"""Giving back the maintenance a teardown stopped, and starting again the refills it held.

Every ending of a teardown that removes its own stop mark comes here: a rejection or an expiry
(RecordApprovalDecision) and a listing that asks nobody because another pending teardown already
asks about its instances (FindTeardownInstances). Whichever removal leaves a request with no mark
starts its held refills again, so a refill held back while the marks stood is never left behind,
whichever ending came last.

At most one refill run per reclaimed instance is live: a refill started earlier that still runs
(it waits for capacity, and no mark stops it now) goes on and nothing else starts; otherwise the
new run's name follows from the run it replaces (never from the teardown that ended), and a
conditional write on the reclaimed instance's record claims the restart before the run starts.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from gpufill.adapters import executions, instances_table, run_store
from gpufill.handlers.observability import logger, metrics
from gpufill.policy import refill

# Step Functions' status of an execution that has not closed.
RUNNING = "RUNNING"


def give_back(request_ids: list[str], *, by: str, state_machine: str) -> dict[str, list[str] | str]:
    """Remove teardown `by`'s stop mark from each request and, where that leaves none, start again
    each refill the marks stopped or held back. Never fails its caller: a refill not started is
    logged and counted.

    Answers per request whose mark it held: the refill runs started, or the teardowns still
    stopping it (by name)."""
    outcome: dict[str, list[str] | str] = {}
    started: list[str] = []
    for request_id in request_ids:
        try:
            left = run_store.give_back_maintenance(request_id, by=by)
            if left is None:
                continue
            if left:
                outcome[request_id] = ", ".join(sorted(left))
                continue
            outcome[request_id] = []
            stored = run_store.load_request(request_id)
            records = instances_table.request_holdings(request_id).records
            for instance_id in refill.refills_to_restart(records, released=True) if stored else []:
                name = _restart(stored, request_id, instance_id, records[instance_id], by=by, state_machine=state_machine)
                if name is not None:
                    started.append(name)
                    outcome[request_id].append(name)  # type: ignore[union-attr]
        except (ClientError, BotoCoreError, executions.ExecutionNameTaken) as error:
            logger.warning("refill not started again", extra={"request": request_id, "error": str(error)})
            metrics.add_metric(name="RefillsNotRestarted", unit="Count", value=1)
    if started:
        logger.info("refills started again", extra={"runs": started})
        metrics.add_metric(name="RefillsRestarted", unit="Count", value=len(started))
    return outcome


def _restart(stored: dict, request_id: str, instance_id: str, record: dict, *, by: str, state_machine: str) -> str | None:
    """Start the refill of one reclaimed instance again, unless its refill still runs or another
    ending claimed the restart first. The run's name, or None when none starts."""
    previous = record.get("refill_run")
    if previous:
        run = executions.describe(state_machine, previous)
        if run is not None and run["status"] == RUNNING:
            return None  # it still waits for capacity: it goes on, and is the one live refill
    name = refill.execution_name(request_id, instance_id, after=refill.restart_after(record))
    if not instances_table.mark_refill_restarted(instance_id, refill_run=name, was=previous, by=by):
        return None  # another ending restarted it from the same run first
    body = refill.refill_input(stored, request_id=request_id, instance_id=instance_id, pool=refill.reclaimed_pool(record))
    executions.start(name, body, state_machine)
    return name
