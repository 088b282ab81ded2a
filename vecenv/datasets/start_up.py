"""How ``vecenv-collect`` ends when Ctrl+C or SIGTERM comes during its start-up, before the
collection began: one line, nothing written, exit status 130 or 143. Shared by the light entry
point (:mod:`vecenv.datasets.command`, while the modules import) and :mod:`vecenv.datasets.cli`
(the rest of start-up); it imports nothing heavy.
"""

from __future__ import annotations

import signal
from types import FrameType

__all__ = [
    "INTERRUPTED_AT_START",
    "INTERRUPTED_STATUS",
    "TERMINATED_STATUS",
    "TerminatedAtStart",
    "terminate_at_start",
    "interrupted_status",
]

#: What the command says when Ctrl+C or SIGTERM ends it before the collection began (nothing
#: written), here while the modules import and in ``cli`` during the rest of start-up, and its
#: exit status (128 + SIGINT, 128 + SIGTERM).
INTERRUPTED_AT_START = "vecenv-collect: interrupted while starting the environments: nothing was written"
INTERRUPTED_STATUS = 130
TERMINATED_STATUS = 128 + signal.SIGTERM


class TerminatedAtStart(KeyboardInterrupt):
    """SIGTERM before ``cli.main`` sets its own handlers: ends the command as Ctrl+C then does,
    rather than killing it without a word (SIGTERM's default)."""


def terminate_at_start(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler for the start-up: raises :class:`TerminatedAtStart`."""
    raise TerminatedAtStart(f"terminated by signal {signum}")


def interrupted_status(exc: KeyboardInterrupt) -> int:
    """The exit status of a command that Ctrl+C (130) or SIGTERM (143) ended during start-up."""
    return TERMINATED_STATUS if isinstance(exc, TerminatedAtStart) else INTERRUPTED_STATUS
