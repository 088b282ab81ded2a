"""The ``scaling`` suite: the worker-count curve. env-steps/s of vecenv at one large N with 1 to
all-cores worker processes, spinning on the step's shared words (the default) against sleeping
on the pipes at every wait, beside Gymnasium's Sync, the all-core ceiling and ``"auto"``.

It is the one suite whose answer depends on the machine's core count: on 2 cores it has two
points; it is meant for the machines where users run hundreds of envs on many cores.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from vecenv.bench.envs import STANDARD_WORKLOADS, atari_missing
from vecenv.bench.plan import Cell, key
from vecenv.bench.report import failed_footnotes, failed_mark, pyplot
from vecenv.bench.runners import curve_runner
from vecenv.bench.step import calibrated_cells
from vecenv.bench.suite import Outcome, Suite, csv, pick, rate_text, ratio, ratio_text, require, table
from vecenv.files import replaced
from vecenv.machine import available_cpus

#: The workloads it can step (the step suite's standard ones).
WORKLOADS = STANDARD_WORKLOADS
GROUP = "scaling"

DOC = """\
Rows, for each workload at N envs (--n):
  single-par       one env stepped in a Python loop in one process per core at once, rates
                   summed: what the machine gives with no coordination at all (the ceiling)
  sync             gymnasium SyncVectorEnv: every env in one process
  vecenv-auto      vecenv.SubprocVectorEnv(fns, "auto"): on many cores, one group per core with
                   this process stepping one of them (the table shows the count it chose)
  vecenv-Kw        vecenv.SubprocVectorEnv(fns, K) for each K of --workers: the default waits,
                   which spin on the step's shared words for about as long as a step lately took
                   before they sleep (with more processes than cores each spin round yields the
                   core; see the guide). K = cores is the default plan (vecenv.make)
  vecenv-Kw-sleep  the same with nobody spinning: every wait sleeps on its pipe at once (the
                   fast path's spin limit set to 0 in the measuring process), so each step
                   wakes every worker and this process through the kernel

Columns: env-steps/s (median, min-max over the repetitions), x Sync, the share of the ceiling
(single-par), x 1 worker (the same runner kind with one worker: how the rate grows with
workers), and the idle CPU (cores used during 0.5 s with the vector env open and nobody
stepping it: ~0 when every wait has gone to sleep).

Method: as the step suite's (vecenv-bench --help): each cell in a fresh process, built, reset
with a seed, warmed up, stepped with precomputed random actions in NEXT_STEP autoreset mode,
repetitions interleaved. Gymnasium's AsyncVectorEnv is not a row: at N=1,024 it is 1,024
processes.

Examples:
  vecenv-bench --suite scaling                              # all workloads' defaults below
  vecenv-bench --suite scaling --workloads cartpole --n 1024 --workers 1,2,4,8,15,16
Writes scaling.md (also printed), scaling.json and scaling.png: env-steps/s against workers,
spinning and sleeping, Sync and the ceiling as lines, one panel per workload (needs matplotlib:
pip install -e ".[bench]"; skipped with a note otherwise)."""


def default_workers(cores: int) -> list[int]:
    """The curve's worker counts on ``cores`` cores: the powers of two below it, one fewer than
    the cores (with this process, one process per core) and the cores (the default plan)."""
    counts = {1 << i for i in range(cores.bit_length()) if 1 << i < cores}
    counts.update({max(1, cores - 1), cores})
    return sorted(counts)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The scaling suite's options."""
    p.add_argument(
        "--workloads",
        type=csv(str, WORKLOADS),
        default=None,
        help="comma-separated workloads (default: cartpole,py100us; --quick: cartpole; "
        f"choices: {','.join(WORKLOADS)})",
    )
    p.add_argument("--n", type=int, default=None, help="envs in each vector env (default: 1024; --quick: 64)")
    p.add_argument(
        "--workers",
        type=csv(int),
        default=None,
        help="comma-separated worker counts (default: the powers of two below the core count, the "
        f"cores less one and the cores: {','.join(map(str, default_workers(available_cpus())))} here; "
        "--quick: 1 and the cores)",
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="seconds of stepping per measurement, after the warm-up (default: 1.5; --quick: 0.3)",
    )
    p.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default: 2; --quick: 1)")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the defaults that depend on ``--quick`` and the cores; ``OptionError`` for values out
    of range."""
    cores = available_cpus()
    args.workloads = pick(args.workloads, ["cartpole", "py100us"], ["cartpole"], args)
    args.n = pick(args.n, 1024, 64, args)
    args.workers = pick(args.workers, default_workers(cores), sorted({1, cores}), args)
    args.seconds = pick(args.seconds, 1.5, 0.3, args)
    args.reps = pick(args.reps, 2, 1, args)
    args.warmup = min(0.5, max(0.1, args.seconds / 4))
    require(args.n >= 1, "--n", "an env count >= 1", args.n)
    require(0 < args.seconds < math.inf, "--seconds", "a finite number > 0", args.seconds)
    require(args.reps >= 1, "--reps", "an int >= 1", args.reps)
    require(
        all(1 <= k <= args.n for k in args.workers),
        "--workers",
        f"worker counts from 1 to --n ({args.n})",
        ",".join(map(str, args.workers)),
    )
    args.workers = sorted(set(args.workers))
    return args


def plan(workloads: list[str], n: int, workers: list[int]) -> tuple[list[Cell], list[str]]:
    """The cells, in interleaving order, and notes on what is skipped."""
    notes: list[str] = []
    if "atari" in workloads and atari_missing():
        notes.append(atari_missing() or "")
        workloads = [w for w in workloads if w != "atari"]
    cells: list[Cell] = []
    for w in workloads:
        common = dict(group=GROUP, workload=w, baseline="sync")
        cells.append(dict(common, n=1, runner="single"))
        cells.append(dict(common, n=1, runner="single-par"))
        cells.append(dict(common, n=n, runner="sync"))
        cells.append(dict(common, n=n, runner="vecenv-auto"))
        for k in workers:
            for spin in (True, False):
                cells.append(dict(common, n=n, runner=curve_runner(k, spin).name, workers=k, spin=spin))
    return cells, notes


def _rate(cell: Cell | None) -> float | None:
    s = None if cell is None else cell.get("summary")
    return None if not s else s["rate_median"]


def _scaled(cell: Cell | None, factor: int) -> dict[str, Any] | None:
    """A cell's summary with its rates multiplied by ``factor`` (the ideal: cores x one env)."""
    s = None if cell is None else cell.get("summary")
    if not s:
        return None
    return {
        **s,
        **{f"rate_{m}": factor * s[f"rate_{m}"] for m in ("median", "min", "max")},
        "idle_cpu_cores_median": None,
    }


def _rate_cell(cell: Cell | None) -> str:
    s = None if cell is None else cell.get("summary")
    if not s:
        err = next((r["error"] for r in (cell or {}).get("reps", []) if "error" in r), None)
        return "not measured" if err is None else f"failed: {err}"[:120]
    return rate_text(s) + failed_mark(cell or {})


def _idle(cell: Cell | None) -> str:
    s = None if cell is None else cell.get("summary")
    idle = None if not s else s["idle_cpu_cores_median"]
    return "—" if idle is None else f"{idle:.2f}"


def _share(x: float | None, ceiling: float | None) -> str:
    r = ratio(x, ceiling)
    return "—" if r is None else f"{r:.0%}"


def markdown(cells: list[Cell], meta: dict[str, Any]) -> str:
    """One table per workload: the anchors, then a row per worker count, spinning and sleeping."""
    by_key = {key(c): c for c in cells}
    n, cores = meta["n"], meta["cores"]
    lines = [
        f"{meta['seconds']} s of stepping after {meta['warmup']} s warm-up, {meta['reps']} interleaved reps, "
        f"each in a fresh process; median (min–max). {cores} cores. Ceiling: `single-par`, one env per core "
        "in as many processes, no coordination.",
        "",
    ]
    for w in meta["workloads"]:
        ceiling = by_key.get((GROUP, w, 1, "single-par"))
        sync = by_key.get((GROUP, w, n, "sync"))
        auto = by_key.get((GROUP, w, n, "vecenv-auto"))
        if not any(c["workload"] == w for c in cells):
            continue
        top, bottom = _rate(ceiling), _rate(sync)
        lines += [f"## {w}, N={n}", ""]
        chosen = ((auto or {}).get("summary") or {}).get("workers_chosen")
        auto_name = "vecenv-auto" + (f" ({'/'.join(f'{k}w' for k in chosen)})" if chosen else "")
        single = by_key.get((GROUP, w, 1, "single"))
        ideal = _rate(single)
        anchors = [
            (f"ideal: {cores} × single", None if ideal is None else {"summary": _scaled(single, cores)}),
            ("single-par (ceiling)", ceiling),
            ("sync", sync),
            (auto_name, auto),
        ]
        lines += table(
            ["row", "env-steps/s", "× Sync", "of ceiling", "idle CPU (cores)"],
            [
                [name, _rate_cell(c), ratio_text(ratio(_rate(c), bottom)), _share(_rate(c), top), _idle(c)]
                for name, c in anchors
            ],
        )
        one = {s: by_key.get((GROUP, w, n, curve_runner(1, s).name)) for s in (True, False)}
        rows = []
        for k in meta["workers"]:
            spin, sleep = (by_key.get((GROUP, w, n, curve_runner(k, s).name)) for s in (True, False))
            rows.append(
                [
                    str(k),
                    _rate_cell(spin),
                    ratio_text(ratio(_rate(spin), bottom)),
                    _share(_rate(spin), top),
                    ratio_text(ratio(_rate(spin), _rate(one[True]))),
                    _rate_cell(sleep),
                    _share(_rate(sleep), top),
                    ratio_text(ratio(_rate(sleep), _rate(one[False]))),
                    ratio_text(ratio(_rate(spin), _rate(sleep))),
                    _idle(spin),
                ]
            )
        lines += table(
            [
                "workers",
                "spinning env-steps/s",
                "× Sync",
                "of ceiling",
                "× 1 worker",
                "sleeping env-steps/s",
                "of ceiling",
                "× 1 worker",
                "spinning / sleeping",
                "idle CPU, spinning",
            ],
            rows,
        )
        lines += failed_footnotes([c for c in cells if c["workload"] == w], meta["reps"])
    return "\n".join(lines)


def chart(cells: list[Cell], meta: dict[str, Any], path: str) -> str | None:
    """env-steps/s against workers, spinning and sleeping, with Sync and the ceiling as lines; a
    note when matplotlib is missing."""
    plt = pyplot(path)
    if isinstance(plt, str):
        return plt
    by_key = {key(c): c for c in cells}
    n, workloads = meta["n"], [w for w in meta["workloads"] if any(c["workload"] == w for c in cells)]
    if not workloads:
        return "chart: nothing to plot"
    fig, axes = plt.subplots(1, len(workloads), figsize=(5.5 * len(workloads), 4), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        for spin, style in ((True, "o-"), (False, "s--")):
            points = [(k, _rate(by_key.get((GROUP, w, n, curve_runner(k, spin).name)))) for k in meta["workers"]]
            ks = np.array([k for k, r in points if r is not None])
            rates = np.array([r for _, r in points if r is not None])
            ax.plot(ks, rates, style, label="vecenv, " + ("spinning" if spin else "sleeping"))
        for name, colour in (("single-par", "tab:red"), ("sync", "tab:gray")):
            rate = _rate(by_key.get((GROUP, w, 1 if name == "single-par" else n, name)))
            if rate is not None:
                ax.axhline(rate, color=colour, ls=":", lw=1, label="ceiling" if name == "single-par" else "Sync")
        ax.set_title(f"{w}, N={n}", fontsize=9)
        ax.set_xlabel("worker processes", fontsize=8)
        ax.set_ylabel("env-steps/s (median)", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with replaced(path) as temporary:  # a run cut while drawing leaves no partial PNG
        fig.savefig(temporary, dpi=110)
    plt.close(fig)
    return None


def run(args: argparse.Namespace) -> Outcome:
    """Calibrate, measure every cell, summarize; the chart goes to ``--out``/scaling.png."""
    args = resolve(args)
    measured = calibrated_cells(args, lambda: plan(args.workloads, args.n, args.workers))
    cells, meta = measured.cells, measured.meta
    meta.update(n=args.n, workers=args.workers, workloads=args.workloads)
    outcome = Outcome(markdown(cells, meta), {"settings": meta, "cells": cells}, measured.notes)
    return measured.finished(outcome, args.out, "scaling.png", lambda png: chart(cells, meta, png))


SUITE = Suite(
    name="scaling",
    summary="the worker-count curve: env-steps/s of vecenv at one large N (1,024) with 1 to "
    "all-cores workers, spinning against sleeping, beside Sync, the all-core ceiling and "
    '"auto"; idle CPU per cell',
    doc=DOC,
    add_arguments=add_arguments,
    run=run,
)
