"""Limits a hostile or unlucky user meets: commands that a stuck worker cannot take, rollouts
and buffers larger than the memory the machine can give, weight pushes that do not fit the
policy.

Every wait has a bound, asserted here; the autouse leak check of ``conftest.py`` fails a test
that leaves a process or a shared block behind.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import vecenv
from tests.crash_envs import fault_fns
from vecenv import VecEnvTimeoutError, WorkerDiedError
from vecenv.transports import sending
from vecenv.transports.sending import SendTimeout, send_within

# -- bounded sends -------------------------------------------------------------------------------


def _pipe_pair() -> tuple[object, socket.socket]:
    """A Connection over one end of a socketpair (as a worker pipe's parent end) and the other end."""
    from multiprocessing.connection import Connection

    a, b = socket.socketpair()
    conn = Connection(a.detach())
    sending.bound_writes(conn)
    return conn, b


@pytest.mark.timeout(30)
def test_send_within_a_deadline_says_whether_part_of_the_message_was_sent() -> None:
    """A message larger than the pipe's buffer to a reader that reads nothing: the send returns
    at its deadline, saying part of it is in the pipe; once the pipe is full, the next send
    says none of it is. A reader that reads gets the bytes ``Connection.send_bytes`` writes."""
    conn, other = _pipe_pair()
    try:
        big = bytes(8 * 2**20)
        start = time.monotonic()
        with pytest.raises(SendTimeout) as info:
            send_within(conn, big, None, 0.3)
        assert info.value.written
        assert 0.3 <= time.monotonic() - start < 5.0
        # Empty messages (a 4-byte header each) fill what is left; the first that does not fit
        # is not sent at all.
        with pytest.raises(SendTimeout) as info:
            for _ in range(100_000):
                send_within(conn, b"", None, 0.05)
        assert not info.value.written
        assert isinstance(info.value, VecEnvTimeoutError)
    finally:
        conn.close()
        other.close()
    conn, other = _pipe_pair()
    try:
        from multiprocessing.connection import Connection

        reader = Connection(other.detach())
        messages = [b"", b"x" * 100, bytes(range(256)) * 4000]  # the last is larger than the buffer
        received: list[bytes] = []
        thread = threading.Thread(target=lambda: received.extend(reader.recv_bytes() for _ in messages))
        thread.start()
        for message in messages:
            send_within(conn, message, None, 10)
        thread.join(10)
        assert received == messages
        reader.close()
        with pytest.raises(OSError):  # the reader is gone: a broken pipe, at once
            send_within(conn, b"after", None, 5)
    finally:
        conn.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("restart", [False, True], ids=["raise", "restart"])
def test_large_command_to_a_stuck_worker_is_bounded(restart: bool, tmp_path: Path, monkeypatch) -> None:
    """After a step timed out on a hung env, a command larger than a pipe's buffer
    (``call_async`` with a 40 MB array) returns within the send bound: the stuck worker,
    which took part of it, is ended (a dead worker; or replaced, and the call goes through)."""
    monkeypatch.setattr(sending, "SEND_TIMEOUT", 1.0)
    fns = fault_fns(2, "hang", "step", 0, once=str(tmp_path / "once"))
    envs = vecenv.SubprocVectorEnv(fns, 2, context="fork", on_worker_death="restart" if restart else "raise")
    try:
        envs.reset(seed=1)
        with pytest.raises(VecEnvTimeoutError):
            envs.step(np.zeros((2, 2), np.float32), timeout=0.5)
        big = np.zeros(40 * 2**20 // 8)
        start = time.monotonic()
        if restart:
            envs.call_async("size_of", big)
            assert time.monotonic() - start < 20.0  # the bound (1 s) and a restart
            assert envs.call_wait(timeout=30) == (big.nbytes, big.nbytes)
            assert envs._pool.restarts == 1, [envs._pool.transport.cause_of_death(0)]
        else:
            with pytest.raises(WorkerDiedError, match="took .* bytes of a .*-byte command and then nothing") as info:
                envs.call_async("size_of", big)
            assert info.value.worker == 0
            assert time.monotonic() - start < 10.0  # the bound is 1 s
    finally:
        envs.close(terminate=True)


@pytest.mark.timeout(60)
def test_a_sync_call_bounds_its_send_by_its_timeout(tmp_path: Path) -> None:
    """``set_attr(..., timeout=1)`` with a value larger than a pipe's buffer, to a worker stuck
    in a step that timed out: the call's own timeout bounds the send (the default bound is
    not waited for)."""
    fns = fault_fns(2, "hang", "step", 0)
    envs = vecenv.SubprocVectorEnv(fns, 2, context="fork")
    try:
        envs.reset(seed=1)
        with pytest.raises(VecEnvTimeoutError):
            envs.step(np.zeros((2, 2), np.float32), timeout=0.5)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match="took .* bytes of a .*-byte command and then nothing"):
            envs.set_attr("payload", np.zeros(2**22), timeout=1.0)
        assert time.monotonic() - start < 10.0
    finally:
        envs.close(terminate=True)
