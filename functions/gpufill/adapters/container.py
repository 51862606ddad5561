"""What a Lambda execution environment keeps between invocations: each function's own caches.

On Lambda every function runs in execution environments of its own, so what one function
cached (a plan, the regions config, a subnet) is never seen by another, and a new
environment starts with nothing. Every in-memory cache of gpufill is therefore kept per
function, keyed by the name of the function running: on Lambda that name never changes in a
process (AWS_LAMBDA_FUNCTION_NAME), so the key costs nothing there; where several functions
share one process (the local engine runs every handler in-process, some side by side on
threads) each keeps its own, as on AWS, and a call one function's cache would hide from
another is made, counted and judged.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from gpufill.constants import ENV_LAMBDA_FUNCTION_NAME

# The function whose invocation runs on this thread, when the process runs several
# (set around each invocation by whatever runs them); unset on Lambda.
_running: ContextVar[str | None] = ContextVar("gpufill_running_function", default=None)

T = TypeVar("T")
_every_store: list[PerFunction] = []
_registry_lock = threading.Lock()


def function_name() -> str:
    """The function this code runs as ("" outside any: a test, the CLI)."""
    return _running.get() or os.environ.get(ENV_LAMBDA_FUNCTION_NAME, "")


@contextmanager
def running_as(name: str | None) -> Iterator[None]:
    """Code in the block runs as function `name` (None: as no function), with its caches."""
    token = _running.set(name)
    try:
        yield
    finally:
        _running.reset(token)


class PerFunction(Generic[T]):
    """One value per function, made by `make()` the first time that function asks for it."""

    def __init__(self, make: Callable[[], T]):
        self._make = make
        self._values: dict[str, T] = {}
        self._lock = threading.Lock()
        with _registry_lock:
            _every_store.append(self)

    def mine(self) -> T:
        name = function_name()
        with self._lock:
            if name not in self._values:
                self._values[name] = self._make()
            return self._values[name]

    def forget_mine(self) -> None:
        with self._lock:
            self._values.pop(function_name(), None)

    def forget_all(self) -> None:
        with self._lock:
            self._values.clear()


def cached(maxsize: int | None = None) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """functools.lru_cache (unbounded when maxsize is None), one per function. `cache_clear()`
    forgets what the running function cached, as code on Lambda can only forget its own."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        caches: PerFunction[Any] = PerFunction(lambda: functools.lru_cache(maxsize=maxsize)(fn))

        @functools.wraps(fn)
        def call(*args, **kwargs):
            return caches.mine()(*args, **kwargs)

        call.cache_clear = caches.forget_mine  # type: ignore[attr-defined]
        call.per_function = caches  # type: ignore[attr-defined]
        return call

    return wrap


def start_afresh() -> None:
    """Every function's caches forgotten, as new execution environments start with none."""
    with _registry_lock:
        stores = list(_every_store)
    for store in stores:
        store.forget_all()
