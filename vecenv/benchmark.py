"""Throughput benchmark: vecenv against Gymnasium's vector envs (and others when installed).

    python -m vecenv.benchmark --quick                  # ~1 min smoke run (2 busy cores: ~80 s)
    python -m vecenv.benchmark --sizes 128 --reps 3     # one size, 3 interleaved repetitions
    python scripts/benchmark.py ...                     # same thing

Workloads (--workloads):
  cartpole      gymnasium.make("CartPole-v1") (a few µs per step)
  py100us       synthetic env burning a fixed number of pure-Python loop iterations per step,
                calibrated at start-up to ~100 µs on this machine (not a wall-clock spin)
  py1ms         the same, ~1 ms per step
  obs84         84x84x4 uint8 observations, ~50 µs of Python work per step
  atari         gymnasium.make("ALE/Pong-v5", frameskip=1) in AtariPreprocessing (84x84 grayscale,
                frame_skip=4, no-op starts) and FrameStackObservation(env, 4): a real emulator,
                ~500 µs per step, (4, 84, 84) uint8 observations. Measured only when ale_py and
                cv2 are importable (pip install -e ".[bench]"; skipped with a note otherwise)
  async-batch   a learner: ~0.5 ms of numpy "inference" per batch while heavy-tailed envs
                (~100 µs per step, 10x with probability 0.1, drawn from the env's seeded RNG)
                run; vecenv's async API (batch_size=, async_reset/recv/send) with 2 and 4
                workers and batches of one or two groups, against synchronous vecenv stepping
                of the same envs with the same inference cost. Skipped when vecenv lacks the API.
  native-group  2 groups x 1024 CartPole envs, each a native vectorized group
                (gymnasium.make_vec(..., vectorization_mode="vector_entry_point")) in a worker
                (vecenv-2w-native), or one of them stepped by the parent (vecenv-2w-native-inline,
                inline_group=True), against that make_vec with 2048 envs in one process.

Runners (--runners, for cartpole, py100us, py1ms, obs84 and atari):
  single        one env stepped in a Python loop (N is reported as 1); the "ideal" is
                cores x this rate
  single-par    `single` in one process per core at once, rates summed: what the hardware
                really gives (shared caches, hyperthreads and a busy host make it less than
                the ideal); the ceiling for any multi-process runner
  sync, async   gymnasium SyncVectorEnv / AsyncVectorEnv(shared_memory=True)
  vecenv-Kw     vecenv.SubprocVectorEnv with K = 1, 2, 4 workers; vecenv-0w: num_workers=0, every
                env stepped in the measuring process (no worker process)
  vecenv-auto   vecenv.SubprocVectorEnv(fns, "auto"): it times one extra env here (part of its
                start-up) and picks 0 workers or one per core; the table shows what it chose
                (e.g. "vecenv-auto (0w)"), the JSON has it per repetition (workers_chosen)
  ray-Kw        vecenv.RayVectorEnv with K = 2, 4 actors on a local Ray that it starts itself
                (start-up includes Ray's, seconds), min(1, cores/K) CPUs per actor; only when
                named in --runners (each cell starts a Ray), and Ray is importable
                (pip install -e ".[ray]")
  vecenv-2w-half, ray-2w-half   the same with 2 workers and batch_size N/2, stepped with
                async_reset/recv/send (no inference): each recv takes the first group to
                finish; only when named in --runners
  supersuit, pufferlib, envpool   when importable (skipped with a note otherwise); envpool
                runs only CartPole (its other cells fail with a note)

Method: every measurement runs in a fresh Python process; it builds the vector env, resets
once with a seed (start-up = constructor + first reset), steps with precomputed random
actions (identical for all runners) in NEXT_STEP autoreset mode for a warm-up, then for
--seconds, and reads the PSS of its whole process tree (/proc/<pid>/smaps_rollup of itself
and every descendant). Then, with the vector env still open and idle (as while a learner is
busy between steps), it sleeps 0.5 s and sums the CPU time (user + system, /proc/<pid>/stat)
that it and its descendants used meanwhile: "idle CPU (cores)" = CPU seconds / wall seconds,
~0 for workers that block on their pipes, ~1 per worker for workers that spin (a batch still in
flight, with recv/send, finishes in that window). Repetitions are interleaved (rep 1 of every
cell, then rep 2, ...); tables give medians with min-max. BLAS is limited to one thread in
measuring processes.

Output (--out, default bench-results/): benchmark.md (also printed), benchmark.json and
benchmark.png (needs matplotlib: pip install -e ".[bench]"; skipped with a note otherwise).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from vecenv.host import available_cpus

__all__ = ["BurnEnv", "FrameEnv", "burn", "main", "make_atari"]

STANDARD_WORKLOADS = ("cartpole", "py100us", "py1ms", "obs84", "atari")
EXTRA_WORKLOADS = ("async-batch", "native-group")
NATIVE_RUNNERS = ("gym-make_vec", "vecenv-2w-native", "vecenv-2w-native-inline")
ALL_WORKLOADS = STANDARD_WORKLOADS + EXTRA_WORKLOADS
VECENV_WORKERS = (0, 1, 2, 4)  # 0: every env in the measuring process
# vecenv-auto: num_workers="auto" (0 or one per core), its choice recorded per repetition
CORE_RUNNERS = (
    ("single", "single-par", "sync", "async") + tuple(f"vecenv-{k}w" for k in VECENV_WORKERS) + ("vecenv-auto",)
)
RAY_RUNNERS = ("ray-2w", "ray-4w", "ray-2w-half")
HALF_BATCH_RUNNERS = ("vecenv-2w-half", "ray-2w-half")  # batch_size = N/2, recv/send
THIRD_PARTY = ("supersuit", "pufferlib", "envpool")
ALL_RUNNERS = CORE_RUNNERS + ("vecenv-2w-half",) + RAY_RUNNERS + THIRD_PARTY
#: Measured only when named in --runners: the Ray rows start a Ray in every cell (seconds each),
#: and the process half-batch row is their counterpart.
OPT_IN_RUNNERS = ("vecenv-2w-half",) + RAY_RUNNERS
SEED = 0
ACTION_ROWS = 256  # precomputed action rows, cycled
INFERENCE_S = 0.5e-3
IDLE_S = 0.5  # the idle-CPU window, after the timed stepping
ATARI_MISSING = "atari: skipped, needs ale-py and opencv-python-headless (pip install -e '.[bench]')"
RESULT_TAG = "VECENV_BENCH_RESULT "
CHILD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# -- benchmark envs ----------------------------------------------------------------------------


def burn(iterations: int) -> int:
    """Pure-Python busy work: a fixed number of loop iterations (not a wall-clock spin)."""
    x = 0
    for i in range(iterations):
        x += i
    return x


class BurnEnv(gym.Env):
    """Burns ``iterations`` Python loop iterations per step; 4 float32 observations, 2 actions.

    With ``tail_prob > 0`` a step costs ``tail_factor`` times more with that probability, drawn
    from the env's own seeded RNG. Episodes end with probability ``1 / episode_len`` per step.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, iterations: int, tail_prob: float = 0.0, tail_factor: int = 10, episode_len: int = 200):
        self.iterations = int(iterations)
        self.tail_prob = float(tail_prob)
        self.tail_factor = int(tail_factor)
        self.end_prob = 1.0 / episode_len
        self.observation_space = spaces.Box(-1e7, 1e7, (4,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        rng = self.np_random
        n = self.iterations
        if self.tail_prob and rng.random() < self.tail_prob:
            n *= self.tail_factor
        burn(n)
        self._t += 1
        obs = np.array([self._t, action, n, 0.0], np.float32)
        return obs, 1.0, bool(rng.random() < self.end_prob), False, {}


class FrameEnv(gym.Env):
    """84x84x4 uint8 observations (a frame stack), ``iterations`` Python loop iterations per step."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, iterations: int, episode_len: int = 200):
        self.iterations = int(iterations)
        self.end_prob = 1.0 / episode_len
        self.observation_space = spaces.Box(0, 255, (84, 84, 4), np.uint8)
        self.action_space = spaces.Discrete(2)
        self._frames = np.zeros((84, 84, 4), np.uint8)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._frames[:] = 0
        return self._frames.copy(), {}

    def step(self, action):
        burn(self.iterations)
        self._t += 1
        self._frames[:, :, self._t % 4] = (self._t + int(action)) & 0xFF
        return self._frames.copy(), 1.0, bool(self.np_random.random() < self.end_prob), False, {}


def make_atari() -> gym.Env:
    """Pong as Atari agents see it: ``ALE/Pong-v5`` (frameskip=1) in ``AtariPreprocessing``
    (84x84 grayscale, frame_skip=4, no-op starts) and a 4-frame ``FrameStackObservation``:
    (4, 84, 84) uint8 observations, 6 actions, ~500 µs per step."""
    # Imported here, not at module level, so that a spawned or forkserver worker registers the ALE
    # envs too; by name, so that mypy needs no ale_py where the bench extra is not installed.
    gym.register_envs(importlib.import_module("ale_py"))
    env = gym.make("ALE/Pong-v5", frameskip=1)
    env = gym.wrappers.AtariPreprocessing(env)
    return gym.wrappers.FrameStackObservation(env, 4)


def atari_missing() -> str | None:
    """``None`` when the atari workload can run (ale_py and cv2 import), else the note saying why not."""
    try:
        for module in ("ale_py", "cv2"):
            importlib.import_module(module)
    except Exception:  # not installed, or installed but broken (e.g. an OpenCV that needs libGL)
        return ATARI_MISSING
    return None


# -- calibration (run in a fresh process, BLAS limited to one thread) -------------------------


def calibrate() -> dict[str, Any]:
    """Loop iterations per µs and the matmul repeat count that takes ~0.5 ms."""
    n = 50_000  # short chunks, many tries: the minimum dodges a noisy machine's interruptions
    burn(n)
    best = min(_timed(burn, n) for _ in range(40))
    per_us = n / (best * 1e6)
    a, b = _inference_arrays()
    reps = 1
    while True:
        t = min(_timed(_infer, a, b, reps) for _ in range(5))
        if t >= INFERENCE_S or reps > 10_000:
            break
        reps = max(reps + 1, int(reps * INFERENCE_S / max(t, 1e-9)))
    return {
        "iterations_per_us": per_us,
        "iters_100us": round(100 * per_us),
        "iters_1ms": round(1000 * per_us),
        "iters_50us": round(50 * per_us),
        "inference_reps": reps,
        "inference_ms": min(_timed(_infer, a, b, reps) for _ in range(5)) * 1e3,
    }


def _timed(fn: Callable[..., Any], *args: Any) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def _inference_arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    return rng.standard_normal((128, 128), np.float32), rng.standard_normal((128, 128), np.float32)


def _infer(a: np.ndarray, b: np.ndarray, reps: int) -> None:
    for _ in range(reps):
        a @ b


# -- measuring (runs in a fresh process) -------------------------------------------------------


def _env_fn(workload: str, calib: dict[str, Any]) -> Callable[[], gym.Env]:
    if workload in ("cartpole", "native-group"):
        return functools.partial(gym.make, "CartPole-v1")
    if workload == "py100us":
        return functools.partial(BurnEnv, calib["iters_100us"])
    if workload == "py1ms":
        return functools.partial(BurnEnv, calib["iters_1ms"])
    if workload == "obs84":
        return functools.partial(FrameEnv, calib["iters_50us"])
    if workload == "atari":
        return make_atari
    if workload == "async-batch":
        return functools.partial(BurnEnv, calib["iters_100us"], tail_prob=0.1, tail_factor=10)
    raise ValueError(f"unknown workload {workload!r}")


def _actions(space: gym.Space, n: int) -> np.ndarray:
    """``ACTION_ROWS x n`` actions; env i's column depends only on (SEED, i), not on n."""
    if not isinstance(space, spaces.Discrete):
        raise TypeError(f"benchmark actions need a Discrete action space, got {space}")
    cols = [np.random.default_rng([SEED, i]).integers(space.n, size=ACTION_ROWS) for i in range(n)]
    return (np.stack(cols, axis=1) + int(space.start)).astype(space.dtype)


def _workers_of(runner: str) -> int:
    """K of a runner that names its worker count (``vecenv-Kw``, ``ray-Kw``, ...; K may be 0)."""
    k = _runner_workers(runner)
    if k is None:
        why = "chooses its worker count when built" if runner == "vecenv-auto" else "does not name a worker count"
        raise ValueError(f"runner {runner!r} {why}")
    return k


def _runner_workers(runner: str) -> int | None:
    """K of a ``vecenv-Kw...`` or ``ray-Kw...`` runner (``vecenv-0w``: 0), else ``None`` (also for
    ``vecenv-auto``, which has no fixed K: it picks 0 or one per core, at most N)."""
    for prefix in ("vecenv-", "ray-"):
        if runner.startswith(prefix):
            head = runner[len(prefix) :].split("-")[0]
            if head.endswith("w") and head[:-1].isdigit():
                return int(head[:-1])
    return None


def _ray_vector(fns: list[Callable[[], gym.Env]], workers: int, **kwargs: Any) -> Any:
    """A RayVectorEnv on a local Ray it starts itself, its actors sharing this machine's cores."""
    from vecenv.parent.ray_env import RayVectorEnv

    cores = available_cpus()
    return RayVectorEnv(
        fns,
        workers,
        actor_options={"num_cpus": min(1.0, cores / workers)},
        autoreset_mode=AutoresetMode.NEXT_STEP,
        **kwargs,
    )


def _make_vector(runner: str, fns: list[Callable[[], gym.Env]], spec: dict[str, Any]) -> Any:
    mode = AutoresetMode.NEXT_STEP
    if runner.startswith("ray-") and runner.endswith("w"):
        return _ray_vector(fns, _workers_of(runner))
    if runner == "sync":
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)
    if runner == "async":
        return gym.vector.AsyncVectorEnv(fns, shared_memory=True, autoreset_mode=mode)
    if runner == "vecenv-auto":
        import vecenv

        return vecenv.SubprocVectorEnv(fns, "auto", autoreset_mode=mode)
    if runner.startswith("vecenv-") and runner.endswith("w"):
        import vecenv

        return vecenv.SubprocVectorEnv(fns, _workers_of(runner), autoreset_mode=mode)
    if runner == "envpool":
        import envpool

        if spec["workload"] != "cartpole":
            raise RuntimeError("envpool runs only its own C++ envs (CartPole here)")
        return envpool.make_gymnasium("CartPole-v1", num_envs=len(fns))
    if runner == "pufferlib":  # best effort; the API moves between releases
        import pufferlib.emulation
        import pufferlib.vector

        creators = [functools.partial(pufferlib.emulation.GymnasiumPufferEnv, env_creator=fn) for fn in fns]
        return pufferlib.vector.make(
            creators, num_envs=len(fns), num_workers=min(2, len(fns)), backend=pufferlib.vector.Multiprocessing
        )
    if runner == "supersuit":  # best effort
        import supersuit

        return supersuit.concat_vec_envs_v1(
            gym.vector.SyncVectorEnv(fns[:1], autoreset_mode=mode), len(fns), num_cpus=2, base_class="gymnasium"
        )
    raise ValueError(f"unknown runner {runner!r}")


def _step_for(seconds: float, fn: Callable[[int], int], start: int = 0) -> tuple[int, int, float]:
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


def _batch_ids(out: Any) -> np.ndarray:
    """The env ids of a ``recv()`` result: its last item, or the info's env id entry."""
    if isinstance(out, tuple) and out:
        last = out[-1]
        if not isinstance(last, dict):
            return np.asarray(last)
        for key in ("env_id", "env_ids", "_env_ids"):
            if key in last:
                return np.asarray(last[key])
    raise RuntimeError(f"cannot find the env ids in recv()'s result ({type(out).__name__})")


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement, in this process: build, reset, warm up, step, read the tree's PSS."""
    workload, runner, n = spec["workload"], spec["runner"], spec["n"]
    calib = spec["calib"]
    env_fn = _env_fn(workload, calib)
    a, b = _inference_arrays()
    reps = calib["inference_reps"]
    infer = spec.get("infer", False)
    close: Callable[[], Any]
    first_obs: Any = None  # the first reset's observation(s), for their shape and dtype
    extra: dict[str, Any] = {}

    t0 = time.perf_counter()
    if runner == "single":
        env = env_fn()
        first_obs, _ = env.reset(seed=SEED)
        startup = time.perf_counter() - t0
        actions = _actions(env.action_space, 1)[:, 0]
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

        close = env.close
    elif runner in NATIVE_RUNNERS:
        envs: Any  # a vector env; vecenv's have the async-batch API (recv/send) too
        if runner == "gym-make_vec":
            envs = gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point")
        else:
            import vecenv

            group = functools.partial(gym.make_vec, "CartPole-v1", n // 2, vectorization_mode="vector_entry_point")
            envs = vecenv.SubprocVectorEnv.from_groups(
                [group, group], autoreset_mode=AutoresetMode.NEXT_STEP, inline_group=runner.endswith("-inline")
            )
        envs.reset(seed=SEED)
        startup = time.perf_counter() - t0
        if envs.num_envs != n:
            raise RuntimeError(f"expected {n} envs, got {envs.num_envs}")
        actions = _actions(envs.single_action_space, n)

        def step(i: int) -> int:
            envs.step(actions[i % ACTION_ROWS])
            return n

        close = envs.close
    elif (runner.startswith("vecenv-") and "-batch" in runner) or runner in HALF_BATCH_RUNNERS:
        # async-batch: vecenv-Kw-batchB; standard workloads: *-2w-half (batch_size N/2)
        import vecenv

        workers, batch = spec["workers"], spec["batch_size"]
        if runner.startswith("ray-"):
            envs = _ray_vector([env_fn] * n, workers, batch_size=batch)
        else:
            envs = vecenv.SubprocVectorEnv([env_fn] * n, workers, batch_size=batch)
        try:
            envs.async_reset(seed=SEED)
        except TypeError:
            envs.async_reset()
        out = envs.recv()
        startup = time.perf_counter() - t0
        actions = _actions(envs.single_action_space, n)
        pending = [out]

        def step(i: int) -> int:
            got = pending.pop() if pending else envs.recv()
            ids = _batch_ids(got)
            if infer:
                _infer(a, b, reps)
            envs.send(actions[i % ACTION_ROWS][ids], ids)
            return len(ids)

        close = envs.close
    else:
        fns = [env_fn] * n
        if runner.endswith("-sync"):  # async-batch baseline: vecenv-Kw-sync
            import vecenv

            envs = vecenv.SubprocVectorEnv(fns, spec["workers"], autoreset_mode=AutoresetMode.NEXT_STEP)
        else:
            envs = _make_vector(runner, fns, spec)
        reset_out = envs.reset(seed=SEED)
        startup = time.perf_counter() - t0
        first_obs = reset_out[0] if isinstance(reset_out, tuple) else reset_out
        if runner == "vecenv-auto":
            choice = getattr(envs, "worker_choice", None)  # what num_workers="auto" picked, and why
            if choice is None:
                raise RuntimeError("vecenv-auto: the vector env reports no worker_choice")
            extra.update(workers_chosen=int(choice.num_workers), workers_chosen_reason=str(choice.reason))
        actions = _actions(envs.single_action_space, n)

        def step(i: int) -> int:
            envs.step(actions[i % ACTION_ROWS])
            if infer:
                _infer(a, b, reps)
            return n

        close = envs.close

    calls, _, _ = _step_for(spec["warmup"], step)
    calls, steps, elapsed = _step_for(spec["seconds"], step, start=calls)
    pss = tree_pss_kib()
    procs = _tree(os.getpid())
    idle = idle_cpu(spec.get("idle_s", IDLE_S), procs)  # the vector env open, nobody stepping it
    result = {
        "rate": steps / elapsed,
        "env_steps": steps,
        "calls": calls,
        "elapsed_s": elapsed,
        "startup_s": startup,
        "pss_mib": None if pss is None else pss / 1024,
        "processes": len(procs),
        "idle_cpu_cores": None if idle is None or idle[1] <= 0 else idle[0] / idle[1],
        "idle_cpu_s": None if idle is None else idle[0],
        "idle_wall_s": None if idle is None else idle[1],
        "obs_shape": None if first_obs is None else list(np.shape(first_obs)),
        "obs_dtype": None if first_obs is None else str(np.asarray(first_obs).dtype),
        **extra,
    }
    print(RESULT_TAG + json.dumps(result), flush=True)
    try:
        close()
    except Exception:
        pass
    return result


def _tree(root: int) -> list[int]:
    """``root`` and all its descendants (from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))  # ppid (field 4)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _cpu_ticks(pids: Sequence[int]) -> dict[int, int]:
    """User + system CPU time of each readable pid (all its threads), in clock ticks."""
    out = {}
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            out[pid] = int(fields[11]) + int(fields[12])  # utime (14), stime (15)
    return out


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, from field 3 (state) on;
    ``None`` for a pid that is gone or unreadable. The name may hold spaces and parentheses,
    so the split starts after its last ``)``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def idle_cpu(seconds: float, pids: Sequence[int] | None = None) -> tuple[float, float] | None:
    """Sleep ``seconds``; the CPU seconds (user + system) that ``pids`` (default: this process and
    its descendants) used meanwhile, and the wall seconds slept. ``None`` without /proc. A pid
    that exits in the window is not counted; resolution is one clock tick (usually 10 ms)."""
    pids = _tree(os.getpid()) if pids is None else pids
    before = _cpu_ticks(pids)
    t0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    after = _cpu_ticks(list(before))
    if not before:
        return None
    ticks = sum(after[p] - before[p] for p in before if p in after)
    return ticks / os.sysconf("SC_CLK_TCK"), wall


def tree_pss_kib(root: int | None = None) -> float | None:
    """Sum of ``Pss`` over /proc/<pid>/smaps_rollup of ``root`` (default: self) and descendants."""
    total, seen = 0, False
    for pid in _tree(os.getpid() if root is None else root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        seen = True
                        break
        except OSError:
            continue
    return total if seen else None


def _child_main() -> None:
    spec = json.loads(sys.argv[1])
    if spec.get("calibrate"):
        print(RESULT_TAG + json.dumps(calibrate()), flush=True)
    else:
        measure(spec)


# -- orchestration (parent) --------------------------------------------------------------------


def _run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run ``spec`` in a fresh interpreter; its result, or ``{"error": ...}``."""
    code = "from vecenv.benchmark import _child_main; _child_main()"
    env = {**os.environ, **CHILD_ENV}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return {"error": (err[-1] if err else f"exit status {proc.returncode}, no result")[:300]}


def _run_concurrently(spec: dict[str, Any], k: int, timeout: float) -> dict[str, Any]:
    """Run ``spec`` in ``k`` fresh interpreters at once; rates and memory summed."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(k) as pool:
        results = list(pool.map(lambda _: _run_child(spec, timeout), range(k)))
    failed = [r for r in results if "error" in r]
    if failed:
        return failed[0]
    pss = [r["pss_mib"] for r in results]
    idle = [r.get("idle_cpu_cores") for r in results]
    return {
        "rate": sum(r["rate"] for r in results),
        "env_steps": sum(r["env_steps"] for r in results),
        "calls": sum(r["calls"] for r in results),
        "elapsed_s": max(r["elapsed_s"] for r in results),
        "startup_s": max(r["startup_s"] for r in results),
        "pss_mib": None if None in pss else sum(pss),
        "processes": k,
        "idle_cpu_cores": None if None in idle else sum(idle),
        "obs_shape": results[0].get("obs_shape"),
        "obs_dtype": results[0].get("obs_dtype"),
    }


def _vecenv_has_batch_api() -> str | None:
    """``None`` when SubprocVectorEnv has batch_size=/async_reset/recv/send, else why not."""
    try:
        from vecenv import SubprocVectorEnv
    except Exception as exc:  # pragma: no cover
        return f"vecenv not importable: {exc}"
    missing = [m for m in ("async_reset", "recv", "send") if not hasattr(SubprocVectorEnv, m)]
    if "batch_size" not in inspect.signature(SubprocVectorEnv.__init__).parameters:
        missing.insert(0, "batch_size=")
    return f"vecenv has no async batch API yet (missing {', '.join(missing)})" if missing else None


def plan(
    workloads: Sequence[str], sizes: Sequence[int], runners: Sequence[str], quick: bool
) -> tuple[list[dict[str, Any]], list[str]]:
    """The cells to measure (in interleaving order) and notes on what is skipped."""
    cells: list[dict[str, Any]] = []
    notes: list[str] = []
    for lib in THIRD_PARTY:
        if lib in runners and importlib.util.find_spec(lib) is None:
            notes.append(f"{lib}: not importable, skipped (pip install {lib} to include it)")
    available = [r for r in runners if r not in THIRD_PARTY or importlib.util.find_spec(r) is not None]
    if any(r in RAY_RUNNERS for r in available) and importlib.util.find_spec("ray") is None:
        notes.append('ray: not importable, its runners skipped (pip install -e ".[ray]" to include them)')
        available = [r for r in available if r not in RAY_RUNNERS]
    if "atari" in workloads:
        missing = atari_missing()
        if missing:
            notes.append(missing)
            workloads = [w for w in workloads if w != "atari"]
    for w in workloads:
        if w not in STANDARD_WORKLOADS:
            continue
        for r in available:
            for n in [1] if r.startswith("single") else sizes:
                k = _runner_workers(r)  # None for vecenv-auto (picks at most N); 0 for vecenv-0w
                if k is not None and k > n:
                    continue
                cell = dict(group="standard", workload=w, n=n, runner=r, baseline="sync")
                if r in HALF_BATCH_RUNNERS:
                    k = _workers_of(r)
                    if n % (2 * k):
                        continue  # N/2 must be whole groups
                    cell.update(workers=k, batch_size=n // 2)
                cells.append(cell)
    if "async-batch" in workloads:
        why = _vecenv_has_batch_api()
        if why:
            notes.append(f"async-batch: skipped, {why}")
        else:
            for n in sizes:
                for k in (2,) if quick else (2, 4):
                    if n < 2 * k:
                        continue
                    group = n // k
                    base = f"vecenv-{k}w-sync"
                    cells.append(
                        dict(
                            group="async-batch",
                            workload="async-batch",
                            n=n,
                            runner=base,
                            workers=k,
                            infer=True,
                            baseline=base,
                        )
                    )
                    for g in (1,) if quick else (1, 2):
                        cells.append(
                            dict(
                                group="async-batch",
                                workload="async-batch",
                                n=n,
                                runner=f"vecenv-{k}w-batch{g * group}",
                                workers=k,
                                batch_size=g * group,
                                infer=True,
                                baseline=base,
                            )
                        )
    if "native-group" in workloads:
        for r in NATIVE_RUNNERS:
            cells.append(dict(group="native-group", workload="native-group", n=2048, runner=r, baseline="gym-make_vec"))
    return cells, notes


def _key(cell: dict[str, Any]) -> tuple[str, str, int, str]:
    return cell["group"], cell["workload"], cell["n"], cell["runner"]


def summarize(cells: list[dict[str, Any]], cores: int) -> None:
    """Add a ``summary`` (medians, min-max, ratios) to every cell that has results."""
    by_key = {_key(c): c for c in cells}
    for c in cells:
        ok = [r for r in c["reps"] if "error" not in r]
        if not ok:
            c["summary"] = None
            continue
        rates = [r["rate"] for r in ok]
        starts = [r["startup_s"] for r in ok]
        pss = [r["pss_mib"] for r in ok if r.get("pss_mib") is not None]
        idle = [r["idle_cpu_cores"] for r in ok if r.get("idle_cpu_cores") is not None]
        chosen = sorted({r["workers_chosen"] for r in ok if r.get("workers_chosen") is not None})
        s: dict[str, Any] = {
            "reps": len(ok),
            "rate_median": statistics.median(rates),
            "rate_min": min(rates),
            "rate_max": max(rates),
            "startup_s_median": statistics.median(starts),
            "startup_s_min": min(starts),
            "startup_s_max": max(starts),
            "pss_mib_median": statistics.median(pss) if pss else None,
            "pss_mib_min": min(pss) if pss else None,
            "pss_mib_max": max(pss) if pss else None,
            "processes": ok[-1].get("processes"),
            "idle_cpu_cores_median": statistics.median(idle) if idle else None,
            "idle_cpu_cores_min": min(idle) if idle else None,
            "idle_cpu_cores_max": max(idle) if idle else None,
            "workers_chosen": chosen or None,  # vecenv-auto: the counts it chose (one per rep, deduplicated)
            "ratio_to_baseline": None,
            "ideal_fraction": None,
        }
        c["summary"] = s
    for c in cells:
        s = c["summary"]
        if not s:
            continue
        base = (
            None if c["runner"].startswith("single") else by_key.get((c["group"], c["workload"], c["n"], c["baseline"]))
        )
        if base and base["summary"]:
            s["ratio_to_baseline"] = s["rate_median"] / base["summary"]["rate_median"]
        single = by_key.get(("standard", c["workload"], 1, "single"))
        if c["group"] == "standard" and single and single["summary"]:
            s["ideal_fraction"] = s["rate_median"] / (cores * single["summary"]["rate_median"])


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def _label(cell: dict[str, Any]) -> str:
    """The runner, with what ``vecenv-auto`` chose: ``vecenv-auto (0w)`` (``(0w/2w)`` if reps differ)."""
    chosen = (cell.get("summary") or {}).get("workers_chosen")
    return f"{cell['runner']} ({'/'.join(f'{k}w' for k in chosen)})" if chosen else cell["runner"]


def markdown(cells: list[dict[str, Any]], notes: list[str], meta: dict[str, Any]) -> str:
    cores = meta["cores"]
    cal = meta["calibration"]
    lines = [
        "# vecenv benchmark",
        "",
        f"{meta['date']} · {meta['machine']} · {cores} cores · Python {meta['python']} · "
        f"gymnasium {meta['gymnasium']} · numpy {meta['numpy']} · vecenv {meta['vecenv']}",
        "",
        f"Calibration: {cal['iterations_per_us']:.1f} loop iterations/µs → py100us = {cal['iters_100us']:,}, "
        f"py1ms = {cal['iters_1ms']:,}, obs84 = {cal['iters_50us']:,} iterations per step; inference = "
        f"{cal['inference_reps']} × (128×128 @ 128×128 float32) ≈ {cal['inference_ms']:.2f} ms. "
        f"{meta['seconds']} s of stepping after {meta['warmup']} s warm-up, {meta['reps']} interleaved reps, "
        "each in a fresh process; median (min–max). Idle CPU: cores that the cell's processes use "
        f"during {IDLE_S:g} s with the vector env open and nobody stepping it (~0 when workers block). "
        "Load average (1, 5, 15 min) at start / end: "
        + " / ".join("?" if la is None else ", ".join(f"{x:.1f}" for x in la) for la in meta["load_average"])
        + ".",
        "",
    ]
    titles = {
        "standard": (
            f"Throughput (× Sync = ratio to gymnasium SyncVectorEnv; ideal = {cores} × single-env rate)",
            "× Sync",
            True,
        ),
        "async-batch": (
            "Async batches (learner: ~0.5 ms inference per batch; heavy-tailed 100 µs envs); "
            "ratio to synchronous vecenv stepping with the same workers",
            "× sync",
            False,
        ),
        "native-group": (
            "Native vectorized groups (CartPole vector_entry_point); ratio to one make_vec of 2048",
            "× make_vec",
            False,
        ),
    }
    for group, (title, ratio_name, ideal) in titles.items():
        rows = [c for c in cells if c["group"] == group]
        if not rows:
            continue
        lines += [f"## {title}", ""]
        head = ["workload", "N", "runner", "env-steps/s", ratio_name]
        if ideal:
            head.append(f"of {cores}-core ideal")
        head += ["start-up s", "PSS MiB (procs)", "idle CPU (cores)"]
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
        for c in rows:
            s = c["summary"]
            cols = [c["workload"], str(c["n"]), _label(c)]
            if not s:
                err = next((r["error"] for r in c["reps"] if "error" in r), "no result")
                cols += [f"failed: {err}".replace("|", "/")] + [""] * (len(head) - 4)
            else:
                cols.append(
                    f"**{_fmt_rate(s['rate_median'])}** ({_fmt_rate(s['rate_min'])}–{_fmt_rate(s['rate_max'])})"
                )
                r = s["ratio_to_baseline"]
                cols.append("—" if r is None else f"{r:.2f}×")
                if ideal:
                    f = s["ideal_fraction"]
                    cols.append("—" if f is None else f"{f:.0%}")
                cols.append(f"{s['startup_s_median']:.2f} ({s['startup_s_min']:.2f}–{s['startup_s_max']:.2f})")
                cols.append(
                    "—"
                    if s["pss_mib_median"] is None
                    else f"{s['pss_mib_median']:.0f} ({s['pss_mib_min']:.0f}–{s['pss_mib_max']:.0f}) ({s['processes']})"
                )
                idle = (s["idle_cpu_cores_median"], s["idle_cpu_cores_min"], s["idle_cpu_cores_max"])
                cols.append("—" if idle[0] is None else "{:.2f} ({:.2f}–{:.2f})".format(*idle))
            lines.append("| " + " | ".join(cols) + " |")
        lines.append("")
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines)


def chart(cells: list[dict[str, Any]], path: str, cores: int) -> str | None:
    """Bar chart of median rates with min-max whiskers; a note when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 'chart: matplotlib not installed, benchmark.png skipped (pip install -e ".[bench]")'
    panels = [(w, [c for c in cells if c["workload"] == w and c["summary"]]) for w in ALL_WORKLOADS]
    panels = [(w, cs) for w, cs in panels if cs]
    if not panels:
        return "chart: nothing to plot"
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10, 2.2 + 0.28 * max(len(cs) for _, cs in panels) * len(panels)), squeeze=False
    )
    for ax, (w, cs) in zip(axes[:, 0], panels):
        labels = [f"N={c['n']} {_label(c)}" for c in cs]
        med = np.array([c["summary"]["rate_median"] for c in cs])
        lo = med - np.array([c["summary"]["rate_min"] for c in cs])
        hi = np.array([c["summary"]["rate_max"] for c in cs]) - med
        colors = ["tab:green" if c["runner"].startswith("vecenv") else "tab:gray" for c in cs]
        y = np.arange(len(cs))
        ax.barh(y, med, xerr=[lo, hi], color=colors, capsize=2)
        ax.set_yticks(y, labels, fontsize=7)
        ax.invert_yaxis()
        single = next((c for c in cs if c["runner"] == "single"), None)
        if single:
            ax.axvline(
                cores * single["summary"]["rate_median"], color="tab:red", ls="--", lw=1, label=f"{cores}-core ideal"
            )
            ax.legend(fontsize=7, loc="lower right")
        ax.set_title(w, fontsize=9)
        ax.set_xlabel("env-steps/s (median, min–max)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _csv(kind: Callable[[str], Any], choices: Sequence[Any] | None = None) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        items = [kind(x.strip()) for x in text.split(",") if x.strip()]
        bad = [x for x in items if choices is not None and x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {', '.join(map(str, choices or []))}, got {text!r}"
            )
        return items

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m vecenv.benchmark", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--workloads",
        type=_csv(str, ALL_WORKLOADS),
        default=list(ALL_WORKLOADS),
        help="comma-separated workloads (default: all: %(default)s)",
    )
    p.add_argument(
        "--sizes", type=_csv(int), default=None, help="comma-separated env counts N (default: 8,32,128; --quick: 8)"
    )
    p.add_argument(
        "--runners",
        type=_csv(str, ALL_RUNNERS),
        default=None,
        help="comma-separated runners for the cartpole/py100us/py1ms/obs84/atari workloads "
        f"(default: all but {', '.join(OPT_IN_RUNNERS)}, which are measured when "
        f"named; choices: {','.join(ALL_RUNNERS)})",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="seconds of stepping per measurement, after the warm-up (default: 2; --quick: 0.4)",
    )
    p.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default: 3; --quick: 1)")
    p.add_argument(
        "--quick", action="store_true", help="smoke run of about a minute: N=8, 0.4 s, 1 rep, fewer async-batch rows"
    )
    p.add_argument("--out", default="bench-results", help="output folder (default: %(default)s)")
    args = p.parse_args(argv)
    args.sizes = args.sizes or ([8] if args.quick else [8, 32, 128])
    if args.runners is None:  # Ray takes seconds to start, in every cell: named runners only
        args.runners = [r for r in ALL_RUNNERS if r not in OPT_IN_RUNNERS]
    args.seconds = args.seconds if args.seconds is not None else (0.4 if args.quick else 2.0)
    args.reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    args.warmup = min(0.5, max(0.1, args.seconds / 4))
    if args.seconds <= 0 or args.reps < 1 or min(args.sizes) < 1:
        p.error("--seconds must be > 0, --reps >= 1 and --sizes >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    t_start = time.perf_counter()
    cores = available_cpus()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    calib = _run_child({"calibrate": True}, timeout=120)
    if "error" in calib:
        print(f"calibration failed: {calib['error']}", file=sys.stderr)
        return 1
    cells, notes = plan(args.workloads, args.sizes, args.runners, args.quick)
    for c in cells:
        c["reps"] = []
    failed: set[tuple[Any, ...]] = set()
    total = len(cells) * args.reps
    done = 0
    for rep in range(args.reps):
        for c in cells:
            done += 1
            if _key(c) in failed:
                continue
            spec = {k: v for k, v in c.items() if k not in ("reps", "summary")}
            spec.update(calib=calib, seconds=args.seconds, warmup=args.warmup)
            timeout = args.seconds + args.warmup + 180
            res = (
                _run_concurrently({**spec, "runner": "single"}, cores, timeout)
                if c["runner"] == "single-par"
                else _run_child(spec, timeout)
            )
            c["reps"].append(res)
            shown = f"error: {res['error']}" if "error" in res else f"{res['rate']:,.0f} env-steps/s"
            print(
                f"[{done}/{total}] rep {rep + 1} {c['workload']} N={c['n']} {c['runner']}: {shown}",
                file=sys.stderr,
                flush=True,
            )
            if "error" in res:
                failed.add(_key(c))
                notes.append(f"{c['workload']} N={c['n']} {c['runner']}: failed, {res['error']}")
    summarize(cells, cores)
    import vecenv

    meta = {
        "load_average": [load_start, os.getloadavg() if hasattr(os, "getloadavg") else None],
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.system()} {platform.machine()}",
        "processor": platform.processor(),
        "cores": cores,
        "python": platform.python_version(),
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "vecenv": vecenv.__version__,
        "seconds": args.seconds,
        "warmup": args.warmup,
        "reps": args.reps,
        "sizes": args.sizes,
        "workloads": args.workloads,
        "runners": args.runners,
        "quick": args.quick,
        "calibration": calib,
    }
    os.makedirs(args.out, exist_ok=True)
    note = chart(cells, os.path.join(args.out, "benchmark.png"), cores)
    if note:
        notes.append(note)
    meta["wall_s"] = time.perf_counter() - t_start
    md = markdown(cells, notes, meta)
    with open(os.path.join(args.out, "benchmark.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "benchmark.json"), "w") as f:
        json.dump({"meta": meta, "notes": notes, "cells": cells}, f, indent=1)
    print(md)
    print(
        f"wrote {args.out}/benchmark.md, benchmark.json{'' if note else ', benchmark.png'} in {meta['wall_s']:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
