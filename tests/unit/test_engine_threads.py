"""Leaving a LocalEngine joins every thread it started, even one registered a moment before it starts."""

import threading
import time

import pytest

from gpufill.local.executions import join_all


def test_a_thread_not_yet_started_is_joined_once_it_has_run():
    ran = threading.Event()
    late = threading.Thread(target=lambda: (time.sleep(0.01), ran.set()))
    # The state threading.enumerate() can show: a thread whose start() has not yet taken effect.
    with pytest.raises(RuntimeError, match="cannot join thread before it is started"):
        late.join(timeout=0)
    starter = threading.Timer(0.05, late.start)
    starter.start()
    join_all([late], timeout=5)
    assert ran.is_set() and not late.is_alive()
    starter.join()


def test_a_thread_that_never_starts_is_given_up_on_after_the_timeout():
    never = threading.Thread(target=lambda: None)
    began = time.monotonic()
    join_all([never], timeout=0.05)
    assert 0.05 <= time.monotonic() - began < 1


def test_the_calling_thread_is_not_joined():
    join_all([threading.current_thread()], timeout=5)  # would raise "cannot join current thread"
