"""Modelled time and orchestration cost: the engine's latency model completed by bench/latency.json,
prices from bench/prices.json, and each Lambda's memory as the CDK app deploys it."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from gpufill import constants
from gpufill.local.metrics import LATENCY_MODEL, Invocation

HERE = Path(__file__).parent
PRICES = json.loads((HERE / "prices.json").read_text())
BENCH_LATENCY = json.loads((HERE / "latency.json").read_text())
# Every bench run is the first after idle: each function's first invocation in a run starts cold.
COLD_START_SECONDS = BENCH_LATENCY["lambda_cold_start_seconds"]
KARPENTER_BATCH_IDLE_SECONDS = BENCH_LATENCY["karpenter_batch_idle_seconds"]
PARALLEL_HANDLERS = frozenset(LATENCY_MODEL["parallel_handlers"])


def complete_engine_model() -> None:
    """Give the engine's latency table the bench's figures for the calls it leaves to its default,
    so the state-machine runs are timed with the same table as the simulators. An entry the engine
    has is never replaced: when it gains one, its own figure wins."""
    table = LATENCY_MODEL["api_seconds"]
    for api, seconds in BENCH_LATENCY["api_seconds"].items():
        table.setdefault(api, seconds)


def api_seconds(api: str) -> float:
    table = LATENCY_MODEL["api_seconds"]
    return table.get(api, BENCH_LATENCY["api_seconds"].get(api, table["default"]))


def scoring_seconds() -> float:
    """One region scored (offerings + spot prices); regions are scored side by side, plus the advisor feed."""
    return (
        api_seconds("ec2:DescribeInstanceTypeOfferings")
        + api_seconds("ec2:DescribeSpotPriceHistory")
        + LATENCY_MODEL["spot_advisor_fetch_seconds"]
    )


def invocation_seconds(invocation: Invocation) -> float:
    """What a Lambda invocation is billed for: its own overhead plus the AWS calls it waits on."""
    return LATENCY_MODEL["lambda_invocation_seconds"] + sum(api_seconds(c) for c in invocation.calls)


@functools.cache
def deployed_memory_mb() -> dict[str, int]:
    """Handler module -> the memory its function deploys with, read from the CDK app's task table
    (cdk/gpufill_stack/task_permissions.py, the figures cdk/gpufill_stack/functions.py deploys)."""
    cdk = str(HERE.parent / "cdk")
    if cdk not in sys.path:
        sys.path.insert(0, cdk)
    from gpufill_stack.task_permissions import TASKS

    return {constants.LAMBDA_TASKS[task].split(".")[-2]: spec.memory_mb for task, spec in TASKS.items()}


def cold_starts(handlers: Iterable[str]) -> int:
    """Cold starts on a run's critical path: one per function invoked. A parallel Map's branches
    start cold side by side, so its function adds one to the wall time however many branches run."""
    return len(set(handlers))


def orchestration_usd(transitions: int, invocations: list[Invocation]) -> float:
    """Step Functions transitions, Lambda requests, and Lambda duration at each function's deployed
    memory; a cold start's init is billed like duration (Lambda bills the INIT phase of on-demand
    functions since August 2025), at the memory of the function that started cold."""
    sfn, lam = PRICES["step_functions_standard"], PRICES["lambda_arm64"]
    memory = deployed_memory_mb()
    gb_seconds = sum(invocation_seconds(i) * memory[i.handler] / 1024 for i in invocations)
    seen: set[str] = set()
    for i in invocations:
        if i.handler in PARALLEL_HANDLERS or i.handler not in seen:
            gb_seconds += COLD_START_SECONDS * memory[i.handler] / 1024
        seen.add(i.handler)
    return (
        transitions * sfn["usd_per_state_transition"]
        + len(invocations) * lam["usd_per_request"]
        + gb_seconds * lam["usd_per_gb_second"]
    )


def fleet_seconds() -> float:
    """One CreateFleet (instant): the latency model gives it RunInstances' time, which if anything
    flatters the fleet (an instant fleet waits on every pool it tries); gpufill's fleet runs on
    the engine are timed with the same figure."""
    table = LATENCY_MODEL["api_seconds"]
    return table.get("ec2:CreateFleet", table["ec2:RunInstances"])
