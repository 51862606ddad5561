"""`gpufill simulate`: the real state machine file on the local engine, against a market scenario."""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from gpufill.cli import request_flags
from gpufill.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    check_name,
    lambda_logs,
    print_json,
    pydantic_problem,
    read_json,
    read_request,
)
from gpufill.cli.render_progress import Progress
from gpufill.cli.render_summary import render_reclaims, render_summary

DECISIONS = ("approved", "rejected", "timeout")
# In a --then request, this request id stands for the run simulated just before it.
PREVIOUS = "$previous"
DEFAULT_TIMEOUT_SECONDS = 600.0


def add_parser(verbs) -> None:
    sim = verbs.add_parser(
        "simulate",
        help="run the state machine locally against a market scenario (no AWS account needed)",
        description="Runs statemachine/provisioner.asl.json on an embedded engine (moto) against MARKET.",
    )
    sim.add_argument("request", type=Path, nargs="?", default=None, help="request JSON (the execution input); optional with request flags")
    sim.add_argument("--market", type=Path, required=True, help="market scenario JSON")
    sim.add_argument("--name", default=None, help="execution name, which is also the request id (1-80 of A-Za-z0-9-_)")
    sim.add_argument("--json", action="store_true", help="print one JSON document: execution and metrics")
    sim.add_argument(
        "--decision",
        choices=DECISIONS,
        default=None,
        help="how the person asked to approve a teardown or a Capacity Block purchase answers: approved, rejected, or timeout (no answer in time)",
    )
    sim.add_argument(
        "--then",
        type=Path,
        default=None,
        metavar="REQUEST2",
        help=f'a second request run after the first in the same simulated account; "request_id": "{PREVIOUS}" '
        "in it stands for the first run (e.g. provision, then tear down what it launched)",
    )
    sim.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"stop a run still going after SECONDS of wall time (error LocalTimeout; default {DEFAULT_TIMEOUT_SECONDS:.0f})",
    )
    sim.add_argument(
        "--advance",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="after the run(s), let SECONDS of modelled time pass: the market's restocks and interruptions "
        "happen, and every run they start (a refill of a request with maintain) is shown",
    )
    add_log_options(sim)
    # --market names the market scenario here, so the request's market is --buy.
    request_flags.add_request_options(sim, market_flags=("--buy",))
    sim.set_defaults(handler=simulate)


def add_log_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true", help="show the Lambda handlers' log lines on stderr as they happen"
    )
    parser.add_argument(
        "--log-file", type=Path, default=None, metavar="FILE", help="append the Lambda handlers' log lines to FILE"
    )


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 seconds")
    return value


def load_market(path: Path):
    """The market scenario in `path`, or a UsageError naming the file and the bad field."""
    from pydantic import ValidationError

    from gpufill.local.scenario import MarketScenario

    document = read_json(path, "market")
    if not isinstance(document, dict):
        raise UsageError(f"market file {path}: must hold a JSON object with \"regions\"")
    if not document.get("regions"):
        raise UsageError(f"market file {path}: \"regions\" is missing or empty; a market needs at least one region")
    try:
        return MarketScenario.model_validate(document)
    except ValidationError as error:
        raise UsageError(f"market file {path}: {pydantic_problem(error)}") from None


def simulate(args: argparse.Namespace) -> int:
    if args.name is not None:
        check_name(args.name)
    request = request_flags.build(args, args.request)
    scenario = load_market(args.market)
    follow = read_request(args.then, "--then request") if args.then else None
    if _names_previous(request):
        raise UsageError(f'"request_id": "{PREVIOUS}" means the run before; use it in the request given to --then')
    if args.decision is None and any(_action(r) == "teardown" for r in (request, follow) if r is not None):
        raise UsageError(
            "a teardown waits for a person to approve it; say what they answer: --decision approved|rejected|timeout"
        )
    if args.decision is None and any(isinstance(r, dict) and r.get("capacity_block") for r in (request, follow)):
        raise UsageError(
            "a Capacity Block is bought only after a person approves the purchase; say what they answer: "
            "--decision approved|rejected|timeout"
        )
    if args.decision is None and _lifetime_passes(request, getattr(args, "advance", None)):
        raise UsageError(
            "--advance passes the request's max_lifetime: its teardown then waits for a person to approve it; "
            "say what they answer: --decision approved|rejected|timeout"
        )
    name = args.name or _default_name(args.request.stem if args.request is not None else "flags")

    from gpufill.local.engine import LocalEngine

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    progress = None if args.json else Progress(sys.stdout)
    if progress:
        progress.header(_header(args.request, scenario))
    on_event = progress.event if progress else None
    with lambda_logs(verbose=args.verbose, log_file=args.log_file), LocalEngine(scenario, facts_refresh=True) as engine:
        executions = [engine.run(request, name=name, on_event=on_event, decision=args.decision, timeout=args.timeout)]
        if follow is not None:
            if progress:
                print(render_summary(executions[0]))
                print()
                progress.header(_header(args.then, scenario))
            then_name = _default_name(args.then.stem)
            then_name = then_name if then_name != name else f"{name[:75]}-then"
            follow = _with_previous(follow, executions[0].name)
            executions.append(
                engine.run(follow, name=then_name, on_event=on_event, decision=args.decision, timeout=args.timeout)
            )
        reclaims = _advance(engine, args, executions, progress) if args.advance else []
    if args.json:
        summaries = [e.summary() for e in executions]
        document = summaries[0] if len(summaries) == 1 else {"runs": summaries}
        if args.advance:
            document = {"runs": summaries, "advanced_seconds": args.advance, "interruptions": reclaims}
        print_json(document)
    else:
        print(render_summary(executions[-1]))
    return EXIT_OK if all(e.status == "SUCCEEDED" for e in executions) else EXIT_FAILED


def _advance(engine, args: argparse.Namespace, executions: list, progress: Progress | None) -> list[dict]:
    """Let --advance seconds of modelled time pass, then follow every run that started meanwhile."""
    from dataclasses import asdict

    known = set(engine.executions())
    start = engine.elapsed
    engine.advance(args.advance)
    engine.settle()
    reclaims = [asdict(r) for r in engine.reclaims]
    if progress:
        print(render_summary(executions[-1]))
        print()
        progress.header(f"{args.advance:g} s of modelled time pass (t = {start:.0f} s -> {engine.elapsed:.0f} s)")
        for line in render_reclaims(reclaims):
            print(line)
    for name in [n for n in engine.executions() if n not in known]:
        if progress:
            print()
            progress.header(f"run {name}, started by " + ("the spend guard (max_lifetime)" if name.endswith("-expired") else "StartRefill"))
        executions.append(engine.follow(name, on_event=progress.event if progress else None, timeout=args.timeout,
                                        decision=args.decision))
        if progress and name != engine.executions()[-1]:
            print(render_summary(executions[-1]))
    return reclaims


def _lifetime_passes(request: Any, advance: float | None) -> bool:
    """Whether --advance reaches the request's max_lifetime (an unreadable one is ValidateRequest's to refuse)."""
    if not advance or not isinstance(request, dict) or not isinstance(request.get("max_lifetime"), str):
        return False
    from datetime import timedelta

    from pydantic import TypeAdapter, ValidationError

    try:
        return advance >= TypeAdapter(timedelta).validate_python(request["max_lifetime"]).total_seconds()
    except ValidationError:
        return False


def _header(request_path: Path | None, scenario) -> str:
    request_path = request_path if request_path is not None else "(from the flags)"
    described = f" ({scenario.description})" if scenario.description else ""
    return f"gpufill simulate {request_path}: market of {len(scenario.regions)} region(s){described}"


def _default_name(stem: str) -> str:
    """simulate-<request file>, with anything an execution name may not hold replaced by -."""
    return f"simulate-{re.sub(r'[^A-Za-z0-9_-]+', '-', stem)}"[:80]


def _action(request: Any) -> str | None:
    return request.get("action", "provision") if isinstance(request, dict) else None


def _names_previous(request: Any) -> bool:
    return isinstance(request, dict) and request.get("request_id") == PREVIOUS


def _with_previous(request: Any, previous: str) -> Any:
    """The --then request with "$previous" replaced by the first run's request id (its execution name)."""
    if _names_previous(request):
        return {**request, "request_id": previous}
    return request
