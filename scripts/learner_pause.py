"""What spinning workers cost a learner that thinks between steps.

    python scripts/learner_pause.py                     # ~30 s
    python scripts/learner_pause.py --think-ms 50 --steps 60 --num-envs 8

Steps a ``vecenv.make`` CartPole vector env (``--workers`` groups; ``--layout inline``: the
parent steps the first, so that the processes fit the cores and spins keep their core;
``workers``: every group in a worker, the default, where spins yield their core each round: see
vecenv.wire.fastpath) with a learner that
computes for ``--think-ms`` between steps (numpy matrix products, timed), and reports the CPU the
worker processes used per second of the run (``/proc/<pid>/stat``), the learner's time per
round (think + step) and, for comparison, the same with spinning off (the ``off`` rows: the
vector env made while vecenv's rule for spinning says never; there is no option for it, both always run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from unittest import mock

import numpy as np

import vecenv
from vecenv.argtypes import non_negative_float, positive_int
from vecenv.bench.procfs import cpu_seconds
from vecenv.bench.stopping import run_main
from vecenv.wire.fastpath import SpinMode


def think(seconds: float, a: np.ndarray) -> None:
    """Busy numpy work for about ``seconds`` (a learner's forward and backward passes)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = np.tanh(a @ a.T * 1e-3)


def run(num_envs: int, workers: int, inline: bool, think_s: float, steps: int, spin: bool) -> tuple[float, float]:
    """(worker CPU cores used during the run, seconds per learner round)."""
    # Spinning off: every transport is told it has too many processes a core to spin, by the
    # rule vecenv sets every spin mode with.
    off = mock.patch.object(SpinMode, "for_processes", classmethod(lambda cls, processes, cpus: cls.OFF))
    with (
        off if not spin else contextlib.nullcontext(),
        vecenv.make("CartPole-v1", num_envs, workers, inline_group=inline and workers > 1) as envs,
    ):
        pids = [pid for pid in envs.worker_pids if pid is not None]
        envs.reset(seed=0)
        actions = np.zeros(num_envs, np.int64)
        a = np.random.default_rng(0).standard_normal((64, 64))
        for _ in range(20):
            envs.step(actions)
        cpu0 = sum(cpu_seconds(pid) for pid in pids)
        start = time.perf_counter()
        for _ in range(steps):
            think(think_s, a)
            envs.step(actions)
        wall = time.perf_counter() - start
        cpu = sum(cpu_seconds(pid) for pid in pids) - cpu0
    return cpu / wall, wall / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=positive_int, default=8, help="CartPole envs (default: %(default)s)")
    parser.add_argument("--workers", type=positive_int, default=2, help="groups of envs (default: %(default)s)")
    parser.add_argument(
        "--think-ms", type=non_negative_float, default=50.0, help="learner work between steps (default: %(default)s)"
    )
    parser.add_argument("--steps", type=positive_int, default=60, help="steps per measurement (default: %(default)s)")
    parser.add_argument(
        "--layout",
        choices=("inline", "workers", "both"),
        default="both",
        help="inline: the parent steps the first group (spins keep their core); workers: every "
        "group in a worker, the default (spins yield their core); both (default)",
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    print(f"CartPole N={args.num_envs}, {args.workers} groups, think {args.think_ms:.0f} ms, load {load:.1f}")
    print("| layout | spin | worker CPU (cores) | learner round (ms) |")
    print("|---|---|---:|---:|")
    layouts = ("inline", "workers") if args.layout == "both" else (args.layout,)
    for layout in layouts:
        for spin in (True, False):
            cores, round_s = run(
                args.num_envs, args.workers, layout == "inline", args.think_ms * 1e-3, args.steps, spin
            )
            print(f"| {layout} | {'on' if spin else 'off'} | {cores:.3f} | {round_s * 1e3:.2f} |")


if __name__ == "__main__":
    raise SystemExit(run_main("learner_pause.py", main))
