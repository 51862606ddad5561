"""`python -m bench.load`: many requests at once in one deployment, competing for one scarce market.

Starts `--runs` executions (25 by default) of the real state machine at once in one local engine,
with EC2's token buckets at AWS's documented sizes (`--scale` shrinks or grows them; 0 turns
throttling off), then audits the account: every run ends with a documented ending (no raw error
name), no instance is in two runs' records or results (duplicates), every gpufill instance EC2
holds has a record (orphans). It reports per run its ending, instances, launch calls and wall
time, and in total the throttles EC2 answered per API, DynamoDB's conditional-check refusals and
the modelled time the backoff after throttles took; and one request alone on the same market,
for comparison. Writes bench/results/load.md (docs/benchmark.md quotes it).

A run not ended within the wall limit is stopped: `--timeout`, by default 600 s times the
machine's load average per core when that is above 1 (the engine runs on wall time it shares).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from collections import Counter
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpufill import constants
from gpufill.local.engine import LocalEngine
from gpufill.local.executions import _execution_record, _record_status
from gpufill.local.scenario import MarketScenario

RESULTS = Path(__file__).parent / "results"
WEST, EAST = "us-west-2", "us-east-1"


def _zone(price: float, spot: int) -> dict:
    return {"g6.xlarge": {"spot_price": price, "spot": spot, "on_demand": 0}}


# Scarce: 20 g6.xlarge in two regions for 25 requests of 2 (50 wanted); Oregon is the cheaper.
MARKET = {
    "description": "load: 20 g6.xlarge in two regions for many requests at once",
    "regions": {
        WEST: {"advisor_tier": {"g6.xlarge": 0}, "zones": {
            "us-west-2a": _zone(0.40, 4), "us-west-2b": _zone(0.42, 4), "us-west-2c": _zone(0.44, 4)}},
        EAST: {"advisor_tier": {"g6.xlarge": 1}, "zones": {
            "us-east-1a": _zone(0.50, 4), "us-east-1b": _zone(0.52, 4)}},
    },
}
REQUEST = {"count": 2, "regions": [WEST, EAST], "launch_mode": "partial"}
# The wall seconds a run may take on an idle machine before it is stopped (see wall_limit).
WALL_LIMIT_SECONDS = 600.0
# Every way a run may end (docs/failures.md); anything else is a raw ending.
SUCCEEDED_ENDS = ("FULFILLED", "PARTIAL", "PLANNED")
FAILED_ENDS = ("ALL_SPOT_EXHAUSTED", "ALL_ON_DEMAND_FAILED", "LAUNCH_REJECTED", "PROVISIONING_FAILED",
               "InvalidRequest", "GANG_NOT_PLACED", "CAPACITY_WAIT_EXPIRED", "CAPACITY_BLOCK_UNUSED")


@dataclass
class RunRow:
    name: str
    ending: str
    documented: bool
    launched: int
    launch_calls: int
    wall_seconds: float
    outcomes: dict = field(default_factory=dict)  # the run's attempts by outcome (capacity, throttled, ...)


@dataclass
class LoadResult:
    runs: list[RunRow]
    duplicates: set[str]
    orphans: set[str]
    unreported: set[str]  # recorded as running by a run that did not report them
    throttles: dict[str, int]
    dynamodb_conflicts: int
    backoff_seconds: float
    modelled_seconds: float
    wall_seconds: float
    alone: RunRow | None = None
    alone_fill_seconds: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def raw_endings(self) -> int:
        return sum(1 for r in self.runs if not r.documented)


def _ending(execution) -> tuple[str, bool]:
    if execution.status == "SUCCEEDED":
        status = (execution.output or {}).get("status", "SUCCEEDED")
        return status, status in SUCCEEDED_ENDS
    return execution.error or execution.status, execution.error in FAILED_ENDS


def _row(execution, wall: float) -> RunRow:
    output = execution.output if isinstance(execution.output, dict) else {}
    cause = execution.cause if isinstance(execution.cause, dict) else {}
    attempts = output.get("attempts") or (cause.get("attempts") if isinstance(cause.get("attempts"), list) else [])
    ending, documented = _ending(execution)
    return RunRow(execution.name, ending, documented, int(output.get("launched", cause.get("launched", 0)) or 0),
                  len(attempts), round(wall, 2), dict(Counter(a.get("outcome") for a in attempts)))


def _reported(execution) -> set[str]:
    if execution.status == "SUCCEEDED":
        return {i["instance_id"] for i in (execution.output or {}).get("instances") or []}
    listed = (execution.cause or {}).get("instances") if isinstance(execution.cause, dict) else None
    return {i if isinstance(i, str) else i["instance_id"] for i in listed or []}


def _audit(executions, regions) -> tuple[set[str], set[str], set[str]]:
    """Duplicates, orphans and unreported instances over the whole account (read from the backends)."""
    import boto3
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    live: dict[str, str] = {}
    for region in regions:
        for instance in ec2_backends[DEFAULT_ACCOUNT_ID][region].all_instances():
            tags = {t["key"]: t["value"] for t in instance.get_tags()}
            if constants.TAG_REQUEST_ID in tags and instance.state in ("pending", "running"):
                live[instance.id] = tags[constants.TAG_REQUEST_ID]
    table = boto3.resource("dynamodb", region_name="us-east-1").Table(constants.instances_table_name("local"))
    items, kwargs = [], {}
    while True:
        page = table.scan(**kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            break
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    records = [i for i in items if "kind" not in i and "instance_id" in i]
    owners: dict[str, set[str]] = {}
    for item in records:
        owners.setdefault(item["instance_id"], set()).add(item.get("request_id", ""))
    reported: dict[str, set[str]] = {}
    for execution in executions:
        for instance in _reported(execution):
            reported.setdefault(instance, set()).add(execution.name)
    duplicates = {i for i, o in owners.items() if len(o) > 1} | {i for i, r in reported.items() if len(r) > 1}
    orphans = set(live) - set(owners)
    unreported = {i for i, request in live.items() if i not in reported}
    return duplicates, orphans, unreported


def wall_limit(base: float = WALL_LIMIT_SECONDS) -> float:
    """`base` wall seconds, times the machine's 1-minute load average per core when above 1: the
    runs share the cores with whatever else runs, and on a busy machine the same work takes that
    much longer in wall time."""
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return base * max(1.0, per_core)


def run_load(runs: int = 25, *, scale: float = 1.0, market: dict = MARKET, request: dict = REQUEST,
             alone: bool = True, timeout: float = WALL_LIMIT_SECONDS) -> LoadResult:
    """`runs` requests started at once in one engine, audited; and one alone on a fresh engine."""
    scenario = MarketScenario.model_validate(market)
    regions = tuple(market["regions"])
    with contextlib.redirect_stdout(io.StringIO()), LocalEngine(scenario, throttling=scale) as engine:
        sfn = engine.client("stepfunctions")
        names = [f"load-{n:02d}" for n in range(runs)]
        began = time.monotonic()
        for name in names:  # all started before any is followed: they run at once
            sfn.start_execution(stateMachineArn=engine.state_machine_arn, name=name, input=json.dumps(request))
        # Their ends are noted as they come (moto's own records), then each is read once.
        arn = engine.state_machine_arn.replace(":stateMachine:", ":execution:")
        records = {name: _execution_record(f"{arn}:{name}") for name in names}
        ended_at: dict[str, float] = {}
        while len(ended_at) < len(names) and time.monotonic() - began < timeout:
            for name, record in records.items():
                if name not in ended_at and (record is None or _record_status(record) != "RUNNING"):
                    ended_at[name] = time.monotonic() - began
            time.sleep(0.01)
        ended = {name: (engine.follow(name, timeout=timeout), ended_at.get(name, time.monotonic() - began))
                 for name in names}
        wall = time.monotonic() - began
        executions = [ended[name][0] for name in names]
        rows = [_row(*ended[name]) for name in names]
        duplicates, orphans, unreported = _audit(executions, regions)
        throttles = {f"{region} {action}": n for (region, action), n in sorted(engine.throttling.throttled.items())}
        result = LoadResult(rows, duplicates, orphans, unreported, throttles, engine.dynamodb_conflicts,
                            round(engine.throttle_backoff_seconds, 2), round(engine.elapsed, 1), round(wall, 2))
    if alone:
        with contextlib.redirect_stdout(io.StringIO()), LocalEngine(scenario, throttling=scale) as engine:
            began = time.monotonic()
            execution = engine.run(request, name="load-alone", timeout=timeout)
            result.alone = _row(execution, time.monotonic() - began)
            result.alone_fill_seconds = execution.metrics.get("fill_seconds")
    return result


def as_markdown(result: LoadResult, *, scale: float) -> str:
    lines = [
        f"# {len(result.runs)} requests at once in one deployment",
        "",
        f"Market: {MARKET['description']}; each request: {REQUEST['count']} g6.xlarge, "
        f"launch_mode {REQUEST['launch_mode']}. EC2 throttling at {scale:g} x AWS's documented bucket sizes.",
        "",
        "| run | ending | launched | launch calls | wall s |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for row in result.runs:
        lines.append(f"| {row.name} | {row.ending} | {row.launched} | {row.launch_calls} | {row.wall_seconds} |")
    launched = sum(r.launched for r in result.runs)
    lines += [
        "",
        f"- endings: {', '.join(f'{e} {n}' for e, n in _counts(r.ending for r in result.runs))}; raw endings {result.raw_endings}",
        f"- instances launched {launched}; duplicates {len(result.duplicates)}; orphans {len(result.orphans)}; "
        f"held but not reported by their run {len(result.unreported)}",
        f"- launch calls {sum(r.launch_calls for r in result.runs)}; throttles "
        f"{sum(result.throttles.values())} ({', '.join(f'{k} {v}' for k, v in result.throttles.items()) or 'none'}); "
        f"DynamoDB conditional-check conflicts {result.dynamodb_conflicts}",
        f"- launch attempts by outcome: {', '.join(f'{k} {v}' for k, v in sorted(_outcomes(result.runs).items()))}",
        f"- modelled backoff after throttles {result.backoff_seconds} s; wall time for all {result.wall_seconds} s",
    ]
    if result.alone is not None:
        lines.append(
            f"- one request alone on the same market: {result.alone.ending}, {result.alone.launched} launched in "
            f"{result.alone.launch_calls} launch call(s), {result.alone.wall_seconds} s wall, "
            f"modelled time to fill {result.alone_fill_seconds} s"
        )
    return "\n".join(lines) + "\n"


def _outcomes(rows: list[RunRow]) -> Counter:
    total: Counter = Counter()
    for row in rows:
        total.update(row.outcomes)
    return total


def _counts(values) -> list[tuple[str, int]]:
    return sorted(Counter(values).items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--scale", type=float, default=1.0, help="EC2 bucket sizes and rates times this (0: off)")
    parser.add_argument("--out", type=Path, default=RESULTS / "load.md")
    parser.add_argument(
        "--timeout", type=_positive, default=None, metavar="SECONDS",
        help=f"wall seconds a run may take before it is stopped (default: {WALL_LIMIT_SECONDS:.0f} times the "
             f"machine's load average per core when above 1; now {wall_limit():.0f})")
    args = parser.parse_args(argv)
    timeout = args.timeout if args.timeout is not None else wall_limit()
    result = run_load(args.runs, scale=args.scale, timeout=timeout)
    text = as_markdown(result, scale=args.scale)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    bad = result.raw_endings or result.duplicates or result.orphans
    return 1 if bad else 0


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--timeout must be a positive number of seconds, not {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
