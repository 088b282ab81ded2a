"""The ``vecenv-collect`` command's entry point (also ``python -m vecenv.datasets`` and
``scripts/collect_rollouts.py``), which imports nothing heavy itself.

The command's modules (NumPy, Gymnasium and its env registry, the collection) take a second
or more to import, before ``cli.main`` sets its signal handlers: Ctrl+C (or SIGTERM) then ends
the command as during the rest of start-up (one line, exit status 130 or 143, nothing written;
see :mod:`vecenv.datasets.start_up`), not with a traceback from the middle of an import. Also
when the import turns the signal's exception into one of its own: a C extension whose
initialisation it interrupts fails with an ``ImportError`` (NumPy's "PyCapsule_Import could not
import module"), or the exception is lost (Python ignores one raised in some callbacks): the
handlers set here record each signal before they raise for it, and an import during which one
came ends the command as the signal would have.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from vecenv.datasets.start_up import INTERRUPTED_AT_START
from vecenv.interrupts import INTERRUPTED_STATUS, TERMINATED_STATUS, exit_status, sigterm_raises


def _recording(handler: Callable[[int, FrameType | None], Any], received: list[int]) -> Any:
    """``handler``, which first appends the signal to ``received``."""

    def record(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        handler(signum, frame)

    return record


def main(argv: Sequence[str] | None = None) -> int:
    """The ``vecenv-collect`` command (see ``--help`` and :func:`vecenv.datasets.cli.main`);
    returns the exit status."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    received: list[int] = []  # the signals whose handler raised while the modules imported
    # Until cli.main sets its handlers (it restores these when it returns). Ctrl+C keeps Python's
    # handler (KeyboardInterrupt), recorded; one ignored (SIG_IGN, a background job) stays so.
    previous: dict[int, Any] = {}
    if in_main_thread:
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, _recording(sigterm_raises(), received))
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, _recording(signal.default_int_handler, received))
    try:
        try:
            from vecenv.datasets import cli
        except KeyboardInterrupt as exc:
            print(INTERRUPTED_AT_START, file=sys.stderr)
            return exit_status(exc)
        except Exception:
            if not received:
                raise
        if received:
            # The signal's exception, turned into the import's own error on its way out, or lost
            # (Python ignores one raised in some callbacks, as an import lock's): still the signal.
            print(INTERRUPTED_AT_START, file=sys.stderr)
            return TERMINATED_STATUS if received[-1] == signal.SIGTERM else INTERRUPTED_STATUS
        return cli.main(argv)
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: not set from Python
                signal.signal(signum, handler)
