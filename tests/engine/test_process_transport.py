"""``vecenv.transports.process``: worker processes behind pipes, through real processes.

Ctrl+C while a message is read or written is held until the read or write returns, so no
worker is ended for it. A second Ctrl+C, or another signal's handler, can still raise between
the two reads of one message (its length, then its body). The half left in the pipe would make
the next read take the body's tail for a length and wait forever. The process transport ends
such a worker at once and reports it dead, with a cause that says why, so the call after the
interrupt raises and close() returns promptly.

A reply that stops arriving part-way (its worker stopped while it wrote) is read within the
wait's deadline, the part read kept for the next wait.

Also: a pipe that hangs up while its process lingers is a death reported at once, never a busy
wait; ``pin_cpus`` pins each worker to one core; ``worker_nice`` runs every worker, a
replacement too, below this process's priority.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import vecenv
from tests.conftest import start_methods
from tests.engine.test_differential import assert_same
from tests.helpers.envs import DiffEnv, HangupEnv, fns
from tests.helpers.fakes import count_pickles
from tests.helpers.faults import no_spinning, transport_of
from vecenv import SubprocVectorEnv, WorkerDiedError
from vecenv.transports.receiving import ReplyReader, bound_reads
from vecenv.wire.buffers import BufferSpec
from vecenv.wire.fastpath import SpinMode


def _cut_next_read(transport: Any, worker: int) -> None:
    """Make worker ``worker``'s next read take 2 bytes of the message's length prefix, then be
    interrupted, as a signal between two reads would leave it."""
    reader = transport.readers[worker]

    def torn_read(*args: Any) -> bytes:
        del reader.read  # one cut only
        os.read(transport.conns[worker].fileno(), 2)
        raise KeyboardInterrupt

    reader.read = torn_read


def _assert_every_worker_kept(envs: Any, sync: SyncVectorEnv, pids: list[int | None]) -> None:
    """After an interrupt that cut no message: no worker was ended or replaced, and the next
    reset and step give Sync's results."""
    assert_same(envs.reset(seed=5), sync.reset(seed=5), "reset after the interrupt")
    actions = np.array([1, 0, 1, 0])
    assert_same(envs.step(actions), sync.step(actions), "step after the interrupt")
    assert envs.worker_pids == pids and envs.restart_count == 0


def _ctrl_c_in_next_read(reader: Any, presses: int) -> None:
    """Make ``reader``'s next read deliver a real SIGINT ``presses`` times while it reads (the
    signal arrives during the read; its handler runs where the interpreter next checks)."""

    def read_with_ctrl_c(*args: Any) -> bytes:
        del reader.read  # once
        for _ in range(presses):
            signal.raise_signal(signal.SIGINT)
        return type(reader).read(reader, *args)

    reader.read = read_with_ctrl_c


@pytest.mark.timeout(60)
def test_a_second_ctrl_c_during_a_read_cuts_it_and_ends_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first Ctrl+C during a pipe read waits for the message; a second one is not held
    (the read could be waiting on a stopped worker): it cuts the read, and ends that worker."""
    no_spinning(monkeypatch)  # every reply through the pipes
    envs = vecenv.make("CartPole-v1", 4, 2, context="fork")
    try:
        envs.reset(seed=0)
        process = transport_of(envs).processes[1]
        _ctrl_c_in_next_read(transport_of(envs).readers[1], presses=2)
        with pytest.raises(KeyboardInterrupt):
            envs.reset(seed=1)
        process.join(10)
        assert process.exitcode is not None
        with pytest.raises(WorkerDiedError, match=r"worker 1 .*an interrupt \(Ctrl\+C\) cut a message on its pipe"):
            envs.reset(seed=2)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is back
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_ctrl_c_as_a_command_is_written_to_a_worker_that_owes_a_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT that arrives while a reset's command is written, to workers that still owe
    the reply of a call an earlier Ctrl+C abandoned (so the write might have blocked): it is
    held until the write returns, which recorded the command as whole. No worker is ended."""
    from vecenv.transports import sending

    no_spinning(monkeypatch)  # every command and reply through the pipes
    envs = vecenv.make("CartPole-v1", 4, 2, context="fork")
    sync = SyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 4)
    transport = transport_of(envs)
    try:
        envs.reset(seed=0)
        pids = envs.worker_pids

        def interrupted(*args: Any) -> Any:
            del transport.poll  # once: the reset's replies are left owed
            raise KeyboardInterrupt

        transport.poll = interrupted
        with pytest.raises(KeyboardInterrupt):
            envs.reset(seed=1)
        write = os.write

        def write_then_ctrl_c(fd: int, data: Any) -> int:
            monkeypatch.setattr(sending.os, "write", write)  # once
            written = write(fd, data)
            signal.raise_signal(signal.SIGINT)  # Ctrl+C as the write returns
            return written

        monkeypatch.setattr(sending.os, "write", write_then_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            envs.reset(seed=2)
        monkeypatch.undo()
        _assert_every_worker_kept(envs, sync, pids)
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_interrupt_mid_read_ends_the_worker_and_close_is_prompt(context: str, monkeypatch: pytest.MonkeyPatch) -> None:
    no_spinning(monkeypatch)  # the step's reply must come through the pipe to be cut there
    envs = vecenv.make("CartPole-v1", 4, 2, context=context)
    assert transport_of(envs).spin_mode is SpinMode.OFF
    try:
        envs.reset(seed=0)
        process = transport_of(envs).processes[1]
        _cut_next_read(transport_of(envs), 1)
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.zeros(4, np.int64))
        process.join(10)
        assert process.exitcode is not None  # ended, not left to answer into a torn pipe
        # The interrupted step needs a reset, which finds worker 1 gone, and says why.
        with pytest.raises(WorkerDiedError, match=r"worker 1 .*an interrupt \(Ctrl\+C\) cut a message on its pipe"):
            envs.reset(seed=1)
    finally:
        start = time.monotonic()
        envs.close()
        assert time.monotonic() - start < 5


@pytest.mark.timeout(60)
def test_interrupt_mid_read_with_restarts_rebuilds_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    no_spinning(monkeypatch)  # the step's reply must come through the pipe to be cut there
    envs = vecenv.make("CartPole-v1", 4, 2, on_worker_death="restart")
    assert transport_of(envs).spin_mode is SpinMode.OFF
    try:
        envs.reset(seed=0)
        _cut_next_read(transport_of(envs), 1)
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.zeros(4, np.int64))
        obs, infos = envs.reset(seed=1)
        assert obs.shape == (4, 4) and infos["worker_restarted"][2:].all()
        obs, *_ = envs.step(np.zeros(4, np.int64))  # and it steps on
        assert obs.shape == (4, 4)
    finally:
        envs.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inline", [False, True])
def test_interrupt_while_waiting_leaves_a_usable_vector_env(inline: bool) -> None:
    """Ctrl+C while the parent waits (the usual case, as in a notebook cell): the step is lost,
    a reset gives what Sync gives, and stepping goes on."""
    envs = vecenv.make("CartPole-v1", 4, 2, inline_group=inline)
    transport = transport_of(envs)
    try:
        envs.reset(seed=0)

        def interrupted(*args: Any) -> Any:
            del transport.poll  # once
            raise KeyboardInterrupt

        transport.poll = interrupted
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.ones(4, np.int64))
        with pytest.raises(vecenv.NeedsResetError):
            envs.step(np.ones(4, np.int64))
        sync = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
        assert_same(envs.reset(seed=7), sync.reset(seed=7), "reset after the interrupt")
        for t in range(5):
            actions = np.array([t % 2, 1, 0, 1])
            assert_same(envs.step(actions), sync.step(actions), f"step {t}")
        sync.close()
    finally:
        envs.close()


# -- a pipe that hangs up; pinning ---------------------------------------------------------------


@pytest.mark.timeout(60)
@start_methods("fork", "spawn")
def test_hung_up_pipe_does_not_spin_or_overrun(start_method: str) -> None:
    envs = SubprocVectorEnv(fns(HangupEnv, 1), num_workers=1, context=start_method)
    try:
        envs.reset(seed=0)
        envs.call_async("hangup", 6.0)  # the process lingers 6 s after closing its pipe
        conn = transport_of(envs).conns[0]
        assert conn.poll(20), "the worker never hung up"  # EOF is readable: the hang-up happened
        wall, cpu = time.monotonic(), time.process_time()
        with pytest.raises(WorkerDiedError):
            envs.call_wait(timeout=0.3)
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        # The worker can never answer: a death, reported quickly (a short grace to exit, then
        # killed), never a busy loop until the lingering thread ends.
        assert wall < 3.0, f"call_wait(timeout=0.3) took {wall:.2f} s"
        assert cpu < 0.5, f"the wait burned {cpu:.2f} s of CPU"
    finally:
        envs.close()


class _AffinityEnv(DiffEnv):
    def cpus(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))


@pytest.mark.timeout(60)
def test_pin_cpus_pins_each_worker_to_one_core() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    fns = [functools.partial(_AffinityEnv, index=i) for i in range(4)]
    with SubprocVectorEnv(fns, 2, pin_cpus=True, context="fork") as sub:
        got = sub.call("cpus")
    expected = [[cpus[0]], [cpus[0]], [cpus[1 % len(cpus)]], [cpus[1 % len(cpus)]]]
    assert list(got) == expected
    with SubprocVectorEnv(fns, 2, context="fork") as sub:
        assert all(c == cpus for c in sub.call("cpus"))  # not pinned by default


class _NiceEnv(DiffEnv):
    def nice(self) -> int:
        return os.getpriority(os.PRIO_PROCESS, 0)


def thread_nices(pid: int) -> set[int]:
    """The nice values of every thread of process ``pid`` (Linux keeps one per thread)."""
    return {os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.timeout(120)
@start_methods()
@pytest.mark.parametrize("inline", [False, True], ids=["workers", "inline-group"])
def test_worker_nice_runs_every_worker_that_far_below_this_process_a_replacement_too(
    start_method: str, inline: bool
) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    fns = [functools.partial(_NiceEnv, index=i) for i in range(4)]
    options = {"context": start_method, "inline_group": inline, "on_worker_death": "restart"}
    with SubprocVectorEnv(fns, 2, worker_nice=3, threads_per_worker=None, **options) as sub:
        want = [own] * 2 * inline + [min(19, own + 3)] * (4 - 2 * inline)
        assert list(sub.call("nice")) == want, "the group this process hosts runs at its priority"
        assert os.getpriority(os.PRIO_PROCESS, 0) == own
        # Every thread, a BLAS pool a spawned or fork-server worker started before its setup too.
        assert all(thread_nices(pid) == {min(19, own + 3)} for pid in sub.worker_pids if pid is not None)
        process = transport_of(sub).processes[-1]
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join(30)
        sub.reset(seed=0)
        assert sub.restart_count == 1
        assert list(sub.call("nice")) == want, "the replacement runs at its predecessor's"
    with SubprocVectorEnv(fns, 2, context=start_method) as sub:
        assert list(sub.call("nice")) == [own] * 4, "at this process's by default"


_NICE_LATER = """
import json, os
import gymnasium as gym
import vecenv

if __name__ == "__main__":
    fns = [lambda: gym.make("CartPole-v1")] * 2
    vecenv.SubprocVectorEnv(fns, 2, context="forkserver").close()  # the server starts at this nice value
    os.nice(2)
    with vecenv.SubprocVectorEnv(fns, 2, context="forkserver") as envs:
        workers = [os.getpriority(os.PRIO_PROCESS, pid) for pid in envs.worker_pids]
    print(json.dumps({"workers": workers, "own": os.getpriority(os.PRIO_PROCESS, 0)}))
"""


@pytest.mark.timeout(120)
@start_methods("forkserver")
def test_fork_server_workers_run_at_this_process_s_priority_now_not_the_server_s(
    start_method: str, tmp_path: Path
) -> None:
    """A fork server's children start at the server's nice value, from when it started: the
    workers of a process that lowered its own priority since would outrank it."""
    script = tmp_path / "nice_later.py"
    script.write_text(_NICE_LATER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["own"] == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 2)
    assert got["workers"] == [got["own"]] * 2


#: The cores the inline group's policy ran on, one entry per call (this process's copy only).
_POLICY_CPUS: list[list[int]] = []


def _affinity_policy(observations: Any) -> np.ndarray:
    _POLICY_CPUS.append(sorted(os.sched_getaffinity(0)))
    return np.zeros(len(observations), np.int64)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("pin", [True, False], ids=["pinned", "not-pinned"])
def test_pin_cpus_runs_the_inline_groups_rollouts_on_the_first_core_and_gives_the_thread_back(pin: bool) -> None:
    """The group this process hosts is worker 0: with ``pin_cpus`` its rollouts run on the
    first core (the worker processes have the others), and the calling thread has its own
    cores back afterwards; its steps, tens of microseconds each, are not moved."""
    cpus = sorted(os.sched_getaffinity(0))
    fns = [functools.partial(_AffinityEnv, index=i) for i in range(4)]
    _POLICY_CPUS.clear()
    with SubprocVectorEnv(fns, 2, inline_group=True, pin_cpus=pin, context="fork") as sub:
        sub.reset(seed=0)
        sub.rollout(3, _affinity_policy)
        assert sorted(os.sched_getaffinity(0)) == cpus  # given back
        # A probe first (in a thread of this process, where nothing is pinned), then 3 steps.
        assert _POLICY_CPUS == [cpus] + [[cpus[0]] if pin else cpus] * 3
        sub.step(np.zeros(4, np.int64))
        got = list(sub.call("cpus"))
    assert got[:2] == [cpus, cpus]  # the parent's group, called outside a rollout: not moved
    assert got[2:] == ([[cpus[1 % len(cpus)]]] * 2 if pin else [cpus, cpus])


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "where", ["before-the-write", "after-the-whole-write", "decoding-a-whole-reply", "ctrl-c-while-a-reply-is-read"]
)
def test_an_interrupt_that_cuts_no_message_keeps_every_worker(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+C during a reset where no message can be cut in two: before its command is
    written, once a command written in one write is whole in the pipe (its worker had taken
    every earlier one), while a reply read whole is decoded, or a real SIGINT while a reply is
    read (held until the message is kept). No worker is ended: the next reset and step give
    Sync's results."""
    from vecenv.transports import process as process_module
    from vecenv.transports import sending

    no_spinning(monkeypatch)  # every command and reply through the pipes
    envs = vecenv.make("CartPole-v1", 4, 2, context="fork")
    sync = SyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 4)
    try:
        envs.reset(seed=0)
        pids = envs.worker_pids
        if where == "decoding-a-whole-reply":
            decode = process_module.decode_reply

            def interrupted_decode(data: bytes) -> Any:
                monkeypatch.setattr(process_module, "decode_reply", decode)  # once
                raise KeyboardInterrupt

            monkeypatch.setattr(process_module, "decode_reply", interrupted_decode)
        elif where == "ctrl-c-while-a-reply-is-read":
            _ctrl_c_in_next_read(transport_of(envs).readers[1], presses=1)
        else:
            write = os.write

            def interrupted_write(fd: int, data: Any) -> int:
                monkeypatch.setattr(sending.os, "write", write)  # once
                if where == "after-the-whole-write":
                    assert write(fd, data) == len(data)
                raise KeyboardInterrupt  # where a signal's handler would run

            monkeypatch.setattr(sending.os, "write", interrupted_write)
        with pytest.raises(KeyboardInterrupt):
            envs.reset(seed=1)
        monkeypatch.undo()
        _assert_every_worker_kept(envs, sync, pids)
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_ctrl_c_as_a_rollout_block_is_written_keeps_every_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT as the write of a rollout block's command returns, before the block's
    descriptor follows it: one Ctrl+C is held until the descriptor is sent too, so no message
    is left without its descriptor and no worker is ended (a single Ctrl+C used to end one)."""
    from vecenv.transports import sending

    envs = vecenv.make("CartPole-v1", 4, 2, context="fork")
    sync = SyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 4)
    try:
        envs.reset(seed=0)
        pids = envs.worker_pids
        write = os.write

        def write_then_ctrl_c(fd: int, data: Any) -> int:
            monkeypatch.setattr(sending.os, "write", write)  # once: the first block command
            written = write(fd, data)
            signal.raise_signal(signal.SIGINT)  # Ctrl+C as the write returns
            return written

        monkeypatch.setattr(sending.os, "write", write_then_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            envs.rollout(3)
        monkeypatch.undo()
        _assert_every_worker_kept(envs, sync, pids)
        assert envs.rollout(3).rewards.shape == (3, 4)
        assert envs.worker_pids == pids
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
def test_the_buffer_spec_is_pickled_once_for_every_worker_and_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker's attach message holds the buffer spec, and with it the observation space
    (tens of MiB for a large image Box): the parent pickles it once per vector env, not once
    per worker, and a replacement worker gets the same bytes; every worker still maps the
    buffers it describes (the steps match Sync)."""
    pickled = count_pickles(monkeypatch, BufferSpec)
    parent = os.getpid()
    sync = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
    with vecenv.make("CartPole-v1", 4, 4, context="fork", on_worker_death="restart") as envs:
        assert_same(envs.reset(seed=3), sync.reset(seed=3))
        assert pickled.count(parent) == 1
        os.kill(envs.worker_pids[2], signal.SIGKILL)
        envs.step(np.ones(4, np.int64))  # worker 2 is replaced and attached
        assert envs.restart_count == 1
        assert pickled.count(parent) == 1
    sync.close()


# -- replies that stop arriving part-way --------------------------------------------------------


def _framed(message: bytes) -> bytes:
    """``message`` as ``Connection.send_bytes`` writes it (a length of under 2 GiB)."""
    return struct.pack("!i", len(message)) + message


@pytest.mark.timeout(30)
@pytest.mark.parametrize("size", [5, 70_000, (1 << 22) + 3])
@pytest.mark.parametrize("cut", ["in-the-length", "in-the-message"])
def test_a_reply_read_in_part_is_kept_until_it_is_whole(size: int, cut: str) -> None:
    """A reply that stops part-way (its writer stopped) is not waited for past the deadline: the
    read returns ``None`` and keeps what it read, and the next read, once the rest is there,
    returns the message whole, then the one after it; a pipe closed part-way is ``EOFError``."""
    parent, child = multiprocessing.Pipe(duplex=True)
    message = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    wire = _framed(message) + _framed(b"next")
    split = 2 if cut == "in-the-length" else 4 + size // 2
    first_written, go_on = threading.Event(), threading.Event()

    def write_all(part: memoryview) -> None:
        while part:
            part = part[os.write(child.fileno(), part) :]

    def writer() -> None:  # as a worker that stops part-way, then goes on
        write_all(memoryview(wire)[:split])
        first_written.set()
        go_on.wait(20)
        write_all(memoryview(wire)[split:])

    thread = threading.Thread(target=writer, daemon=True)
    try:
        bound_reads(parent)
        reader = ReplyReader(parent)
        thread.start()
        while not first_written.is_set():  # (more than the socket holds is read as it comes)
            assert reader.read(time.monotonic() + 0.01) is None
        t0 = time.monotonic()
        assert reader.read(time.monotonic() + 0.05) is None  # the rest is not there: kept for later
        assert time.monotonic() - t0 < 5  # the deadline and a slice (0.06 s), with room for a loaded host
        go_on.set()
        got = reader.read(None)
        assert got is not None and bytes(got) == message
        assert reader.read(None) == b"next"
        thread.join(20)
        os.write(child.fileno(), wire[: min(split, 6)])  # (what the socket's buffer holds)
        child.close()
        with pytest.raises(EOFError):
            reader.read(None)
    finally:
        go_on.set()
        parent.close()
        if not child.closed:
            child.close()


class _StopsInItsReply(gym.Env):
    """The info of its first step ever is 8 MiB, its later ones none (with a ``_send_bytes``
    that stops the worker part-way through a message that large)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    big_sent = False

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 1).astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        info = {} if self.big_sent else {"big": np.ones(1 << 21, np.float32)}
        self.big_sent = True
        return self.np_random.uniform(-1, 1, 1).astype(np.float32), 1.0, False, False, info


@pytest.mark.timeout(60)
def test_a_worker_stopped_part_way_through_its_reply_is_a_timeout_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker stopped (SIGSTOP) part-way through writing a large reply held ``step(timeout=1)``
    for as long as it stayed stopped: the parent read the reply whole, without a deadline. The
    step raises ``VecEnvTimeoutError`` at its timeout; once the worker goes on, its late reply
    is dropped and a reset gives Sync's results."""
    real = Connection._send_bytes

    def stops_part_way(self: Connection, buf: Any) -> None:
        if len(buf) < 1 << 20:
            return real(self, buf)
        data = bytes(buf)
        self._send(struct.pack("!i", len(data)) + data[: len(data) // 2])  # type: ignore[attr-defined]
        os.kill(os.getpid(), signal.SIGSTOP)
        self._send(data[len(data) // 2 :])  # type: ignore[attr-defined]

    monkeypatch.setattr(Connection, "_send_bytes", stops_part_way)  # the forked worker's too
    sync = SyncVectorEnv([_StopsInItsReply] * 2)
    with SubprocVectorEnv([_StopsInItsReply] * 2, num_workers=1, context="fork") as envs:
        monkeypatch.setattr(Connection, "_send_bytes", real)  # (this process's own pipes: as they were)
        envs.reset(seed=3)
        (pid,) = envs.worker_pids
        t0 = time.monotonic()
        with pytest.raises(vecenv.VecEnvTimeoutError, match="step"):
            envs.step(np.array([0, 1]), timeout=1.0)
        assert time.monotonic() - t0 < 10, "the step waited for the stopped worker"
        os.kill(pid, signal.SIGCONT)
        assert_same(envs.reset(seed=4, timeout=30), sync.reset(seed=4), "reset after the late reply")
        # The first step since: Sync's envs send their 8 MiB infos now, the others sent theirs late.
        got, want = envs.step(np.array([0, 1])), sync.step(np.array([0, 1]))
        assert_same(got[:4], want[:4], "the first step after it")
        assert_same(envs.step(np.array([1, 1])), sync.step(np.array([1, 1])), "the second step after it")
        assert envs.worker_pids == [pid]
