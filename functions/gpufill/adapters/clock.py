"""What time it is for a run.

On AWS this is the wall clock. The local engine fast-forwards Wait states, so it moves this clock
by the seconds a run would have waited: capacity-cache expiry, wait deadlines, scheduled restocks
and instance start-up all see the same modelled time, as they would on AWS after a real wait.
Handlers and adapters read time here, never from `time` or `datetime` directly.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

_offset_seconds = 0.0


def epoch() -> float:
    return time.time() + _offset_seconds


def now() -> datetime:
    return datetime.fromtimestamp(epoch(), UTC)


def iso_now() -> str:
    return now().isoformat(timespec="seconds")


def pause(seconds: float) -> None:
    """Wait `seconds` inside a handler (a short backoff). The local engine lets the modelled
    time pass instead of sleeping."""
    _sleep(seconds)


_sleep = time.sleep


def fast_forward(seconds: float) -> None:
    """The local engine's: a Wait state of `seconds` has passed without sleeping."""
    global _offset_seconds
    _offset_seconds += max(0.0, seconds)


def reset() -> None:
    global _offset_seconds
    _offset_seconds = 0.0
