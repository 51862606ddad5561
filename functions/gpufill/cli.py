"""The gpufill command line. `simulate` runs the real state machine file on the local engine;
`approve` and `reject` answer a teardown's pending approval on AWS."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from gpufill.render import Progress, render_summary

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DECISIONS = ("approved", "rejected", "timeout")
# In a --then request, this request id stands for the run simulated just before it.
PREVIOUS = "$previous"


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
    sim.add_argument(
        "--decision",
        choices=DECISIONS,
        default=None,
        help="how the person asked to approve a teardown answers: approved, rejected, or timeout (no answer in time)",
    )
    sim.add_argument(
        "--then",
        type=Path,
        default=None,
        metavar="REQUEST2",
        help=f'a second request run after the first in the same simulated account; "request_id": "{PREVIOUS}" '
        "in it stands for the first run (e.g. provision, then tear down what it launched)",
    )
    for verb, decision in (("approve", "approved"), ("reject", "rejected")):
        answer = verbs.add_parser(
            verb,
            help=f"{verb} the pending teardown of EXECUTION (on AWS)",
            description=(
                f"Sends {{\"decision\": \"{decision}\"}} with the task token of EXECUTION's pending approval "
                "(SendTaskSuccess). Refused, changing nothing, when it was already answered or has expired."
            ),
        )
        answer.add_argument("execution", help="the teardown's execution name or ARN (the ARN also gives region and env)")
        answer.add_argument("--reason", default=None, help="why; recorded with the decision")
        answer.add_argument("--env", default=None, help="deployment env (default: from the ARN, $GPUFILL_ENV, else dev)")
        answer.add_argument("--region", default=None, help="region of the state machine (default: from the ARN, else AWS config)")
        answer.set_defaults(decision=decision)
    args = parser.parse_args(argv)
    if args.verb in ("approve", "reject"):
        return answer_approval(args)
    return simulate(args)


def simulate(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from gpufill.local.scenario import MarketScenario

    try:
        request = _read_json(args.request, "request")
        scenario = MarketScenario.load(args.market)
        follow = _read_json(args.then, "--then request") if args.then else None
    except ValidationError as error:
        return _usage(f"market scenario {args.market} is not usable:\n{error}")
    except (OSError, ValueError) as error:
        return _usage(str(error))
    if _names_previous(request):
        return _usage(f'"request_id": "{PREVIOUS}" means the run before; use it in the request given to --then')
    if args.decision is None and any(_action(r) == "teardown" for r in (request, follow) if r is not None):
        return _usage(
            "a teardown waits for a person to approve it; say what they answer: --decision approved|rejected|timeout"
        )

    from gpufill.local.engine import LocalEngine

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    name = args.name or f"simulate-{args.request.stem}"
    progress = None if args.json else Progress(sys.stdout)
    if progress:
        progress.header(args.request, scenario)
    on_event = progress.event if progress else None
    with LocalEngine(scenario) as engine:
        executions = [engine.run(request, name=name, on_event=on_event, decision=args.decision)]
        if follow is not None:
            if progress:
                print(render_summary(executions[0]))
                print()
                progress.header(args.then, scenario)
            then_name = f"simulate-{args.then.stem}" if f"simulate-{args.then.stem}" != name else f"{name}-then"
            follow = _with_previous(follow, executions[0].name)
            executions.append(engine.run(follow, name=then_name, on_event=on_event, decision=args.decision))
    if args.json:
        summaries = [e.summary() for e in executions]
        print(json.dumps(summaries[0] if len(summaries) == 1 else {"runs": summaries}, indent=2))
    else:
        print(render_summary(executions[-1]))
    return EXIT_OK if all(e.status == "SUCCEEDED" for e in executions) else EXIT_FAILED


def _action(request: Any) -> str | None:
    return request.get("action", "provision") if isinstance(request, dict) else None


def _names_previous(request: Any) -> bool:
    return isinstance(request, dict) and request.get("request_id") == PREVIOUS


def _with_previous(request: Any, previous: str) -> Any:
    """The --then request with "$previous" replaced by the first run's request id (its execution name)."""
    if _names_previous(request):
        return {**request, "request_id": previous}
    return request


def answer_approval(args: argparse.Namespace) -> int:
    """gpufill approve|reject EXECUTION: claim the pending approval, then SendTaskSuccess with the decision."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from gpufill import approve

    try:
        ref = approve.parse_execution(args.execution)
    except approve.ApprovalError as error:
        return _usage(str(error))
    env = args.env or ref.env or os.environ.get("GPUFILL_ENV") or "dev"
    try:
        session = boto3.Session(region_name=args.region or ref.region)
        table = session.resource("dynamodb").Table(approve.table_name(env))
        approver = _caller(session)
        item = approve.answer(
            args.execution,
            args.decision,
            approver=approver,
            reason=args.reason,
            sfn=session.client("stepfunctions"),
            table=table,
        )
    except approve.ApprovalError as error:
        print(f"gpufill: {error}", file=sys.stderr)
        return EXIT_FAILED
    except (BotoCoreError, ClientError) as error:
        print(f"gpufill: could not answer {ref.name!r} (env {env}): {error}", file=sys.stderr)
        return EXIT_FAILED
    count = len(item.get("instance_ids") or [])
    outcome = "will now be terminated" if args.decision == "approved" else "stay as they are"
    print(f"{args.decision} teardown {ref.name} as {approver}: its {count} instance(s) {outcome}.")
    if item.get("execution_arn"):
        print(f"Follow it: aws stepfunctions describe-execution --execution-arn {item['execution_arn']}")
    return EXIT_OK


def _caller(session) -> str:
    """Who answers: the caller's IAM identity, else the login name."""
    try:
        return session.client("sts").get_caller_identity()["Arn"]
    except Exception:  # no credentials for STS still leaves a name worth recording
        return os.environ.get("USER") or "unknown"


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
