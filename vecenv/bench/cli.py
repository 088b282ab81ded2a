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
                of the same envs with the same inference cost.
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
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from vecenv.bench.child import run_child, run_concurrently
from vecenv.bench.envs import ALL_WORKLOADS
from vecenv.bench.plan import Cell, key, plan
from vecenv.bench.report import chart, markdown, summarize
from vecenv.bench.runners import RUNNERS, runner_named
from vecenv.host import available_cpus

ALL_RUNNERS = tuple(RUNNERS)
#: Measured only when named in --runners: the Ray rows start a Ray in every cell (seconds each),
#: and the process half-batch row is their counterpart.
OPT_IN_RUNNERS = tuple(r.name for r in RUNNERS.values() if r.opt_in)


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
    """The options (``--help`` explains each), with the defaults that depend on ``--quick`` filled in."""
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


def _measure_all(cells: list[Cell], notes: list[str], args: argparse.Namespace, calib: dict[str, Any]) -> None:
    """Every repetition of every cell, interleaved, each in a fresh process; a cell that fails
    once is not measured again (a note says why)."""
    cores = available_cpus()
    for c in cells:
        c["reps"] = []
    failed: set[tuple[Any, ...]] = set()
    total = len(cells) * args.reps
    done = 0
    for rep in range(args.reps):
        for c in cells:
            done += 1
            if key(c) in failed:
                continue
            spec = {k: v for k, v in c.items() if k not in ("reps", "summary")}
            spec.update(calib=calib, seconds=args.seconds, warmup=args.warmup)
            timeout = args.seconds + args.warmup + 180
            res = (
                run_concurrently({**spec, "runner": "single"}, cores, timeout)
                if runner_named(c["runner"], c["n"]).parallel
                else run_child(spec, timeout)
            )
            c["reps"].append(res)
            shown = f"error: {res['error']}" if "error" in res else f"{res['rate']:,.0f} env-steps/s"
            print(
                f"[{done}/{total}] rep {rep + 1} {c['workload']} N={c['n']} {c['runner']}: {shown}",
                file=sys.stderr,
                flush=True,
            )
            if "error" in res:
                failed.add(key(c))
                notes.append(f"{c['workload']} N={c['n']} {c['runner']}: failed, {res['error']}")


def _meta(args: argparse.Namespace, cores: int, calib: dict[str, Any], load_start: Any) -> dict[str, Any]:
    """The run's machine, versions and options, for the markdown header and the JSON."""
    import vecenv

    return {
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


def main(argv: Sequence[str] | None = None) -> int:
    """``vecenv-bench``: calibrate, measure every cell, write benchmark.md/.json/.png to --out."""
    args = parse_args(argv)
    t_start = time.perf_counter()
    cores = available_cpus()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    calib = run_child({"calibrate": True}, timeout=120)
    if "error" in calib:
        print(f"calibration failed: {calib['error']}", file=sys.stderr)
        return 1
    cells, notes = plan(args.workloads, args.sizes, args.runners, args.quick)
    _measure_all(cells, notes, args, calib)
    summarize(cells, cores)
    meta = _meta(args, cores, calib, load_start)
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
