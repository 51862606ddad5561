"""What every gpufill verb shares: exit codes, the one-line errors, reading input files, and
keeping the Lambda handlers' log lines off stdout."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shlex
import shutil
import sys
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Iterator, TextIO

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
# Step Functions' own rule for execution names (StartExecution `name`): 1-80 characters; gpufill
# keeps to the ASCII letters, digits, - and _ so the name is also a valid tag value and request id.
EXECUTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
MAX_EXECUTION_NAME = 80


class UsageError(Exception):
    """An argument or input file gpufill cannot use: printed as one line, exit 2. `fields` (each
    {"field", "problem"}) go into the --json error document too."""

    def __init__(self, message: str, fields: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.fields = fields


class Failed(Exception):
    """The verb ran and did not succeed (AWS refused, nothing found): printed as one line, exit 1."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, a container stopping, timeout(1)): every path that cleans up after Ctrl-C
    cleans up after it too; only the exit code differs (143)."""


# With --json the one document goes here (the real stdout), while sys.stdout points at stderr
# for the verb's duration: whatever else prints (a library's warning, a metrics line) cannot
# land in front of it.
_document_stream: TextIO | None = None


def program() -> str:
    """The gpufill command as this process was started, for hints a user copy-pastes: `gpufill`
    when that is what PATH finds, else the path typed (`.venv/bin/gpufill`, no venv activated)."""
    invoked = sys.argv[0] if sys.argv else ""
    real = os.path.realpath(invoked) if invoked else ""
    if real == os.path.realpath(os.path.join(os.path.dirname(__file__), "__main__.py")):
        return f"{shlex.quote(_as_typed(sys.executable))} -m gpufill.cli"
    if os.path.basename(invoked) != "gpufill":  # called in-process (tests, another tool)
        return "gpufill"
    on_path = shutil.which("gpufill")
    if on_path and os.path.realpath(on_path) == real:
        return "gpufill"
    return shlex.quote(_as_typed(invoked))


def _as_typed(path: str) -> str:
    """`path` relative to the working directory when it lies below it (`.venv/bin/gpufill`)."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    if relative.startswith(".."):
        return absolute
    return relative if os.sep in relative else f".{os.sep}{relative}"


def say(message: str) -> None:
    print(f"gpufill: {message}", file=sys.stderr, flush=True)


def check_name(name: str, what: str = "--name") -> str:
    if not EXECUTION_NAME.fullmatch(name):
        too_long = f" ({len(name)} given)" if len(name) > MAX_EXECUTION_NAME else ""
        raise UsageError(
            f"{what} {name!r} is not a valid execution name: use 1-{MAX_EXECUTION_NAME} characters from "
            f"A-Z a-z 0-9 - _{too_long}"
        )
    return name


def fresh_name(stem: str) -> str:
    """A new execution name from a file name: its valid characters plus a UTC timestamp."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-") or "run"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")[:-3]
    return f"{cleaned[: MAX_EXECUTION_NAME - len(stamp) - 1]}-{stamp}"


def read_json(path: Path, what: str) -> Any:
    """The JSON document in `path`, or a UsageError naming the file and what is wrong with it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{what} file {path}: not found") from None
    except IsADirectoryError:
        raise UsageError(f"{what} file {path}: is a directory") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"{what} file {path}: cannot be read ({error})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_repeated_keys)
    except json.JSONDecodeError as error:
        raise UsageError(f"{what} file {path}: not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except _RepeatedKey as repeated:
        # json keeps the last of two equal keys without a word: the first value the person wrote
        # would be silently dropped, so the file is refused instead.
        raise UsageError(f"{what} file {path}: the key {repeated.key!r} appears twice in one object; keep one") from None


class _RepeatedKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict:
    document: dict = {}
    for key, value in pairs:
        if key in document:
            raise _RepeatedKey(key)
        document[key] = value
    return document


def read_request(path: Path, what: str = "request") -> dict:
    """A request file must hold a JSON object; the state machine validates its fields."""
    document = read_json(path, what)
    if not isinstance(document, dict):
        raise UsageError(
            f"{what} file {path}: must hold a JSON object such as {{\"count\": 1}}, not a {_json_kind(document)}"
        )
    return document


def check_request(request: dict, what: str, *, name: str | None = None) -> None:
    """The state machine's own check (ValidateRequest's model), before StartExecution: a bad
    request is refused here with the same words, and no execution (nor its bill line) starts."""
    from pydantic import ValidationError

    from gpufill.models.request import Request, RequestProblems, describe_problems
    from gpufill.policy.execution_names import reserved_problem

    problems: list[dict[str, str]] = []
    reserved = reserved_problem(name, request) if name is not None else None
    if reserved is not None:
        problems.append({"field": "(execution name)", "problem": reserved})
    try:
        Request.model_validate(request)
    except (ValidationError, RequestProblems) as error:
        problems += describe_problems(error)
    if problems:
        listed = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
        changes = "changed" if request.get("action") in ("teardown", "status") else "started"
        raise UsageError(f"{what}: {len(problems)} problem(s): {listed}. Nothing was {changes}.", problems)


def _json_kind(value: Any) -> str:
    return {str: "string", list: "list", bool: "boolean", type(None): "null"}.get(type(value), "number")


def pydantic_problem(error: Any) -> str:
    """A pydantic ValidationError as `field: problem; field: problem`, without pydantic's links."""
    parts = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(p) for p in problem.get("loc", ())) or "(document)"
        parts.append(f"{where}: {problem['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def print_json(document: Any, out: TextIO | None = None, *, indent: int | None = 2) -> None:
    print(json.dumps(document, indent=indent, default=str), file=out or _document_stream or sys.stdout, flush=True)


@contextmanager
def json_stdout(enabled: bool) -> Iterator[None]:
    """While a --json verb runs, stdout is stderr; print_json alone writes to the real stdout."""
    global _document_stream
    if not enabled:
        yield
        return
    real, previous = sys.stdout, _document_stream
    _document_stream, sys.stdout = real, sys.stderr
    try:
        yield
    finally:
        sys.stdout, _document_stream = real, previous


@contextmanager
def lambda_logs(*, verbose: bool, log_file: Path | None) -> Iterator[None]:
    """The handlers log (Powertools, JSON lines) to stdout, as Lambda wants. Locally that would
    land between progress lines and break --json, so the lines go to --log-file, or straight
    to stderr with --verbose, or are kept and written to stderr once the run is over.

    The local engine runs the handlers at Powertools' WARNING level, so a run that goes well
    logs nothing; asked for the lines (--verbose, --log-file), the handlers log at INFO."""
    from gpufill.constants import SERVICE_NAME

    kept = io.StringIO()
    if log_file is not None:
        try:
            target: TextIO = log_file.open("a")
        except OSError as error:
            raise UsageError(f"--log-file {log_file}: cannot be opened ({error})") from None
    else:
        target = sys.stderr if verbose else kept
    service = logging.getLogger(SERVICE_NAME)
    # Powertools gives the service logger its own stdout handler on first import; each handler
    # module imports it lazily, so the stream is swapped both now and whenever one appears.
    # Quiet is held at WARNING too: an earlier --verbose run in the same process leaves the
    # service logger wherever Powertools last set it.
    level = logging.INFO if verbose or log_file is not None else logging.WARNING
    try:
        with _StreamSwap(service, target, level):
            yield
    finally:
        if log_file is not None:
            target.close()
        elif not verbose and kept.getvalue():
            sys.stderr.write(kept.getvalue())
            sys.stderr.flush()


class _StreamSwap:
    """Points every stream handler of `logger` at `target` while active, including handlers
    added while it is active (Powertools adds its handler when the first handler module loads),
    and holds the logger at `level` (Powertools sets its level just before adding the handler)."""

    def __init__(self, logger: logging.Logger, target: TextIO, level: int | None = None):
        self.logger, self.target, self.level = logger, target, level
        self.swapped: dict[logging.StreamHandler, Any] = {}
        self.original_level = logger.level

    def __enter__(self) -> _StreamSwap:
        self._swap()
        self._original_add = self.logger.addHandler
        swap = self

        def add_handler(handler: logging.Handler) -> None:
            swap._original_add(handler)
            swap._swap()

        self.logger.addHandler = add_handler  # type: ignore[method-assign]
        return self

    def _swap(self) -> None:
        if self.level is not None:
            self.logger.setLevel(self.level)
        for handler in self.logger.handlers:
            if isinstance(handler, logging.StreamHandler) and handler not in self.swapped:
                self.swapped[handler] = _set_stream(handler, self.target)

    def __exit__(self, *exc) -> None:
        self.logger.addHandler = self._original_add  # type: ignore[method-assign]
        for handler, stream in self.swapped.items():
            _set_stream(handler, stream)
        if self.level is not None:
            self.logger.setLevel(self.original_level)


def _set_stream(handler: logging.StreamHandler, stream: TextIO) -> TextIO:
    """StreamHandler.setStream without its flush of the old stream, which may be closed already
    (the handler was made at import time, with whatever stdout was then)."""
    with handler.lock:  # type: ignore[union-attr]
        old, handler.stream = handler.stream, stream
    return old
