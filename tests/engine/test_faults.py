"""Fault injection: every way an env or a worker can fail, under each start method.

Each fault test asserts the exception type and message, a bound on the time the fault takes to
surface and on ``close()``, and that nothing is left behind: no child process (and the worker
pids are gone), no open pipe of the parent, no new file descriptor, no ``/dev/shm/vecenv_*``
block. The measured times are collected in :data:`TIMINGS`, printed at the end of the session and
printed in the terminal summary.

The failing envs live in ``tests/helpers/faults.py``; the reference for "the results are right" is
``gymnasium.vector.SyncVectorEnv`` over healthy copies of the same envs.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError

import vecenv
from tests.helpers.faults import FaultEnv, fault_fns, healthy_fns, late_replies_arrived, open_fds, transport_of
from vecenv import NeedsResetError, RemoteEnvError, VecEnvTimeoutError, WorkerDiedError
from vecenv.bench import procfs
from vecenv.errors import RemoteTraceback
from vecenv.parent.pool import WorkerPool
from vecenv.transports import process as process_transport
from vecenv.transports.process import KILL_GRACE

ROOT = Path(__file__).resolve().parents[2]

CONTEXTS = [pytest.param("fork", id="fork"), pytest.param("spawn", id="spawn")]
N_ENVS = 4
N_WORKERS = 2
TARGET = 3  # the faulting env: the second env of worker 1 (envs 2..3)
TARGET_WORKER = 1

# Generous for a loaded 2-core machine, tight enough to catch a hang.
RAISE_S = 3.0  # a fault (including a worker's death) surfaces within this
INIT_RAISE_S = 20.0  # a constructor fault: includes starting the workers (spawn imports a lot)
CLOSE_S = 5.0  # close() returns within this
GONE_S = 5.0  # orphans of a killed parent are gone within this
SLACK_S = 0.9  # beyond a stated timeout: terminating a worker, reaping, a loaded machine

SEED = 11
ACTIONS = [a.astype(np.float32) for a in np.random.default_rng(7).uniform(-1, 1, (10, N_ENVS, 2))]

# -- the timing table -------------------------------------------------------------------------

TIMINGS: dict[tuple[str, str], dict[str, float]] = {}


def record(fault: str, ctx: str, **seconds: float) -> None:
    TIMINGS.setdefault((fault, ctx), {}).update(seconds)


def timing_table() -> str:
    lines = [f"{'fault':34} {'ctx':6} {'raise_s':>8} {'close_s':>8}  other"]
    for (fault, ctx), t in sorted(TIMINGS.items()):
        other = ", ".join(f"{k}={v:.3f}" for k, v in t.items() if k not in ("raise", "close"))
        raise_s, close_s = (f"{t[k]:8.3f}" if k in t else f"{'-':>8}" for k in ("raise", "close"))
        lines.append(f"{fault:34} {ctx:6} {raise_s} {close_s}  {other}")
    return "\n".join(lines)


class _TimingReport:
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if TIMINGS:
            terminalreporter.section("vecenv fault timings (seconds)")
            terminalreporter.write_line(timing_table())


@pytest.fixture(scope="module", autouse=True)
def _timing_report(request: pytest.FixtureRequest):
    name = "vecenv-fault-timings"
    if request.config.pluginmanager.get_plugin(name) is None:
        request.config.pluginmanager.register(_TimingReport(), name)
    yield


# -- leak checks ------------------------------------------------------------------------------


def _shm_exists(name: str) -> bool:
    return os.path.exists(os.path.join("/dev/shm", name.lstrip("/")))


def _wait_gone(pids: list[int], limit: float) -> tuple[list[int], float]:
    """Poll until every pid is gone or ``limit`` seconds pass; return the survivors and the time."""
    t0 = time.monotonic()
    while True:
        alive = [p for p in pids if procfs.alive(p)]
        elapsed = time.monotonic() - t0
        if not alive or elapsed > limit:
            return alive, elapsed
        time.sleep(0.02)


class LeakCheck:
    """Snapshot of processes, fds and shared blocks before a test; :meth:`check` compares."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        resource_tracker.ensure_running()  # started once per session; not a leak
        self.pid_dir = str(tmp_path / "pids")
        os.mkdir(self.pid_dir)
        assert not multiprocessing.active_children(), "a previous test left children"
        self.fds = open_fds()
        # Other test runs may share /dev/shm: track the blocks this process creates.
        self.created: list[str] = []
        original = shared_memory.SharedMemory.__init__
        me, created = os.getpid(), self.created

        def tracking_init(shm: Any, name: Any = None, create: bool = False, size: int = 0, *a: Any, **k: Any) -> None:
            original(shm, name, create, size, *a, **k)
            if create and os.getpid() == me:
                created.append(shm.name)

        monkeypatch.setattr(shared_memory.SharedMemory, "__init__", tracking_init)

    def worker_pids(self) -> set[int]:
        """Pids of every process that built a FaultEnv with ``pid_dir`` (all workers, if used)."""
        return {int(name) for name in os.listdir(self.pid_dir)}

    def check(self, envs: vecenv.SubprocVectorEnv | None = None, pids: set[int] = frozenset()) -> None:
        children = multiprocessing.active_children()
        assert not children, f"child processes left after close: {children}"
        pids = set(pids) | self.worker_pids()
        alive, _ = _wait_gone(sorted(pids), GONE_S)  # reaped children vanish at once; a loaded host may lag
        assert not alive, f"worker pids still running after close: {alive}"
        if envs is not None:
            open_conns = [i for i, c in enumerate(transport_of(envs).conns) if not c.closed]
            assert not open_conns, f"pipes of workers {open_conns} are still open"
        left = [name for name in self.created if _shm_exists(name)]
        assert not left, f"shared-memory blocks left: {left}"
        extra = {fd: target for fd, target in open_fds().items() if self.fds.get(fd) != target}
        assert not extra, f"file descriptors left open: {extra}"


@pytest.fixture
def leaks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    yield LeakCheck(tmp_path, monkeypatch)
    while _MADE:  # a failed test must not leave its workers to the next one
        envs = _MADE.pop()
        try:
            envs.close(terminate=True)
        except Exception:
            pass


# -- helpers ----------------------------------------------------------------------------------


_MADE: list[vecenv.SubprocVectorEnv] = []  # closed by the `leaks` fixture, should a test fail early


def make(ctx: str, fns: list, **kwargs: Any) -> vecenv.SubprocVectorEnv:
    envs = vecenv.SubprocVectorEnv(fns, N_WORKERS, context=ctx, **kwargs)
    _MADE.append(envs)
    return envs


def raises_timed(exc_type: type[BaseException], fn: Callable, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.monotonic()
    with pytest.raises(exc_type) as info:
        fn(*args, **kwargs)
    return info.value, time.monotonic() - t0


def close_timed(envs: vecenv.SubprocVectorEnv, **kwargs: Any) -> float:
    t0 = time.monotonic()
    envs.close(**kwargs)
    return time.monotonic() - t0


def assert_same(a: Any, b: Any, path: str = "result") -> None:
    """Exact equality of nested results, dtypes included."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), f"{path}: {type(a)} vs {type(b)}"
        assert a.dtype == b.dtype, f"{path}: dtype {a.dtype} vs {b.dtype}"
        assert a.shape == b.shape, f"{path}: shape {a.shape} vs {b.shape}"
        assert np.array_equal(a, b), f"{path}: {a} != {b}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def reference(seed: int, actions: list[np.ndarray]) -> list[Any]:
    """What SyncVectorEnv over healthy envs gives for reset(seed) then the steps."""
    ref = gym.vector.SyncVectorEnv(healthy_fns(N_ENVS))
    try:
        return [ref.reset(seed=seed)] + [ref.step(a) for a in actions]
    finally:
        ref.close()


def assert_matches_reference(envs: vecenv.SubprocVectorEnv, seed: int, n_steps: int = 8) -> None:
    """A full reset(seed) then ``n_steps`` steps (through autoresets) equal a fresh SyncVectorEnv."""
    actions = ACTIONS[:n_steps]
    got = [envs.reset(seed=seed)] + [envs.step(a) for a in actions]
    assert_same(got, reference(seed, actions))


def note_of(exc: BaseException) -> str:
    notes = getattr(exc, "__notes__", [])
    assert notes, "expected a note naming env and worker"
    return " | ".join(notes)


def assert_remote(exc: BaseException, call: str, env: int = TARGET, worker: int = TARGET_WORKER) -> None:
    """The worker traceback is the cause; the note names env, worker and call."""
    assert isinstance(exc.__cause__, RemoteTraceback), f"cause is {exc.__cause__!r}"
    assert "helpers/faults.py" in exc.__cause__.tb, exc.__cause__.tb
    note = note_of(exc)
    # The global index (what the user passed as env_fns[i]), not an index within a worker's group.
    assert re.search(rf"\benv {env}\b|\benv_fns\[{env}\]", note), f"note does not name env {env}: {note!r}"
    assert re.search(rf"\bworker {worker}\b", note), f"note does not name worker {worker}: {note!r}"
    assert call in note, f"note does not name `{call}`: {note!r}"


def assert_all_calls_raise_died(envs: vecenv.SubprocVectorEnv) -> None:
    """After WorkerDiedError, every call but close() raises it again, quickly."""
    t0 = time.monotonic()
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("step", lambda: envs.step(ACTIONS[0])),
        ("step_async", lambda: envs.step_async(ACTIONS[0])),
        ("step_wait", lambda: envs.step_wait()),
        ("reset", lambda: envs.reset(seed=1)),
        ("reset_async", lambda: envs.reset_async()),
        ("reset_wait", lambda: envs.reset_wait()),
        ("call", lambda: envs.call("ping")),
        ("call_async", lambda: envs.call_async("ping")),
        ("call_wait", lambda: envs.call_wait()),
        ("get_attr", lambda: envs.get_attr("index")),
        ("set_attr", lambda: envs.set_attr("index", 0)),
        ("render", lambda: envs.render()),
    ]
    for _, fn in calls:
        with pytest.raises(WorkerDiedError, match=rf"worker {TARGET_WORKER}\b"):
            fn()
    assert time.monotonic() - t0 < RAISE_S, "calls on a broken vector env must fail fast"


# -- the fault scenarios ----------------------------------------------------------------------
# Each takes (ctx, leaks), records its timings and asserts everything about one fault.


def scenario_init_raise(ctx: str, leaks: LeakCheck) -> None:
    fns = fault_fns(N_ENVS, "raise", "init", TARGET, pid_dir=leaks.pid_dir)
    exc, t = raises_timed(ValueError, make, ctx, fns)
    record("init-raise", ctx, **{"raise": t})
    assert t < INIT_RAISE_S
    leaks.check()
    assert str(exc) == f"injected fault in init of env {TARGET}"
    assert_remote(exc, "__init__")


def _init_death(ctx: str, leaks: LeakCheck, fault: str, how: str, exitcode: int) -> None:
    fns = fault_fns(N_ENVS, fault, "init", TARGET, pid_dir=leaks.pid_dir)
    exc, t = raises_timed(WorkerDiedError, make, ctx, fns)
    record(f"init-{fault}", ctx, **{"raise": t})
    assert t < INIT_RAISE_S
    leaks.check()
    assert exc.worker == TARGET_WORKER and exc.envs == range(2, 4)
    assert exc.exitcode == exitcode
    assert re.search(rf"\bworker {TARGET_WORKER} \(envs 2\.\.3\)", str(exc)), str(exc)
    assert how in str(exc) and "__init__" in str(exc), str(exc)


def scenario_init_exit(ctx: str, leaks: LeakCheck) -> None:
    _init_death(ctx, leaks, "exit", "exited with code 3", 3)


def scenario_init_segv(ctx: str, leaks: LeakCheck) -> None:
    _init_death(ctx, leaks, "segv", "SIGSEGV", -signal.SIGSEGV)


def scenario_reset_raise(ctx: str, leaks: LeakCheck) -> None:
    envs = make(ctx, fault_fns(N_ENVS, "raise", "reset", TARGET, pid_dir=leaks.pid_dir))
    exc, t = raises_timed(ValueError, envs.reset, seed=SEED)
    record("reset-raise", ctx, **{"raise": t})
    assert t < RAISE_S
    assert str(exc) == f"injected fault in reset of env {TARGET}"
    assert_remote(exc, "reset")
    assert not envs.closed
    with pytest.raises(NeedsResetError, match="reset"):
        envs.step(ACTIONS[0])
    assert envs.call("ping") == tuple(f"pong {i}" for i in range(N_ENVS))
    assert_matches_reference(envs, SEED)
    tc = close_timed(envs)
    record("reset-raise", ctx, close=tc)
    assert tc < CLOSE_S
    leaks.check(envs)


def _step_error(ctx: str, leaks: LeakCheck, fault: str, exc_type: type[BaseException]) -> BaseException:
    """Fault on the 3rd step; then NeedsResetError, calls work, reset gives SyncVectorEnv's results."""
    envs = make(ctx, fault_fns(N_ENVS, fault, "step", TARGET, at=3, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    envs.step(ACTIONS[1])
    exc, t = raises_timed(exc_type, envs.step, ACTIONS[2])
    record(f"step-{fault}", ctx, **{"raise": t})
    assert t < RAISE_S
    assert_remote(exc, "step")
    # The vector env stays open; stepping would give wrong data until a full reset.
    assert not envs.closed
    t0 = time.monotonic()
    with pytest.raises(NeedsResetError, match="reset"):
        envs.step(ACTIONS[3])
    with pytest.raises(NeedsResetError):
        envs.step_async(ACTIONS[3])
    assert time.monotonic() - t0 < RAISE_S
    assert envs.call("ping") == tuple(f"pong {i}" for i in range(N_ENVS))
    assert_matches_reference(envs, SEED + 100)
    tc = close_timed(envs)
    record(f"step-{fault}", ctx, close=tc)
    assert tc < CLOSE_S
    leaks.check(envs)
    return exc


def scenario_step_raise(ctx: str, leaks: LeakCheck) -> None:
    exc = _step_error(ctx, leaks, "raise", ValueError)
    assert str(exc) == f"injected fault in step of env {TARGET}"


def scenario_step_unpicklable(ctx: str, leaks: LeakCheck) -> None:
    exc = _step_error(ctx, leaks, "unpicklable", RemoteEnvError)
    assert exc.type_name == "tests.helpers.faults.UnpicklableError"
    assert "tests.helpers.faults.UnpicklableError" in str(exc)
    assert f"injected fault in step of env {TARGET}" in str(exc)
    assert "UnpicklableError" in exc.__cause__.tb


def scenario_step_unloadable(ctx: str, leaks: LeakCheck) -> None:
    exc = _step_error(ctx, leaks, "unloadable", RemoteEnvError)
    assert exc.type_name == "tests.helpers.faults.UnloadableError"
    assert f"injected unloadable fault: step of env {TARGET}" in str(exc)
    assert "UnloadableError" in exc.__cause__.tb


def scenario_call_raise(ctx: str, leaks: LeakCheck) -> None:
    envs = make(ctx, fault_fns(N_ENVS, "raise", "call", TARGET, pid_dir=leaks.pid_dir))
    got = [envs.reset(seed=SEED), envs.step(ACTIONS[0])]
    exc, t = raises_timed(ValueError, envs.call, "boom")
    record("call-raise", ctx, **{"raise": t})
    assert t < RAISE_S
    assert str(exc) == f"injected fault in call of env {TARGET}"
    assert_remote(exc, "call")
    # Calls still work, and a failed call does not disturb stepping.
    assert envs.call("boom") == tuple(range(N_ENVS))
    assert envs.call("ping") == tuple(f"pong {i}" for i in range(N_ENVS))
    assert envs.get_attr("index") == tuple(range(N_ENVS))
    got += [envs.step(a) for a in ACTIONS[1:4]]
    assert_same(got, reference(SEED, ACTIONS[:4]))
    tc = close_timed(envs)
    record("call-raise", ctx, close=tc)
    assert tc < CLOSE_S
    leaks.check(envs)


def scenario_close_raise(ctx: str, leaks: LeakCheck) -> None:
    envs = make(ctx, fault_fns(N_ENVS, "raise", "close", TARGET, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    exc, t = raises_timed(ValueError, envs.close)
    record("close-raise", ctx, **{"raise": t, "close": t})
    assert t < CLOSE_S
    # Everything is released before the env's error is re-raised.
    assert envs.closed
    leaks.check(envs)
    assert str(exc) == f"injected fault in close of env {TARGET}"
    assert_remote(exc, "close")
    envs.close()  # idempotent: nothing left to raise
    with pytest.raises(ClosedEnvironmentError):
        envs.step(ACTIONS[1])


def _step_death(
    ctx: str, leaks: LeakCheck, name: str, envs: vecenv.SubprocVectorEnv, how: str, exitcode: int, action: np.ndarray
) -> None:
    """The next step raises WorkerDiedError fast; every later call too; close() returns."""
    pids = set(envs.worker_pids)
    exc, t = raises_timed(WorkerDiedError, envs.step, action)
    record(name, ctx, **{"raise": t})
    assert t < RAISE_S
    assert exc.worker == TARGET_WORKER
    assert exc.exitcode == exitcode
    assert exc.envs == range(2, 4)
    message = str(exc)
    assert re.search(rf"\bworker {TARGET_WORKER}\b", message) and "envs 2..3" in message, message
    assert how in message and "step" in message, message
    assert_all_calls_raise_died(envs)
    tc = close_timed(envs)
    record(name, ctx, close=tc)
    assert tc < CLOSE_S
    leaks.check(envs, pids)
    envs.close()
    with pytest.raises(ClosedEnvironmentError):
        envs.step(action)


def scenario_step_exit(ctx: str, leaks: LeakCheck) -> None:
    envs = make(ctx, fault_fns(N_ENVS, "exit", "step", TARGET, at=2, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    _step_death(ctx, leaks, "step-exit", envs, "exited with code 3", 3, ACTIONS[1])


def scenario_step_segv(ctx: str, leaks: LeakCheck) -> None:
    envs = make(ctx, fault_fns(N_ENVS, "segv", "step", TARGET, at=2, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    _step_death(ctx, leaks, "step-segv", envs, "SIGSEGV", -signal.SIGSEGV, ACTIONS[1])


def scenario_idle_sigkill(ctx: str, leaks: LeakCheck) -> None:
    envs = make(ctx, healthy_fns(N_ENVS, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    victim = transport_of(envs).processes[TARGET_WORKER]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(2.0)  # dead before the next call: the worker was idle
    assert victim.exitcode == -signal.SIGKILL
    _step_death(ctx, leaks, "idle-sigkill", envs, "SIGKILL", -signal.SIGKILL, ACTIONS[1])


def _hang(ctx: str, leaks: LeakCheck, name: str, close_kwargs: dict[str, Any], at_least: float, limit: float) -> None:
    envs = make(ctx, fault_fns(N_ENVS, "hang", "step", TARGET, at=2, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    envs.step_async(ACTIONS[1])
    exc, t = raises_timed(VecEnvTimeoutError, envs.step_wait, timeout=0.5)
    record(name, ctx, **{"raise": t})
    assert 0.5 <= t < RAISE_S
    assert isinstance(exc, TimeoutError) and isinstance(exc, multiprocessing.TimeoutError)
    assert "step_wait" in str(exc) and "0.5" in str(exc), str(exc)
    # It names the worker that did not reply and its envs (the one that answered is not named):
    # the hung env is found without bisecting.
    assert str(exc).endswith(f"No reply yet from worker {TARGET_WORKER} (envs 2..3)."), str(exc)
    with pytest.raises(NeedsResetError):
        envs.step(ACTIONS[2])
    tc = close_timed(envs, **close_kwargs)
    record(name, ctx, close=tc)
    leaks.check(envs)
    assert at_least <= tc < limit, (
        f"close({close_kwargs}) took {tc:.2f}s with a hung worker (expected {at_least}..{limit}s)"
    )


def scenario_step_hang(ctx: str, leaks: LeakCheck) -> None:
    """The default close does not wait for a worker stuck in a timed-out call: well under the
    DEFAULT_CLOSE_TIMEOUT it would take if it did."""
    _hang(ctx, leaks, "step-hang", {}, at_least=0.0, limit=vecenv.DEFAULT_CLOSE_TIMEOUT)


def scenario_step_hang_close_timeout(ctx: str, leaks: LeakCheck) -> None:
    """close(timeout=1) gives the hung worker 1 s, then terminates it: at least 1 s, and less
    than the default grace it would have used without the argument."""
    _hang(ctx, leaks, "step-hang close(timeout=1)", {"timeout": 1.0}, at_least=1.0, limit=vecenv.DEFAULT_CLOSE_TIMEOUT)


def scenario_close_hang(ctx: str, leaks: LeakCheck) -> None:
    """An env whose close() never returns: close() gives up after DEFAULT_CLOSE_TIMEOUT."""
    envs = make(ctx, fault_fns(N_ENVS, "hang", "close", TARGET, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    tc = close_timed(envs)
    record("close-hang", ctx, close=tc)
    assert envs.closed
    leaks.check(envs)
    # It waits the grace, then terminates and reaps: bounded well away from a hang.
    assert vecenv.DEFAULT_CLOSE_TIMEOUT <= tc < vecenv.DEFAULT_CLOSE_TIMEOUT + KILL_GRACE + 3.0, (
        f"close() took {tc:.2f}s for a hung env.close(); DEFAULT_CLOSE_TIMEOUT is {vecenv.DEFAULT_CLOSE_TIMEOUT}s"
    )


def scenario_step_timeout_stale(ctx: str, leaks: LeakCheck) -> None:
    """A step that sleeps once: the timed-out reply arrives late and must be discarded."""
    envs = make(ctx, fault_fns(N_ENVS, "sleep", "step", TARGET, at=2, duration=2.0, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    envs.step_async(ACTIONS[1])
    exc, t = raises_timed(VecEnvTimeoutError, envs.step_wait, timeout=0.2)
    record("step-timeout-stale", ctx, **{"raise": t})
    assert 0.2 <= t < RAISE_S
    with pytest.raises(NeedsResetError):
        envs.step(ACTIONS[2])
    # A call while the late step reply is still due: its answer, not the stale one.
    assert envs.call("ping") == tuple(f"pong {i}" for i in range(N_ENVS))
    assert_matches_reference(envs, SEED + 1)
    tc = close_timed(envs)
    record("step-timeout-stale", ctx, close=tc)
    assert tc < CLOSE_S
    leaks.check(envs)


def scenario_step_timeout_stale_queued(ctx: str, leaks: LeakCheck) -> None:
    """As above, but the late reply is already in the pipe when reset(seed) is sent."""
    envs = make(ctx, fault_fns(N_ENVS, "sleep", "step", TARGET, at=2, duration=1.5, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step(ACTIONS[0])
    envs.step_async(ACTIONS[1])
    exc, t = raises_timed(VecEnvTimeoutError, envs.step_wait, timeout=0.1)
    record("step-timeout-stale-queued", ctx, **{"raise": t})
    assert 0.1 <= t < RAISE_S
    # Wait until the late reply (posted after its writes to the shared rows) has arrived.
    assert late_replies_arrived(envs, 5), "the late reply never arrived"
    assert_matches_reference(envs, SEED + 2)
    tc = close_timed(envs)
    record("step-timeout-stale-queued", ctx, close=tc)
    assert tc < CLOSE_S
    leaks.check(envs)


SCENARIOS: dict[str, Callable[[str, LeakCheck], None]] = {
    "init-raise": scenario_init_raise,
    "init-exit": scenario_init_exit,
    "init-segv": scenario_init_segv,
    "reset-raise": scenario_reset_raise,
    "step-raise": scenario_step_raise,
    "step-unpicklable": scenario_step_unpicklable,
    "step-unloadable": scenario_step_unloadable,
    "call-raise": scenario_call_raise,
    "close-raise": scenario_close_raise,
    "step-exit": scenario_step_exit,
    "step-segv": scenario_step_segv,
    "idle-sigkill": scenario_idle_sigkill,
    "step-hang": scenario_step_hang,
    "step-hang-close-timeout": scenario_step_hang_close_timeout,
    "step-timeout-stale": scenario_step_timeout_stale,
    "step-timeout-stale-queued": scenario_step_timeout_stale_queued,
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("fault", list(SCENARIOS))
def test_fault(fault: str, ctx: str, leaks: LeakCheck) -> None:
    SCENARIOS[fault](ctx, leaks)


@pytest.mark.timeout(30)
def test_close_hang(leaks: LeakCheck) -> None:
    """Not start-method specific, and slow (DEFAULT_CLOSE_TIMEOUT): fork only."""
    scenario_close_hang("fork", leaks)


@pytest.mark.timeout(30)
def test_ctrl_c_in_close_still_ends_every_worker(leaks: LeakCheck, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+C while close() waits for an env's close() that hangs: close() raises it, the
    vector env is closed, and no worker is left (a later close() has nothing left to end)."""
    envs = make("fork", fault_fns(N_ENVS, "hang", "close", TARGET, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)

    def interrupted(*args: Any) -> None:  # a Ctrl+C while the close replies are awaited
        raise KeyboardInterrupt

    monkeypatch.setattr(WorkerPool, "_close_errors", interrupted)
    with pytest.raises(KeyboardInterrupt):
        envs.close(timeout=30)
    assert envs.closed
    envs.close()
    leaks.check(envs)


@pytest.mark.timeout(30)
def test_ctrl_c_while_close_waits_for_the_workers_to_exit_still_reaps_them(
    leaks: LeakCheck, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl+C while close() waits for the workers to exit: close() raises it, and every worker
    is already ended and reaped (no zombie) and every pipe closed, with no later close()."""
    envs = make("fork", healthy_fns(N_ENVS, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    wait = process_transport.wait_for_objects  # how close() waits for a worker's exit
    interrupted: list[bool] = []

    def wait_interrupted_once(objects: Any, timeout: float | None = None) -> Any:
        if not interrupted and timeout:  # a wait, not a look (timeout 0)
            interrupted.append(True)
            raise KeyboardInterrupt
        return wait(objects, timeout)

    monkeypatch.setattr(process_transport, "wait_for_objects", wait_interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        envs.close()
    monkeypatch.setattr(process_transport, "wait_for_objects", wait)
    assert interrupted and envs.closed
    # Checked before anything reaps children (as multiprocessing.active_children() would).
    zombies = [pid for pid in leaks.worker_pids() if os.path.exists(f"/proc/{pid}")]
    assert not zombies, f"workers not reaped after an interrupted close(): {zombies}"
    leaks.check(envs)


# -- bad inputs -------------------------------------------------------------------------------
# (id, which call, argument, exception type, substrings the message must hold: the argument's
# name, the expected and the received value)

BAD_INPUTS: list[tuple[str, str, Any, type[Exception], list[str]]] = [
    ("actions-too-few", "step", np.zeros((3, 2), np.float32), ValueError, ["actions", "(4, 2)", "(3, 2)"]),
    ("actions-too-many", "step", np.zeros((5, 2), np.float32), ValueError, ["actions", "(4, 2)", "(5, 2)"]),
    ("actions-wrong-shape", "step", np.zeros((4, 3), np.float32), ValueError, ["actions", "(4, 2)", "(4, 3)"]),
    ("actions-flat", "step", np.zeros(8, np.float32), ValueError, ["actions", "(4, 2)", "(8,)"]),
    ("actions-complex-dtype", "step", np.zeros((4, 2), np.complex128), TypeError, ["actions", "float32", "complex128"]),
    ("actions-str-dtype", "step", np.full((4, 2), "a"), TypeError, ["actions", "float32", "<U1"]),
    ("actions-ragged", "step", [[0.0, 0.0], [0.0]], TypeError, ["actions", "[[0.0, 0.0], [0.0]]"]),
    ("actions-none", "step", None, TypeError, ["actions", "None", "4"]),
    ("actions-string", "step", "left", TypeError, ["actions", "'left'", "4"]),
    ("seed-list-short", "seed", [1, 2, 3], ValueError, ["seed", "4", "3"]),
    ("seed-list-long", "seed", [1, 2, 3, 4, 5], ValueError, ["seed", "4", "5"]),
    ("seed-list-float", "seed", [0, 1, 2.5, 3], TypeError, ["seed[2]", "int", "2.5"]),
    ("seed-list-str", "seed", [0, "1", 2, 3], TypeError, ["seed[1]", "int", "'1'"]),
    ("seed-list-negative", "seed", [0, -5, 1, 2], ValueError, ["seed[1]", "non-negative", "-5"]),
    ("seed-negative", "seed", -1, ValueError, ["seed", "non-negative", "-1"]),
    ("seed-float", "seed", 1.5, TypeError, ["seed", "int", "1.5"]),
    ("seed-string", "seed", "42", TypeError, ["seed", "int", "'42'"]),
    ("seed-bool", "seed", True, TypeError, ["seed", "int", "True"]),
    ("reset-mask-list", "mask", [True] * 4, TypeError, ["reset_mask", "numpy array", "list"]),
    ("reset-mask-shape", "mask", np.ones(3, np.bool_), ValueError, ["reset_mask", "(4,)", "(3,)"]),
    ("reset-mask-dtype", "mask", np.ones(4, np.int64), TypeError, ["reset_mask", "bool", "int64"]),
    (
        "reset-mask-none-set",
        "mask",
        np.zeros(4, np.bool_),
        ValueError,
        ["reset_mask", "True", "[False False False False]"],
    ),
]


def _bad_call(envs: Any, kind: str, arg: Any) -> None:
    if kind == "step":
        envs.step(arg)
    elif kind == "seed":
        envs.reset(seed=arg)
    else:
        envs.reset(seed=SEED, options={"reset_mask": arg})


def _check_bad_input(envs: Any, case: tuple, ctx: str) -> None:
    name, kind, arg, exc_type, needles = case
    exc, t = raises_timed(exc_type, _bad_call, envs, kind, arg)
    slowest = TIMINGS.get(("bad inputs (slowest)", ctx), {}).get("raise", 0.0)
    record("bad inputs (slowest)", ctx, **{"raise": max(t, slowest)})
    assert t < RAISE_S
    message = str(exc)
    for needle in needles:
        assert needle in message, f"{needle!r} not in the message {message!r}"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input(case: tuple, leaks: LeakCheck) -> None:
    """The bad call raises, names argument, expected and received; the next call is unaffected."""
    envs = make("fork", healthy_fns(N_ENVS, pid_dir=leaks.pid_dir))
    got = [envs.reset(seed=SEED), envs.step(ACTIONS[0])]
    _check_bad_input(envs, case, "fork")
    got += [envs.step(a) for a in ACTIONS[1:7]]
    assert_same(got, reference(SEED, ACTIONS[:7]))
    envs.close()
    leaks.check(envs)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_bad_inputs_interleaved(ctx: str, leaks: LeakCheck) -> None:
    """All bad inputs on one vector env, each followed by a good step checked against Sync."""
    envs = make(ctx, healthy_fns(N_ENVS, pid_dir=leaks.pid_dir))
    ref = gym.vector.SyncVectorEnv(healthy_fns(N_ENVS))
    assert_same(envs.reset(seed=SEED), ref.reset(seed=SEED))
    for i, case in enumerate(BAD_INPUTS):
        _check_bad_input(envs, case, ctx)
        action = ACTIONS[i % len(ACTIONS)]
        assert_same(envs.step(action), ref.step(action), f"step after {case[0]}")
    mask = np.array([True, False, False, True])
    assert_same(envs.reset(options={"reset_mask": mask}), ref.reset(options={"reset_mask": mask}))
    assert_same(envs.step(ACTIONS[0]), ref.step(ACTIONS[0]))
    ref.close()
    envs.close()
    leaks.check(envs)


# -- call order and closed envs ---------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_call_order_errors(ctx: str, leaks: LeakCheck) -> None:
    envs = make(ctx, healthy_fns(N_ENVS, pid_dir=leaks.pid_dir))
    with pytest.raises(NoAsyncCallError):
        envs.step_wait()
    with pytest.raises(NoAsyncCallError):
        envs.reset_wait()
    with pytest.raises(NoAsyncCallError):
        envs.call_wait()
    got = [envs.reset(seed=SEED)]
    envs.step_async(ACTIONS[0])
    with pytest.raises(AlreadyPendingCallError):
        envs.step_async(ACTIONS[1])
    with pytest.raises(AlreadyPendingCallError):
        envs.reset_async(seed=SEED)
    with pytest.raises(AlreadyPendingCallError):
        envs.call_async("ping")
    with pytest.raises(NoAsyncCallError):
        envs.reset_wait()
    got.append(envs.step_wait())  # the pending step is intact
    got += [envs.step(a) for a in ACTIONS[1:4]]
    assert_same(got, reference(SEED, ACTIONS[:4]))
    tc = close_timed(envs)
    assert tc < CLOSE_S
    leaks.check(envs)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_closed_env(ctx: str, leaks: LeakCheck) -> None:
    envs = make(ctx, healthy_fns(N_ENVS, pid_dir=leaks.pid_dir))
    envs.reset(seed=SEED)
    envs.step_async(ACTIONS[0])  # closing with a call pending works, and warns as Gymnasium's Async
    with pytest.warns(UserWarning, match="Calling `close` while waiting for a pending call to `step` to complete"):
        tc = close_timed(envs)
    assert tc < CLOSE_S
    leaks.check(envs)
    assert envs.closed
    t0 = time.monotonic()
    envs.close()  # idempotent
    envs.close(terminate=True)
    assert time.monotonic() - t0 < 0.5
    for fn in (
        lambda: envs.step(ACTIONS[0]),
        lambda: envs.step_async(ACTIONS[0]),
        lambda: envs.step_wait(),
        lambda: envs.reset(seed=1),
        lambda: envs.reset_async(),
        lambda: envs.reset_wait(),
        lambda: envs.call("ping"),
        lambda: envs.call_wait(),
        lambda: envs.get_attr("index"),
        lambda: envs.set_attr("index", 0),
        lambda: envs.render(),
    ):
        with pytest.raises(ClosedEnvironmentError):
            fn()


# -- the parent dies or is interrupted --------------------------------------------------------

CHILD_SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys, time
    # A program started from an interactive shell gets KeyboardInterrupt on SIGINT; one started
    # in the background of a non-interactive shell inherits SIGINT ignored. Be the former.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, {root!r})
    import numpy as np
    from multiprocessing import resource_tracker, shared_memory
    import vecenv
    from tests.helpers.faults import healthy_fns

    def main():
        envs = vecenv.SubprocVectorEnv(healthy_fns(4), 2, context={ctx!r})
        envs.reset(seed=0)
        helper = None
        if {helper!r}:  # a process of its own, forked later: it inherits the parent's pipe ends
            helper = os.fork()
            if helper == 0:
                time.sleep(60)
                os._exit(0)
        tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
        pids = envs.worker_pids
        with open("/proc/self/maps") as f:
            maps = f.read()
        # A memfd block (Linux) has no name to leak; the named fallback lives in /dev/shm.
        shm = sorted({{line.split()[-1] for line in maps.splitlines() if "/dev/shm/vecenv_" in line}})
        mapped = bool(shm) or "/memfd:vecenv" in maps
        actions = np.zeros((4, 2), np.float32)
        with envs:
            for _ in range(20):
                envs.step(actions)
            # Printed once the loop is running, so the signal lands mid-stepping.
            report = {{"workers": pids, "tracker": tracker, "shm": shm, "mapped": mapped, "helper": helper}}
            print(json.dumps(report), flush=True)
            while True:
                envs.step(actions)

    if __name__ == "__main__":
        main()
    """
)


def _start_child(
    tmp_path: Path, ctx: str, helper: bool = False
) -> tuple[subprocess.Popen, list[int], int | None, list[str]]:
    """The child script, stepping; ``helper``: it forks a process of its own first, whose pid
    joins the workers' (so that :func:`_reap` ends it too)."""
    script = tmp_path / "child.py"
    script.write_text(CHILD_SCRIPT.format(root=str(ROOT), ctx=ctx, helper=helper))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell job
    )
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        pytest.fail(f"the child script failed to start:\n{err}")
    info = json.loads(line)
    assert info["mapped"], "the child maps no shared-memory block"
    assert (info["helper"] is not None) == helper
    workers = info["workers"] + ([info["helper"]] if helper else [])
    return proc, workers, info["tracker"], info["shm"]


def _reap(proc: subprocess.Popen, workers: list[int]) -> None:
    """Whatever a failed assertion left running: kill it, and close the child's pipes."""
    for pid in workers:
        if procfs.alive(pid):
            os.kill(pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
    if proc.stdout is not None and not proc.stdout.closed:
        proc.communicate(timeout=10)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_workers_leave_with_a_killed_parent_whatever_it_forked(ctx: str, tmp_path: Path) -> None:
    """The parent forked a process of its own after starting its workers (a logger, a data
    loader), which holds copies of every pipe end the parent had: the workers still leave as
    soon as the parent is killed, not when that process ends."""
    proc, pids, _, _ = _start_child(tmp_path, ctx, helper=True)
    workers, helper = pids[:-1], pids[-1]
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        alive, _ = _wait_gone(workers, GONE_S)
        assert not alive, f"workers {alive} still running {GONE_S}s after the parent was killed"
        assert procfs.alive(helper), "the parent's own process must outlive it for this test to mean anything"
    finally:
        _reap(proc, pids)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_parent_sigkill_leaves_no_orphans(ctx: str, tmp_path: Path) -> None:
    proc, workers, tracker, shm = _start_child(tmp_path, ctx)
    try:
        assert all(procfs.alive(p) for p in workers)
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        alive, t = _wait_gone(workers, GONE_S)
        record("parent-sigkill", ctx, workers_gone=t)
        assert not alive, f"orphan workers {alive} still running {GONE_S}s after the parent was killed"
        if tracker is not None:
            alive, t = _wait_gone([tracker], GONE_S)
            record("parent-sigkill", ctx, tracker_gone=t)
            assert not alive, "the resource tracker of the killed parent is still running"
        t0 = time.monotonic()
        while any(map(os.path.exists, shm)) and time.monotonic() - t0 < GONE_S:
            time.sleep(0.02)
        record("parent-sigkill", ctx, shm_gone=time.monotonic() - t0)
        assert not any(map(os.path.exists, shm)), f"the killed parent's block {shm} was not unlinked"
    finally:
        _reap(proc, workers)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_ctrl_c(ctx: str, tmp_path: Path) -> None:
    """SIGINT to the whole process group (what Ctrl+C does): KeyboardInterrupt in the parent only."""
    proc, workers, tracker, shm = _start_child(tmp_path, ctx)
    try:
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # a hang guard only; the bound is asserted below
        t = time.monotonic() - t0
        record("ctrl-c", ctx, exit=t)
        # Exit closes the envs (one grace at most, then terminate and reap): bounded, not a hang.
        assert t < vecenv.DEFAULT_CLOSE_TIMEOUT + KILL_GRACE + 5.0, f"the interrupted parent took {t:.1f}s to exit"
        # Python re-raises an uncaught KeyboardInterrupt as death by SIGINT.
        assert proc.returncode == -signal.SIGINT, (proc.returncode, err)
        assert err.rstrip().endswith("KeyboardInterrupt"), err
        assert err.count("Traceback (most recent call last)") == 1, f"more than the parent's traceback:\n{err}"
        for worker_trace in ("vecenv/worker.py", "vecenv-worker", "Process "):
            assert worker_trace not in err, f"a worker printed to stderr:\n{err}"
        assert "leaked" not in err, err  # the resource tracker found nothing to clean up
        alive, t = _wait_gone(workers + ([tracker] if tracker else []), GONE_S)
        record("ctrl-c", ctx, orphans_gone=t)
        assert not alive, f"orphans {alive} after Ctrl+C"
        assert not any(map(os.path.exists, shm)), f"block {shm} left after Ctrl+C"
    finally:
        _reap(proc, workers)


@pytest.mark.timeout(30)
def test_constructor_error_does_not_wait_for_a_hanging_sibling() -> None:
    """Start-up raises the first constructor error at once, even while another worker hangs."""
    fns = healthy_fns(2)
    fns[0] = fault_fns(1, "raise", "init", 0)[0]
    fns[1] = fault_fns(2, "hang", "init", 1)[1]
    start = time.monotonic()
    with pytest.raises(ValueError, match="injected fault in init of env 0"):
        vecenv.SubprocVectorEnv(fns, 2, context="fork")
    assert time.monotonic() - start < 5.0
    assert multiprocessing.active_children() == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ctx", CONTEXTS)
def test_exit_without_close_does_not_hang(ctx: str, tmp_path: Path) -> None:
    """An env never closed, with non-daemon workers, must not block the interpreter's exit."""
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        import vecenv
        from tests.helpers.faults import healthy_fns

        def main():
            global envs  # alive until the interpreter exits
            envs = vecenv.SubprocVectorEnv(healthy_fns(4), 2, context={ctx!r}, daemon=False)
            envs.reset(seed=0)
            print(json.dumps(envs.worker_pids), flush=True)

        if __name__ == "__main__":
            main()
    """)
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    workers = json.loads(proc.stdout.strip().splitlines()[-1])
    alive, _ = _wait_gone(workers, GONE_S)
    assert not alive, f"workers {alive} outlived their parent"
    assert "Traceback" not in proc.stderr, proc.stderr


def _exit_in_step(dying: set[int], n: int, pid_dir: str) -> list:
    """``n`` constructors; the envs in ``dying`` call ``os._exit(3)`` at their first step."""
    return [
        functools.partial(FaultEnv, index=i, fault="exit" if i in dying else None, target=i, pid_dir=pid_dir)
        for i in range(n)
    ]


def _wait_ended(pids: list[int], limit: float) -> bool:
    """Wait up to ``limit`` seconds for each of ``pids`` (children of this process) to end as a
    pidfd reports it: every thread gone. A process whose main thread has exited shows as a zombie
    in /proc while its other threads still tear down, and until they are gone neither its pidfd
    nor its sentinel says it has ended."""
    fds = [os.pidfd_open(pid) for pid in pids]
    try:
        deadline = time.monotonic() + limit
        waiting = list(fds)
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready, _, _ = select.select(waiting, [], [], remaining)
            waiting = [fd for fd in waiting if fd not in ready]
        return True
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.timeout(30)
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfds (Linux 5.3)")
@pytest.mark.parametrize("how", ["sigkill-between-calls", "exit-in-the-same-step"])
def test_every_worker_found_dead_is_named(how: str, leaks: LeakCheck) -> None:
    """Two of three workers die during one call: the error names both (index, pid, how, envs),
    its ``worker``/``envs``/``exitcode`` keep naming the first, ``deaths`` lists them all."""
    envs = vecenv.SubprocVectorEnv(_exit_in_step({1, 5}, 6, leaks.pid_dir), 3, context="fork")
    _MADE.append(envs)
    envs.reset(seed=SEED)
    pids = envs.worker_pids
    actions = np.zeros((6, 2), np.float32)
    if how == "sigkill-between-calls":
        for pid in (pids[0], pids[2]):
            os.kill(pid, signal.SIGKILL)
        code = -signal.SIGKILL
    else:
        envs.step_async(actions)  # envs 1 and 5 (workers 0 and 2) exit in this step
        code = 3
    # Both have ended, as the parent sees it, before it looks (their statuses still unread).
    assert _wait_ended([pids[0], pids[2]], GONE_S)
    if how == "sigkill-between-calls":
        exc, t = raises_timed(WorkerDiedError, envs.step, actions)
    else:
        exc, t = raises_timed(WorkerDiedError, envs.step_wait)
    assert t < RAISE_S
    first = exc.deaths[0]  # whichever death the parent saw first: both had happened
    assert (exc.worker, exc.envs, exc.exitcode) == (first.worker, first.envs, code)
    deaths = sorted((d.worker, d.pid, d.envs, d.exitcode) for d in exc.deaths)
    assert deaths == [(0, pids[0], range(0, 2), code), (2, pids[2], range(4, 6), code)], deaths
    message = str(exc)
    ended = "was killed by signal SIGKILL" if code < 0 else "exited with code 3"
    for index in (0, 2):
        named = rf"\bworker {index} \(pid {pids[index]}, envs {2 * index}\.\.{2 * index + 1}\), which {ended}"
        assert re.search(named, message), message
    assert "worker 1 " not in message, message
    with pytest.raises(WorkerDiedError) as again:  # every later call: the same deaths
        envs.reset(seed=SEED)
    assert again.value.deaths == exc.deaths and (again.value.worker, again.value.exitcode) == (exc.worker, code)
    envs.close()
    leaks.check(envs)
