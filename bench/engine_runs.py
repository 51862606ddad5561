"""`classic` and `gpufill`: the real state machine on the local engine, a fresh simulated account per run.

A fresh engine per (case, strategy) matters: a run consumes the market's capacity,
so a second run in the same account would meet a different market.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import warnings
from collections import Counter

import boto3

from gpufill.constants import CAPACITY_TABLE_KEY, DEFAULT_BATCH_MAX, ENV_CAPACITY_TABLE, FACTS_REFRESH_DEFAULT_MINUTES
from gpufill.local.engine import LocalEngine
from gpufill.local.metrics import LAUNCH_HANDLER

from bench.cases import Case
from bench.costs import (
    COLD_START_SECONDS,
    cold_starts,
    complete_engine_model,
    orchestration_usd,
)
from bench.outcome import Outcome, WarmRun

ENGINE_STRATEGIES = ("classic", "gpufill")
CLASSIC_BATCH = 4
# Fields a strategy decides; the case's request must not decide them for gpufill.
STRATEGY_FIELDS = ("launch_mode", "batch_max", "scoring")
# Which of gpufill's two figures a default deployment's user meets: it refreshes its warm facts on a
# schedule (`facts_refresh_every`, on by default), so a request after an idle spell of under a day
# finds them warm: the warm run's time to fill ("warm"). The first run after deploy ("cold") is
# what a deployment with the refresh off meets after more than 10 idle minutes.
DEFAULT_DEPLOYMENT_FIGURE = "warm" if FACTS_REFRESH_DEFAULT_MINUTES else "cold"
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


def run(
    case: Case, strategy: str, launch_mode: str | None = None, scoring: str | None = None, *, warm_too: bool = True,
    judge_iam: bool = False,
) -> Outcome:
    """The case's request on a fresh deployment (the first run after deploy: cold facts, every
    function cold); for gpufill (`warm_too`), also the same request again in that deployment.
    `judge_iam`: judge every call by the deployed IAM policies, as the suite's engine does. Off by
    default: it is half of a run's CPU here and changes no figure the bench reports when every call
    is allowed (a denied call would end the run broken, and the suite's IAM tests judge each call)."""
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    complete_engine_model()
    request = request_for(case, strategy, launch_mode, scoring)
    # The handlers' metrics and logs go to stdout, which belongs to the bench's table.
    with contextlib.redirect_stdout(io.StringIO()), LocalEngine(case.market(), judge_iam=judge_iam) as engine:
        execution = engine.run(request, name=f"bench-{strategy}-{case.name}"[:80])
        invocations = list(engine.calls.invocations)
        # Wait states (waiting for instances to boot) are not time spent finding capacity, and
        # the simulators have none: time to fill leaves them out.
        waited = sum(engine.calls.wait_seconds)
        defaults = launch_mode is None and scoring is None  # comparing other settings: the first run only
        warm = _warm_run(engine, execution, request, case) if strategy == "gpufill" and warm_too and defaults else None
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
        warm=warm,
    )


def _warm_run(engine: LocalEngine, first, request: dict, case: Case) -> WarmRun:
    """The same request again in the same deployment, as a user's next request finds it: the
    facts and launch settings the first run kept, within their TTL if the first run's boot and
    readiness checks took less than it (modelled time goes on). The first run's instances are
    terminated (their capacity goes back to the market, as on EC2) and the shared capacity signals
    it left are cleared, so the market and what the run knows of it are the first run's own: the
    difference is the warm facts alone. Its functions still start cold (a request minutes later
    may meet warm containers; the bench does not count on it)."""
    output = first.output if isinstance(first.output, dict) else {}
    by_region: dict[str, list[str]] = {}
    for instance in output.get("instances") or []:
        by_region.setdefault(instance["region"], []).append(instance["instance_id"])
    for region, ids in by_region.items():
        engine.client("ec2", region).terminate_instances(InstanceIds=ids)
    _forget_capacity_signals(engine)
    engine.cold_start()  # new containers: nothing the first run's functions held in memory
    mark = len(engine.calls.invocations)
    # The readiness checks come after the fill and are not timed: the warm run skips them.
    execution = engine.run({**request, "ready_timeout": "PT0S"}, name=f"{first.name}-warm"[:80])
    invocations = list(engine.calls.invocations)[mark:]
    result = execution.output if isinstance(execution.output, dict) else {}
    metrics = execution.metrics
    cold = round(cold_starts(_before_fill(invocations)) * COLD_START_SECONDS, 3)
    entered = execution.entered()
    return WarmRun(
        modelled_seconds=round(_seconds_to_fill(metrics, 0.0) + cold, 3),
        cold_start_seconds=cold,
        launched=int(result.get("launched", 0) or 0),
        launch_calls=metrics["launch_calls"],
        hourly_cost=round(float(result.get("hourly_cost", 0.0) or 0.0), 4),
        scored="ScoreRegions" in entered,
        prepared="PrepareRegion" in entered[: entered.index("LaunchBatch") if "LaunchBatch" in entered else None],
    )


def _forget_capacity_signals(engine: LocalEngine) -> None:
    """Every "recently full" signal of the deployment (the placement scores AWS gave, shared for
    10 minutes in the same table, stay: they are facts like the others)."""
    table = boto3.resource("dynamodb", region_name=engine.home_region).Table(os.environ[ENV_CAPACITY_TABLE])
    for item in table.scan(ProjectionExpression="#k", ExpressionAttributeNames={"#k": CAPACITY_TABLE_KEY})["Items"]:
        if not str(item[CAPACITY_TABLE_KEY]).startswith("placement#"):
            table.delete_item(Key={CAPACITY_TABLE_KEY: item[CAPACITY_TABLE_KEY]})
