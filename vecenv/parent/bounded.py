"""A call the parent makes without waiting forever on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from vecenv.errors import VecEnvTimeoutError

__all__ = ["bounded_call"]

#: A thread whose call returned only has to exit; it is waited for this long at most.
_JOIN_S = 1.0
#: How often a wait with a ``stop`` asks it whether to give up.
_STOP_POLL_S = 0.05


def bounded_call(
    function: Callable[[], Any],
    timeout: float,
    message: str,
    name: str,
    stop: Callable[[], BaseException | None] | None = None,
) -> Any:
    """``function()`` run in a daemon thread named ``name``, waited for at most ``timeout``
    seconds: its result, or its exception raised here; ``VecEnvTimeoutError(message)`` when it
    has not returned by then (the thread is left to finish, or not, on its own). For calls that
    have no deadline of their own and may never return: user code (a policy's probe), or a
    library's native call (Ray's ``cluster_resources`` on a stalled connection).

    A call that returned is joined: its thread is gone when this returns, so a worker forked
    right after (a restart) is not forked from a process that has another thread (which Python
    3.12+ warns about, and which a child may deadlock on).

    ``stop``, asked every few tens of milliseconds while waiting: an exception to raise now
    instead of waiting on (the vector env was closed from another thread), or ``None``."""
    done = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, function()))
        except BaseException as exc:  # handed to the waiting thread
            outcome.append((False, exc))
        finally:
            done.set()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if not _wait(done, timeout, stop):
        raise VecEnvTimeoutError(message)
    thread.join(_JOIN_S)
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _wait(done: threading.Event, timeout: float, stop: Callable[[], BaseException | None] | None) -> bool:
    """Whether ``done`` was set within ``timeout``; raises what ``stop`` gives meanwhile."""
    if stop is None:
        return done.wait(timeout)
    deadline = time.monotonic() + timeout
    while not done.wait(min(_STOP_POLL_S, max(0.0, deadline - time.monotonic()))):
        error = stop()
        if error is not None:
            raise error
        if time.monotonic() >= deadline:
            return False
    return True
