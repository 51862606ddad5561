"""The gpufill command line.

`simulate` and `local serve` run the state machine file on the local engine; `run`, `watch`,
`up`, `status`, `teardown`, `approve`, `reject` and `connect` act on a deployment (on AWS, or
on `gpufill local serve` with --endpoint-url).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from contextlib import contextmanager

from gpufill.cli import connect, doctor, local, runs, simulate, status, teardown
from gpufill.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    Failed,
    Terminated,
    UsageError,
    json_stdout,
    print_json,
    say,
)


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors, as one line like every other gpufill error (exit 2)."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="gpufill",
        description="Get scarce AWS GPU instances: score regions, fill from the best pools, fall back, "
        "tear down behind an approval.",
        epilog="Start with: gpufill simulate examples/requests/provision-spot.json "
        "--market examples/markets/first-az-sold-out.json",
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    verbs = top.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    simulate.add_parser(verbs)
    runs.add_parsers(verbs)
    status.add_parser(verbs)
    teardown.add_parsers(verbs)
    connect.add_parser(verbs)
    local.add_parser(verbs)
    doctor.add_parser(verbs)
    return top


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("gpufill")
    except PackageNotFoundError:  # run from a checkout without installing it
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # With --json, stdout holds exactly one JSON document on every path, errors included.
    as_json = "--json" in argv
    try:
        with json_stdout(as_json), _sigterm_as_interrupt():
            return _run(argv, as_json)
    except Terminated:  # arrived after the verb's own handling was over
        return _error(EXIT_TERMINATED, "terminated", "terminated", as_json)
    except KeyboardInterrupt:
        return _error(EXIT_INTERRUPTED, "interrupted", "interrupted", as_json)


def _run(argv: list[str], as_json: bool) -> int:
    try:
        top = parser()
        try:
            args = top.parse_args(argv)
        except SystemExit as done:  # --help, --version
            return done.code if isinstance(done.code, int) else EXIT_OK
        if args.verb is None:  # `gpufill` alone: what it can do
            top.print_help()
            return EXIT_OK
        args.argv = argv  # for hints that repeat the command as it was typed
        return args.handler(args)
    except UsageError as error:
        return _error(EXIT_USAGE, "usage", str(error), as_json, fields=error.fields)
    except Failed as error:
        return _error(EXIT_FAILED, "failed", str(error), as_json)
    except Terminated:
        return _error(EXIT_TERMINATED, "terminated", "terminated", as_json)
    except KeyboardInterrupt:
        # The engine's context has already stopped its executions on the way out.
        return _error(EXIT_INTERRUPTED, "interrupted", "interrupted", as_json)


@contextmanager
def _sigterm_as_interrupt():
    """SIGTERM stops a verb as Ctrl-C does: the engine's executions end, the one-line error (and
    with --json the error document) is printed, exit 143."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _error(code: int, kind: str, message: str, as_json: bool, *, fields: list | None = None) -> int:
    say(message)
    if as_json:
        document = {"kind": kind, "message": message, "exit_code": code}
        if fields:
            document["fields"] = fields
        print_json({"error": document})
    return code


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
