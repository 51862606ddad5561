"""What the tests share besides fixtures: paths, market and request builders, readings of a run.

Fixtures stay in the conftest.py files; a test imports helpers from here, never from a conftest
(pytest imports a conftest under its own name, so importing it again makes a second copy).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def zone(price=None, spot=0, on_demand=0, itype="g6.xlarge") -> dict:
    """One AZ of a market scenario: what it has left of one type, per market, and the spot price."""
    stock = {"spot": spot, "on_demand": on_demand}
    if price is not None:
        stock["spot_price"] = price
    return {itype: stock}


def tried(execution) -> list[tuple[str, int, int, str]]:
    """(zone, batch, launched, outcome) of every attempt, in order, from the result or the failure cause."""
    attempts = (execution.output or {}).get("attempts") or (execution.cause or {}).get("attempts") or []
    return [(a["availability_zone"], a["batch"], a["launched"], a["outcome"]) for a in attempts]


def largest_state(execution) -> int:
    """The largest input, output or task parameters of any event, in bytes (UTF-8): what Step
    Functions holds to constants.STATE_SIZE_LIMIT_BYTES."""
    largest = 0
    for event in execution.history:
        for key, details in event.items():
            if key.endswith("EventDetails") and isinstance(details, dict):
                for field in ("input", "output", "parameters"):
                    if isinstance(details.get(field), str):
                        largest = max(largest, len(details[field].encode()))
    return largest


def stack_names(engine) -> tuple[str, str]:
    """The instance profile ARN and the startup bucket the CDK app deploys (and so the engine)."""
    from gpufill import constants

    app = engine.deployments[engine.env_names[0]].app
    return app.instance_profile.arn, app.home.functions["LaunchBatch"].environment[constants.ENV_STARTUP_BUCKET]
