"""The fork server that ``forkserver`` workers start from, when it is not as Python left it: a
descriptor limit raised after it started, killed (SIGKILL), or killed in a process that ignores
SIGCHLD (so that nobody can wait for it). Every start either works, from a fit or a new server,
or raises a vecenv error naming the server; a worker whose server died is reported as having
lost it (not as "exited with code 255"), and ``on_worker_death="restart"`` replaces it.

Every test bounds its time (pytest-timeout), and the autouse leak check of ``conftest.py`` fails
it when a child process is left; the workers a killed server leaves behind (no longer children
of anyone here) are waited for by their pids.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
from collections.abc import Iterator

import numpy as np
import pytest

from tests.helpers.faults import healthy_fns, open_fds
from vecenv import SubprocVectorEnv
from vecenv.errors import VecEnvError, WorkerDiedError
from vecenv.transports import fork_server

ACTIONS = np.zeros((2, 2), np.float32)


def _wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    """Wait until none of ``pids`` runs (by pidfd: they need not be our children); returns
    those still running after ``timeout``."""
    left = []
    for pid in pids:
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            if not select.select([pidfd], [], [], timeout)[0]:
                left.append(pid)
        finally:
            os.close(pidfd)
    return left


def _running_server() -> int:
    """The fork server's process id, after a forkserver vector env made sure it runs."""
    with SubprocVectorEnv(healthy_fns(1), 1, context="forkserver") as envs:
        envs.reset(seed=0)
    pid = fork_server.server_pid()
    assert pid is not None
    return pid


@contextlib.contextmanager
def _sigchld(handler: signal.Handlers) -> Iterator[None]:
    previous = signal.signal(signal.SIGCHLD, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGCHLD, previous)


# Descriptors above this process's open ones in the low limit the server starts under: enough
# for that first start (it took 11 on Python 3.11), with room to spare. Every one more is a
# worker more, each a process started, in the start over the server's limit that follows.
LOW_LIMIT_HEADROOM = 16


def _server_started_under(limit: int) -> int:
    """Start the fork server (with a forkserver vector env, as a user's first one does) while
    ``RLIMIT_NOFILE`` is ``limit``, then put the limit back; returns how many workers the server
    can still start at once under its limit (it holds a descriptor per running worker)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = fork_server.server_pid()
    if before is not None:  # an earlier test's server: kill it, so that the next start runs one
        os.kill(before, signal.SIGKILL)
        _wait_gone([before])
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        server = _running_server()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert server != before and resource.prlimit(server, resource.RLIMIT_NOFILE)[0] == limit
    return limit - len(os.listdir(f"/proc/{server}/fd"))


@pytest.mark.timeout(180)
def test_a_descriptor_limit_raised_after_the_fork_server_started_reaches_it() -> None:
    """The user lowers ``RLIMIT_NOFILE``, a vector env starts the fork server, the user raises
    the limit again: the server kept the low one, and used to die in the middle of the next
    start with more workers than it could hold (a bare ``EOFError``). Its limit is raised to
    this process's first, so the start works, and the workers get the limit set here."""
    room = _server_started_under(len(open_fds()) + LOW_LIMIT_HEADROOM)
    workers = room + 3  # more than the server could hold under its old limit
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    with SubprocVectorEnv(healthy_fns(workers), workers, context="forkserver") as envs:
        envs.reset(seed=0)
        envs.step(np.zeros((workers, 2), np.float32))
        assert {resource.prlimit(pid, resource.RLIMIT_NOFILE)[0] for pid in envs.worker_pids} == {soft}


@pytest.mark.timeout(120)
def test_workers_start_from_the_fork_server_with_descriptors_numbered_past_1024() -> None:
    """A process with many files, sockets or workers open hands out descriptors numbered from
    1024 (``select``'s ``FD_SETSIZE``) up: the check before each start that the fork server
    still runs used ``select`` on a pidfd and raised a bare ``ValueError`` ("filedescriptor out
    of range in select()") from the second worker on."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE's hard limit {hard} leaves no descriptor past 1024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1030:
            held.append(os.open(os.devnull, os.O_RDONLY))
        _running_server()  # a running server: the next starts check it
        with SubprocVectorEnv(healthy_fns(3), 3, context="forkserver") as envs:
            envs.reset(seed=0)
            assert len(envs.step(np.zeros((3, 2), np.float32))[1]) == 3
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.timeout(180)
def test_a_fork_server_that_dies_during_a_start_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the server's limit could not be raised (``prepare`` does nothing here), it dies in
    the middle of the start: the workers it had started lost it, and the start raises a vecenv
    error naming the fork server, not a bare ``EOFError``; the next start runs a new server."""
    room = _server_started_under(len(open_fds()) + LOW_LIMIT_HEADROOM)
    server = fork_server.server_pid()
    monkeypatch.setattr(fork_server, "prepare", lambda: None)
    workers = room + 3
    with pytest.raises(VecEnvError, match="fork server") as raised:
        SubprocVectorEnv(healthy_fns(workers), workers, context="forkserver")
    assert "exited with code 255" not in str(raised.value), str(raised.value)
    monkeypatch.undo()
    assert server is not None and _wait_gone([server]) == []
    with SubprocVectorEnv(healthy_fns(2), 2, context="forkserver") as envs:
        envs.reset(seed=0)
    assert fork_server.server_pid() != server


def _kill_the_fork_server(envs: SubprocVectorEnv) -> tuple[int, list[int]]:
    """Reset ``envs`` (forkserver workers), SIGKILL the fork server that started them and wait
    until it is gone: its process id, and the workers' it had started."""
    envs.reset(seed=0)
    old_workers = [pid for pid in envs.worker_pids if pid is not None]
    server = fork_server.server_pid()
    assert server is not None
    os.kill(server, signal.SIGKILL)
    assert _wait_gone([server]) == []  # its descriptors, the workers' status pipes, closed
    return server, old_workers


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sigchld", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigchld-default", "sigchld-ignored"])
def test_a_killed_fork_server_is_named_and_replaced(sigchld: signal.Handlers) -> None:
    """SIGKILL to the fork server: the workers it started lost their exit statuses with it, and
    the next call says so (not "exited with code 255"); the next forkserver vector env starts
    from a new server, also where SIGCHLD is ignored (nobody could wait for the dead one: every
    later start used to fail with a bare ``ChildProcessError``)."""
    with _sigchld(sigchld):
        envs = SubprocVectorEnv(healthy_fns(2), 2, context="forkserver")
        try:
            server, old_workers = _kill_the_fork_server(envs)
            with pytest.raises(WorkerDiedError, match="lost its fork server") as raised:
                envs.get_attr("index")  # replies on the pipes, which are polled with the status pipes
            assert f"pid {server}" in str(raised.value) and "code 255" not in str(raised.value)
            assert raised.value.exitcode is None
        finally:
            envs.close()
        assert _wait_gone(old_workers) == []  # orphaned by the server, they end with the vector env
        for _ in range(2):
            with SubprocVectorEnv(healthy_fns(2), 2, context="forkserver") as fresh:
                fresh.reset(seed=0)
                fresh.step(ACTIONS)
            assert fork_server.server_pid() not in (None, server)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sigchld", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigchld-default", "sigchld-ignored"])
def test_restart_replaces_the_workers_of_a_killed_fork_server(sigchld: signal.Handlers) -> None:
    """``on_worker_death="restart"``: the workers of a killed server count as dead, and their
    replacements start from a new server; the vector env steps on."""
    with (
        _sigchld(sigchld),
        SubprocVectorEnv(healthy_fns(2), 2, context="forkserver", on_worker_death="restart") as envs,
    ):
        server, old_workers = _kill_the_fork_server(envs)
        assert envs.get_attr("index") == (0, 1)  # sees both deaths: asked again of the replacements
        _, _, _, truncations, infos = envs.step(ACTIONS)  # the restart's reset, reported here
        assert truncations.all() and infos["worker_restarted"].all()
        assert envs.restart_count == 2
        assert set(envs.worker_pids).isdisjoint(old_workers)
        assert fork_server.server_pid() not in (None, server)
        envs.step(ACTIONS)
        assert _wait_gone(old_workers) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ends_it", ["close", "restart"])
def test_a_stopped_worker_of_a_killed_fork_server_does_not_outlive_its_vector_env(ends_it: str) -> None:
    """A worker orphaned by its fork server ends when its pipe hangs up; one that cannot read the
    hang-up (stopped by SIGSTOP) used to outlive ``close()``, and its replacement's restart, for
    good: the server's death had made it look ended. It is killed now."""
    restart = ends_it == "restart"
    envs = SubprocVectorEnv(healthy_fns(2), 2, context="forkserver", on_worker_death="restart" if restart else "raise")
    try:
        _, old_workers = _kill_the_fork_server(envs)
        os.kill(old_workers[0], signal.SIGSTOP)
        if restart:
            assert envs.get_attr("index") == (0, 1)  # both replaced (the stopped one too)
            assert _wait_gone(old_workers) == []
            envs.step(ACTIONS)
    finally:
        envs.close()
    assert _wait_gone(old_workers) == []
