"""The ``vecenv-collect`` command's entry point (also ``python -m vecenv.datasets`` and
``scripts/collect_rollouts.py``), which imports nothing heavy itself.

The command's modules (NumPy, Gymnasium and its env registry, the collection) take a second
or more to import, before ``cli.main`` sets its signal handlers: Ctrl+C then ends the command
as Ctrl+C during the rest of start-up does (one line, exit status 130, nothing written), not
with a traceback from the middle of an import.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: What the command says when Ctrl+C ends it before the collection began (nothing written),
#: here while the modules import and in ``cli`` during the rest of start-up, and its exit
#: status (128 + SIGINT).
INTERRUPTED_AT_START = "vecenv-collect: interrupted while starting the environments: nothing was written"
INTERRUPTED_STATUS = 130


def main(argv: Sequence[str] | None = None) -> int:
    """The ``vecenv-collect`` command (see ``--help`` and :func:`vecenv.datasets.cli.main`);
    returns the exit status."""
    try:
        from vecenv.datasets import cli
    except KeyboardInterrupt:
        print(INTERRUPTED_AT_START, file=sys.stderr)
        return INTERRUPTED_STATUS
    return cli.main(argv)
