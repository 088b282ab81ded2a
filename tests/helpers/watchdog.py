"""The session's last line of defence against a test that never returns.

pytest-timeout's default method raises in the main thread from a ``SIGALRM`` handler, and Python
runs signal handlers only between bytecodes: a test stuck inside C code (a native library waiting
on a socket with the GIL released, say) is never interrupted, and the whole session would hang
until the CI's own limit kills it, with nothing said about which test it was.

:class:`Watchdog` is a daemon thread armed around each test (setup, call and teardown) with the
test's timeout plus a grace period. If the test is still running when that expires, it prints the
test's id and every thread's stack, kills this process's descendants (workers, Ray's processes)
so that nothing is left running, and ends the session with exit status 3. The rest of the session
is lost, but the run ends, says why, and the CI goes on to its next step.

The watchdog runs in a thread that ``threading`` does not list (see :meth:`Watchdog.__init__`).
"""

from __future__ import annotations

import _thread
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from vecenv.bench import procfs

#: Seconds past a test's own timeout before the watchdog ends the session: enough for
#: pytest-timeout to fail the test and for its teardown to run. ``VECENV_TEST_WATCHDOG_GRACE_S``
#: overrides it (the watchdog's own test sets a short one).
GRACE_S = float(os.environ.get("VECENV_TEST_WATCHDOG_GRACE_S", "60"))
#: What the watchdog's exit status says.
EXIT_STATUS = 3


class Watchdog:
    """Ends the session when one test overruns its timeout by more than :data:`GRACE_S`."""

    def __init__(self, release_terminal: Callable[[], None] = lambda: None) -> None:
        """``release_terminal``: called before the report, to give the real stderr back (pytest
        captures descriptor 2 while a test runs)."""
        self._release_terminal = release_terminal
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._test: str | None = None
        self._deadline = 0.0
        self._limit = 0.0
        # A low-level thread, which `threading` does not list: a Python thread would count in
        # threading.active_count(), and vecenv chooses forkserver over fork in a threaded parent,
        # so its mere presence would change the start method of every test that takes the default.
        _thread.start_new_thread(self._watch, ())

    def arm(self, test: str, timeout_s: float) -> None:
        """Watch ``test`` from now on, with ``timeout_s`` (its own timeout) plus the grace."""
        with self._lock:
            self._test = test
            self._limit = timeout_s + GRACE_S
            self._deadline = time.monotonic() + self._limit
            self._wake.notify()

    def disarm(self) -> None:
        """The test returned: stop watching it."""
        with self._lock:
            self._test = None
            self._wake.notify()

    def _watch(self) -> None:
        with self._lock:
            while True:
                if self._test is None:
                    self._wake.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                self._expire(self._test, self._limit)

    def _expire(self, test: str, limit: float) -> None:
        try:
            self._release_terminal()
        except Exception:  # the report matters more than a clean release
            pass
        err = sys.__stderr__
        fd = err.fileno() if err is not None else 2
        message = (
            f"\n[watchdog] {test} still running {limit:.0f} s after it started (its timeout plus "
            f"{GRACE_S:.0f} s): the session ends here. Every thread's stack:\n"
        )
        os.write(fd, message.encode())
        faulthandler.dump_traceback(file=fd, all_threads=True)
        below = procfs.descendants(os.getpid())
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os.write(fd, f"[watchdog] killed {len(below)} descendant processes; exit status {EXIT_STATUS}\n".encode())
        os._exit(EXIT_STATUS)
