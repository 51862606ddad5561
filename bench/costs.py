"""Modelled time and orchestration cost, from the latency model and bench/prices.json."""

from __future__ import annotations

import json
from pathlib import Path

from gpufill.local.metrics import LATENCY_MODEL, Invocation

PRICES = json.loads((Path(__file__).parent / "prices.json").read_text())


def api_seconds(api: str) -> float:
    table = LATENCY_MODEL["api_seconds"]
    return table.get(api, table["default"])


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


def orchestration_usd(transitions: int, invocations: list[Invocation]) -> float:
    sfn, lam = PRICES["step_functions_standard"], PRICES["lambda_arm64"]
    gb_seconds = sum(invocation_seconds(i) for i in invocations) * lam["memory_mb"] / 1024
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
