"""Measure what limiting each worker's BLAS threads does to an env that multiplies matrices.

Each env does one ``size x size`` float64 matrix product per step (numpy, so OpenBLAS or MKL).
W workers host the envs; left alone, every worker's BLAS starts one thread per core, so W
workers run up to W x cores BLAS threads on the cores. This script builds the same vector env
twice per repetition, through ``SubprocVectorEnv.from_groups``, with ``threads_per_worker=None``
(the workers' threads left alone) and with ``threads_per_worker=threads`` (the default, 1), and
reports env-steps/s for both, interleaved, medians over repetitions, plus the threads each
worker actually has (``/proc/PID/status``).

Small products (64 x 64) run on one thread in OpenBLAS anyway; the effect shows from about
128 x 128, where an unlimited BLAS spins several threads per worker. Run with nothing else on
the machine for clean numbers. ``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import pathlib
import statistics
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # also runs from a checkout
import vecenv  # noqa: E402
from vecenv.argtypes import int_list, positive_float, positive_int
from vecenv.bench import procfs  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402
from vecenv.worker.threads import THREAD_ENV_VARS  # noqa: E402


class MatmulEnv(gym.Env):
    """A trivial env whose step costs one ``size x size`` matrix product."""

    def __init__(self, size: int) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (8,), np.float64)
        self.action_space = gym.spaces.Discrete(2)
        rng = np.random.default_rng(0)
        self._a = rng.standard_normal((size, size))
        self._b = rng.standard_normal((size, size)) / size

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(8), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        c = self._a @ self._b
        return c[0, :8].copy(), float(c[0, 0]), False, False, {}


def make_group(envs_per_worker: int, size: int) -> list[gym.Env]:
    """A worker's group of matrix-multiplying envs."""
    return [MatmulEnv(size) for _ in range(envs_per_worker)]


def worker_threads(parent: int) -> list[int]:
    """Threads of each child process of ``parent`` (its resource tracker left out), from /proc."""
    counts = []
    for pid in procfs.children(parent):
        cmd = procfs.cmdline(pid)
        try:
            threads = int(procfs.status(pid)["Threads"])
        except OSError:
            continue  # exited while we looked
        if cmd is not None and "resource_tracker" not in cmd:
            counts.append(threads)
    return sorted(counts)


def measure(
    num_workers: int, envs_per_worker: int, size: int, threads: int | None, seconds: float, context: str | None
) -> tuple[float, list[int]]:
    """Env-steps/s over ``seconds`` of stepping after a short warm-up; worker thread counts."""
    group = functools.partial(make_group, envs_per_worker, size)
    with vecenv.SubprocVectorEnv.from_groups(
        [group] * num_workers, context=context, threads_per_worker=threads
    ) as envs:
        envs.reset(seed=0)
        actions = np.zeros(envs.num_envs, dtype=np.int64)
        for _ in range(20):
            envs.step(actions)
        counts = worker_threads(os.getpid())
        steps, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            envs.step(actions)
            steps += 1
        return steps * envs.num_envs / elapsed, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int_list, default="64,128", help="matrix sizes, comma-separated (default 64,128)"
    )
    parser.add_argument("--num-workers", type=positive_int, default=2, help="worker processes (default 2)")
    parser.add_argument("--envs-per-worker", type=positive_int, default=8, help="envs in each worker (default 8)")
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="threads_per_worker in the limited run (default 1)"
    )
    parser.add_argument("--seconds", type=positive_float, default=3.0, help="stepping time per measurement (default 3)")
    parser.add_argument("--reps", type=positive_int, default=3, help="repetitions, interleaved (default 3)")
    parser.add_argument(
        "--context",
        choices=multiprocessing.get_all_start_methods(),
        default=None,
        help="start method (default: the platform's)",
    )
    args = parser.parse_args(argv)
    if min(args.sizes) < 1:
        parser.error(f"argument --sizes: expected matrix sizes >= 1, got {','.join(map(str, args.sizes))}")
    preset = [v for v in THREAD_ENV_VARS if os.environ.get(v)]
    if preset:
        print(f"note: {', '.join(preset)} set in this shell: the 'default' run is not unlimited")
    print(
        f"{os.cpu_count()} cores, {args.num_workers} workers x {args.envs_per_worker} envs, "
        f"context={args.context or 'default'}, {args.seconds:g} s x {args.reps} reps"
    )
    print(f"{'size':>5} {'threads_per_worker, threads':<30}{'env-steps/s (median, min-max)':<34}{'speed-up':>9}")
    for size in args.sizes:
        rates: dict[str, list[float]] = {"default": [], "limited": []}
        counts: dict[str, list[int]] = {}
        for _ in range(args.reps):
            for label, n in (("default", None), ("limited", args.threads)):
                rate, counts[label] = measure(
                    args.num_workers, args.envs_per_worker, size, n, args.seconds, args.context
                )
                rates[label].append(rate)
        base = statistics.median(rates["default"])
        for label in ("default", "limited"):
            r = rates[label]
            name = "None" if label == "default" else str(args.threads)
            cell = f"{statistics.median(r):>10,.0f} ({min(r):,.0f}-{max(r):,.0f})"
            print(f"{size:>5} {name + ', ' + str(counts[label]):<30}{cell:<34}{statistics.median(r) / base:>8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("threads_demo.py", main))
