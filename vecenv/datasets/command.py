"""The ``vecenv-collect`` command's entry point (also ``python -m vecenv.datasets`` and
``scripts/collect_rollouts.py``), which imports nothing heavy itself.

The command's modules (NumPy, Gymnasium and its env registry, the collection) take a second
or more to import, before ``cli.main`` sets its signal handlers: Ctrl+C (or SIGTERM) then ends
the command as during the rest of start-up (one line, exit status 130 or 143, nothing written;
see :mod:`vecenv.datasets.start_up`), not with a traceback from the middle of an import.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence

from vecenv.datasets.start_up import INTERRUPTED_AT_START
from vecenv.interrupts import exit_status, sigterm_raises


def main(argv: Sequence[str] | None = None) -> int:
    """The ``vecenv-collect`` command (see ``--help`` and :func:`vecenv.datasets.cli.main`);
    returns the exit status."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    # Until cli.main sets its handlers (it restores this one when it returns).
    previous = signal.signal(signal.SIGTERM, sigterm_raises()) if in_main_thread else None
    try:
        try:
            from vecenv.datasets import cli
        except KeyboardInterrupt as exc:
            print(INTERRUPTED_AT_START, file=sys.stderr)
            return exit_status(exc)
        return cli.main(argv)
    finally:
        if previous is not None:  # None: not set from Python, or not in the main thread
            signal.signal(signal.SIGTERM, previous)
