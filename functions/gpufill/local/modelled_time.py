"""The engine's modelled time: Wait states, handlers' backoff and advance() move it instead of
sleeping, and what the scenario or a test scheduled at a modelled second happens when it is reached."""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Callable

from gpufill.adapters import clock

_SEQUENCE = itertools.count()


class ModelledTime:
    """The engine's part that keeps modelled time (a part of LocalEngine)."""

    def __init__(self) -> None:
        super().__init__()
        # Modelled time: what the fast-forwarded Wait states and advance() have added, and what
        # the scenario or a test scheduled to happen at a modelled second.
        self._elapsed = 0.0
        self._scheduled: list[tuple[float, int, Callable[[], None]]] = []
        self._clock_lock = threading.RLock()
        self._incoming: list[tuple[float, Callable[[], None]]] = []
        self._incoming_lock = threading.Lock()

    @property
    def elapsed(self) -> float:
        """Modelled seconds since the engine started (Wait states and advance())."""
        return self._elapsed

    def at(self, seconds: float, action: Callable[[], None]) -> None:
        """Do `action` once modelled time reaches `seconds` (at once if it already has)."""
        with self._clock_lock:
            heapq.heappush(self._scheduled, (seconds, next(_SEQUENCE), action))
        self.advance(0)

    def at_later(self, seconds: float, action: Callable[[], None]) -> None:
        """As at(), for a caller that may run while another thread holds the clock (a Lambda of an
        execution that an action scheduled at a modelled second runs): noted under a lock of its
        own, taken into the schedule by the next advance()."""
        with self._incoming_lock:
            self._incoming.append((seconds, action))

    def advance(self, seconds: float) -> None:
        """Let `seconds` of modelled time pass: the handlers' clock moves, and what was scheduled
        by then happens, in time order, before anything reads the clock again."""
        with self._clock_lock:
            self._elapsed += max(0.0, seconds)
            clock.fast_forward(seconds)
            while True:
                with self._incoming_lock:  # noted meanwhile, by an action or another thread
                    for due, action in self._incoming:
                        heapq.heappush(self._scheduled, (due, next(_SEQUENCE), action))
                    self._incoming.clear()
                if not (self._scheduled and self._scheduled[0][0] <= self._elapsed):
                    break
                _, _, action = heapq.heappop(self._scheduled)
                action()

