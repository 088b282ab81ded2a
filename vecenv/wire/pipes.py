"""What both ends of a worker pipe share: the bounded poll before a blocking wait, and the
registry of the parent's pipe ends that a forked worker must close.

The parent (:mod:`vecenv.transports.process`) and the worker loop (:mod:`vecenv.worker.loop`)
both import this module; neither imports the other.
"""

from __future__ import annotations

import time
import weakref
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["PARENT_ENDS", "SPIN_BACKOFF", "SPIN_SECONDS", "Spin"]

#: Seconds a worker (or the parent) polls for the next message before it sleeps, where it may.
SPIN_SECONDS = 200e-6
#: After a poll that caught nothing, this many waits sleep at once.
SPIN_BACKOFF = 8

#: The parent's ends of every worker pipe this process created. A worker started by ``fork``
#: inherits copies of them (and so would keep other vector envs' pipes open); it closes its
#: copies first thing, holding only what is its own.
PARENT_ENDS: weakref.WeakSet[Connection] = weakref.WeakSet()


class Spin:
    """Polling without sleeping, bounded, before a blocking wait (the workers' and the parent's).

    :meth:`poll` polls for up to ``seconds`` (never past ``limit``); one that catches nothing
    makes the next :data:`SPIN_BACKOFF` calls return at once, so that waits which are long
    anyway (a learner busy between steps) go straight to sleep. ``seconds=0`` never polls.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._skip = 0

    def poll(self, poller: Any, limit: float | None = None) -> list[tuple[int, int]]:
        """What ``poller`` reports ready within the spin (``[]``: sleep on it now)."""
        if not self.seconds or limit == 0:
            return []
        if self._skip:
            self._skip -= 1
            return []
        deadline = time.perf_counter() + (self.seconds if limit is None else min(self.seconds, limit))
        while True:
            ready: list[tuple[int, int]] = poller.poll(0)
            if ready:
                return ready
            if time.perf_counter() >= deadline:
                self._skip = SPIN_BACKOFF
                return []
