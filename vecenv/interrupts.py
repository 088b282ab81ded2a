"""Ctrl+C and SIGTERM: held back over a few lines that must not be cut (a message read from or
written to a worker's pipe, :mod:`vecenv.transports.sending`; a shared block or descriptor between
its making and its recording by its owner, who closes it: an interrupt in between would leak it),
and how the commands (``vecenv-collect``, ``vecenv-bench``, the scripts) end on either: SIGTERM
raised as :class:`Terminated` where Ctrl+C's ``KeyboardInterrupt`` would be, so both unwind
through the command's ``finally`` blocks, and the exit status a shell gives a process that
signal killed.
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["HeldInterrupt", "Terminated", "sigterm_raises", "exit_status", "INTERRUPTED_STATUS", "TERMINATED_STATUS"]

#: The exit statuses of a command that Ctrl+C (128 + SIGINT) or SIGTERM (128 + SIGTERM) ended,
#: as a shell reports a process killed by that signal.
INTERRUPTED_STATUS = 128 + signal.SIGINT
TERMINATED_STATUS = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl+C's ``KeyboardInterrupt`` would be: the command unwinds
    (closing its workers, finishing what it writes) and ends as after Ctrl+C, rather than being
    killed without a word (SIGTERM's default action)."""


def sigterm_raises(main_pid: int | None = None) -> Callable[[int, FrameType | None], None]:
    """A SIGTERM handler that raises :class:`Terminated` in the process ``main_pid`` (default:
    this one). A process forked before it set handlers of its own ends as SIGTERM ends it, in
    silence: the command's main process speaks for it."""
    owner = os.getpid() if main_pid is None else main_pid

    def terminate(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated(f"terminated by signal {signum}")

    return terminate


def exit_status(exc: KeyboardInterrupt) -> int:
    """The exit status of a command that ``exc`` ended: 143 after SIGTERM, 130 after Ctrl+C."""
    return TERMINATED_STATUS if isinstance(exc, Terminated) else INTERRUPTED_STATUS


# The C functions under signal.getsignal and signal.signal, for HeldInterrupt on every pipe
# read and write: the public ones look each handler up in an enum, which fails through an
# exception for a function (2 to 5 us a call here, against 0.3 us).
_c_signal: Any = importlib.import_module("_signal")
_getsignal, _setsignal = _c_signal.getsignal, _c_signal.signal
_SIGINT, _SIGTERM = int(signal.SIGINT), int(signal.SIGTERM)


class HeldInterrupt:
    """Ctrl+C and SIGTERM held back while a message is read from, or written to, a worker's
    pipe, or while a shared block is made and recorded by its owner.

    A ``KeyboardInterrupt`` (or the commands' :class:`Terminated`, raised by their SIGTERM
    handler) raised inside ``recv_bytes`` may cut a message in two (the next read would take its
    tail for a header) or drop one read whole (its worker would never be asked again); one
    raised just after a write returned hides how much of the message went. Either way the worker
    would have to be ended. Within this block the first SIGINT or SIGTERM is only recorded, and
    the handler it was meant for runs on leaving the block, once what was read is kept and what
    was written is recorded. Each block is one read of messages already arriving, or one write
    (which returns within :data:`~vecenv.transports.sending.SEND_SLICE`), or the making of one
    block, so the wait is short. A second signal of either kind is not held (a read may be
    waiting on a stopped worker): its handler runs at once and cuts the read or write, which
    ends that worker. Only the main thread handles signals, so elsewhere this does nothing; nor
    for a signal that has no Python handler (SIGTERM's default action kills the process at
    once, as it would anywhere else)."""

    __slots__ = ("_on_int", "_on_term", "_held", "_frame", "_every")

    def __init__(self, every: bool = False) -> None:
        """``every``: hold every signal, the second too, until the block ends (for what must
        not be cut short whatever the user does, and ends by itself: the writing of a
        dataset's last metadata once the run was interrupted); the last one held then runs."""
        self._on_int: Callable[[int, FrameType | None], Any] | None = None
        self._on_term: Callable[[int, FrameType | None], Any] | None = None
        self._held = 0  # the signal held back, 0 for none
        self._frame: FrameType | None = None
        self._every = every

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        if self._held and not self._every:  # a second one: its handler runs now
            handler = self._on_int if signum == _SIGINT else self._on_term
            if handler is not None:
                handler(signum, frame)
            return
        self._held, self._frame = signum, frame

    def __enter__(self) -> HeldInterrupt:
        if threading.get_ident() == threading.main_thread().ident:
            # Each handler is kept before its swap: a signal just after it runs _hold, and its
            # handler is run on exit.
            on_int = _getsignal(_SIGINT)
            if callable(on_int):
                self._on_int = on_int
                _setsignal(_SIGINT, self._hold)
            on_term = _getsignal(_SIGTERM)
            if callable(on_term):
                self._on_term = on_term
                _setsignal(_SIGTERM, self._hold)
        return self

    def __exit__(self, *exc_info: object) -> None:
        on_int, on_term = self._on_int, self._on_term
        if on_int is None and on_term is None:
            return
        self._on_int = self._on_term = None
        if on_int is not None:
            _setsignal(_SIGINT, on_int)
        if on_term is not None:
            _setsignal(_SIGTERM, on_term)
        held = self._held
        if held and not isinstance(exc_info[1], KeyboardInterrupt):  # not raised already
            handler = on_int if held == _SIGINT else on_term
            if handler is not None:
                handler(held, self._frame)
