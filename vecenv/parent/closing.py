"""Closing a vector env: :class:`Closer`, which the vector env owns and which never refers back.

``close()``, the interpreter's exit and a vector env dropped without ``close()`` all end here.
The closer holds the call runner (the pool and the call state) and the call lock, never the vector env itself: the
exit hook (``multiprocessing.util.Finalize``) holds the closer, so no reference cycle keeps a
dropped vector env (and its workers) alive until the cyclic garbage collector runs.

Bounds: the polite close waits ``timeout`` (default :data:`DEFAULT_CLOSE_TIMEOUT`) for the
workers to close their envs; stragglers are terminated and, :data:`~vecenv.transports.process.KILL_GRACE`
later, killed. A call still running in another thread is given the same grace for the call
lock, then its workers are ended (:mod:`vecenv.parent.call_lock`). ``close()`` inside a call of
its own thread (a signal handler's, while ``step`` waits) closes as asked once that call is over;
with ``terminate=True`` it ends the workers at once, which ends the call.

A process forked from the parent (``os.fork()``) inherits the vector env but not its workers:
there, every call is refused and ``close()`` (and the child's exit) leaves the parent's workers
alone.
"""

from __future__ import annotations

import os
import weakref
from multiprocessing import util
from typing import Any

from gymnasium import logger

from vecenv.parent.call_lock import CallLock
from vecenv.parent.calls import CallRunner
from vecenv.parent.state import State

__all__ = ["Closer", "DEFAULT_CLOSE_TIMEOUT"]

#: Seconds ``close()`` waits for workers to close their envs before terminating them.
DEFAULT_CLOSE_TIMEOUT = 3.0


class Closer:
    """Closes one vector env's pool, once, from ``close()``, the exit hook or ``__del__``.

    Args:
        runner, lock: the vector env's call runner and call lock.
        owner: the vector env; only a weak reference is kept (by the exit hook).
    """

    def __init__(self, runner: CallRunner, lock: CallLock, owner: Any) -> None:
        self.runner = runner
        self.calls = runner.calls
        self.lock = lock
        # Closes the envs at interpreter exit, before multiprocessing joins its children
        # (non-daemon workers of an env never closed would otherwise block the exit), and when
        # the owner is collected.
        self.finalizer = util.Finalize(owner, self.at_exit, exitpriority=100)
        self.pid = os.getpid()
        self.deferred = False  # close() ran inside a call of its thread: it ends with that call
        _OPEN.add(self)

    @property
    def closed(self) -> bool:
        """``close()`` ran, or was called and ends with the call it interrupted."""
        return self.calls.closed or self.deferred

    def forked(self) -> None:
        """In a child forked from the owner's process: the workers are the parent's, not ours."""
        self.lock.renew()
        self.calls.mark_forked(self.pid)
        self.finalizer.cancel()

    def at_exit(self) -> None:
        try:
            self.close(None, terminate=False, warn=False)
        except Exception:  # an env's close() error has no one to reach at exit
            pass

    def close(self, timeout: float | None, terminate: bool, warn: bool, wait_late: bool | None = None) -> None:
        """Close under the call lock; a call running in another thread is given the grace,
        then ended (its workers killed: it raises ``WorkerDiedError`` there). Workers still busy
        with a call that was cut short are given the grace when ``wait_late`` (by default, when
        ``timeout`` is given)."""
        if self.calls.forked_from is not None:  # the parent's workers: nothing of them is ours to close
            return
        grace = 0.0 if terminate else (DEFAULT_CLOSE_TIMEOUT if timeout is None else timeout)
        runner = self.runner
        running = self.lock.running_here()
        if running is not None:
            # A call of this thread runs underneath (a signal handler closes while it waits), and
            # uses what a close releases: the close runs, as asked, once that call is over (the
            # handler's sys.exit() ends it at once); terminate=True ends the workers now, which
            # makes the call raise WorkerDiedError.
            if not self.lock.closing_here() and not self.calls.closed and not self.deferred:
                self.deferred = True
                if terminate:
                    runner.abort(f"was ended by close(terminate=True), called while `{running}` ran in the same thread")
                self.lock.defer(lambda: self._close_deferred(timeout, terminate))
            return
        with self.lock.closing(grace, lambda: runner.abort("was ended by close() from another thread")):
            self._close(grace, wait_late=timeout is not None if wait_late is None else wait_late, warn=warn)

    def _close_deferred(self, timeout: float | None, terminate: bool) -> None:
        """The close a call of this thread held back, now that it is over; the workers still
        finishing that call are closed politely, within the grace. Nobody waits for its result
        any more, so an env's ``close()`` error is a warning."""
        try:
            self.close(timeout, terminate, warn=False, wait_late=True)
        except Exception as exc:
            logger.warn(f"close() (called during another call of its thread) raised {type(exc).__name__}: {exc}")

    def _close(self, grace: float, wait_late: bool, warn: bool) -> None:
        calls = self.calls
        if calls.closed:
            return
        if warn and calls.state in (State.WAITING_RESET, State.WAITING_STEP, State.WAITING_CALL, State.WAITING_ROLLOUT):
            logger.warn(f"Calling `close` while waiting for a pending call to `{calls.waiting.value}` to complete.")
        try:
            error = self.runner.shutdown(grace, wait_late=wait_late)
        finally:
            calls.mark_closed()
            self.finalizer.cancel()
            _OPEN.discard(self)
        if error is not None:
            raise error


#: Every closer whose vector env is open, for the fork hook below.
_OPEN: weakref.WeakSet[Closer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for closer in list(_OPEN):
        closer.forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
