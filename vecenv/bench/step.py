"""The ``step`` suite: env-steps/s of vecenv against Gymnasium's vector envs (and others when
installed), over workloads, sizes and runners; the cells are planned in :mod:`~vecenv.bench.plan`,
measured in :mod:`~vecenv.bench.measure` and reported in :mod:`~vecenv.bench.report`."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from vecenv.bench.child import run_child, run_concurrently
from vecenv.bench.envs import ALL_WORKLOADS
from vecenv.bench.plan import Cell, key, plan
from vecenv.bench.report import chart, markdown, summarize
from vecenv.bench.runners import RUNNERS, runner_named
from vecenv.bench.suite import Cut, Outcome, Suite, SuiteFailed, csv, finished, measure_all, pick, require
from vecenv.machine import available_cpus

ALL_RUNNERS = tuple(RUNNERS)
#: Measured only when named in --runners: the Ray rows start a Ray in every cell (seconds each),
#: and the process half-batch row is their counterpart.
OPT_IN_RUNNERS = tuple(r.name for r in RUNNERS.values() if r.opt_in)

DOC = """\
Workloads (--workloads):
  cartpole      gymnasium.make("CartPole-v1") (a few µs per step)
  py100us       synthetic env burning a fixed number of pure-Python loop iterations per step,
                calibrated at start-up to ~100 µs on this machine (not a wall-clock spin)
  py1ms         the same, ~1 ms per step
  wait1ms       an env that waits 1 ms per step (time.sleep) and computes almost nothing, as one
                that waits on a simulator, a socket or a device: its core is free meanwhile
  obs84         84x84x4 uint8 observations, ~50 µs of Python work per step
  atari         gymnasium.make("ALE/Pong-v5", frameskip=1) in AtariPreprocessing (84x84 grayscale,
                frame_skip=4, no-op starts) and FrameStackObservation(env, 4): a real emulator,
                ~500 µs per step, (4, 84, 84) uint8 observations. Measured only when ale_py and
                cv2 are importable (pip install -e ".[bench]"; skipped with a note otherwise)
  async-batch   a learner: ~0.5 ms of numpy "inference" per batch while heavy-tailed envs
                (~100 µs per step, 10x with probability 0.1, drawn from the env's seeded RNG)
                run; vecenv's async API (batch_size=, async_reset/recv/send) with 2 and 4
                workers and batches of one or two groups, against synchronous vecenv stepping
                of the same envs with the same inference cost.
  native-group  2 groups x 1024 CartPole envs, each a native vectorized group
                (gymnasium.make_vec(..., vectorization_mode="vector_entry_point")) in a worker
                (vecenv-2w-native), or one of them stepped by the parent (vecenv-2w-native-inline,
                inline_group=True), against that make_vec with 2048 envs in one process.

Runners (--runners, for cartpole, py100us, py1ms, wait1ms, obs84 and atari):
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
  vecenv-default   vecenv.SubprocVectorEnv(fns) with no worker count: the plan vecenv.make
                uses by default; only when named in --runners
  vecenv-2w-inline   2 groups, the parent stepping the first (inline_group=True) and one worker
                process the other; only when named in --runners
  ray-Kw        vecenv.RayVectorEnv with K = 2, 4 actors on a local Ray that it starts itself
                (start-up includes Ray's, seconds), min(1, cores/K) CPUs per actor; only when
                named in --runners (each cell starts a Ray), and Ray is importable
                (pip install -e ".[ray]")
  vecenv-2w-half, ray-2w-half   the same with 2 workers and batch_size N/2, stepped with
                async_reset/recv/send (no inference): each recv takes the first group to
                finish; only when named in --runners
  supersuit, pufferlib, envpool   when importable (skipped with a note otherwise;
                pip install -e ".[anchors]" brings SuperSuit and EnvPool); envpool steps its
                own C++ CartPole (num_threads: its default, one per core) and is skipped with
                a note on the other workloads; supersuit is its processes
                (concat_vec_envs_v1, num_cpus=2), one env per copy, reset at the step that
                ends its episode

Method: it builds the vector env, resets once with a seed (start-up = constructor + first
reset), steps with precomputed random actions (identical for all runners) in NEXT_STEP
autoreset mode for a warm-up, then for --seconds, and reads the PSS of its whole process tree
(/proc/<pid>/smaps_rollup of itself and every descendant). Then, with the vector env still open
and idle (as while a learner is busy between steps), it sleeps 0.5 s and sums the CPU time
(user + system, /proc/<pid>/stat) that it and its descendants used meanwhile: "idle CPU
(cores)" = CPU seconds / wall seconds, ~0 for workers that block on their pipes, ~1 per worker
for workers that spin. Repetitions are interleaved (rep 1 of every cell, then rep 2, ...);
tables give medians with min-max.

Examples:
  vecenv-bench --quick                              # ~1 min smoke run (2 busy cores: ~80 s)
  vecenv-bench --sizes 128 --reps 3                 # one size, 3 interleaved repetitions
Writes step.md (also printed), step.json and step.png: a bar per cell, its median rate with
min-max whiskers, one panel per workload, the ideal as a dashed line (needs matplotlib:
pip install -e ".[bench]"; skipped with a note otherwise)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The step suite's options."""
    p.add_argument(
        "--workloads",
        type=csv(str, ALL_WORKLOADS),
        default=list(ALL_WORKLOADS),
        help=f"comma-separated workloads (default: all: {','.join(ALL_WORKLOADS)})",
    )
    p.add_argument(
        "--sizes", type=csv(int), default=None, help="comma-separated env counts N (default: 8,32,128; --quick: 8)"
    )
    p.add_argument(
        "--runners",
        type=csv(str, ALL_RUNNERS),
        default=None,
        help="comma-separated runners for the cartpole/py100us/py1ms/wait1ms/obs84/atari workloads "
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


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the defaults that depend on ``--quick``; ``OptionError`` for values out of range."""
    args.sizes = pick(args.sizes, [8, 32, 128], [8], args)
    if args.runners is None:  # Ray takes seconds to start, in every cell: named runners only
        args.runners = [r for r in ALL_RUNNERS if r not in OPT_IN_RUNNERS]
    args.seconds = pick(args.seconds, 2.0, 0.4, args)
    args.reps = pick(args.reps, 3, 1, args)
    args.warmup = min(0.5, max(0.1, args.seconds / 4))
    require(0 < args.seconds < math.inf, "--seconds", "a finite number > 0", args.seconds)
    require(args.reps >= 1, "--reps", "an int >= 1", args.reps)
    require(min(args.sizes) >= 1, "--sizes", "env counts >= 1", ",".join(map(str, args.sizes)))
    return args


@dataclasses.dataclass
class MeasuredCells:
    """What :func:`calibrated_cells` measured, for a suite's report.

    Attributes:
        cells: the planned cells, each with its ``reps`` and ``summary``.
        notes: the rows skipped or failed.
        meta: the settings (cores, seconds, warm-up, repetitions) and the calibration.
        cut: the Ctrl+C or SIGTERM that cut the measurements after some of them, and how many
            ran (``None``: every repetition ran).
    """

    cells: list[Cell]
    notes: list[str]
    meta: dict[str, Any]
    cut: Cut | None = None

    def finished(self, outcome: Outcome, out: str, name: str, draw: Callable[[str], str | None]) -> Outcome:
        """``outcome`` with its chart (:func:`charted`); :class:`~vecenv.bench.suite.PartialRun`
        with it instead (no chart) when the measurements were cut."""
        return charted(finished(outcome, self.cut), out, name, draw)


def measure_cells(cells: list[Cell], notes: list[str], args: argparse.Namespace, calib: dict[str, Any]) -> int:
    """Every repetition of every cell, interleaved, each in a fresh process; a cell that fails
    once is not measured again (a note says why). Returns how many repetitions ran; a Ctrl+C
    or SIGTERM propagates, the cells keeping the repetitions that ran before it."""
    cores = available_cpus()
    for c in cells:
        c["reps"] = []
    failed: set[tuple[Any, ...]] = set()
    total = len(cells) * args.reps
    done = ran = 0
    for rep in range(args.reps):
        for c in cells:
            done += 1
            if key(c) in failed:
                continue
            spec = {k: v for k, v in c.items() if k not in ("reps", "summary")}
            spec.update(task="step", calib=calib, seconds=args.seconds, warmup=args.warmup)
            timeout = args.seconds + args.warmup + 180
            res = (
                run_concurrently({**spec, "runner": "single"}, cores, timeout)
                if runner_named(c["runner"], c["n"]).parallel
                else run_child(spec, timeout)
            )
            c["reps"].append(res)
            ran += 1
            shown = f"error: {res['error']}" if "error" in res else f"{res['rate']:,.0f} env-steps/s"
            print(
                f"[{done}/{total}] rep {rep + 1} {c['workload']} N={c['n']} {c['runner']}: {shown}",
                file=sys.stderr,
                flush=True,
            )
            if "error" in res:
                failed.add(key(c))
                notes.append(f"{c['workload']} N={c['n']} {c['runner']}: failed, {res['error']}")
    return ran


def calibrated_cells(args: argparse.Namespace, plan_cells: Callable[[], tuple[list[Cell], list[str]]]) -> MeasuredCells:
    """Calibrate the busy envs, plan the cells (``plan_cells``), measure and summarize them:
    the cells, the notes and the settings every report of them starts from. A Ctrl+C or
    SIGTERM after some repetitions ran ends the measurements: what ran is summarized, and the
    interrupt kept for :meth:`MeasuredCells.finished` (before any ran, it propagates)."""
    cores = available_cpus()
    calib = run_child({"task": "calibrate"}, timeout=120)
    if "error" in calib:
        raise SuiteFailed(f"calibration failed: {calib['error']}")
    cells, notes = plan_cells()
    cut = measure_all(
        lambda: measure_cells(cells, notes, args, calib),
        lambda: sum(len(c.get("reps", [])) for c in cells),
        len(cells) * args.reps,
        notes,
    )
    summarize(cells, cores)
    settings = {"cores": cores, "seconds": args.seconds, "warmup": args.warmup, "reps": args.reps}
    return MeasuredCells(cells, notes, {**settings, "calibration": calib}, cut)


def charted(outcome: Outcome, out: str, name: str, draw: Callable[[str], str | None]) -> Outcome:
    """``outcome`` with the chart ``draw(path)`` wrote to ``out``/``name`` among its files, or its
    note (matplotlib missing) among its notes."""
    os.makedirs(out, exist_ok=True)
    png = os.path.join(out, name)
    note = draw(png)
    if note:
        outcome.notes.append(note)
    else:
        outcome.files.append(png)
    return outcome


def run(args: argparse.Namespace) -> Outcome:
    """Calibrate, measure every cell, summarize; the chart goes to ``--out``/step.png."""
    args = resolve(args)
    measured = calibrated_cells(args, lambda: plan(args.workloads, args.sizes, args.runners, args.quick))
    cells, meta = measured.cells, measured.meta
    meta.update(sizes=args.sizes, workloads=args.workloads, runners=args.runners)
    outcome = Outcome(markdown(cells, meta), {"settings": meta, "cells": cells}, measured.notes)
    return measured.finished(outcome, args.out, "step.png", lambda png: chart(cells, png, meta["cores"]))


SUITE = Suite(
    name="step",
    summary="env-steps/s of vecenv's vector envs against Gymnasium's Sync and Async (and SuperSuit, "
    "PufferLib, EnvPool when installed) over workloads, sizes and worker counts; start-up, "
    "PSS and idle CPU per cell (the default suite)",
    doc=DOC,
    add_arguments=add_arguments,
    run=run,
)
