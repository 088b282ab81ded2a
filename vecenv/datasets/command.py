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

#: What ``cli`` says when Ctrl+C ends the command before the collection began (nothing
#: written), and its exit status (128 + SIGINT); ``cli`` is not imported here to say it.
_INTERRUPTED_AT_START = "vecenv-collect: interrupted while starting the environments: nothing was written"
_INTERRUPTED_STATUS = 130


def main(argv: Sequence[str] | None = None) -> int:
    """The ``vecenv-collect`` command (see ``--help`` and :func:`vecenv.datasets.cli.main`);
    returns the exit status."""
    try:
        from vecenv.datasets import cli
    except KeyboardInterrupt:
        print(_INTERRUPTED_AT_START, file=sys.stderr)
        return _INTERRUPTED_STATUS
    return cli.main(argv)
