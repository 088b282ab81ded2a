"""Reliability as a demanding user or an operator meets it: threads, interrupts, dropped vector
envs, stuck closes, a parent killed with replies unread, errors that must name the env, a low
descriptor limit, and scripts without a ``__main__`` guard.

Every test bounds its time (pytest-timeout, and explicit bounds on what is promised), and the
autouse leak check of ``conftest.py`` fails it when a child process or a shared block is left.
The reference for "the data is right" is ``gymnasium.vector.SyncVectorEnv``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

import vecenv
from tests.engine.test_differential import assert_same
from tests.helpers.envs import SlowReplacementEnv
from tests.helpers.envs import fns as fns_of
from tests.helpers.faults import (
    FaultEnv,
    counter_fns,
    fault_fns,
    healthy_fns,
    no_spinning,
    odd_fns,
    open_fds,
    transport_of,
)
from tests.helpers.limits import file_size_limit
from tests.helpers.threads import take_turns
from vecenv import VecEnvError, WorkerDiedError
from vecenv.parent.call_lock import CallLock, serialised
from vecenv.parent.calls import CallRunner
from vecenv.parent.pool import WorkerPool
from vecenv.parent.state import State
from vecenv.policies import FunctionPolicy
from vecenv.transports import process as process_transport
from vecenv.transports.sending import Progress
from vecenv.wire import fastpath

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _worker_pids(envs: Any) -> list[int]:
    return [p for p in envs.worker_pids if p is not None]


# -- threads -----------------------------------------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("inline", [False, True], ids=["workers", "inline-group"])
def test_threads_sharing_a_vector_env_take_turns(inline: bool) -> None:
    """Two threads stepping one vector env (and a third reading an attribute) never collide:
    each step reaches every env, and the steps of both threads are one sequence."""
    envs = vecenv.SubprocVectorEnv(counter_fns(4), 2, context="fork", inline_group=inline)
    steps = 150
    try:
        envs.reset(seed=3)
        seen: list[np.ndarray] = []
        counts: list[tuple[int, ...]] = []

        def stepper(action: int) -> Callable[[], None]:
            def step() -> None:
                obs, rewards, *_ = envs.step(np.full(4, action))
                assert (rewards == action).all()
                seen.append(obs)

            return step

        take_turns([stepper(0), stepper(1), lambda: counts.append(envs.get_attr("count"))], steps)
        for obs in seen:  # one step reached every env: they agree on their step count
            assert (obs[:, 0] == obs[0, 0]).all(), f"envs at different step counts {obs[:, 0]}"
            assert (obs[:, 1] == [3, 4, 5, 6]).all()
        assert sorted(int(obs[0, 0]) for obs in seen) == list(range(1, 2 * steps + 1))
        assert all(len(set(c)) == 1 for c in counts), "an attribute read saw envs at different steps"
        sync = SyncVectorEnv(counter_fns(4))
        assert_same(envs.reset(seed=9), sync.reset(seed=9))
        assert_same(envs.step(np.ones(4, np.int64)), sync.step(np.ones(4, np.int64)))
        sync.close()
    finally:
        envs.close()


def _step_in_a_thread(envs: Any, actions: np.ndarray) -> tuple[threading.Thread, list[BaseException | None]]:
    """A started thread that steps ``envs`` once, and what the step gave: ``None`` or what it raised."""
    outcome: list[BaseException | None] = []

    def stepper() -> None:
        try:
            envs.step(actions)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=stepper)
    thread.start()
    return thread, outcome


@pytest.mark.timeout(60)
def test_close_from_another_thread_ends_a_stuck_step() -> None:
    """A thread stuck in ``step`` (an env that hangs, no timeout) and ``close()`` from another
    thread: close waits its grace, ends the workers, and both threads return promptly."""
    envs = vecenv.SubprocVectorEnv(fault_fns(4, "hang", "step", 3), 2, context="fork")
    envs.reset(seed=0)
    thread, outcome = _step_in_a_thread(envs, np.zeros((4, 2), np.float32))
    deadline = time.monotonic() + 10
    while envs.state is not vecenv.State.WAITING_STEP and time.monotonic() < deadline:
        time.sleep(0.01)
    assert envs.state is vecenv.State.WAITING_STEP
    t0 = time.monotonic()
    envs.close(timeout=0.5)
    took = time.monotonic() - t0
    thread.join(10)
    assert not thread.is_alive(), "the stepping thread is still waiting after close()"
    assert took < 0.5 + 3.0, f"close() from another thread took {took:.1f} s"
    assert len(outcome) == 1 and isinstance(outcome[0], WorkerDiedError), outcome
    assert "close()" in str(outcome[0]) and "another thread" in str(outcome[0]), str(outcome[0])
    assert envs.closed
    assert all(c is None or c.closed for c in transport_of(envs).conns)


#: What a WaitsInStep env's step waits for (the env lives in the parent: a threading.Event).
_STEP_RELEASE = threading.Event()


class WaitsInStep(gym.Wrapper):
    """Its step waits for :data:`_STEP_RELEASE` (read when it steps: the Event is not pickled)."""

    def step(self, action: Any) -> Any:
        _STEP_RELEASE.wait(30)
        return super().step(action)


@pytest.mark.timeout(60)
def test_close_from_another_thread_leaves_a_step_stuck_in_the_parents_own_env_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With every env in the parent, close() from another thread cannot end a step stuck in env
    code: after its grace and END_WAIT it raises CallInFlightError, says where the call is
    stuck, and leaves the vector env open; once the step returns, close() closes it."""
    from vecenv.errors import CallInFlightError
    from vecenv.parent import call_lock

    monkeypatch.setattr(call_lock, "END_WAIT", 0.5)
    release = _STEP_RELEASE
    release.clear()
    fns = [functools.partial(lambda i: WaitsInStep(FaultEnv(index=i)), i) for i in range(2)]
    envs = vecenv.SubprocVectorEnv(fns, 0)
    envs.reset(seed=0)
    thread, outcome = _step_in_a_thread(envs, np.zeros((2, 2), np.float32))
    try:
        deadline = time.monotonic() + 10
        while envs.call_lock.holder() == "a call" and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(CallInFlightError) as caught:
            envs.close(timeout=0.2)
        message = str(caught.value)
        assert "`step`" in message and "stuck in env code that this process hosts" in message, message
        assert "ended the workers" not in message, message
        assert not envs.closed
    finally:
        release.set()
        thread.join(10)
    assert not thread.is_alive() and len(outcome) == 1, outcome
    envs.close()
    assert envs.closed


class ClosedMarks(gym.Wrapper):
    """Writes ``<dir>/<index>`` when the env's ``close()`` runs (in whichever process hosts it);
    with ``signals`` (a pid), its first step sends that process SIGUSR1, then takes 0.3 s."""

    def __init__(self, env: gym.Env, index: int, marks: str, signals: int | None) -> None:
        super().__init__(env)
        self.index, self.marks, self.signals = index, marks, signals

    def step(self, action: Any) -> Any:
        if self.signals is not None:
            os.kill(self.signals, signal.SIGUSR1)
            self.signals = None
            time.sleep(0.3)  # the step is still running when the handler closes the vector env
        return super().step(action)

    def close(self) -> None:
        Path(self.marks, str(self.index)).touch()
        super().close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layout", ["workers", "inline-group", "all-in-parent"])
@pytest.mark.parametrize("handler", ["returns", "raises"])
def test_close_from_a_signal_handler_during_a_step_closes_every_env_once_the_step_is_over(
    layout: str, handler: str, tmp_path: Path
) -> None:
    """A signal handler closes the vector env while ``step`` runs in the same thread (a graceful
    shutdown on SIGTERM): close() returns at once, and the close runs as asked once the step is
    over (returned, or ended by what the handler raised), every env's own ``close()`` included,
    wherever the env lives."""
    marks = tmp_path / "marks"
    marks.mkdir()
    num_workers, inline = {"workers": (2, False), "inline-group": (2, True), "all-in-parent": (0, False)}[layout]
    me = os.getpid()
    fns = [
        functools.partial(lambda i: ClosedMarks(FaultEnv(index=i), i, str(marks), me if i == 3 else None), i)
        for i in range(4)
    ]
    envs = vecenv.SubprocVectorEnv(fns, num_workers, context="fork", inline_group=inline)
    envs.reset(seed=0)
    pids = envs.worker_pids
    handled: list[bool] = []

    class Shutdown(Exception):
        pass

    def on_signal(signum: int, frame: Any) -> None:
        envs.close()
        handled.append(envs.closed)
        if handler == "raises":
            raise Shutdown

    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        if handler == "raises":
            with pytest.raises(Shutdown):
                envs.step(np.zeros((4, 2), np.float32))
        else:
            envs.step(np.zeros((4, 2), np.float32))
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert handled == [True], "close() in the handler did not return, or the env did not count as closed"
    assert envs.closed and envs.state is vecenv.State.CLOSED
    assert sorted(int(p.name) for p in marks.iterdir()) == [0, 1, 2, 3], "an env's close() did not run"
    assert all(c is None or c.closed for c in transport_of(envs).conns)
    assert not [p for p in pids if p is not None and _alive(p)]
    with pytest.raises(gym.error.ClosedEnvironmentError):
        envs.step(np.zeros((4, 2), np.float32))


def test_the_call_lock_knows_when_a_close_runs_in_this_thread() -> None:
    """What ``close()`` asks to tell a close reached from inside a close (nothing left to do)
    from one reached inside another call (deferred to its end): a typed fact of the lock, not
    the running call's name."""
    lock = CallLock()
    seen: list[bool] = []
    assert not lock.closing_here()
    with lock.closing(0.0, lambda: None):
        seen.append(lock.closing_here())
        other = threading.Thread(target=lambda: seen.append(lock.closing_here()))
        other.start()
        other.join(10)
    with lock.taken_if_free("close", closing=True) as free:
        seen.append(free and lock.closing_here())
    with lock.taken_if_free("flush") as free:
        seen.append(free and lock.closing_here())
    assert seen == [True, False, True, False] and not lock.closing_here()

    class Owner:
        call_lock = lock

        @serialised
        def step(self) -> bool:
            return lock.closing_here()

    assert Owner().step() is False


class CloseAgainEnv(gym.Env):
    """An env whose ``close()`` closes the vector env it is in again (a close reached from
    inside the close), counting its own closes."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    envs: Any = None
    closes = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def close(self) -> None:
        type(self).closes += 1
        if type(self).envs is not None:  # None in a worker: the vector env is the parent's
            type(self).envs.close(terminate=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_close_reached_from_inside_the_close_returns_and_closes_once(num_workers: int) -> None:
    """``close(terminate=True)`` from an env's ``close()`` run by the close, in this process:
    nothing is left for it to do; it neither ends the workers under the polite close nor
    defers another close."""
    envs = vecenv.SubprocVectorEnv([CloseAgainEnv] * 4, num_workers, inline_group=True, context="fork")
    CloseAgainEnv.envs, CloseAgainEnv.closes = envs, 0
    try:
        envs.reset(seed=0)
        envs.close()
        parent_hosted = 4 if num_workers == 0 else 2
        assert envs.closed and envs.state is vecenv.State.CLOSED and CloseAgainEnv.closes == parent_hosted
        envs.close()
        assert CloseAgainEnv.closes == parent_hosted
    finally:
        CloseAgainEnv.envs = None


@pytest.mark.timeout(60)
def test_an_env_close_error_of_a_close_from_a_signal_handler_is_a_warning(tmp_path: Path) -> None:
    """The close the handler asked for runs after the step, when nobody waits for its result:
    an env's ``close()`` error is not lost, it is a warning naming it."""
    me = os.getpid()
    fns = [
        functools.partial(
            lambda i: ClosedMarks(
                FaultEnv(index=i, fault="raise", where="close", target=3), i, str(tmp_path), me if i == 0 else None
            ),
            i,
        )
        for i in range(4)
    ]
    envs = vecenv.SubprocVectorEnv(fns, 2, context="fork")
    envs.reset(seed=0)
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: envs.close())
    try:
        with pytest.warns(UserWarning, match="injected fault in close of env 3"):
            envs.step(np.zeros((4, 2), np.float32))
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert envs.closed and envs.state is vecenv.State.CLOSED


@pytest.mark.timeout(60)
def test_close_terminate_from_a_signal_handler_ends_a_stuck_step() -> None:
    """``close(terminate=True)`` from a signal handler while ``step`` waits on a hung env: the
    workers are ended at once, the step raises ``WorkerDiedError`` naming the close, and once it
    has unwound everything is released."""
    envs = vecenv.SubprocVectorEnv(fault_fns(4, "hang", "step", 3), 2, context="fork")
    envs.reset(seed=0)
    pids = envs.worker_pids

    def on_signal(signum: int, frame: Any) -> None:
        envs.close(terminate=True)

    def signal_once_waiting() -> None:
        deadline = time.monotonic() + 10
        while envs.state is not vecenv.State.WAITING_STEP and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, on_signal)
    try:
        threading.Thread(target=signal_once_waiting).start()
        with pytest.raises(
            WorkerDiedError, match=r"close\(terminate=True\), called while `step` ran in the same thread"
        ):
            envs.step(np.zeros((4, 2), np.float32))
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert envs.closed and envs.state is vecenv.State.CLOSED
    assert all(c is None or c.closed for c in transport_of(envs).conns)
    assert not [p for p in pids if _alive(p)]


FORKED_CHILD = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {root!r})
    import numpy as np
    import vecenv
    from tests.helpers.faults import healthy_fns

    if __name__ == "__main__":
        envs = vecenv.SubprocVectorEnv(healthy_fns(4), 2, context={ctx!r})
        envs.reset(seed=0)
        read, write = os.pipe()
        if os.fork() == 0:  # the child: does {what!r} with the env it inherited, then exits normally
            os.close(read)
            try:
                if {what!r} == "step":
                    envs.step(np.zeros((4, 2), np.float32))
                elif {what!r} == "close":
                    envs.close()
                elif {what!r} == "del":
                    del envs
                said = "ok"
            except Exception as exc:
                said = f"{{type(exc).__name__}}: {{exc}}"
            os.write(write, said.encode())
            sys.exit(0)  # the interpreter's exit, with multiprocessing's exit hook
        os.close(write)
        said = b""
        while chunk := os.read(read, 4096):
            said += chunk
        os.wait()
        obs = envs.step(np.zeros((4, 2), np.float32))[0]
        print(json.dumps({{"child": said.decode(), "obs": obs.tolist(), "pids": envs.worker_pids}}), flush=True)
        envs.close()
    """
)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("ctx", ["fork", "forkserver", "spawn"])
@pytest.mark.parametrize("what", ["exit", "step", "close", "del"])
def test_a_child_forked_from_the_parent_leaves_its_workers_alone(ctx: str, what: str, tmp_path: Path) -> None:
    """``os.fork()`` while a vector env is open: whatever the child does with the copy it
    inherited (nothing, a step, close(), dropping it) and however it exits, the parent's workers
    keep serving the parent; the child's step is refused, naming both processes."""
    script = tmp_path / "parent.py"
    script.write_text(FORKED_CHILD.format(root=str(ROOT), ctx=ctx, what=what))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "AssertionError" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    if what == "step":
        assert report["child"].startswith("InvalidStateError: `step"), report["child"]
        assert "which this process was forked from" in report["child"], report["child"]
    else:
        assert report["child"] == "ok", report["child"]
    ref = SyncVectorEnv(healthy_fns(4))
    ref.reset(seed=0)
    expected = ref.step(np.zeros((4, 2), np.float32))[0]
    ref.close()
    assert np.array_equal(np.asarray(report["obs"], np.float32), expected)
    assert not [p for p in report["pids"] if _alive(p)]


def _close_inherited(envs: vecenv.SubprocVectorEnv, how: str) -> None:
    """In a multiprocessing child forked from the parent: close the vector env it inherited."""
    if how != "exit":
        envs.close(terminate=how == "close-terminate")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inline_group", [False, True], ids=["workers", "inline-group"])
@pytest.mark.parametrize("how", ["exit", "close", "close-terminate"])
def test_a_multiprocessing_child_forked_from_the_parent_leaves_its_workers_alone(how: str, inline_group: bool) -> None:
    """A ``multiprocessing`` child of the fork context inherits the vector env as ``os.fork()``'s
    does, but ends through multiprocessing's own exit (its finalizers run, the parent's records
    of its children copied with it): neither its ``close()`` nor that exit may stop the
    parent's workers, unlink their memory or write to their pipes."""
    import multiprocessing

    with vecenv.SubprocVectorEnv(healthy_fns(4), 2, context="fork", inline_group=inline_group) as envs:
        envs.reset(seed=0)
        pids = [p for p in envs.worker_pids if p is not None]
        child = multiprocessing.get_context("fork").Process(target=_close_inherited, args=(envs, how))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert all(_alive(p) for p in pids) and not envs.closed
        obs = envs.step(np.zeros((4, 2), np.float32))[0]
    ref = SyncVectorEnv(healthy_fns(4))
    ref.reset(seed=0)
    np.testing.assert_array_equal(obs, ref.step(np.zeros((4, 2), np.float32))[0])
    ref.close()
    assert not [p for p in pids if _alive(p)]


def _pidfds() -> int:
    """How many pidfds this process holds."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]"
    return count


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfds are Linux's")
def test_a_child_forked_from_the_parent_holds_no_pidfd_of_its_workers() -> None:
    """The parent waits on a pidfd of each worker; a child of ``os.fork()`` never does (its
    calls are refused, its ``close()`` leaves the workers alone), so it must not keep a copy of
    them open for as long as it lives (a data loader's workers, a server forked from the trainer)."""
    with vecenv.SubprocVectorEnv(healthy_fns(4), 2, context="fork") as envs:
        envs.reset(seed=0)
        before = _pidfds()
        assert before >= 2  # the parent's own, one per worker
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the child: report its pidfds, then leave without Python's exit
            try:
                os.write(write, str(_pidfds()).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            in_child = int(pipe.read())
        os.waitpid(child, 0)
        assert in_child == before - 2  # the workers' two are gone, nothing else the child had
        assert _pidfds() == before  # the parent's are untouched
        envs.step(np.zeros((4, 2), np.float32))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ender", ["call-timeout", "close-from-thread"])
def test_a_restart_whose_rebuild_hangs_ends_with_the_call_or_with_close(tmp_path: Path, ender: str) -> None:
    """A worker dies mid-step and its replacement hangs while it builds its envs (no
    start_timeout): the step's own timeout ends the wait, and so does close() from another
    thread, which must not see the replacement it killed restarted again."""
    marker = str(tmp_path / "died")
    fns = fns_of(SlowReplacementEnv, 4, marker=marker)
    envs = vecenv.SubprocVectorEnv(fns, 2, context="fork", on_worker_death="restart")
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(4, np.int64))
        if ender == "call-timeout":
            with pytest.raises(WorkerDiedError, match="took longer than what was left of the call's timeout"):
                envs.step(np.zeros(4, np.int64), timeout=1.0)
            return
        thread, outcome = _step_in_a_thread(envs, np.zeros(4, np.int64))
        deadline = time.monotonic() + 20
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.path.exists(marker), "the worker did not die"
        envs.close(timeout=0.5)
        thread.join(20)
        assert not thread.is_alive(), "the stepping thread is still waiting after close()"
        assert len(outcome) == 1 and isinstance(outcome[0], WorkerDiedError), outcome
        assert envs.closed
        assert all(c is None or c.closed for c in transport_of(envs).conns)
    finally:
        envs.close(timeout=0)


# -- interrupts --------------------------------------------------------------------------------

N = 4
SYNC_FNS = [lambda: gym.make("CartPole-v1")] * N


def _interrupt_send(envs: Any, worker: int, after: bool) -> None:
    """Make the next command sent to ``worker`` raise KeyboardInterrupt, before any byte is
    written (``after=False``) or just after the whole message went out (``after=True``): a
    Ctrl+C landing between two statements of the send."""
    transport = transport_of(envs)
    real = transport.send

    def send(index: int, message: Any, timeout: float | None = None) -> None:
        if index != worker:
            return real(index, message, timeout)
        del transport.send  # once
        if after:
            real(index, message, timeout)
        raise KeyboardInterrupt

    transport.send = send


def _tear_write(envs: Any, worker: int) -> None:
    """Make the next write on ``worker``'s pipe put half a message in it, then be interrupted."""
    conn = transport_of(envs).conns[worker]
    real = process_transport.send_within

    def torn(
        to: Any, data: bytes, fd: int | None, timeout: float | None, progress: Any = None, room: bool = False
    ) -> None:
        if to is not conn:
            return real(to, data, fd, timeout, progress, room)
        process_transport.send_within = real  # once
        progress.state = Progress.PART  # what send_within says before a write that may be cut
        os.write(conn.fileno(), len(data).to_bytes(4, "big", signed=True) + bytes(data)[: len(data) // 2])
        raise KeyboardInterrupt

    process_transport.send_within = torn


def _recovers_as_sync(envs: Any, sync: SyncVectorEnv) -> None:
    """After an interrupt: a reset and the steps after it give exactly Sync's data."""
    assert_same(envs.reset(seed=7), sync.reset(seed=7), "reset after the interrupt")
    for t in range(5):
        actions = np.array([t % 2, 1, 0, 1])
        assert_same(envs.step(actions), sync.step(actions), f"step {t}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("worker", "after"),
    [(0, False), (1, False), (1, True)],
    ids=["before-the-first-write", "between-two-workers", "after-the-last-write"],
)
@pytest.mark.parametrize("call", ["step_async", "reset_async", "call_async"])
def test_interrupt_while_sending_then_reset_matches_sync(call: str, worker: int, after: bool) -> None:
    envs = vecenv.make("CartPole-v1", N, 2, context="fork")
    sync = SyncVectorEnv(SYNC_FNS)
    try:
        envs.reset(seed=0)
        _interrupt_send(envs, worker, after)
        with pytest.raises(KeyboardInterrupt):
            if call == "step_async":
                envs.step_async(np.ones(N, np.int64))
            elif call == "reset_async":
                envs.reset_async(seed=5)
            else:
                envs.call_async("render")
        if call == "step_async":
            with pytest.raises(vecenv.NeedsResetError, match="interrupted"):
                envs.step(np.ones(N, np.int64))
        _recovers_as_sync(envs, sync)
    finally:
        sync.close()
        envs.close()


_WHOLE_CALLS = {
    "step": lambda envs: envs.step(np.ones(N, np.int64)),
    "reset": lambda envs: envs.reset(seed=5),
    "call": lambda envs: envs.call("reset", seed=3),
    "get_attr": lambda envs: envs.get_attr("np_random_seed"),
    "set_attr": lambda envs: envs.set_attr("tag", 1),
    "rollout": lambda envs: envs.rollout(3),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "where", [(CallRunner, "finish"), (WorkerPool, "gather")], ids=["before-the-wait", "as-it-begins"]
)
@pytest.mark.parametrize("call", list(_WHOLE_CALLS))
def test_interrupt_between_a_calls_send_and_its_wait_leaves_nothing_pending(
    call: str, where: tuple[type, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl+C after a call's commands are out, before its wait has begun or as it begins: the
    call is abandoned as an interrupted send is, never left pending with nobody to wait for it
    (the next call raised AlreadyPendingCallError) nor with its workers still owing replies
    that are wanted (a reset then found them busy)."""
    envs = vecenv.make("CartPole-v1", N, 2, context="fork")
    sync = SyncVectorEnv(SYNC_FNS)
    owner, name = where
    real = getattr(owner, name)

    def interrupted(self: Any, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(owner, name, real)  # once
        raise KeyboardInterrupt

    try:
        envs.reset(seed=0)
        monkeypatch.setattr(owner, name, interrupted)
        with pytest.raises(KeyboardInterrupt):
            _WHOLE_CALLS[call](envs)
        assert getattr(owner, name) is real, "the call never reached its wait"
        assert envs.state is State.DEFAULT
        if call in ("step", "reset", "rollout"):  # its envs may have acted on it
            with pytest.raises(vecenv.NeedsResetError, match=r"\(KeyboardInterrupt\): call `reset\(\)` first"):
                envs.step(np.ones(N, np.int64))
        _recovers_as_sync(envs, sync)
    finally:
        sync.close()
        envs.close()


CTRL_C_IN_A_FORK_HOOK = textwrap.dedent(
    """
    import json, os, signal, sys
    sys.path.insert(0, {root!r})
    import vecenv
    from tests.helpers.faults import healthy_fns

    armed = []

    def interrupt_after_fork() -> None:  # Ctrl+C landing in an at-fork hook, as logging's
        if armed:
            armed.clear()
            os.kill(os.getpid(), signal.SIGINT)

    if __name__ == "__main__":
        os.register_at_fork(after_in_parent=interrupt_after_fork)
        armed.append(True)
        try:
            envs = vecenv.SubprocVectorEnv(healthy_fns(4), 2, context="fork")
        except KeyboardInterrupt:
            outcome = "KeyboardInterrupt"
        else:
            outcome = "built"
            envs.close()
        import multiprocessing
        print(json.dumps({{"outcome": outcome, "children": len(multiprocessing.active_children())}}), flush=True)
    """
)


def _signal_while_sending(envs: Any, worker: int, signum: int) -> None:
    """Make the next command sent to ``worker`` first raise ``signum`` in this thread: its
    handler runs right there, in the middle of the call that sends (the earlier workers have
    their command, the later ones not yet)."""
    transport = transport_of(envs)
    real = transport.send

    def send(index: int, message: Any, timeout: float | None = None) -> None:
        if index == worker:
            del transport.send  # once
            signal.raise_signal(signum)
        return real(index, message, timeout)

    transport.send = send


_HANDLER_CALLS = {
    "get_attr": lambda envs: envs.get_attr("np_random_seed"),
    "call": lambda envs: envs.call("spec"),
    "step": lambda envs: envs.step(np.zeros(N, np.int64)),
    "reset": lambda envs: envs.reset(seed=1),
    "rollout": lambda envs: envs.rollout(2),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("worker", [0, 1], ids=["before-the-first-send", "between-two-workers"])
@pytest.mark.parametrize("inner", list(_HANDLER_CALLS))
@pytest.mark.parametrize("outer", ["step", "reset", "get_attr"])
def test_a_call_from_a_signal_handler_inside_a_running_call_is_refused_and_the_call_goes_on(
    outer: str, inner: str, worker: int
) -> None:
    """A signal handler that calls the vector env while a call of the same thread is sending
    cannot wait for that call: its call raises AlreadyPendingCallError naming both, touches
    nothing, and the running call returns Sync's data (it used to run in the middle of the
    sends, and met workers busy with the running call, or broke the pipes' protocol)."""
    envs = vecenv.make("CartPole-v1", N, 2, context="fork")
    sync = SyncVectorEnv(SYNC_FNS)
    outcome: list[BaseException | None] = []

    def handler(signum: int, frame: Any) -> None:
        try:
            _HANDLER_CALLS[inner](envs)
            outcome.append(None)
        except Exception as exc:
            outcome.append(exc)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0), "reset")
        actions = np.array([1, 0, 1, 1])
        _signal_while_sending(envs, worker, signal.SIGUSR1)
        if outer == "step":
            assert_same(envs.step(actions), sync.step(actions), "the step the handler interrupted")
        elif outer == "reset":
            assert_same(envs.reset(seed=4), sync.reset(seed=4), "the reset the handler interrupted")
        else:
            assert envs.get_attr("np_random_seed") == sync.get_attr("np_random_seed")
        assert len(outcome) == 1, "the handler did not run"
        error = outcome[0]
        assert isinstance(error, vecenv.errors.AlreadyPendingCallError), repr(error)
        assert isinstance(error, VecEnvError)
        assert f"Calling `{inner}` while `{outer}` runs in this same thread" in str(error), str(error)
        assert error.name == outer
        _recovers_as_sync(envs, sync)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        sync.close()
        envs.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_subclass_method_may_call_the_vector_env_inside_a_running_call(num_workers: int) -> None:
    """Calls nested on purpose are not refused as a signal handler's would be: a subclass's
    ``reset_wait``, run by ``reset``, reads an attribute through ``self.get_attr``."""

    class Seeded(vecenv.SubprocVectorEnv):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.seen: list[tuple[int, ...]] = []

        def reset_wait(self, *args: Any, **kwargs: Any) -> Any:
            result = super().reset_wait(*args, **kwargs)
            self.seen.append(tuple(self.get_attr("np_random_seed")))
            return result

    sync = SyncVectorEnv(SYNC_FNS)
    try:
        with Seeded(SYNC_FNS, num_workers) as envs:
            assert_same(envs.reset(seed=0), sync.reset(seed=0), "reset")
            assert envs.seen == [tuple(sync.get_attr("np_random_seed"))]
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_ctrl_c_while_a_worker_is_forked_is_raised_not_lost(tmp_path: Path) -> None:
    """A KeyboardInterrupt raised in one of Python's at-fork hooks is printed as "Exception
    ignored" and dropped: the constructor went on as if no Ctrl+C came (and a hook cut half-way,
    logging's, leaves its lock held). Held over the start, it is raised once the worker is
    started and recorded, and the constructor ends its workers."""
    script = tmp_path / "ctrl_c_in_fork_hook.py"
    script.write_text(CTRL_C_IN_A_FORK_HOOK.format(root=str(ROOT)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"outcome": "KeyboardInterrupt", "children": 0}


@pytest.mark.timeout(60)
def test_ctrl_c_never_leaves_the_fence_lock_held() -> None:
    """The fast path's memory barrier takes and releases a lock; a signal handled between the
    two (here a profiling timer's, every 0.2 ms of CPU, raising as Ctrl+C would) must not leave
    it held, or the next barrier of the process waits forever. The handler raises once per
    arming, and only the loop of barriers arms it: a tick that lands while the check runs (or
    before the timer is off) returns, instead of raising where nothing catches it."""

    class Interrupt(Exception):
        pass

    armed = False

    def interrupt(signum: int, frame: Any) -> None:
        nonlocal armed
        if armed:
            armed = False
            raise Interrupt

    previous = signal.signal(signal.SIGPROF, interrupt)
    interrupts = 0
    try:
        signal.setitimer(signal.ITIMER_PROF, 0.0002, 0.0002)
        while interrupts < 300:
            try:
                armed = True
                while True:
                    fastpath.fence()
            except Interrupt:
                interrupts += 1
                assert not fastpath._FENCE.locked(), f"the lock was left held by interrupt {interrupts}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@pytest.mark.timeout(60)
def test_interrupt_while_sending_batches_then_async_reset_recovers() -> None:
    envs = vecenv.make("CartPole-v1", N, 2, context="fork", batch_size=2)
    sync = SyncVectorEnv(SYNC_FNS)
    try:
        envs.async_reset(seed=0)
        *_, ids = envs.recv()
        *_, other = envs.recv()
        _interrupt_send(envs, 1, after=False)
        with pytest.raises(KeyboardInterrupt):
            envs.send(np.ones(N, np.int64), np.arange(N))
        with pytest.raises(vecenv.NeedsResetError, match="interrupted"):
            envs.recv()
        envs.async_reset(seed=7)
        obs0, *_ = sync.reset(seed=7)
        got = {}
        for _ in range(2):
            obs, rewards, terms, truncs, infos, ids = envs.recv()
            for row, i in enumerate(ids):
                got[int(i)] = obs[row]
        assert_same(np.stack([got[i] for i in range(N)]), obs0)
    finally:
        sync.close()
        envs.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("restart", [False, True], ids=["raise", "restart"])
def test_interrupt_tearing_a_write_breaks_clearly_or_restarts(restart: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Half a command left in a pipe: that worker cannot be talked to again. Without restarts
    the vector env says so and closes cleanly; with them the reset rebuilds it. (The step's
    command must go through the pipe to be torn there: where nobody spins it always does,
    never through the shared words of the fast path.)"""
    no_spinning(monkeypatch)
    kwargs: dict[str, Any] = {"on_worker_death": "restart"} if restart else {}
    envs = vecenv.make("CartPole-v1", N, 2, context="fork", **kwargs)
    assert transport_of(envs).spin_mode is fastpath.SpinMode.OFF
    sync = SyncVectorEnv(SYNC_FNS)
    try:
        envs.reset(seed=0)
        _tear_write(envs, 1)
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.ones(N, np.int64))
        if restart:
            obs, infos = envs.reset(seed=7)
            assert_same(obs, sync.reset(seed=7)[0])
            assert infos["worker_restarted"][2:].all()
            assert_same(envs.step(np.ones(N, np.int64))[0], sync.step(np.ones(N, np.int64))[0])
        else:
            with pytest.raises(WorkerDiedError, match=r"worker 1 .*interrupt \(Ctrl\+C\) cut a message"):
                envs.reset(seed=7)
    finally:
        sync.close()
        t0 = time.monotonic()
        envs.close()
        assert time.monotonic() - t0 < 5


SIGTERM_WHILE_READING = textwrap.dedent(
    """
    import json, signal, sys
    sys.path.insert(0, {root!r})
    import gymnasium as gym
    import numpy as np
    from gymnasium.vector import SyncVectorEnv
    import vecenv
    from tests.helpers.faults import transport_of
    from vecenv.interrupts import Terminated, exit_status, sigterm_raises


    def main():
        signal.signal(signal.SIGTERM, sigterm_raises())  # as vecenv-collect and vecenv-bench do
        envs = vecenv.make("CartPole-v1", 4, 2, context="fork")
        sync = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4)
        try:
            envs.reset(seed=0)
            reader = transport_of(envs).readers[0]
            real = reader.read

            def read(*args):
                del reader.read  # once
                print("reading", flush=True)
                sys.stdin.readline()  # the test sends SIGTERM, then this line
                return real(*args)

            reader.read = read
            try:
                envs.get_attr("spec")
            except Terminated as exc:
                obs, _ = envs.reset(seed=7)
                same = bool(np.array_equal(obs, sync.reset(seed=7)[0]))
                print(json.dumps({{"raised": type(exc).__name__, "same_as_sync": same}}), flush=True)
                return exit_status(exc)
            return 0
        finally:
            sync.close()
            envs.close()


    if __name__ == "__main__":
        sys.exit(main())
    """
)


@pytest.mark.timeout(60)
def test_sigterm_while_a_reply_is_read_waits_for_the_read(tmp_path: Path) -> None:
    """Under the commands' SIGTERM handler (it raises ``Terminated``, a KeyboardInterrupt), a
    SIGTERM that comes while a worker's reply is being read is held as Ctrl+C is: the message is
    read whole, ``Terminated`` comes after it, the vector env goes on exactly as Sync, and the
    process ends with 143. Unheld, the read was cut and that worker had to be ended."""
    script = tmp_path / "sigterm_while_reading.py"
    script.write_text(SIGTERM_WHILE_READING.format(root=str(ROOT)))
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "reading\n", proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGTERM)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=50)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert json.loads(out.splitlines()[-1]) == {"raised": "Terminated", "same_as_sync": True}, err


# -- dropped without close() -----------------------------------------------------------------


def _use_plain(envs: Any) -> None:
    envs.reset(seed=0)
    envs.step(np.zeros(N, np.int64))
    envs.get_attr("spec")


def _use_batches(envs: Any) -> None:
    envs.async_reset(seed=0)
    *_, ids = envs.recv()
    envs.send(np.zeros(len(ids), np.int64), ids)


def _use_timeout(envs: Any) -> None:
    envs.reset(seed=0)
    with pytest.raises(vecenv.VecEnvTimeoutError):  # env 3 sleeps 2 s in its first step
        envs.step(np.zeros((N, 2), np.float32), timeout=0.05)


def _use_env_error(envs: Any) -> None:
    with pytest.raises(AttributeError):
        envs.call("no_such_method")


def _use_broken(envs: Any) -> None:
    envs.reset(seed=0)
    os.kill(_worker_pids(envs)[-1], signal.SIGKILL)
    with pytest.raises(WorkerDiedError):
        envs.step(np.zeros(N, np.int64))
    with pytest.raises(WorkerDiedError):
        envs.reset(seed=0)


def _use_restarted(envs: Any) -> None:
    envs.reset(seed=0)
    os.kill(_worker_pids(envs)[-1], signal.SIGKILL)
    envs.step(np.zeros(N, np.int64))


USES = {
    "step": (_use_plain, {}),
    "batches": (_use_batches, {"batch_size": 2}),
    "timeout": (_use_timeout, {"fns": fault_fns(N, "sleep", "step", 3, duration=2.0)}),
    "env-error": (_use_env_error, {}),
    "worker-died": (_use_broken, {}),
    "worker-restarted": (_use_restarted, {"on_worker_death": "restart"}),
    "inline-group": (_use_plain, {"inline_group": True}),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use", list(USES))
def test_dropped_vector_env_goes_at_once_without_the_cyclic_gc(use: str) -> None:
    """``del envs`` with the cyclic GC off: no reference cycle keeps the vector env, so its
    workers, pipes and shared block go at once, as ``AsyncVectorEnv``'s do."""
    run, kwargs = USES[use]
    before = open_fds()
    gc.collect()
    gc.disable()
    try:
        kwargs = dict(kwargs)
        fns = kwargs.pop("fns", None)
        if fns is None:
            envs = vecenv.make("CartPole-v1", N, 2, context="fork", **kwargs)
        else:
            envs = vecenv.SubprocVectorEnv(fns, 2, context="fork", **kwargs)
        run(envs)
        pids = _worker_pids(envs)
        ref = weakref.ref(envs)
        del envs
        assert ref() is None, "the vector env is still alive: a reference cycle holds it"
        # Reaped by close(): gone now, not after a wait (a zombie counts as gone).
        assert [p for p in pids if _alive(p)] == []
        left = {fd: target for fd, target in open_fds().items() if before.get(fd) != target}
        assert not left, f"descriptors left open: {left}"
    finally:
        gc.enable()


# -- close(): an env that hangs, another that raises -----------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timeout", [None, 0.5])
def test_close_raises_an_env_close_error_even_while_another_env_hangs(timeout: float | None) -> None:
    envs = vecenv.SubprocVectorEnv(odd_fns(N, {0: "close-hang", 3: "close-raise"}), 2, context="fork")
    envs.reset(seed=0)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="injected close error of env 3") as info:
        envs.close(timeout=timeout)
    took = time.monotonic() - t0
    grace = vecenv.DEFAULT_CLOSE_TIMEOUT if timeout is None else timeout
    assert took < grace + 2.5, f"close took {took:.1f} s"
    assert any("env 3" in note for note in info.value.__notes__), info.value.__notes__
    assert envs.closed


# -- a parent killed with replies unread -----------------------------------------------------

KILLED_PARENT = textwrap.dedent(
    """
    import json, os, signal, sys
    sys.path.insert(0, {root!r})
    from multiprocessing.connection import wait
    import numpy as np
    import vecenv
    from tests.helpers.faults import healthy_fns, transport_of

    if __name__ == "__main__":
        envs = vecenv.SubprocVectorEnv(healthy_fns(8), 4, context={ctx!r})
        envs.reset(seed=0)
        envs.step_async(np.zeros((8, 2), np.float32))
        pending = list(transport_of(envs).conns)
        while pending:  # every reply has arrived, and none is read
            pending = [c for c in pending if c not in wait(pending, 5)]
        print(json.dumps(envs.worker_pids), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


class ForksAHelperEnv(gym.Env):
    """Env 0's first step forks a helper process (as env code that forks a simulator server
    without exec does), which lives on, holding copies of every descriptor its worker had,
    until the test kills it; its pid is written to ``pid_file`` before the step returns. With
    ``die``, env 0's second step ends its worker."""

    def __init__(self, index: int, pid_file: str, die: bool) -> None:
        self.index, self.pid_file, self.die = index, pid_file, die
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        if self.index == 0 and self.t == 1:
            pid = os.fork()
            if pid == 0:  # the helper: waits for its end, never returns into the worker's code
                try:
                    signal.pause()
                finally:
                    os._exit(0)
            with open(self.pid_file, "w") as f:
                f.write(str(pid))
        if self.index == 0 and self.t == 2 and self.die:
            os._exit(3)
        return np.zeros(2, np.float32), 1.0, False, False, {}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("die", [True, False], ids=["worker-dies", "close"])
@pytest.mark.parametrize("ctx", ["fork", "spawn", "forkserver"])
def test_a_helper_that_env_code_forked_holds_nothing_up(ctx: str, die: bool, tmp_path: Path) -> None:
    """A process that env code forks keeps copies of its worker's pipe and of multiprocessing's
    sentinel, so neither tells that the worker ended: its death is still reported within the
    wait (it waited for the helper to end), and close() ends the workers at once (it waited out
    its grace for each)."""
    pid_file = str(tmp_path / "helper")
    fns = [functools.partial(ForksAHelperEnv, i, pid_file, die) for i in range(4)]
    envs = vecenv.SubprocVectorEnv(fns, num_workers=2, context=ctx)
    helper = None
    try:
        envs.reset(seed=0)
        envs.step(np.zeros(4, np.int64))
        with open(pid_file) as f:
            helper = int(f.read())
        assert _alive(helper)
        start = time.monotonic()
        if die:
            with pytest.raises(WorkerDiedError, match="worker 0 .* exited with code 3"):
                envs.step(np.zeros(4, np.int64), timeout=20)
        else:
            envs.step(np.zeros(4, np.int64))
            envs.close()
        took = time.monotonic() - start
        assert took < 2.0, f"took {took:.1f} s"
        assert _alive(helper), "the helper is env code's own: it lives on"
    finally:
        envs.close()
        if helper is not None:
            os.kill(helper, signal.SIGKILL)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_parent_killed_with_replies_unread_leaves_workers_quiet(ctx: str, tmp_path: Path) -> None:
    """SIGKILL to a parent whose pipes hold replies it never read: each worker's next read
    fails with ECONNRESET; the workers exit without a word on stderr."""
    script = tmp_path / "parent.py"
    script.write_text(KILLED_PARENT.format(root=str(ROOT), ctx=ctx))
    for attempt in range(3):
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        pids = json.loads(proc.stdout.splitlines()[-1])
        # stderr reached EOF: every worker (they share it) has closed its files, which a process
        # does on its way out, a moment before it is a zombie; give that moment a bound.
        deadline = time.monotonic() + 10.0
        while [p for p in pids if _alive(p)] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not [p for p in pids if _alive(p)]
        assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, (
            f"attempt {attempt}: a worker wrote to stderr:\n{proc.stderr}"
        )


GIL_HOLDING_PARENT = textwrap.dedent(
    """
    import json, os, re, signal, sys, time
    sys.path.insert(0, {root!r})
    import gymnasium as gym
    import numpy as np
    import vecenv

    class NativeCall(gym.Env):
        # A step in C code that holds the GIL far longer than the test (a native simulator's call).
        observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros(2, np.float32), {{}}

        def step(self, action):
            open(os.path.join({marks!r}, str(os.getpid())), "w").close()
            re.match(r"(a+)+$", "a" * 40 + "b")
            return np.zeros(2, np.float32), 0.0, False, False, {{}}

    if __name__ == "__main__":
        envs = vecenv.SubprocVectorEnv([NativeCall] * 2, num_workers=2, context={ctx!r})
        envs.reset(seed=0)
        envs.step_async(np.zeros(2, np.int64))
        while len(os.listdir({marks!r})) < 2:  # both workers are inside the native call
            time.sleep(0.01)
        print(json.dumps(envs.worker_pids), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_a_killed_parent_ends_workers_whose_env_code_holds_the_gil(ctx: str, tmp_path: Path) -> None:
    """The workers' watch thread needs the GIL, which a long native call holds; the kernel's
    parent-death signal does not: the workers end with the parent, not when the call returns."""
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "parent.py"
    script.write_text(GIL_HOLDING_PARENT.format(root=str(ROOT), ctx=ctx, marks=str(marks)))
    out = tmp_path / "out.txt"
    pids: list[int] = []
    try:
        with open(out, "w") as sink:  # not a pipe: a surviving worker would hold it open
            proc = subprocess.run([sys.executable, str(script)], stdout=sink, stderr=subprocess.STDOUT, timeout=60)
        text = out.read_text()
        assert proc.returncode == -signal.SIGKILL, text
        pids = json.loads(text.splitlines()[-1])
        deadline = time.monotonic() + 10.0
        while [p for p in pids if _alive(p)] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not [p for p in pids if _alive(p)], "a worker outlived its parent inside a native call"
    finally:
        for pid in pids or [int(name) for name in os.listdir(marks)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class ThreadsEnv(gym.Env):
    """Reports the Python threads of the process it runs in, and what forking there warns."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(2, np.float32), 0.0, False, False, {}

    def thread_names(self) -> list[str]:
        return sorted(t.name for t in threading.enumerate())

    def fork_warnings(self) -> list[str]:
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pid = os.fork()
            if pid == 0:
                os._exit(0)
        os.waitpid(pid, 0)
        return [str(w.message) for w in caught]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_a_worker_started_from_the_main_thread_runs_no_thread_of_ours(ctx: str) -> None:
    """Where the kernel ends a worker with its parent (Linux, started by the parent's main
    thread), the worker runs no watch thread: env code that forks forks a process of one
    thread (Python 3.12+ warns of the other kind), as it would under SyncVectorEnv."""
    envs = vecenv.SubprocVectorEnv([ThreadsEnv] * 2, num_workers=2, context=ctx)
    try:
        assert envs.call("thread_names") == (["MainThread"], ["MainThread"])
        assert envs.call("fork_warnings") == ([], [])
    finally:
        envs.close()


# -- errors name the env -----------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("odd", "error"),
    [("lock-info", TypeError), ("huge-reward", OverflowError)],
)
@pytest.mark.parametrize("inline", [False, True], ids=["workers", "inline-group"])
def test_value_errors_name_the_env_not_the_worker(odd: str, error: type, inline: bool) -> None:
    envs = vecenv.SubprocVectorEnv(odd_fns(N, {3: odd}), 2, context="fork", inline_group=inline)
    try:
        envs.reset(seed=0)
        with pytest.raises(error) as info:
            envs.step(np.zeros(N, np.int64))
        notes = " ".join(getattr(info.value, "__notes__", []))
        assert "raised in env 3 (worker 1" in notes, notes
        assert "envs 2..3" not in notes
    finally:
        envs.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("odd", "call", "where"),
    [
        ("gen-info", "step", "during `step_wait`, its info['stats']['pending'] is"),
        ("gen-reset-info", "reset", "during `reset_wait`, its info['stats']['pending'] is"),
        ("gen-info", "rollout", "during `rollout_wait`, its info['stats']['pending'] at step 0 of the rollout is"),
    ],
    ids=["step", "reset", "rollout"],
)
def test_an_info_value_that_cannot_be_pickled_is_named(odd: str, call: str, where: str) -> None:
    """Pickling's message names only the type (``cannot pickle 'generator' object``): the note
    names the env and the key path of the value within its info, among others that pickle."""
    envs = vecenv.SubprocVectorEnv(odd_fns(N, {3: odd}), 2, context="fork")
    try:
        with pytest.raises(TypeError, match="cannot pickle 'generator'") as info:
            envs.reset(seed=0)
            if call == "step":
                envs.step(np.zeros(N, np.int64))
            elif call == "rollout":
                envs.rollout(2)
        notes = " ".join(info.value.__notes__)
        assert f"raised in env 3 (worker 1) {where} a builtins.generator, which cannot be pickled" in notes, notes
        assert "num_workers=0" in notes, notes
        assert envs.get_attr("index") == (0, 1, 2, 3)  # the worker answers on
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_unpicklable_call_result_names_the_env() -> None:
    envs = vecenv.SubprocVectorEnv(odd_fns(N, {3: "lock-call"}), 2, context="fork")
    try:
        with pytest.raises(TypeError, match="pickle") as info:
            envs.call("handle")
        assert "raised in env 3 (worker 1" in " ".join(info.value.__notes__), info.value.__notes__
        assert envs.get_attr("index") == (0, 1, 2, 3)  # the worker answers on
    finally:
        envs.close()


def _holding(lock: Any) -> gym.Env:
    """A constructor's body that keeps ``lock`` (a lambda capturing it cannot be pickled)."""
    assert lock is not None
    return FaultEnv(index=0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("inline", [False, True], ids=["workers", "inline-group"])
def test_unpicklable_env_fn_is_named(inline: bool) -> None:
    """Pickling's own error names the lock it met, not whose it was: among many constructors,
    the note names the one that cannot travel (its index, name and line), and nothing starts."""
    lock = threading.Lock()
    fns = healthy_fns(N)
    fns[3] = lambda: _holding(lock)
    before = open_fds()
    with pytest.raises(TypeError, match="pickle") as info:
        vecenv.SubprocVectorEnv(fns, 2, context="fork", inline_group=inline)
    notes = " ".join(info.value.__notes__)
    assert "`env_fns[3]` (test_unpicklable_env_fn_is_named.<locals>.<lambda>, " in notes, notes
    assert "cannot be pickled to be sent to worker 1" in notes, notes
    assert open_fds() == before


PATH_LOADED_ENV = """\
import gymnasium as gym


class PathLoadedEnv(gym.Wrapper):
    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ctx", ["spawn", "forkserver"])
@pytest.mark.parametrize("how", ["class", "partial", "lambda"])
def test_an_env_fn_from_a_module_the_workers_cannot_import_is_named(ctx: str, how: str, tmp_path: Path) -> None:
    """A class of a module loaded from a file path (importlib) travels by reference: a worker
    that is not forked cannot import it, and loading the whole group fails before any
    constructor runs. The error names the constructor among many, the module, and the ways
    out (it said only "No module named ..." and "raised in its env group")."""
    name = f"vecenv_path_loaded_{ctx}_{how}"
    path = tmp_path / "elsewhere.py"
    path.write_text(PATH_LOADED_ENV)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        cls = module.PathLoadedEnv
        fns: list[Any] = healthy_fns(N)
        fns[3] = {"class": cls, "partial": functools.partial(cls), "lambda": lambda: cls()}[how]
        with pytest.raises(ModuleNotFoundError, match=name) as info:
            vecenv.SubprocVectorEnv(fns, 2, context=ctx)
    finally:
        del sys.modules[name]
    notes = " ".join(info.value.__notes__)
    assert "`env_fns[3]` (" in notes, notes
    assert f"refers to module {name!r}, which worker 1 cannot import" in notes, notes
    assert "cloudpickle.register_pickle_by_value(module)" in notes and "'fork'" in notes, notes


@pytest.mark.timeout(60)
def test_unpicklable_group_fn_is_named() -> None:
    lock = threading.Lock()
    groups = [lambda: [FaultEnv(index=0)], lambda: [_holding(lock)]]
    with pytest.raises(TypeError, match="pickle") as info:
        vecenv.SubprocVectorEnv.from_groups(groups, context="fork")
    assert "`group_fns[1]` (" in " ".join(info.value.__notes__), info.value.__notes__


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_unpicklable_call_arguments_name_the_call_and_the_vector_env_goes_on(num_workers: int) -> None:
    """Pickling's error names only the object (``cannot pickle '_thread.lock' object``): the
    note names the call whose arguments it was in, and why they are pickled at all."""
    lock = threading.Lock()
    envs = vecenv.SubprocVectorEnv(healthy_fns(N), num_workers, context="fork")
    try:
        envs.reset(seed=0)
        calls = {
            "call_async": lambda: envs.call("size_of", lock),
            "set_attr": lambda: envs.set_attr("index", lock),
            "reset_async": lambda: envs.reset(options={"lock": lock}),
        }
        for name, call in calls.items():
            with pytest.raises(TypeError, match="pickle") as info:
                call()
            notes = " ".join(getattr(info.value, "__notes__", []))
            assert f"raised while pickling what `{name}` sends to worker 0" in notes, notes
            assert "must be picklable" in notes, notes
        assert envs.get_attr("index") == tuple(range(N))  # nothing was sent: it answers on
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_an_unpicklable_rollout_policy_is_named() -> None:
    lock = threading.Lock()

    def holds_a_lock(observations: np.ndarray) -> np.ndarray:
        assert lock is not None
        return np.zeros((len(observations), 2), np.float32)

    envs = vecenv.SubprocVectorEnv(healthy_fns(N), 2, context="fork")
    try:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match="pickle") as info:
            envs.rollout(2, holds_a_lock)
        notes = " ".join(getattr(info.value, "__notes__", []))
        assert "raised while pickling the policy " in notes and "holds_a_lock" in notes, notes
        assert envs.rollout(2).actions.shape == (2, N, 2)  # nothing was sent: it rolls out on
    finally:
        envs.close()


# -- a low descriptor limit ------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_low_descriptor_limit_leaves_nothing_open(ctx: str) -> None:
    """With ``RLIMIT_NOFILE`` too low for 4 workers, at every limit around what they need: the
    constructor either works or raises one clear error, and leaves no descriptor open. (Four
    workers pass every stage a start can fail at, the first worker, a middle one and the last,
    at half the limits and starts that eight take.)"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource_tracker.ensure_running()  # spawn starts it once per process: not a leak
    before = open_fds()
    # A new descriptor takes the lowest free number, and the limit bounds the numbers.
    base = len(before)
    outcomes: dict[int, str] = {}
    # From too few for a single worker upwards, until three limits in a row let it run: what 4
    # workers need depends on the Python, the kernel (a pidfd per worker where it has them) and
    # the numbers already taken, so the walk finds the edge rather than assuming it.
    step = 1 if ctx == "fork" else 3  # spawn starts slowly: every third limit
    try:
        for limit in range(base, base + 256, step):
            if list(outcomes.values())[-3:] == ["ran"] * 3:
                break
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            try:
                envs = vecenv.SubprocVectorEnv(healthy_fns(4), 4, context=ctx)
            except VecEnvError as exc:
                assert "RLIMIT_NOFILE" in str(exc) and "descriptors" in str(exc), str(exc)
                outcomes[limit] = "refused"
            else:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                envs.reset(seed=0)
                envs.close()
                outcomes[limit] = "ran"
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            left = {fd: t for fd, t in open_fds().items() if before.get(fd) != t}
            assert not left, f"limit {limit}: descriptors left open: {left} (outcomes so far {outcomes})"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert outcomes[base] == "refused", outcomes  # the limit bit
    assert list(outcomes.values())[-3:] == ["ran"] * 3, outcomes  # and, high enough, let it run


# -- scripts without a __main__ guard ----------------------------------------------------------

SCRIPT_HEAD = """\
import os, sys, threading
sys.path.insert(0, {root!r})
with open({marker!r}, "a") as f:  # one line each time this script's top level runs
    f.write(f"{{os.getpid()}}\\n")
stop = threading.Event()
threading.Thread(target=stop.wait, daemon=True).start()  # a logger, a progress monitor
import numpy as np
import gymnasium as gym
import vecenv
"""
#: What builds the vector env (one line), and what uses it; ``{ctx}``: the start method.
BUILDS = {
    "make": "envs = vecenv.make('CartPole-v1', 4, 2{ctx})",
    "subproc": "envs = vecenv.SubprocVectorEnv([lambda: gym.make('CartPole-v1')] * 4, 2{ctx})",
    "sb3": "from vecenv.sb3 import SubprocVecEnv; "
    "envs = SubprocVecEnv([lambda: gym.make('CartPole-v1')] * 4, {sb3ctx}num_workers=2)",
}
USE = {
    "make": "envs.reset(seed=0); envs.step(np.zeros(4, np.int64)); envs.close(); method = envs.start_method",
    "subproc": "envs.reset(seed=0); envs.step(np.zeros(4, np.int64)); envs.close(); method = envs.start_method",
    "sb3": "envs.reset(); envs.step(np.zeros(4, np.int64)); envs.close(); method = envs.vector_env.start_method",
}


def _pythons() -> list[Any]:
    """This interpreter, and others named in ``VECENV_TEST_PYTHONS`` (``:``-separated paths to
    interpreters with numpy, gymnasium and cloudpickle installed): 3.12 and 3.13 warn when a
    threaded process forks, which 3.11 does not."""
    found = [pytest.param(sys.executable, id=f"py{sys.version_info.major}.{sys.version_info.minor}")]
    for path in filter(None, os.environ.get("VECENV_TEST_PYTHONS", "").split(":")):
        exe = shutil.which(path) or path
        version = subprocess.run(
            [exe, "-c", "import sys, gymnasium, cloudpickle; print(*sys.version_info[:2], sep='.')"],
            capture_output=True,
            text=True,
        )
        if version.returncode == 0:
            found.append(pytest.param(exe, id=f"py{version.stdout.strip()}"))
    return found


class Script:
    """A script file that builds a vector env, run in a fresh interpreter."""

    def __init__(self, tmp_path: Path, kind: str, ctx: str | None, guarded: bool = False) -> None:
        self.marker = tmp_path / "runs.txt"
        self.path = tmp_path / "train.py"
        build = BUILDS[kind].format(
            ctx="" if ctx is None else f", context={ctx!r}", sb3ctx="" if ctx is None else f"start_method={ctx!r}, "
        )
        body = [build, USE[kind], "stop.set()", 'print("ok", method, flush=True)']
        if guarded:
            body = ['if __name__ == "__main__":'] + ["    " + line for line in body]
        head = SCRIPT_HEAD.format(root=str(ROOT), marker=str(self.marker))
        #: The line that builds the vector env.
        self.build_line = head.count("\n") + 1 + int(guarded)
        self.path.write_text(head + "\n".join(body) + "\n")

    def run(self, python: str, *options: str) -> tuple[subprocess.CompletedProcess, int]:
        """The finished process, and how many times the script's top level ran."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
        proc = subprocess.run(
            [python, *options, str(self.path)],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
            cwd=self.path.parent,
        )
        runs = len(self.marker.read_text().splitlines()) if self.marker.exists() else 0
        return proc, runs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("python", _pythons())
@pytest.mark.parametrize("kind", ["make", "subproc", "sb3"])
def test_unguarded_script_runs_once_with_one_warning(kind: str, python: str, tmp_path: Path) -> None:
    """No start method given, a helper thread running, no guard: the workers are forked (the
    one method that does not import the script again), with one warning that says why."""
    if kind == "sb3" and python != sys.executable:
        pytest.skip("SB3 (and torch) are installed for this interpreter only")
    script = Script(tmp_path, kind, None)
    # Every DeprecationWarning shown: the warning must bring none of its own (Python 3.12+
    # reports warn_explicit's module_globals of a script, which have no __spec__.loader).
    proc, runs = script.run(python, "-W", "always::DeprecationWarning")
    assert proc.returncode == 0, proc.stderr
    assert "__spec__" not in proc.stderr, proc.stderr
    assert runs == 1, f"the script's top level ran {runs} times:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.splitlines() == ["ok fork"], proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "UnguardedMainWarning" in line]
    assert len(warnings) == 1, proc.stderr
    assert f"train.py:{script.build_line}: " in warnings[0], warnings[0]
    assert "if __name__ == " in warnings[0] and "'fork'" in warnings[0], warnings[0]
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("python", _pythons())
@pytest.mark.parametrize("ctx", ["forkserver", "spawn"])
@pytest.mark.parametrize("kind", ["subproc", "sb3"])
def test_unguarded_script_with_a_start_method_that_imports_it_again_is_refused(
    kind: str, ctx: str, python: str, tmp_path: Path
) -> None:
    """A start method the user chose that would import the script again (forkserver, the
    default from Python 3.14 on, or spawn): one clear error before any process starts, naming
    the script's line and both ways out; the script ran once."""
    if kind == "sb3" and python != sys.executable:
        pytest.skip("SB3 (and torch) are installed for this interpreter only")
    script = Script(tmp_path, kind, ctx)
    proc, runs = script.run(python)
    assert proc.returncode == 1, proc.stderr
    assert runs == 1, f"the script's top level ran {runs} times:\n{proc.stderr}"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("vecenv.errors.UnguardedMainError: "), proc.stderr
    assert f"{script.path}, line {script.build_line}" in last, last
    assert 'if __name__ == "__main__":' in last and "'fork'" in last, last
    assert proc.stderr.count("Traceback") == 1, proc.stderr  # the parent's, no worker's
    assert "bootstrapping phase" not in proc.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ctx", [None, "forkserver", "spawn"])
@pytest.mark.parametrize("how", ["-m", "dir"])
def test_a_packages_unguarded_main_is_never_run_again_so_it_keeps_its_method(
    how: str, ctx: str | None, tmp_path: Path
) -> None:
    """``python -m pkg`` (or ``python pkg/``) runs ``pkg/__main__.py``, which spawn and
    forkserver never run again in a worker: it needs no guard, and nothing is refused,
    warned about or forked instead (with a helper thread, the default is forkserver)."""
    package = tmp_path / "app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    script = Script(tmp_path, "subproc", ctx)
    (package / "__main__.py").write_text(script.path.read_text())
    script.path.unlink()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    target = ["-m", "app"] if how == "-m" else [str(package)]
    proc = subprocess.run(
        [sys.executable, "-W", "always", *target], capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    runs = len(script.marker.read_text().splitlines())
    assert runs == 1, f"the package's __main__ ran {runs} times:\n{proc.stderr}"
    assert proc.stdout.splitlines() == [f"ok {ctx or 'forkserver'}"], proc.stdout + proc.stderr
    assert "UnguardedMain" not in proc.stderr, proc.stderr


#: A module whose top-level code builds a vector env of a class it defines. The depth bound
#: only keeps a failing run finite: each level's workers would build one more level.
BUILDS_ON_IMPORT = """\
class TrainEnv(gym.Wrapper):
    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))


depth = int(os.environ.get("VECENV_TEST_DEPTH", "0"))
if depth >= 2:
    raise SystemExit("built at depth 2")
os.environ["VECENV_TEST_DEPTH"] = str(depth + 1)
envs = vecenv.SubprocVectorEnv([TrainEnv] * 4, 2, context={ctx!r}, daemon=False, start_timeout=60)
envs.close()
stop.set()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("python", _pythons())
@pytest.mark.parametrize("ctx", [None, "forkserver", "spawn"])
def test_a_module_that_builds_a_vector_env_when_imported_by_the_workers_is_refused_there(
    ctx: str | None, python: str, tmp_path: Path
) -> None:
    """``python -m app`` imports ``app.train``, whose top-level code builds a vector env of its
    own class: that class travels by reference, so each spawn/forkserver worker imports
    ``app.train`` to load its constructors and ran that code again, building a vector env of
    its own, whose workers did the same (without end under ``daemon=False``; with daemonic
    workers, an error advising ``daemon=False``). Each worker now refuses it with an error
    naming the module and the line: the module's top level runs once here and at most once per
    worker."""
    package = tmp_path / "app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("from app import train  # noqa: F401\n")
    head = SCRIPT_HEAD.format(root=str(ROOT), marker=str(tmp_path / "runs.txt"))
    train = package / "train.py"
    train.write_text(head + BUILDS_ON_IMPORT.format(ctx=ctx))
    build_line = head.count("\n") + BUILDS_ON_IMPORT.split("envs = ")[0].count("\n") + 1
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "VECENV_TEST_DEPTH")}
    proc = subprocess.run([python, "-m", "app"], capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path)
    runs = len((tmp_path / "runs.txt").read_text().splitlines())
    # Here, and in each worker that got as far as loading before the first refusal ended them all.
    assert 2 <= runs <= 3, f"app.train's top level ran {runs} times:\n{proc.stderr}"
    assert proc.returncode == 1, proc.stderr
    assert "built at depth 2" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("vecenv.errors.UnguardedMainError: ")]
    assert errors, proc.stderr
    assert "they refer to module 'app.train'" in errors[-1], errors[-1]
    assert f"({train}, line {build_line})" in errors[-1] and "'fork'" in errors[-1], errors[-1]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("python", _pythons())
def test_guarded_script_in_a_threaded_parent_keeps_forkserver(python: str, tmp_path: Path) -> None:
    proc, runs = Script(tmp_path, "make", None, guarded=True).run(python)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["ok forkserver"]
    assert "UnguardedMainWarning" not in proc.stderr, proc.stderr
    # Each worker imports the script as __mp_main__: its top level runs, the guarded part not.
    assert runs >= 1, runs


EDITED_WHILE_RUNNING = """
import pathlib
import sys

sys.path.insert(0, {root!r})
import vecenv
from tests.helpers.faults import FaultEnv

if __name__ == "__main__":
    me = pathlib.Path(__file__)
    me.write_text("# a line added while the script runs" + chr(10) * 12 + me.read_text())
    envs = vecenv.SubprocVectorEnv([FaultEnv], 1, context={ctx!r})
    envs.close()
    print("ok")
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ctx", ["forkserver", "spawn"])
def test_a_guarded_script_edited_while_it_runs_is_not_refused(ctx: str, tmp_path: Path) -> None:
    """The script's file changed after it started (edited during a long run): its line numbers
    no longer match the running code, so the guard check cannot read them and changes nothing.
    It refused the guarded script here, reading the line that builds the vector env from the
    edited file (a comment now, outside the guard)."""
    path = tmp_path / "train.py"
    path.write_text(EDITED_WHILE_RUNNING.format(root=str(ROOT), ctx=ctx))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["ok"], proc.stdout
    assert "UnguardedMain" not in proc.stderr, proc.stderr


def _script_running_a_cell(tmp_path: Path, ctx: str | None, cell_guarded: bool) -> tuple[Script, int]:
    """A script whose unguarded top level runs a string of code in its own namespace
    (``exec(cell)``, as a notebook converted to a script does), the cell building the vector
    env (under a guard of its own where ``cell_guarded``); and the line of the ``exec``."""
    script = Script(tmp_path, "subproc", ctx)
    body = [BUILDS["subproc"].format(ctx="" if ctx is None else f", context={ctx!r}"), USE["subproc"]]
    body += ["stop.set()", 'print("ok", method, flush=True)']
    if cell_guarded:
        body = ['if __name__ == "__main__":'] + ["    " + line for line in body]
    head = SCRIPT_HEAD.format(root=str(ROOT), marker=str(script.marker))
    script.path.write_text(head + f"cell = {chr(10).join(body)!r}\nexec(cell)\nstop.set()\n")
    return script, head.count("\n") + 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ctx", [None, "forkserver", "spawn"])
def test_a_script_that_execs_unguarded_code_which_builds_a_vector_env_is_refused_or_forked(
    ctx: str | None, tmp_path: Path
) -> None:
    """The statement building the vector env runs in code the script's unguarded top level
    passed to ``exec``: every spawn/forkserver worker, importing the script, would run it again.
    The guard check read only that innermost level, whose source it could not read, and let it
    through: the workers died with exit code 1 (set_start_method's or CPython's bootstrapping
    error in each). Now the script's line is named, as for any unguarded statement."""
    script, exec_line = _script_running_a_cell(tmp_path, ctx, cell_guarded=False)
    proc, runs = script.run(sys.executable)
    assert runs == 1, f"the script's top level ran {runs} times:\n{proc.stderr}"
    if ctx is None:  # vecenv chose forkserver (a helper thread runs): it forks, and says why
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == ["ok fork"], proc.stdout
        warnings = [line for line in proc.stderr.splitlines() if "UnguardedMainWarning" in line]
        assert len(warnings) == 1 and f"train.py:{exec_line}: " in warnings[0], proc.stderr
        return
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("vecenv.errors.UnguardedMainError: "), proc.stderr
    assert f"{script.path}, line {exec_line}" in last, last
    assert proc.stderr.count("Traceback") == 1, proc.stderr  # the parent's, no worker's


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ctx", [None, "forkserver"])
def test_a_script_that_execs_code_with_its_own_main_guard_keeps_its_method(ctx: str | None, tmp_path: Path) -> None:
    """The exec'd code builds the vector env under a guard of its own: a worker importing the
    script runs that code as ``__mp_main__``, skipping it, so nothing is refused or forked."""
    script, _ = _script_running_a_cell(tmp_path, ctx, cell_guarded=True)
    proc, _ = script.run(sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["ok forkserver"], proc.stdout + proc.stderr
    assert "UnguardedMain" not in proc.stderr, proc.stderr


def _script_building_in_a_thread(tmp_path: Path, ctx: str | None, guarded: bool) -> tuple[Script, int]:
    """A script whose top level starts a thread that builds the vector env and joins it; the
    thread reports what it got. Returns it and the line the script's top level runs meanwhile."""
    script = Script(tmp_path, "make", ctx)
    head = SCRIPT_HEAD.format(root=str(ROOT), marker=str(script.marker))
    build = BUILDS["make"].format(ctx="" if ctx is None else f", context={ctx!r}")
    thread = [
        "got = []",
        "def build():",
        "    try:",
        f"        {build}; {USE['make']}; got.append(f'ok {{method}}')",
        "    except Exception as exc:",
        "        got.append(f'{type(exc).__module__}.{type(exc).__name__}: {exc}')",
    ]
    run = ["worker = threading.Thread(target=build); worker.start(); worker.join()", "stop.set()", "print(*got)"]
    if guarded:
        run = ['if __name__ == "__main__":'] + ["    " + line for line in run]
    script.path.write_text(head + "\n".join(thread + run) + "\n")
    return script, head.count("\n") + len(thread) + 1 + int(guarded)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ctx", [None, "spawn"])
def test_a_vector_env_built_in_a_thread_an_unguarded_script_started_is_refused_or_forked(
    ctx: str | None, tmp_path: Path
) -> None:
    """The script's unguarded top level is running in the main thread (it joins the thread
    that builds): a worker importing the script again would run it once more. The check read
    only the building thread's stack, found no top level there, and let it through: every
    worker printed CPython's bootstrapping error. Now the main thread's statement is named."""
    script, line = _script_building_in_a_thread(tmp_path, ctx, guarded=False)
    proc, runs = script.run(sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert runs == 1, f"the script's top level ran {runs} times:\n{proc.stderr}"
    assert "bootstrapping phase" not in proc.stderr, proc.stderr
    if ctx is None:  # vecenv chose forkserver (threads run): it forks, and says why
        assert proc.stdout.splitlines() == ["ok fork"], proc.stdout + proc.stderr
        warnings = [line for line in proc.stderr.splitlines() if "UnguardedMainWarning" in line]
        assert len(warnings) == 1 and f"train.py:{line}: " in warnings[0], proc.stderr
        return
    got = proc.stdout.strip()
    assert got.startswith("vecenv.errors.UnguardedMainError: "), proc.stdout + proc.stderr
    assert f"{script.path}, line {line}" in got, got


@pytest.mark.timeout(120)
def test_a_vector_env_built_in_a_thread_a_guarded_script_started_keeps_forkserver(tmp_path: Path) -> None:
    script, _ = _script_building_in_a_thread(tmp_path, None, guarded=True)
    proc, _ = script.run(sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["ok forkserver"], proc.stdout + proc.stderr
    assert "UnguardedMain" not in proc.stderr, proc.stderr


def test_main_guard_detection_reads_the_script() -> None:
    from vecenv.machine import guarded_line

    source = textwrap.dedent(
        """
        import os
        x = 1
        if __name__ == "__main__":
            y = 2
            with open(os.devnull) as f:
                z = 3
        else:
            w = 4
        if "__main__" == __name__ and x:
            v = 5
        def main():
            return 6
        if __name__ != "__main__":
            a = 7
        else:
            b = 8
        if __name__ in ("__main__",):
            c = 9
        if __name__ in ("__main__", "__mp_main__"):
            d = 10
        if not __name__ == "__main__" or x:
            e = 11
        else:
            f = 12
        if __name__ == "__main__" or x:
            g = 13
        match __name__:
            case "__main__":
                h = 14
            case _:
                i = 15
        """
    )
    lines = source.splitlines()
    expect = {"x = 1": False, "y = 2": True, "z = 3": True, "w = 4": False, "v = 5": True, "main()": False}
    # the else of a test that fails only in the main script; a tuple of "__main__" alone; match
    expect |= {"a = 7": False, "b = 8": True, "c = 9": True, "d = 10": False, "e = 11": False, "f = 12": True}
    expect |= {"g = 13": False, "h = 14": True, "i = 15": False}
    for text, guarded in expect.items():
        number = next(i for i, line in enumerate(lines, 1) if text in line or (text == "main()" and "def" in line))
        assert guarded_line(source, number) is guarded, text


# -- vecenv-collect on a full disk or a read-only --out ---------------------------------------


def _mount_tmpfs(where: Path, options: str) -> bool:
    """Mount a tmpfs at ``where`` (root only); whether it worked."""
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    return mounted.returncode == 0


@pytest.fixture
def tmpfs(tmp_path: Path):
    """``mount(options)`` mounts a small tmpfs under ``tmp_path`` and returns its path, or skips
    where mounting is not allowed; every mount is undone after the test."""
    mounts: list[Path] = []

    def mount(options: str) -> Path:
        where = tmp_path / f"fs{len(mounts)}"
        if not _mount_tmpfs(where, options):
            pytest.skip("cannot mount a tmpfs here (needs root)")
        mounts.append(where)
        return where

    yield mount
    for where in mounts:
        subprocess.run(["umount", str(where)], check=True)


def _collect_cli(out: Path, *extra: str, fsize: int | None = None) -> subprocess.CompletedProcess:
    """``vecenv-collect`` in a real process; ``fsize``: its RLIMIT_FSIZE (SIGXFSZ ignored, so a
    write past the limit fails with EFBIG instead of killing it)."""

    def limit() -> None:
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    command = [sys.executable, "-m", "vecenv.datasets", "--env", "CartPole-v1", "--num-envs", "4", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*command, "--out", str(out), *extra], capture_output=True, text=True, timeout=90, env=env, preexec_fn=limit
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("full", ["tmpfs", "fsize"], ids=["full-tmpfs", "file-size-limit"])
def test_collect_on_a_full_disk_is_one_line_and_keeps_a_valid_partial_dataset(full: str, tmp_path: Path, tmpfs) -> None:
    """A full disk (a 10 MiB tmpfs) or, where nothing can be mounted, a file size limit
    (RLIMIT_FSIZE, 3 MiB): one line naming the file and the cause, exit status 1, no traceback,
    and the rows written before it (a chunk of 8 MiB of rows fits, the next does not) a
    loadable dataset marked incomplete. (A run whose first write fails leaves nothing: see
    test_a_first_write_that_fails_puts_the_replaced_dataset_back, where no timed flush can come
    before it.)"""
    disk = tmpfs("size=10m") if full == "tmpfs" else tmp_path
    out = disk / "cartpole"
    proc = _collect_cli(out, "--steps", "300000", fsize=3 * 2**20 if full == "fsize" else None)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    cause = "No space left on device" if full == "tmpfs" else "File too large"
    assert lines[0].startswith(f"vecenv-collect: error: cannot write {out}/"), lines[0]
    assert cause in lines[0] and 'kept a partial dataset ("complete": false)' in lines[0], lines[0]
    with vecenv.load(out) as dataset:
        assert dataset.metadata["complete"] is False
        kept = dataset.metadata["counts"]["transitions"]
        assert kept > 0 and all(len(a) == kept for a in dataset.arrays.values())
    assert f"of {kept} transitions in {out}" in lines[0]
    shutil.rmtree(out)
    debug = _collect_cli(out, "--steps", "20000", "--debug", fsize=64 * 1024)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "DatasetWriteError" in debug.stderr


@pytest.mark.timeout(120)
def test_minari_output_over_a_file_size_limit_is_one_line_and_marked_incomplete(tmp_path: Path) -> None:
    """The same fault with ``--format minari``: one line naming the files and what was kept; the
    episodes a reader finds are a dataset whose ``vecenv`` entry says it is incomplete."""
    minari = pytest.importorskip("minari")
    root = tmp_path / "minari-root"
    proc = _collect_cli(root, "--steps", "20000", "--format", "minari", "--dataset-id", "cp/fsz-v0", fsize=40 * 1024)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    data = root / "cp" / "fsz-v0" / "data"
    assert lines[0].startswith(f"vecenv-collect: error: cannot write {data}: File too large"), lines[0]
    record = json.loads((data / "metadata.json").read_text())["vecenv"]
    assert record["complete"] is False and record["counts"]["episodes"] > 0
    assert f"kept the {record['counts']['episodes']} episodes a reader finds, marked incomplete" in lines[0]
    assert minari.MinariDataset(data).total_episodes == record["counts"]["episodes"]


@pytest.mark.timeout(120)
def test_collect_into_a_read_only_out_is_one_line(tmpfs) -> None:
    """A read-only file system is found before any env starts (usage error, status 2), named
    as such: not "permission denied", which root never gets there."""
    out = tmpfs("size=64k,ro") / "cartpole"
    proc = _collect_cli(out, "--steps", "200")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"vecenv-collect: error: --out: expected a directory this process may write in, got {str(out)!r}, "
        f"where {str(out.parent)!r} is not writable (read-only file system)"
    ), proc.stderr


@pytest.mark.timeout(60)
def test_collect_library_raises_a_write_error_naming_the_file(tmp_path: Path) -> None:
    """The library's error: a ``VecEnvError`` and an ``OSError`` with the errno and the file."""
    target = tmp_path / "data"
    envs = vecenv.make("CartPole-v1", 2, 1, context="fork")
    try:
        with file_size_limit(4096), pytest.raises(vecenv.datasets.DatasetWriteError) as info:
            vecenv.collect(envs, steps=2000, out=target)
    finally:
        envs.close()
    assert isinstance(info.value, VecEnvError) and isinstance(info.value, OSError)
    assert info.value.errno == 27 and str(target) in info.value.filename  # EFBIG
    assert not target.exists(), "its first write failed: nothing was written, and nothing is left"


SIGCHLD_SCRIPT = """\
import os, signal, subprocess, sys
sys.path.insert(0, {root!r})
import gymnasium as gym
import numpy as np
import vecenv
signal.signal(signal.SIGCHLD, {handler})
class RunsFalse(gym.Wrapper):
    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
    def run_false(self):
        return subprocess.run(["false"]).returncode
def fds():
    return len(os.listdir("/proc/self/fd"))
if __name__ == "__main__":
    with vecenv.SubprocVectorEnv([RunsFalse] * 2, 2, context={ctx!r}) as envs:
        print("env code's subprocess exit codes:", envs.call("run_false"))
    for cycle in range(4):
        envs = vecenv.make("CartPole-v1", num_envs=4, num_workers=2, context={ctx!r}, on_worker_death="restart")
        envs.reset(seed=0)
        os.kill(envs.worker_pids[1], signal.SIGKILL)
        obs, rewards, terminations, truncations, infos = envs.step(np.zeros(4, np.int64))
        assert truncations.tolist() == [False, False, True, True], truncations
        envs.close()
        if cycle == 0:
            before = fds()  # (spawn's first start opens a descriptor for good)
    envs = vecenv.make("CartPole-v1", num_envs=4, num_workers=2, context={ctx!r})
    envs.reset(seed=0)
    os.kill(envs.worker_pids[0], signal.SIGKILL)
    try:
        envs.step(np.zeros(4, np.int64))
    except vecenv.WorkerDiedError as exc:
        print("died:", exc, "exitcode:", exc.exitcode)
    envs.close()
    print("fds:", before, fds())
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("ctx", ["fork", "spawn"])
@pytest.mark.parametrize(
    "handler", ["signal.SIG_IGN", "lambda *a: os.waitpid(-1, os.WNOHANG)"], ids=["ignored", "reaped"]
)
def test_a_parent_that_loses_its_childrens_exit_statuses_still_closes_and_restarts(
    ctx: str, handler: str, tmp_path: Path
) -> None:
    """Ignoring SIGCHLD (inherited from a launcher) or reaping every child in a handler takes
    the workers' exit statuses from multiprocessing: their sentinels still tell that they
    ended, so a death is reported (or restarted), close() returns and nothing stays open. The
    workers start with SIGCHLD at its default: env code's subprocesses keep their statuses."""
    path = tmp_path / "run.py"
    path.write_text(SIGCHLD_SCRIPT.format(root=str(ROOT), ctx=ctx, handler=handler))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=100, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    died = next(line for line in lines if line.startswith("died:"))
    assert "worker 0 (envs 0..1)" in died, died
    # Its status is lost, unless vecenv's own waitpid came first (a handler runs when it can).
    assert "another waitpid" in died and "exitcode: None" in died or "SIGKILL" in died, died
    before, after = next(line for line in lines if line.startswith("fds:")).split()[1:]
    assert before == after, proc.stdout
    # The workers do not inherit the lost statuses: env code's own subprocesses report theirs.
    assert "env code's subprocess exit codes: (1, 1)" in lines, proc.stdout


def test_the_call_lock_is_taken_if_free_without_waiting() -> None:
    """``CallLock.taken_if_free``: taken when no call holds the lock; never waits behind a
    call of another thread, nor nests in one of its own thread."""
    from vecenv.parent.call_lock import CallLock

    lock = CallLock()
    with lock.taken_if_free("close") as taken:
        assert taken and lock.holder().startswith("`close`")
        with lock.taken_if_free("close") as again:  # nested in this thread's own call
            assert not again
    assert lock.holder() == "a call"
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock.taken_if_free("step_wait"):
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        start = time.monotonic()
        with lock.taken_if_free("close") as taken:
            assert not taken
        assert time.monotonic() - start < 1.0
    finally:
        release.set()
        thread.join(10)
    with lock.taken_if_free("close") as taken:
        assert taken


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["async_reset", "policy_state"])
def test_ctrl_c_right_after_a_command_went_out_leaves_nothing_pending(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl+C after the commands of ``async_reset`` (before its batches are recorded) or of
    ``policy_state`` (before its replies are awaited) went out: the workers' replies are
    abandoned, and a reset and steps work again."""
    from vecenv.parent.state import CallState

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # where a signal's handler would run

    envs = vecenv.SubprocVectorEnv(
        [functools.partial(gym.make, "CartPole-v1")] * 4, 2, context="fork", autoreset_mode="SameStep"
    )
    try:
        envs.reset(seed=0)
        if where == "policy_state":
            envs.rollout(2, FunctionPolicy(_count_state, initial_state=lambda n: np.zeros((n, 1), np.int64)))
            monkeypatch.setattr(CallRunner, "gather", interrupted)
            with pytest.raises(KeyboardInterrupt):
                envs.policy_state()
        else:
            monkeypatch.setattr(CallState, "batches_started", interrupted)
            with pytest.raises(KeyboardInterrupt):
                envs.async_reset(seed=1)
        monkeypatch.undo()
        sync = SyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 4, autoreset_mode="SameStep")
        want = sync.reset(seed=2)[0]
        assert_same(envs.reset(seed=2)[0], want, "reset after the interrupt")
        actions = np.array([0, 1, 1, 0])
        assert_same(envs.step(actions)[:4], sync.step(actions)[:4], "step after the interrupt")
        sync.close()
    finally:
        envs.close()


def _count_state(observations: Any, state: Any) -> Any:
    return np.zeros(len(observations), np.int64), {}, state + 1
