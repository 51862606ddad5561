"""The gpufill command line. `simulate` runs the real state machine file on the local engine."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from gpufill.render import Progress, render_summary

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufill", description="Get scarce AWS GPU instances.")
    verbs = parser.add_subparsers(dest="verb", required=True)
    sim = verbs.add_parser(
        "simulate",
        help="run the state machine locally against a market scenario (no AWS account needed)",
        description="Runs statemachine/provisioner.asl.json on an embedded engine (moto) against MARKET.",
    )
    sim.add_argument("request", type=Path, help="request JSON (the execution input)")
    sim.add_argument("--market", type=Path, required=True, help="market scenario JSON")
    sim.add_argument("--name", default=None, help="execution name, which is also the request id")
    sim.add_argument("--json", action="store_true", help="print one JSON document: execution and metrics")
    args = parser.parse_args(argv)
    return simulate(args)


def simulate(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from gpufill.local.scenario import MarketScenario

    try:
        request = _read_json(args.request, "request")
        scenario = MarketScenario.load(args.market)
    except ValidationError as error:
        return _usage(f"market scenario {args.market} is not usable:\n{error}")
    except (OSError, ValueError) as error:
        return _usage(str(error))

    from gpufill.local.engine import LocalEngine

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    name = args.name or f"simulate-{args.request.stem}"
    progress = None if args.json else Progress(sys.stdout)
    if progress:
        progress.header(args.request, scenario)
    with LocalEngine(scenario) as engine:
        execution = engine.run(request, name=name, on_event=progress.event if progress else None)
    if args.json:
        print(json.dumps(execution.summary(), indent=2))
    else:
        print(render_summary(execution))
    return EXIT_OK if execution.status == "SUCCEEDED" else EXIT_FAILED


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise OSError(f"{what} file not found: {path}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{what} file {path} is not JSON: {error}") from None


def _usage(message: str) -> int:
    print(f"gpufill: {message}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
