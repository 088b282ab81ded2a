"""One call at a time on a vector env, whatever the number of threads that share it.

A vector env's state (the call in flight, which worker owes what, the shared rows) belongs to one
call at a time. Every public method of :class:`~vecenv.parent.vector_env.GroupVectorEnv` runs
under its :class:`CallLock` (the :func:`serialised` decorator), so two threads stepping the same
vector env take turns: each ``step`` is whole, and the results are exactly those of one thread's
calls after the other's. The lock is reentrant (``step`` is ``step_async`` then ``step_wait``)
and held only while a call runs, never between ``step_async`` and ``step_wait``: those are two
calls, and their order is checked as Gymnasium's ``AsyncVectorEnv`` checks it.

``close()`` from another thread must not wait forever behind a call stuck on a hung env: it waits
its grace for the lock (:meth:`CallLock.closing`), then ends the worker processes, which makes the
stuck call raise ``WorkerDiedError`` in its own thread and let go.

``close()`` in the thread of a call that is running (a signal handler that closes the vector env
while ``step`` waits) cannot release what that call is using: the close is :meth:`CallLock.defer`-red
until the call is over (``terminate=True`` also ends the workers at once, as from another thread).
Any other call made there (a signal handler's ``get_attr`` while ``step`` waits, or env code
the parent hosts calling its own vector env) would run in the middle of the running one, with the
pool half-way through that call's sends or replies: it raises ``AlreadyPendingCallError`` naming
both calls, and the running call goes on. The calls a vector env's method makes on purpose
(``reset`` is ``reset_async`` then ``reset_wait``) are told apart by their caller: the running
method itself, an override of the called method that it called, or another method of the same
vector env (a subclass's).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, Protocol, TypeVar

from vecenv.errors import AlreadyPendingCallError, CallInFlightError

__all__ = ["CallLock", "serialised", "END_WAIT"]

#: After ``close()`` from another thread ended the workers, seconds it waits for the call in
#: flight to notice and let go (a call stuck in the parent-hosted group's env code cannot).
END_WAIT = 5.0

F = TypeVar("F", bound=Callable[..., Any])

#: The running method's code while :meth:`CallLock.taken_if_free` holds the lock: the block runs
#: calls on purpose from wherever its owner makes them.
_ANY_CALLER = object()


class CallLock:
    """A reentrant lock that knows which call holds it, and from which thread."""

    __slots__ = ("_lock", "_call", "_thread", "_deferred", "_closing", "_code")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._call: str | None = None  # the outermost call running, while one runs (for messages)
        self._thread: int | None = None  # its thread's ident
        # The code of the innermost method running under the lock, whose own calls of this
        # thread's vector env run as parts of it (None: no method's, as in close()).
        self._code: object = None
        self._deferred: Callable[[], None] | None = None  # runs when the outermost call ends
        self._closing = False  # the outermost call is a close (:meth:`closing`, or one said so)

    def running_here(self) -> str | None:
        """The call this thread is running underneath the caller (``None``: none)."""
        return self._call if self._thread == threading.get_ident() else None

    def closing_here(self) -> bool:
        """Whether the call this thread is running underneath the caller is a close (a
        ``close()`` reached again from inside it has nothing left to do)."""
        return self._closing and self._thread == threading.get_ident()

    def defer(self, action: Callable[[], None]) -> None:
        """Run ``action`` when the call running in this thread ends (its errors are dropped)."""
        self._deferred = action

    def renew(self) -> None:
        """In a forked child: a fresh lock (the parent's threads that held it do not exist here)."""
        self._lock = threading.RLock()
        self._call = self._thread = self._deferred = self._code = None
        self._closing = False

    def _ended(self) -> None:
        """The outermost call is over: run what was deferred to its end."""
        self._call = self._thread = self._code = None
        self._closing = False
        action, self._deferred = self._deferred, None
        if action is not None:
            with contextlib.suppress(Exception):
                action()

    def holder(self) -> str:
        """The call that holds the lock, for messages ("`step` (thread 'Thread-1')")."""
        call, ident = self._call, self._thread
        if call is None:
            return "a call"
        names = {t.ident: t.name for t in threading.enumerate()}
        return f"`{call}` (thread {names.get(ident, ident)!r})"

    @contextlib.contextmanager
    def taken_if_free(self, call: str, *, closing: bool = False) -> Iterator[bool]:
        """Hold the lock for ``call`` if no call holds it now, in any thread (never waiting):
        yields whether it was taken. Calls of this thread in the block run as nested ones. For
        work that must not queue behind a call that may never end (a close's last collection:
        ``closing``, so that a ``close()`` in the block is taken as reached from inside a close)."""
        if self._thread == threading.get_ident() or not self._lock.acquire(blocking=False):
            yield False
            return
        try:
            self._call, self._thread, self._closing = call, threading.get_ident(), closing
            self._code = _ANY_CALLER
            yield True
        finally:
            if self._deferred is None:
                self._call = self._thread = self._code = None
                self._closing = False
            else:
                self._ended()
            self._lock.release()

    @contextlib.contextmanager
    def closing(self, grace: float, end_call: Callable[[], None]) -> Iterator[None]:
        """Hold the lock for ``close()``: wait ``grace`` seconds for a call in flight in another
        thread, then ``end_call()`` (end the workers) and wait up to :data:`END_WAIT` more."""
        acquired = self._lock.acquire(timeout=grace) if grace > 0 else self._lock.acquire(blocking=False)
        if not acquired:
            holder = self.holder()
            end_call()
            if not self._lock.acquire(timeout=END_WAIT):
                raise CallInFlightError(
                    f"`close` cannot run: {holder} still runs {END_WAIT:g} s after close() stopped waiting for "
                    "it, stuck in env code that this process hosts (close() ends worker processes, never the "
                    "envs of this process); call close() again once it returns"
                )
        try:
            outer = self._call is None
            if outer:
                self._call, self._thread, self._closing = "close", threading.get_ident(), True
                self._code = None
            try:
                yield
            finally:
                if outer:
                    self._call = self._thread = self._code = None
                    self._closing = False
        finally:
            self._lock.release()


class _Serialised(Protocol):
    call_lock: CallLock


def serialised(method: F) -> F:
    """Run a vector env's public method under its ``call_lock``, one call at a time.

    Inside a call of the same thread, the method runs as a part of it when that call's method
    made it on purpose; made from anywhere else (a signal handler, env code the parent hosts),
    it raises ``AlreadyPendingCallError`` before doing anything (see the module docstring)."""
    name = method.__name__
    code = method.__code__

    @functools.wraps(method)
    def run(self: _Serialised, *args: Any, **kwargs: Any) -> Any:
        # The lock's protocol written inline (no helper call): this wraps every step, where one
        # frame more shows.
        lock = self.call_lock
        ident = threading.get_ident()
        if lock._thread == ident:  # nested in a call of this thread: it holds the lock
            running = lock._code
            if running is not _ANY_CALLER and not _made_by(sys._getframe(1), running, name, self):
                raise _reentered(name, lock._call)
            lock._code = code
            try:
                return method(self, *args, **kwargs)
            finally:
                lock._code = running
        with lock._lock:
            lock._call, lock._thread, lock._code = name, ident, code
            try:
                return method(self, *args, **kwargs)
            finally:
                if lock._deferred is None:
                    lock._call = lock._thread = lock._code = None
                else:
                    lock._ended()

    return run  # type: ignore[return-value]


def _made_by(caller: FrameType, running: object, name: str, owner: object) -> bool:
    """Whether the frame ``caller`` calls ``name`` as a part of the method running under the
    lock (whose code is ``running``): it is that method, an override of ``name`` that the
    method called (a subclass's ``reset_async`` that calls ``super().reset_async()``), or another
    method of the same vector env ``owner`` (a subclass's ``step_wait`` that reads an attribute
    with ``self.get_attr``). A signal handler or env code is none of these."""
    if caller.f_code is running:
        return True
    outer = caller.f_back
    if caller.f_code.co_name == name and outer is not None and outer.f_code is running:
        return True
    return caller.f_locals.get("self") is owner  # (the rare paths only: it copies the frame's locals)


def _reentered(call: str, running: str | None) -> AlreadyPendingCallError:
    """The error of ``call`` made inside the call ``running`` of the same thread, not by it."""
    return AlreadyPendingCallError(
        f"Calling `{call}` while `{running}` runs in this same thread (called from a signal handler, or "
        f"from env code this process hosts, in the middle of `{running}`): it cannot wait for `{running}`, "
        f"which goes on. Make the call once `{running}` has returned (a signal handler may set a flag "
        "for the main loop; close() there is run when the call is over)",
        str(running),
    )
