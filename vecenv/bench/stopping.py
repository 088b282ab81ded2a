"""How the scripts under ``scripts/`` end on Ctrl+C or SIGTERM: one line on stderr, exit status
130 or 143, their workers and child processes ended on the way out, no traceback.

Without this, Ctrl+C printed a traceback from wherever the main loop happened to wait (a pipe
poll, a tensor op), and SIGTERM (its default action) killed the script without a word, before
any ``finally`` could close its vector env. :func:`run_main` raises SIGTERM as
:class:`~vecenv.interrupts.Terminated` where Ctrl+C's exception would be, so both unwind through
the script's ``finally`` blocks (which close the workers) and end the same way, as
``vecenv-bench`` and ``vecenv-collect`` do.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable

from vecenv.interrupts import Terminated, exit_status, sigterm_raises

__all__ = ["run_main"]


def run_main(prog: str, main: Callable[[], int | None], what: str = "nothing was written", quiet: bool = False) -> int:
    """Run ``main`` (a script's body; it returns its exit status or ``None`` for 0) with SIGTERM
    raised as :class:`~vecenv.interrupts.Terminated`. On Ctrl+C or SIGTERM print
    ``PROG: interrupted: WHAT`` (or ``terminated``) as one line on stderr and return 130 or
    143; else ``main``'s status.

    ``what`` says what the interrupted run left behind (default: nothing was written), since a
    user deciding whether to rerun needs to know. ``quiet``: no line (a script's own child run,
    whose parent says it once for both)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, sigterm_raises()) if in_main_thread else None
    try:
        status = main()
    except KeyboardInterrupt as exc:
        if not quiet:
            ended = "terminated" if isinstance(exc, Terminated) else "interrupted"
            print(f"{prog}: {ended}: {what}", file=sys.stderr, flush=True)
        return exit_status(exc)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0 if status is None else status
