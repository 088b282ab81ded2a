"""One measurement, in the measuring process: build a runner's envs, reset once with a seed
(start-up = constructor + first reset), warm up, step for a while with precomputed actions, then
read the process tree's PSS and, with the vector env open and idle, its CPU use."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.bench import procfs
from vecenv.bench.calibration import SEED, infer, inference_arrays
from vecenv.bench.envs import env_fn
from vecenv.bench.runners import Drive, Runner, runner_named
from vecenv.bench.vectors import EnvFn
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, InvalidStateError

ACTION_ROWS = 256  # precomputed action rows, cycled
IDLE_S = 0.5  # the idle-CPU window, after the timed stepping


@dataclasses.dataclass
class Session:
    """Envs built and reset, ready to be stepped."""

    step: Callable[[int], int]  # step(i): one call with action row i; returns the env-steps it did
    close: Callable[[], Any]
    startup: float  # seconds: constructor + first reset
    first_obs: Any = None  # the first reset's observation(s), for their shape and dtype
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # more result fields


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a :class:`Session` is started from."""

    runner: Runner
    workload: str
    n: int
    env_fn: EnvFn
    learner: Callable[[], None] | None  # the learner's inference, run per step or batch
    t0: float  # when the build started


def action_rows(space: gym.Space, n: int) -> np.ndarray:
    """``ACTION_ROWS x n`` actions; env i's column depends only on (SEED, i), not on n."""
    if not isinstance(space, spaces.Discrete):
        raise ArgumentTypeError(f"benchmark actions need a Discrete action space, got {space}")
    cols = [np.random.default_rng([SEED, i]).integers(space.n, size=ACTION_ROWS) for i in range(n)]
    return (np.stack(cols, axis=1) + int(space.start)).astype(space.dtype)


def step_for(seconds: float, fn: Callable[[int], int], start: int = 0) -> tuple[int, int, float]:
    """Call ``fn(i)`` (returning env-steps done) until ``seconds`` passed; (calls, env-steps, s)."""
    i, steps = start, 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        steps += fn(i)
        i += 1
        now = time.perf_counter()
        if now >= deadline:
            return i - start, steps, now - t0


def batch_ids(out: Any) -> np.ndarray:
    """The env ids of a ``recv()`` result: its last item, or the info's env id entry."""
    if isinstance(out, tuple) and out:
        last = out[-1]
        if not isinstance(last, dict):
            return np.asarray(last)
        for key in ("env_id", "env_ids", "_env_ids"):
            if key in last:
                return np.asarray(last[key])
    raise InvalidStateError(f"cannot find the env ids in recv()'s result ({type(out).__name__})")


def _start_single(s: Setup) -> Session:
    env = s.env_fn()
    first_obs, _ = env.reset(seed=SEED)
    startup = time.perf_counter() - s.t0
    actions = action_rows(env.action_space, 1)[:, 0]
    done = False

    def step(i: int) -> int:
        nonlocal done
        if done:  # NEXT_STEP: the step after an episode's end is a reset
            env.reset()
            done = False
        else:
            _, _, term, trunc, _ = env.step(actions[i % ACTION_ROWS])
            done = term or trunc
        return 1

    return Session(step, env.close, startup, first_obs)


def _build(s: Setup) -> Any:
    if s.runner.build is None:
        raise InvalidArgumentError(f"runner {s.runner.name!r} builds no vector env")
    return s.runner.build(s.runner, [s.env_fn] * s.n, s.workload)


def _start_native(s: Setup) -> Session:
    envs = _build(s)
    envs.reset(seed=SEED)
    startup = time.perf_counter() - s.t0
    if envs.num_envs != s.n:
        raise InvalidStateError(f"expected {s.n} envs, got {envs.num_envs}")
    actions = action_rows(envs.single_action_space, s.n)

    def step(i: int) -> int:
        envs.step(actions[i % ACTION_ROWS])
        return s.n

    return Session(step, envs.close, startup)


def _start_recv_send(s: Setup) -> Session:
    envs = _build(s)
    try:
        envs.async_reset(seed=SEED)
    except TypeError:
        envs.async_reset()
    pending = [envs.recv()]
    startup = time.perf_counter() - s.t0
    actions = action_rows(envs.single_action_space, s.n)

    def step(i: int) -> int:
        got = pending.pop() if pending else envs.recv()
        ids = batch_ids(got)
        if s.learner:
            s.learner()
        envs.send(actions[i % ACTION_ROWS][ids], ids)
        return len(ids)

    return Session(step, envs.close, startup)


def _start_step(s: Setup) -> Session:
    envs = _build(s)
    reset_out = envs.reset(seed=SEED)
    startup = time.perf_counter() - s.t0
    extra = _worker_choice(s.runner, envs)
    actions = action_rows(envs.single_action_space, s.n)

    def step(i: int) -> int:
        envs.step(actions[i % ACTION_ROWS])
        if s.learner:
            s.learner()
        return s.n

    first_obs = reset_out[0] if isinstance(reset_out, tuple) else reset_out
    return Session(step, envs.close, startup, first_obs, extra)


def _worker_choice(runner: Runner, envs: Any) -> dict[str, Any]:
    """What ``num_workers="auto"`` picked, and why (result fields); nothing for a fixed count."""
    if runner.workers != "auto":
        return {}
    choice = getattr(envs, "worker_choice", None)
    if choice is None:
        raise InvalidStateError(f"{runner.name}: the vector env reports no worker_choice")
    return {"workers_chosen": int(choice.num_workers), "workers_chosen_reason": str(choice.reason)}


def _spin_limit() -> float | None:
    """The longest a wait of vecenv's step path could spin in this process (0: every wait slept
    at once); ``None`` where no vecenv vector env was made."""
    fastpath = sys.modules.get("vecenv.wire.fastpath")
    return None if fastpath is None else float(fastpath.SPIN_LIMIT)


_STARTS: dict[Drive, Callable[[Setup], Session]] = {
    Drive.SINGLE: _start_single,
    Drive.NATIVE: _start_native,
    Drive.RECV_SEND: _start_recv_send,
    Drive.STEP: _start_step,
}


def measure(spec: dict[str, Any], on_result: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """One measurement, in this process: build, reset, warm up, step, read the tree's PSS and
    idle CPU. ``on_result`` gets the result before the envs close (a close that hangs or
    fails loses nothing)."""
    runner = runner_named(spec["runner"], spec["n"])
    calib = spec["calib"]
    make = env_fn(spec["workload"], calib)
    a, b = inference_arrays()
    learner = functools.partial(infer, a, b, calib["inference_reps"]) if runner.infer else None
    session = _STARTS[runner.drive](Setup(runner, spec["workload"], spec["n"], make, learner, time.perf_counter()))
    calls, _, _ = step_for(spec["warmup"], session.step)
    calls, steps, elapsed = step_for(spec["seconds"], session.step, start=calls)
    pss = procfs.tree_pss_kib()
    procs = procfs.tree(os.getpid())
    idle = procfs.idle_cpu(spec.get("idle_s", IDLE_S), procs)  # the vector env open, nobody stepping it
    obs = session.first_obs
    result = {
        "rate": steps / elapsed,
        "env_steps": steps,
        "calls": calls,
        "elapsed_s": elapsed,
        "startup_s": session.startup,
        "pss_mib": None if pss is None else pss / 1024,
        "processes": len(procs),
        "idle_cpu_cores": None if idle is None or idle[1] <= 0 else idle[0] / idle[1],
        "idle_cpu_s": None if idle is None else idle[0],
        "idle_wall_s": None if idle is None else idle[1],
        "obs_shape": None if obs is None else list(np.shape(obs)),
        "obs_dtype": None if obs is None else str(np.asarray(obs).dtype),
        "spin_limit_s": _spin_limit(),
        **session.extra,
    }
    if on_result is not None:
        on_result(result)
    try:
        session.close()
    except Exception:
        pass
    return result
