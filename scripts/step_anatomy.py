"""Where a step's wall time goes at large N: the parent's share, the workers' and the wait.

    python scripts/step_anatomy.py                     # CartPole N=1,024, ~1 min on 16 cores
    python scripts/step_anatomy.py --num-envs 1024 --workers 4,8,15,16 --seconds 2

For each worker count K, spinning (the default waits) and sleeping (nobody spins on the step's
shared words), CartPole at --num-envs envs steps with random actions (NEXT_STEP autoreset) for
--seconds, and the row gives, per step: the wall time; this process's CPU time (the parent's
share: actions out, observations and flags copied in, the pool's bookkeeping, and any spin);
the mean and the largest CPU time of one worker (its group's envs, its wait); and the wall time
one process takes to step one group's envs alone (``SyncVectorEnv`` of N/K envs, rounded up):
the work a worker must do, with nobody to coordinate. ``wall - group`` is what coordinating K
processes adds to a step; ``N / group`` is the row's ceiling. With ``--rollout-steps T``, the
spinning rows also give the env-steps/s of ``envs.rollout(T)`` (random policy: one message per
worker per T steps, the actions drawn in the workers) on the same vector env. The table is
printed as markdown.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import vecenv
from vecenv.argtypes import non_negative_int, positive_float, positive_int
from vecenv.bench.measure import step_for
from vecenv.bench.procfs import cpu_seconds
from vecenv.bench.scaling import default_workers
from vecenv.bench.stopping import run_main
from vecenv.bench.suite import csv
from vecenv.machine import available_cpus
from vecenv.wire import fastpath


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def _timed(envs: Any, seconds: float, pids: Callable[[], list[int]]) -> tuple[float, list[float]]:
    """Step ``envs`` for ``seconds`` after a warm-up: (wall seconds per step, CPU seconds per step
    of each pid in ``pids()``)."""
    envs.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, (256, envs.num_envs))

    def step(i: int) -> int:
        envs.step(actions[i % 256])
        return 1

    warm, _, _ = step_for(min(0.3, seconds / 4), step)
    ids = pids()
    cpu = [cpu_seconds(pid) for pid in ids]
    steps, _, wall = step_for(seconds, step, start=warm)
    cpu = [cpu_seconds(pid) - before for pid, before in zip(ids, cpu)]
    return wall / steps, [c / steps for c in cpu]


def _rollout_rate(envs: Any, steps: int, seconds: float) -> float:
    """env-steps/s of ``envs.rollout(steps)`` (random policy) over ``seconds``, after one."""
    envs.rollout(steps)
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < seconds:
        envs.rollout(steps)
        calls += 1
    return calls * steps * envs.num_envs / (time.perf_counter() - start)


def vecenv_row(n: int, workers: int, spin: bool, seconds: float, rollout_steps: int = 0) -> dict[str, float]:
    """Wall, parent CPU and worker CPU per step of vecenv with ``workers`` workers (and the
    rate of ``rollout(rollout_steps)``, where it is not 0)."""
    limit = fastpath.SPIN_LIMIT
    fastpath.SPIN_LIMIT = limit if spin else 0.0  # read when the vector env is made
    try:
        envs = vecenv.SubprocVectorEnv([_cartpole] * n, workers, autoreset_mode="NextStep")
    finally:
        fastpath.SPIN_LIMIT = limit
    try:
        wall, cpu = _timed(envs, seconds, lambda: [os.getpid(), *[p for p in envs.worker_pids if p is not None]])
        rollout = _rollout_rate(envs, rollout_steps, seconds) if rollout_steps else math.nan
    finally:
        envs.close()
    return {
        "wall": wall,
        "parent": cpu[0],
        "worker_mean": statistics.mean(cpu[1:]),
        "worker_max": max(cpu[1:]),
        "rollout": rollout,
    }


def group_alone(envs_per_group: int, seconds: float) -> float:
    """Wall seconds per step of one group's envs in this process (``SyncVectorEnv``)."""
    envs = gym.vector.SyncVectorEnv([_cartpole] * envs_per_group, autoreset_mode="NextStep")
    try:
        wall, _ = _timed(envs, seconds, lambda: [os.getpid()])
    finally:
        envs.close()
    return wall


def main(argv: list[str] | None = None) -> None:
    cores = available_cpus()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=positive_int, default=1024, help="CartPole envs (default: %(default)s)")
    parser.add_argument(
        "--workers",
        type=csv(int),
        default=default_workers(cores),
        help="comma-separated worker counts (default: the scaling suite's: the powers of two below the cores, "
        "the cores less one and the cores)",
    )
    parser.add_argument(
        "--seconds", type=positive_float, default=1.0, help="seconds of stepping per row (default: %(default)s)"
    )
    parser.add_argument(
        "--rollout-steps",
        type=non_negative_int,
        default=0,
        help="T of envs.rollout(T), measured on the spinning rows (default: 0, not measured)",
    )
    args = parser.parse_args(argv)
    n = args.num_envs
    bad = [k for k in args.workers if not 1 <= k <= n]
    if bad:
        parser.error(f"argument --workers: expected worker counts from 1 to --num-envs ({n}), got {bad[0]}")
    sync = group_alone(n, args.seconds)
    print(f"CartPole N={n}, {args.seconds:g} s per row, {cores} cores, load {os.getloadavg()[0]:.1f}")
    print(f"SyncVectorEnv of all {n}: {sync * 1e6:,.0f} µs a step ({n / sync:,.0f} env-steps/s)")
    print()
    print(
        "| workers | waits | wall µs/step | env-steps/s | parent CPU µs/step | worker CPU µs/step "
        "(mean / max) | group alone µs/step | wall − group µs | ceiling env-steps/s | rollout env-steps/s |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k in sorted(set(args.workers)):
        group = group_alone(math.ceil(n / k), args.seconds)
        for spin in (True, False):
            r = vecenv_row(n, k, spin, args.seconds, args.rollout_steps if spin else 0)
            rollout = "—" if math.isnan(r["rollout"]) else f"{r['rollout']:,.0f}"
            print(
                f"| {k} | {'spinning' if spin else 'sleeping'} | {r['wall'] * 1e6:,.0f} | {n / r['wall']:,.0f} | "
                f"{r['parent'] * 1e6:,.0f} | {r['worker_mean'] * 1e6:,.0f} / {r['worker_max'] * 1e6:,.0f} | "
                f"{group * 1e6:,.0f} | {(r['wall'] - group) * 1e6:,.0f} | {n / group:,.0f} | {rollout} |",
                flush=True,
            )


if __name__ == "__main__":
    raise SystemExit(run_main("step_anatomy.py", main))
