"""How the scripts under ``scripts/`` end on Ctrl+C or SIGTERM: one line on stderr, exit status
130 or 143, their workers and child processes ended on the way out, no traceback.

Without this, Ctrl+C printed a traceback from wherever the main loop happened to wait (a pipe
poll, a tensor op), and SIGTERM (its default action) killed the script without a word, before
any ``finally`` could close its vector env. :func:`run_main` turns SIGTERM into an exception
raised where Ctrl+C's would be, so both unwind through the script's ``finally`` blocks (which
close the workers) and end the same way.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["Terminated", "run_main", "INTERRUPTED_STATUS", "TERMINATED_STATUS"]

#: The exit statuses of a script that Ctrl+C (128 + SIGINT) or SIGTERM (128 + SIGTERM) ended,
#: as a shell reports a process killed by that signal.
INTERRUPTED_STATUS = 128 + signal.SIGINT
TERMINATED_STATUS = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl+C's ``KeyboardInterrupt`` would be, so that the script unwinds
    (closing its workers) and ends the same way."""


def _handler_for(main_pid: int) -> Callable[[int, FrameType | None], None]:
    def terminate(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != main_pid:
            # A process forked before it set its own handlers: end as SIGTERM ends it, silently.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated(f"terminated by signal {signum}")

    return terminate


def run_main(prog: str, main: Callable[[], int | None], what: str = "nothing was written", quiet: bool = False) -> int:
    """Run ``main`` (a script's body; it returns its exit status or ``None`` for 0) with SIGTERM
    raised as :class:`Terminated`. On Ctrl+C or SIGTERM print ``PROG: interrupted: WHAT`` (or
    ``terminated``) as one line on stderr and return 130 or 143; else ``main``'s status.

    ``what`` says what the interrupted run left behind (default: nothing was written), since a
    user deciding whether to rerun needs to know. ``quiet``: no line (a script's own child run,
    whose parent says it once for both)."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _handler_for(os.getpid())) if in_main_thread else None
    try:
        status = main()
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        if not quiet:
            print(f"{prog}: {'terminated' if terminated else 'interrupted'}: {what}", file=sys.stderr, flush=True)
        return TERMINATED_STATUS if terminated else INTERRUPTED_STATUS
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0 if status is None else status
