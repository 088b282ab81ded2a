"""How ``vecenv-collect`` ends when Ctrl+C or SIGTERM comes during its start-up, before the
collection began: one line, nothing written, exit status 130 or 143
(:func:`vecenv.interrupts.exit_status`). Shared by the light entry point
(:mod:`vecenv.datasets.command`, while the modules import) and :mod:`vecenv.datasets.cli` (the
rest of start-up); it imports nothing heavy.
"""

from __future__ import annotations

__all__ = ["INTERRUPTED_AT_START"]

#: What the command says when Ctrl+C or SIGTERM ends it before the collection began (nothing
#: written), here while the modules import and in ``cli`` during the rest of start-up.
INTERRUPTED_AT_START = "vecenv-collect: interrupted while starting the environments: nothing was written"
