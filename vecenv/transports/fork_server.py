"""The fork server that ``forkserver`` workers are started from, kept fit to start them.

Python starts one fork server per process (``multiprocessing.forkserver``) and forks every
``forkserver`` worker from it; it notices a dead server only by ``waitpid``, so a server that
this process can no longer wait for (SIGCHLD ignored, or reaped by another handler) fails every
later start with a bare ``ChildProcessError``, and a server whose ``RLIMIT_NOFILE`` is lower
than this process's now (the limit was raised after the server started: it keeps the one it
started with) dies in the middle of a start once it holds as many descriptors as it may, which
reaches the caller as a bare ``EOFError``. Before each start, :func:`prepare` forgets a server
that has died (the start then runs a new one) and raises a running server's descriptor limit
to this process's; :func:`lost` tells whether a server died during a start, so that the start
is tried once more from a new one; :func:`died` tells whether the server that started a worker
has died since (its workers' exit statuses went with it: multiprocessing reports exit code 255).

This is the one module that reads ``multiprocessing.forkserver``'s internals: it offers no
public way to name its server's process, to tell that it died, or to forget it.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import select
import sys
import threading
from typing import Any

__all__ = ["prepare", "server_pid", "lost", "died", "forget_in_child", "DEATH_GRACE"]

#: How long a fork server that failed a start, or whose worker's status pipe closed, gets to
#: become a process that ``waitpid`` reports ended (it closes its descriptors a moment before).
DEATH_GRACE = 0.5


def _server() -> Any:
    """Python's fork server record, or ``None`` where ``multiprocessing.forkserver`` was never
    imported (no forkserver process started, nothing to check)."""
    module = sys.modules.get("multiprocessing.forkserver")
    return getattr(module, "_forkserver", None)


def server_pid() -> int | None:
    """The process id of this process's running fork server (``None``: none is started)."""
    server = _server()
    pid = getattr(server, "_forkserver_pid", None)
    return pid if isinstance(pid, int) else None


def _ended(pid: int, timeout: float = 0.0) -> bool:
    """Whether fork server ``pid`` (a child of this process) has ended, waiting up to
    ``timeout`` seconds for it to; an ended one is reaped here."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:  # already reaped, by another waitpid or an ignored SIGCHLD
        pidfd = None
        gone = True
    except OSError:  # no pidfd here (an old kernel): waitpid alone, without waiting
        pidfd = None
        gone = False
    else:
        gone = False
    if pidfd is not None:
        # poll, not select: select refuses a descriptor numbered from FD_SETSIZE (1024) up,
        # which a process with many files, sockets or workers open hands out.
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        try:
            if not poller.poll(math.ceil(timeout * 1000)):
                return False  # still running
        finally:
            os.close(pidfd)
    if not gone:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else meanwhile
            done = pid
        gone = done != 0
    return gone


def _forget(server: Any) -> None:
    """Forget an ended fork server, as ``ensure_running`` does when its ``waitpid`` finds one
    (which it cannot once the server was reaped elsewhere): the next start runs a new one."""
    alive = server._forkserver_alive_fd
    server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)


def _limit(value: int) -> float:
    return math.inf if value == resource.RLIM_INFINITY else value


def _fit_descriptor_limit(pid: int) -> None:
    """Raise fork server ``pid``'s ``RLIMIT_NOFILE`` to this process's where it is lower: it
    holds a descriptor per worker it started, and its workers inherit its limit, not ours. Where
    that is refused, the server is left as it is (a start it fails is tried again: see
    :func:`lost`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        server_soft, server_hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        if _limit(server_soft) >= _limit(soft):
            return
        new_hard = server_hard if _limit(server_hard) >= _limit(soft) else hard
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, new_hard))
    except OSError:
        pass


def prepare() -> None:
    """Before a ``forkserver`` worker starts: forget a fork server that has died (the start runs
    a new one), and raise a running one's descriptor limit to this process's."""
    server = _server()
    if server is None:
        return
    with server._lock:
        pid = server._forkserver_pid
        if pid is None:
            return
        if _ended(pid):
            _forget(server)
        else:
            _fit_descriptor_limit(pid)


def lost(pid: int | None) -> bool:
    """After a ``forkserver`` start failed: whether fork server ``pid`` (the one running before
    it) has died, waiting :data:`DEATH_GRACE` for it to; if so it is forgotten, and a start tried
    again runs a new one."""
    server = _server()
    if pid is None or server is None or not _ended(pid, DEATH_GRACE):
        return False
    with server._lock:
        if server._forkserver_pid == pid:
            _forget(server)
    return True


def died(pid: int) -> bool:
    """Whether fork server ``pid``, which started a worker whose status pipe has closed, has
    died (waiting :data:`DEATH_GRACE` for it to): the worker's exit status went with it."""
    if not _ended(pid, DEATH_GRACE):
        return False
    server = _server()
    if server is not None:
        with server._lock:
            if server._forkserver_pid == pid:
                _forget(server)
    return True


def forget_in_child() -> None:
    """In a child of ``os.fork()``: Python's record of the parent's fork server names a process
    that is not this one's child, so the next forkserver worker would fail to start with a bare
    ``ChildProcessError`` (``waitpid`` on it). Forget it, and close the child's copy of the
    descriptor that keeps it alive (the parent holds its own): the child's first forkserver
    worker then starts a server of its own. Nothing to do where none was started."""
    server = _server()
    if getattr(server, "_forkserver_pid", None) is None:
        return
    alive = getattr(server, "_forkserver_alive_fd", None)
    for name in ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_forkserver_authkey"):
        if hasattr(server, name):
            setattr(server, name, None)
    server._lock = threading.Lock()  # another thread may have held it
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
