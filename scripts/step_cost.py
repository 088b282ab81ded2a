"""Wall time and CPU time per vector step: what the step path costs, with and without its fast path.

    python scripts/step_cost.py                        # CartPole N=8, ~1 min
    python scripts/step_cost.py --num-envs 128 --steps 1000 --reps 3

Each layout steps CartPole (NEXT_STEP autoreset) with the same actions; the rows give the wall
time per step and the CPU time per step of the whole vector env (this process and its workers,
``/proc/<pid>/stat``), medians over interleaved repetitions. CPU per step is what the layout
costs the machine whatever else runs on it; on a machine busy with other work, wall time
mostly says how the scheduler shared the cores out. Layouts: Gymnasium's ``SyncVectorEnv``;
vecenv with 2 workers (the default on 2 cores: more processes than cores, so nobody spins);
2 groups with the parent stepping one (``inline_group``: the processes fit the cores and the
step's fast path may run), and the same with the fast path off (pipes only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import vecenv
from vecenv.argtypes import positive_int
from vecenv.bench.procfs import cpu_seconds
from vecenv.bench.stopping import run_main
from vecenv.wire import fastpath


def _pids(envs: Any) -> list[int]:
    """This process and every worker process of ``envs`` (Gymnasium's ``SyncVectorEnv`` has none)."""
    workers = envs.worker_pids if isinstance(envs, vecenv.GroupVectorEnv) else []
    return [os.getpid(), *(pid for pid in workers if pid is not None)]


def measure(make: Callable[[], Any], num_envs: int, steps: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) per step."""
    envs = make()
    try:
        envs.reset(seed=0)
        actions = np.random.default_rng(0).integers(0, 2, (steps, num_envs))
        for row in actions[:100]:
            envs.step(row)
        pids = _pids(envs)
        cpu = sum(cpu_seconds(pid) for pid in pids)
        start = time.perf_counter()
        for row in actions:
            envs.step(row)
        wall = time.perf_counter() - start
        cpu = sum(cpu_seconds(pid) for pid in pids) - cpu
    finally:
        envs.close()
    return wall / steps, cpu / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=positive_int, default=8, help="CartPole envs (default: %(default)s)")
    parser.add_argument("--steps", type=positive_int, default=3000, help="steps per measurement (default: %(default)s)")
    parser.add_argument("--reps", type=positive_int, default=3, help="interleaved repetitions (default: %(default)s)")
    args = parser.parse_args(argv)
    n = args.num_envs
    fns = [lambda: gym.make("CartPole-v1")] * n

    def subproc(workers: int, inline: bool, fast: bool) -> Callable[[], Any]:
        def make() -> Any:
            fastpath.SUPPORTED, supported = fast and fastpath.SUPPORTED, fastpath.SUPPORTED
            try:
                return vecenv.SubprocVectorEnv(fns, workers, inline_group=inline, autoreset_mode="NextStep")
            finally:
                fastpath.SUPPORTED = supported

        return make

    layouts: dict[str, Callable[[], Any]] = {
        "sync": lambda: gym.vector.SyncVectorEnv(fns, autoreset_mode="NextStep"),
        "vecenv 2 workers": subproc(2, False, True),
        "vecenv 2 groups, parent steps one": subproc(2, True, True),
        "the same, pipes only": subproc(2, True, False),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in layouts}
    for _ in range(args.reps):
        for name, make in layouts.items():
            results[name].append(measure(make, n, args.steps))
    print(f"CartPole N={n}, {args.steps} steps x {args.reps} reps, load {os.getloadavg()[0]:.1f}")
    print("| layout | wall µs/step | CPU µs/step |")
    print("|---|---:|---:|")
    for name, rows in results.items():
        wall = statistics.median(r[0] for r in rows) * 1e6
        cpu = statistics.median(r[1] for r in rows) * 1e6
        print(f"| {name} | {wall:.0f} | {cpu:.0f} |")


if __name__ == "__main__":
    raise SystemExit(run_main("step_cost.py", main))
