"""`gpufill local serve`: the local engine as an AWS endpoint on 127.0.0.1."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

from gpufill.cli.common import EXIT_OK, UsageError, lambda_logs
from gpufill.cli.simulate import add_log_options, load_market

DEFAULT_PORT = 4566
EXAMPLE_REQUEST = "examples/requests/provision-spot.json"


def add_parser(verbs) -> None:
    local = verbs.add_parser("local", help="run gpufill's simulated account as a local AWS endpoint")
    actions = local.add_subparsers(dest="local_verb", metavar="serve", required=True)
    serve = actions.add_parser(
        "serve",
        help="serve the local engine over HTTP on 127.0.0.1 until Ctrl-C",
        description="The simulated account of gpufill simulate, served on http://127.0.0.1:PORT: the real AWS "
        "CLI (--endpoint-url) and gpufill's AWS verbs (--endpoint-url --env local) work against it.",
    )
    serve.add_argument("--market", type=Path, required=True, help="market scenario JSON")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0 picks one)")
    add_log_options(serve)
    serve.set_defaults(handler=serve_verb)


def serve_verb(args: argparse.Namespace, ready: threading.Event | None = None, stop: threading.Event | None = None) -> int:
    """Serves until Ctrl-C (or `stop`, for tests); `ready` is set once the endpoint answers."""
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port number (0-65535)")
    scenario = load_market(args.market)

    from gpufill.local.engine import LocalEngine
    from gpufill.local.server import LocalEndpoint

    warnings.filterwarnings("ignore", message="No application metrics to publish")
    if not args.verbose:  # one access-log line per AWS call would drown everything else
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with lambda_logs(verbose=args.verbose, log_file=args.log_file), LocalEngine(scenario) as engine:
        try:
            endpoint = LocalEndpoint(engine, args.port).start()
        except OSError as error:
            raise UsageError(f"--port {args.port}: cannot listen on 127.0.0.1 ({error.strerror or error})") from None
        try:
            region = engine.state_machine_arn.split(":")[3]
            for line in instructions(endpoint.url, region, engine.state_machine_arn, args.market):
                print(line, flush=True)
            if ready is not None:
                ready.set()
            try:
                with _terminate_as_interrupt():
                    (stop or threading.Event()).wait()
            except KeyboardInterrupt:  # Ctrl-C (or kill) is how serving ends
                print("stopped; the simulated account is gone", flush=True)
        finally:
            endpoint.stop()
    return EXIT_OK


@contextmanager
def _terminate_as_interrupt():
    """SIGTERM (kill, a container stopping) ends serving as cleanly as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def instructions(url: str, region: str, state_machine_arn: str, market: Path) -> list[str]:
    return [
        f"gpufill local serve: a simulated account ({market}) at {url}",
        f"  state machine {state_machine_arn}",
        "Any credentials work; in another terminal:",
        f"  export AWS_ACCESS_KEY_ID=gpufill-local AWS_SECRET_ACCESS_KEY=gpufill-local AWS_DEFAULT_REGION={region}",
        f"  aws stepfunctions start-execution --endpoint-url {url} --state-machine-arn {state_machine_arn} "
        f"--name my-run --input file://{EXAMPLE_REQUEST}",
        f"  .venv/bin/gpufill up {EXAMPLE_REQUEST} --env local --endpoint-url {url}",
        "Ctrl-C stops it (everything in the simulated account is forgotten).",
    ]
