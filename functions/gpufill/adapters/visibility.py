"""EC2 is eventually consistent: what gpufill has just created (the launch template, its new
version, a cluster placement group, the instance security group) may be unknown for a moment to
the next call that names it, which EC2 answers with that resource's NotFound code.

`until_visible` sends the same call again (the same parameters, so the same ClientToken: a call
EC2 refused launched nothing and spent no token) after short, growing pauses, as AWS advises,
and stops early when the function's time left would not cover the next pause. Only after that
bound is the refusal an answer, and its message says how long EC2 was waited for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from gpufill.adapters import clock
from gpufill.policy.errors import not_visible_yet

# Seconds between tries: five tries over 7.5 s at most.
PAUSES = (0.5, 1.0, 2.0, 4.0)
T = TypeVar("T")
logger = Logger(child=True)
# Seconds the running handler may still spend waiting (its time left less what it keeps back).
_time_left: ContextVar[Callable[[], float] | None] = ContextVar("gpufill_time_left", default=None)


@contextmanager
def time_left(seconds: Callable[[], float]) -> Iterator[None]:
    """Pauses inside stop when `seconds()` would not cover them (the Lambda time-left guard)."""
    token = _time_left.set(seconds)
    try:
        yield
    finally:
        _time_left.reset(token)


def seconds_left() -> float | None:
    """What the running handler may still spend waiting, None outside a handler's guard."""
    left = _time_left.get()
    return left() if left is not None else None


def until_visible(call: Callable[[], T], what: str, *, also: frozenset[str] = frozenset()) -> T:
    """`also`: more codes that mean "not visible yet" for this call (a lookup's own NotFound)."""
    waited = 0.0
    for tries, pause in enumerate((*PAUSES, None), start=1):
        try:
            return call()
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            if not (not_visible_yet(code) or code in also):
                raise
            left = _time_left.get()
            if pause is None or (left is not None and left() < pause):
                _note_bound(error, what, tries, waited)
                raise
            logger.info("not visible yet, asking again", extra={"call": what, "code": code, "pause": pause})
            clock.pause(pause)
            waited += pause
    raise AssertionError("unreachable")


def _note_bound(error: ClientError, what: str, tries: int, waited: float) -> None:
    """The refusal, saying it outlasted EC2's usual delay, so the run's log explains itself."""
    answer = error.response.setdefault("Error", {})
    answer["Message"] = (
        f"{answer.get('Message', '')} ({what}: still unknown after {tries} tries over {waited:g} s; "
        "EC2 shows a resource created a moment ago within seconds, so it may have been deleted)"
    ).strip()
