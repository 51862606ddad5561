"""`gpufill local serve`: the local engine as an AWS endpoint on 127.0.0.1.
`gpufill local iam-report`: the grants gpufill's runs use, and those they never use."""

from __future__ import annotations

import argparse
import errno
import io
import logging
import socket
import threading
import warnings
from contextlib import redirect_stderr
from pathlib import Path

from gpufill.cli.aws import endpoint_url
from gpufill.cli.common import (
    EXIT_INTERRUPTED,
    Failed,
    EXIT_TERMINATED,
    Terminated,
    UsageError,
    lambda_logs,
    print_json,
    program,
    say,
)
from gpufill.cli.simulate import add_log_options, load_market

DEFAULT_PORT = 4566
LOOPBACK = "127.0.0.1"
EXAMPLE_REQUEST = "examples/requests/provision-spot.json"


def add_parser(verbs) -> None:
    local = verbs.add_parser("local", help="run gpufill's simulated account as a local AWS endpoint")
    actions = local.add_subparsers(dest="local_verb", metavar="serve|clock|iam-report", required=True)
    report = actions.add_parser(
        "iam-report",
        help="run gpufill's paths locally and print, per role, the grants they used and those never used",
        description="Provision by fleet and by RunInstances, spot to On-Demand, a same-AZ gang, status and an "
        "approved teardown, every call judged by the deployed IAM policies; writes what they needed to "
        "catalog/iam_needs.json for gpufill doctor (with --write).",
    )
    report.add_argument("--json", action="store_true", help="print the report as one JSON document")
    report.add_argument("--write", action="store_true", help="also write functions/gpufill/catalog/iam_needs.json")
    report.add_argument(
        "--usage", type=Path, default=None, metavar="DIR",
        help="also list, per role, the grants no engine used that left its usage in DIR "
        "(run a test session with GPUFILL_IAM_USAGE=DIR first, e.g. GPUFILL_IAM_USAGE=/tmp/usage make test)",
    )
    report.set_defaults(handler=iam_report_verb)
    serve = actions.add_parser(
        "serve",
        help="serve the local engine over HTTP on 127.0.0.1 until Ctrl-C",
        description="The simulated account of gpufill simulate, served on http://127.0.0.1:PORT: the real AWS "
        "CLI (--endpoint-url) and gpufill's AWS verbs (--endpoint-url --env local) work against it.",
    )
    serve.add_argument("--market", type=Path, required=True, help="market scenario JSON")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0 picks one)")
    serve.add_argument(
        "--json",
        action="store_true",
        help="once it answers, print one JSON line: url, region, env, state machine, stack outputs",
    )
    add_log_options(serve)
    serve.set_defaults(handler=serve_verb)
    clock = actions.add_parser(
        "clock",
        help="read or move gpufill local serve's modelled clock",
        description="Reads the modelled time of the engine behind --endpoint-url; `advance DURATION` lets that "
        "much modelled time pass at once, so lifetimes, approval deadlines and Capacity Block starts "
        "and ends happen as they would.",
    )
    clock.add_argument("move", nargs="?", choices=["advance"], help="advance: let DURATION pass")
    clock.add_argument("duration", nargs="?", default=None, help="an ISO 8601 duration such as PT2H or P1D")
    clock.add_argument("--endpoint-url", required=True, type=endpoint_url, metavar="URL",
                       help="gpufill local serve's endpoint (it prints it)")
    clock.add_argument("--json", action="store_true", help="print the clock as one JSON document")
    clock.set_defaults(handler=clock_verb)


def clock_verb(args: argparse.Namespace) -> int:
    import json
    import urllib.error
    import urllib.request

    from gpufill.local.server import CLOCK_PATH

    body = None
    if args.move == "advance":
        body = json.dumps({"advance_seconds": _duration_seconds(args.duration)}).encode()
    request = urllib.request.Request(args.endpoint_url.rstrip("/") + CLOCK_PATH, data=body, method="POST" if body else "GET",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=600) as answer:  # noqa: S310 -- a loopback URL the user gave
            read = json.loads(answer.read())
    except urllib.error.HTTPError as error:
        raise Failed(f"the local endpoint refused: {json.loads(error.read() or b'{}').get('message', error.reason)}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise Failed(f"no gpufill local serve answers at {args.endpoint_url} ({getattr(error, 'reason', error)}); "
                     f"start one with {program()} local serve --market FILE") from None
    if args.json:
        print_json(read)
    else:
        moved = f"advanced {args.duration}; " if body else ""
        print(f"{moved}modelled time {read['now']} ({read['elapsed_seconds'] / 3600:.2f} h since the engine started)")
    return 0


def _duration_seconds(text: str | None) -> float:
    from datetime import timedelta

    from pydantic import TypeAdapter, ValidationError

    if not text or not text.startswith("P"):
        raise UsageError(f"gpufill local clock advance: give an ISO 8601 duration such as PT2H or P1D, not {text!r}")
    try:
        seconds = TypeAdapter(timedelta).validate_python(text).total_seconds()
    except ValidationError:
        raise UsageError(f"gpufill local clock advance: {text!r} is not an ISO 8601 duration such as PT2H or P1D") from None
    if seconds <= 0:
        raise UsageError(f"gpufill local clock advance: {text!r} is no time at all; give one such as PT2H")
    return seconds


def iam_report_verb(args: argparse.Namespace) -> int:
    import json

    from gpufill.local.iam import report

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    with lambda_logs(verbose=False, log_file=None):
        uses = report.measure(report.run_paths())
    needs = report.needs_document(uses)
    if args.write:
        report.NEEDS_FILE.write_text(json.dumps(needs, indent=1, sort_keys=True) + "\n")
    never = report.unused_across(args.usage, uses) if args.usage else None
    if args.json:
        print_json({
            "roles": {u.principal: {"used": {a: sorted(t) for a, t in sorted(u.used.items())}, "unused": u.unused,
                                    **({"unused_by_any_run": never[u.principal]} if never is not None else {})}
                      for u in uses.values()},
        })
    else:
        print(report.render(uses))
        if never is not None:
            print(f"\nGranted, and used by no run of the engines in {args.usage}:")
            for principal, actions in sorted(never.items()):
                for action in actions:
                    why = report.kept_for(action)
                    print(f"  {principal:26} {action:42} {('kept: ' + why) if why else 'remove, or test the path that needs it'}")
    return 0


def serve_verb(args: argparse.Namespace, ready: threading.Event | None = None, stop: threading.Event | None = None) -> int:
    """Serves until Ctrl-C or SIGTERM (or `stop`, for tests); `ready` is set once the endpoint answers.
    Serving only ever ends by being stopped, so it exits 130 (143 on SIGTERM), as an interrupted
    command does; `stop` gives 130 too."""
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port number (0-65535)")
    scenario = load_market(args.market)
    check_port_free(args.port)  # before the seconds the simulated account takes to build

    from gpufill.local.engine import LocalEngine
    from gpufill.local.server import LocalEndpoint

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    if not args.verbose:  # one access-log line per AWS call would drown everything else
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with lambda_logs(verbose=args.verbose, log_file=args.log_file), LocalEngine(scenario, facts_refresh=True) as engine:
        endpoint = LocalEndpoint(engine, args.port)
        try:
            with redirect_stderr(io.StringIO()):  # werkzeug prints its own paragraph, then exits
                endpoint.start()
        except (OSError, SystemExit) as error:
            raise UsageError(_cannot_listen(args.port, error)) from None
        code = EXIT_INTERRUPTED
        try:
            # From the first line printed on, a stop is the normal end of serving (even one that
            # arrives before the wait begins): it never adds an error document to the ready one.
            try:
                region = engine.state_machine_arn.split(":")[3]
                if args.json:
                    print_json(ready_document(endpoint, region, engine.state_machine_arn, args.market), indent=None)
                else:
                    for line in instructions(endpoint.url, region, engine.state_machine_arn, args.market):
                        print(line, flush=True)
                if ready is not None:
                    ready.set()
                (stop or threading.Event()).wait()
            except Terminated:
                code = EXIT_TERMINATED
            except KeyboardInterrupt:  # Ctrl-C is how serving ends
                pass
            stopped = "stopped; the simulated account is gone"
            if args.json:
                say(stopped)
            else:
                print(stopped, flush=True)
        finally:
            endpoint.stop()
    return code


def check_port_free(port: int) -> None:
    """A port something else holds is one line now, not werkzeug's paragraph after the engine is built."""
    if port == 0:
        return
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server itself binds
    try:
        probe.bind((LOOPBACK, port))
    except OSError as error:
        raise UsageError(_cannot_listen(port, error)) from None
    finally:
        probe.close()


def _cannot_listen(port: int, error: BaseException) -> str:
    if isinstance(error, SystemExit) or getattr(error, "errno", None) == errno.EADDRINUSE:
        return f"--port {port}: another program listens on 127.0.0.1:{port}; stop it or pick another port (--port 0 picks a free one)"
    if getattr(error, "errno", None) == errno.EACCES:
        return f"--port {port}: not allowed to listen on it (ports below 1024 need root); pick another port"
    return f"--port {port}: cannot listen on 127.0.0.1 ({getattr(error, 'strerror', None) or error})"


def ready_document(endpoint, region: str, state_machine_arn: str, market: Path) -> dict:
    return {
        "url": endpoint.url,
        "region": region,
        "env": endpoint.engine_env(),
        "market": str(market),
        "state_machine_arn": state_machine_arn,
        "outputs": endpoint.outputs(),
    }


def instructions(url: str, region: str, state_machine_arn: str, market: Path) -> list[str]:
    return [
        f"gpufill local serve: a simulated account ({market}) at {url}",
        f"  state machine {state_machine_arn}",
        "Any credentials work; in another terminal:",
        f"  export AWS_ACCESS_KEY_ID=gpufill-local AWS_SECRET_ACCESS_KEY=gpufill-local AWS_DEFAULT_REGION={region}",
        f"  aws stepfunctions start-execution --endpoint-url {url} --state-machine-arn {state_machine_arn} "
        f"--name my-run --input file://{EXAMPLE_REQUEST}",
        f"  {program()} up {EXAMPLE_REQUEST} --env local --endpoint-url {url}",
        "Ctrl-C stops it (everything in the simulated account is forgotten).",
    ]
