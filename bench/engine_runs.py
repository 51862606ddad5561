"""`classic` and `gpufill`: the real state machine on the local engine, a fresh simulated account per run.

A fresh engine per (case, strategy) matters: a run consumes the market's capacity,
so a second run in the same account would meet a different market.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import warnings
from collections import Counter

from gpufill.constants import DEFAULT_BATCH_MAX
from gpufill.local.engine import LocalEngine
from gpufill.local.metrics import LAUNCH_HANDLER

from bench.cases import Case
from bench.costs import (
    COLD_START_SECONDS,
    cold_starts,
    complete_engine_model,
    orchestration_usd,
)
from bench.outcome import Outcome

ENGINE_STRATEGIES = ("classic", "gpufill")
CLASSIC_BATCH = 4
# Fields a strategy decides; the case's request must not decide them for gpufill.
STRATEGY_FIELDS = ("launch_mode", "batch_max", "scoring")
# How a run may end on a scarce market; anything else is a broken run, not a result.
EXPECTED_ENDS = ("FULFILLED", "PARTIAL", "ALL_SPOT_EXHAUSTED")


def request_for(case: Case, strategy: str, launch_mode: str | None = None, scoring: str | None = None) -> dict:
    """The case's request as `strategy` sends it; gpufill uses its defaults unless `launch_mode`
    or `scoring` is given (to compare them on the same markets)."""
    request = {k: v for k, v in case.request.items() if k not in STRATEGY_FIELDS}
    if strategy == "classic":
        # Probe-and-fill as first described: ask for the whole batch, halve on capacity.
        request.update(launch_mode="exact", batch_max=min(CLASSIC_BATCH, case.count))
        request["scoring"] = "classic"
    elif strategy != "gpufill":
        raise ValueError(f"{strategy!r} does not run on the engine")
    else:
        request.update({k: v for k, v in (("launch_mode", launch_mode), ("scoring", scoring)) if v})
    return request


def _seconds_to_fill(metrics: dict, waited: float) -> float:
    """Until the last launch step ended: the boot and model-server checks after it are not
    finding capacity, and the simulators have none. A run that never launched: all of it."""
    if metrics.get("fill_seconds") is not None:
        return metrics["fill_seconds"]
    return round(metrics["modelled_seconds"] - waited, 3)


def _before_fill(invocations: list) -> list[str]:
    """The functions invoked until the last launch step (all of them when nothing launched)."""
    handlers = [i.handler for i in invocations]
    launches = [n for n, h in enumerate(handlers) if h == LAUNCH_HANDLER]
    return handlers[: launches[-1] + 1] if launches else handlers


def run(case: Case, strategy: str, launch_mode: str | None = None, scoring: str | None = None) -> Outcome:
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    complete_engine_model()
    request = request_for(case, strategy, launch_mode, scoring)
    # The handlers' metrics and logs go to stdout, which belongs to the bench's table.
    with contextlib.redirect_stdout(io.StringIO()), LocalEngine(case.market()) as engine:
        execution = engine.run(request, name=f"bench-{strategy}-{case.name}"[:80])
        invocations = list(engine.calls.invocations)
        # Wait states (waiting for instances to boot) are not time spent finding capacity, and
        # the simulators have none: time to fill leaves them out.
        waited = sum(engine.calls.wait_seconds)
    result = execution.output if isinstance(execution.output, dict) else {}
    cause = execution.cause if isinstance(execution.cause, dict) else {}
    attempts = result.get("attempts") or (cause.get("attempts") if isinstance(cause.get("attempts"), list) else [])
    metrics = execution.metrics
    status = result.get("status") or execution.error or execution.status
    if status not in EXPECTED_ENDS:
        detail = json.dumps(execution.cause)[:400] if execution.cause else ""
        print(f"warning: {strategy} on {case.name} ended {status}: {detail}", file=sys.stderr)
    batch_max = request.get("batch_max") or min(DEFAULT_BATCH_MAX, case.count)
    # Every run is the first after idle (a fresh account each time): each function on the way to
    # the fill starts cold once, and its init delays the run.
    cold = round(cold_starts(_before_fill(invocations)) * COLD_START_SECONDS, 3)
    return Outcome(
        case=case.name,
        strategy=strategy,
        requested=case.count,
        launched=int(result.get("launched", cause.get("launched", 0)) or 0),
        run_instances=metrics["run_instances_calls"],
        ec2_calls=sum(metrics["ec2_calls"].values()),
        hourly_cost=round(float(result.get("hourly_cost", 0.0) or 0.0), 4),
        modelled_seconds=round(_seconds_to_fill(metrics, waited) + cold, 3),
        cold_start_seconds=cold,
        status=status,
        transitions=metrics["state_transitions"],
        lambda_invocations=metrics["lambda_invocations"],
        lambda_by_function=dict(Counter(i.handler for i in invocations)),
        orchestration_usd=orchestration_usd(metrics["state_transitions"], invocations),
        history_events=metrics.get("history_events"),
        answers=dict(Counter(a["outcome"] for a in attempts)),
        ec2_by_api=dict(metrics["ec2_calls"]),
        regions_used=list(dict.fromkeys(i["region"] for i in result.get("instances") or [])),
        full_batches=sum(1 for a in attempts if a["launched"] and a["launched"] == a["batch"] == batch_max),
    )
