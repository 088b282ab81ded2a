"""The ``vecenv-collect`` command's entry point (also ``python -m vecenv.datasets`` and
``scripts/collect_rollouts.py``), which imports nothing heavy itself.

The command's modules (NumPy, Gymnasium and its env registry, the collection) take a second
or more to import, before ``cli.main`` sets its signal handlers: Ctrl+C then ends the command
as Ctrl+C during the rest of start-up does (one line, exit status 130, nothing written), not
with a traceback from the middle of an import.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

#: What the command says when Ctrl+C or SIGTERM ends it before the collection began (nothing
#: written), here while the modules import and in ``cli`` during the rest of start-up, and its
#: exit status (128 + SIGINT, 128 + SIGTERM).
INTERRUPTED_AT_START = "vecenv-collect: interrupted while starting the environments: nothing was written"
INTERRUPTED_STATUS = 130
TERMINATED_STATUS = 128 + signal.SIGTERM


class TerminatedAtStart(KeyboardInterrupt):
    """SIGTERM before ``cli.main`` sets its own handlers: ends the command as Ctrl+C then does,
    rather than killing it without a word (SIGTERM's default)."""


def _terminate_at_start(signum: int, frame: FrameType | None) -> None:
    raise TerminatedAtStart(f"terminated by signal {signum}")


def interrupted_status(exc: KeyboardInterrupt) -> int:
    """The exit status of a command that Ctrl+C (130) or SIGTERM (143) ended during start-up."""
    return TERMINATED_STATUS if isinstance(exc, TerminatedAtStart) else INTERRUPTED_STATUS


def main(argv: Sequence[str] | None = None) -> int:
    """The ``vecenv-collect`` command (see ``--help`` and :func:`vecenv.datasets.cli.main`);
    returns the exit status."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    # Until cli.main sets its handlers (it restores this one when it returns).
    previous = signal.signal(signal.SIGTERM, _terminate_at_start) if in_main_thread else None
    try:
        try:
            from vecenv.datasets import cli
        except KeyboardInterrupt as exc:
            print(INTERRUPTED_AT_START, file=sys.stderr)
            return interrupted_status(exc)
        return cli.main(argv)
    finally:
        if previous is not None:  # None: not set from Python, or not in the main thread
            signal.signal(signal.SIGTERM, previous)
