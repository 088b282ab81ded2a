"""Soak test: run a vecenv vector env for a long time and check that nothing leaks.

Three modes (``--mode``):

* ``steps``: N CartPole steps through ``step`` at ``--num-envs`` envs in ``--num-workers``
  workers; samples parent and worker resources every so often.
* ``cycles``: K create/step/close cycles under each start method (fork and spawn by default);
  samples the parent after every close.
* ``recv-send``: N steps through the EnvPool-style ``async_reset``/``recv``/``send`` API, sending
  each batch back in a random order (shuffled ids, groups sent together or one by one).

Each sample reads, from ``/proc`` only (no psutil): resident memory (``VmRSS``), open file
descriptors (``/proc/PID/fd``), threads (``Threads``), memory maps (lines of ``/proc/PID/maps``)
for the parent and for each worker (the parent's child processes), the number of child
processes, and the entries in ``/dev/shm`` (vecenv's named blocks, and all of them).

The verdict compares the median of the first few samples after the warm-up with the median of
the last few: a metric that grew by more than ``--tolerance`` (5% by default) is reported; in
``cycles`` mode any growth of descriptors, child processes, ``/dev/shm`` entries or memory maps
is a leak (they are counted exactly between cycles, when no worker runs; memory maps may gain
at most ``MAPS_SLACK`` = 2 over the whole run, for the allocators' occasional new arena).
Writes ``<out>/soak-<mode>.csv``, ``.json`` and ``.png`` (the plot needs matplotlib; without
it the plot is skipped with a note), each whole or not at all; in the JSON a number that is not
one (NaN, infinite) is ``null``. Exit status: 0 if flat, 1 if something grew.

Only vecenv's public API (and its ``/proc`` reader, ``vecenv.bench.procfs``) is used, so the
same script soaks any version of the engine that has that reader.
Linux only (it reads ``/proc``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import multiprocessing
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # also runs from a checkout
import vecenv  # noqa: E402
from vecenv.argtypes import non_negative_float, non_negative_int, out_folder, positive_int  # noqa: E402
from vecenv.bench import procfs  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402
from vecenv.files import json_text, replaced, write_text_atomically  # noqa: E402

#: Metrics read from /proc for one process.
PROC_FIELDS = ("rss_kb", "fds", "threads", "maps")
#: Metrics that, in ``cycles`` mode, must not grow at all (counted between cycles).
EXACT_CYCLE_METRICS = ("parent_fds", "children", "shm_vecenv", "parent_maps")
#: Memory maps the parent may gain over a whole cycles run: Python's and libc's allocators map
#: a new arena now and then (seen: one map in 200 cycles, as the sampler's own list grew); a
#: leaked mapping would add one per cycle.
MAPS_SLACK = 2
DEFAULT_OUT = "bench-results/soak"


# -- reading /proc ----------------------------------------------------------------------------


def process_stats(pid: int) -> dict[str, int]:
    """``rss_kb``, ``fds``, ``threads`` and ``maps`` of one process, read from ``/proc``.

    Raises ``FileNotFoundError``/``ProcessLookupError`` if the process is gone.
    """
    status = procfs.status(pid)
    rss_kb = int(status.get("VmRSS", "0 kB").split()[0])
    threads = int(status["Threads"])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    with open(f"/proc/{pid}/maps", "rb") as f:
        maps = sum(1 for _ in f)
    return {"rss_kb": rss_kb, "fds": fds, "threads": threads, "maps": maps}


def describe_children(pid: int | None = None) -> list[str]:
    """``"PID command line"`` of each live child of ``pid`` (default: this process)."""
    out = []
    for child in procfs.children(os.getpid() if pid is None else pid):
        cmd = procfs.cmdline(child)
        if cmd is not None:
            out.append(f"{child} {cmd[:160]}")
    return out


def shm_entries() -> tuple[int, int]:
    """(vecenv's named blocks, all entries) in ``/dev/shm``. The total is machine-wide: other
    programs change it, so it is reported but judged only in the vecenv count."""
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return 0, 0
    return sum(n.startswith("vecenv_") for n in names), len(names)


def sample(step: int, t0: float, parent: int | None = None) -> dict[str, float]:
    """One row: the parent's metrics, worker sums and maxima, child count and /dev/shm entries."""
    parent = os.getpid() if parent is None else parent
    row: dict[str, float] = {"t": round(time.monotonic() - t0, 3), "step": step}
    for k, v in process_stats(parent).items():
        row[f"parent_{k}"] = v
    workers = []
    for pid in procfs.children(parent):
        try:
            workers.append(process_stats(pid))
        except (FileNotFoundError, ProcessLookupError):
            pass  # exited between the scan and the read
    row["children"] = len(workers)
    for k in PROC_FIELDS:
        values = [w[k] for w in workers]
        row[f"workers_{k}"] = sum(values)
        row[f"worker_max_{k}"] = max(values, default=0)
    row["shm_vecenv"], row["shm_total"] = shm_entries()
    return row


class Recorder:
    """Samples kept in one array allocated up front.

    A list of per-sample dicts would itself grow the parent's RSS by a few KiB per sample
    (hundreds of KiB over a run), which is the very thing being measured: the array is
    allocated once, before the run, and each sample only overwrites a row of it.
    """

    def __init__(self, capacity: int, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self._data = np.zeros((capacity, len(self.columns)), dtype=np.float64)
        self._n = 0

    def add(self, row: dict[str, float]) -> None:
        if self._n >= len(self._data):
            raise RuntimeError(f"more samples than the {len(self._data)} planned")
        data = self._data[self._n]
        for j, name in enumerate(self.columns):
            data[j] = row[name]
        self._n += 1

    def rows(self) -> list[dict[str, float]]:
        """The samples as dicts (ints where the value is whole), for judging and the CSV."""
        return [
            {c: (int(v) if float(v).is_integer() else float(v)) for c, v in zip(self.columns, r)}
            for r in self._data[: self._n]
        ]


def _recorder(capacity: int) -> Recorder:
    """A recorder whose columns are those :func:`sample` returns here."""
    return Recorder(capacity, list(sample(0, time.monotonic())))


# -- results and verdict -------------------------------------------------------------------------


@dataclasses.dataclass
class SoakResult:
    """The samples of one soak run and how to judge them."""

    mode: str
    params: dict[str, Any]
    rows: list[dict[str, float]]
    #: Metrics judged with the tolerance (relative growth after warm-up).
    judged: tuple[str, ...]
    #: Metrics judged exactly (any growth after warm-up is a leak).
    exact: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    #: Absolute growth allowed for some exact metrics (see :data:`MAPS_SLACK`).
    slack: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Verdict:
    """Per metric: baseline (after warm-up), end value, relative growth; and what grew."""

    flat: bool
    metrics: dict[str, dict[str, float]]
    grew: list[str]

    def describe(self) -> str:
        if self.flat:
            return "FLAT: every judged metric stayed within tolerance after warm-up"
        parts = []
        for name in self.grew:
            m = self.metrics[name]
            parts.append(f"{name} {m['baseline']:g} -> {m['end']:g} ({m['growth'] * 100:+.1f}%)")
        return "GREW: " + "; ".join(parts)


def judge(result: SoakResult, tolerance: float = 0.05, warmup: float = 0.1, window: int = 5) -> Verdict:
    """Compare the median of the first ``window`` samples after the warm-up (the first
    ``warmup`` fraction of samples) with the median of the last ``window`` samples.

    A metric in ``result.judged`` grew if it rose by more than ``tolerance`` (relative); one in
    ``result.exact`` grew if its end value exceeds its baseline by more than its
    ``result.slack`` (0 unless given; medians are not used for those: the maximum of the last
    window against the baseline sample).
    """
    rows = result.rows
    if len(rows) < 2:
        raise ValueError(f"need at least 2 samples to judge growth, got {len(rows)}")
    start = min(len(rows) - 1, math.ceil(len(rows) * warmup))
    after = rows[start:]
    w = max(1, min(window, len(after) // 2 or 1))
    metrics: dict[str, dict[str, float]] = {}
    grew: list[str] = []
    for name in result.judged:
        base = statistics.median(r[name] for r in after[:w])
        end = statistics.median(r[name] for r in after[-w:])
        peak = max(r[name] for r in after)
        growth = (end - base) / base if base else (0.0 if end == base else math.inf)
        metrics[name] = {"baseline": base, "end": end, "max": peak, "growth": growth}
        if growth > tolerance:
            grew.append(name)
    for name in result.exact:
        base = after[0][name]
        end = max(r[name] for r in after[-w:])
        peak = max(r[name] for r in after)
        growth = (end - base) / base if base else (0.0 if end == base else math.inf)
        metrics[name] = {"baseline": base, "end": end, "max": peak, "growth": growth}
        if end > base + result.slack.get(name, 0):
            grew.append(name)
    # The trend after warm-up, for the record (not judged): growth per SLOPE_UNIT of progress.
    xs = np.array([r["step"] for r in after], dtype=float)
    for name, m in metrics.items():
        ys = np.array([r[name] for r in after], dtype=float)
        m["slope"] = float(np.polyfit(xs, ys, 1)[0] * slope_unit(result.mode)) if len(after) > 2 and np.ptp(xs) else 0.0
    return Verdict(not grew, metrics, grew)


def slope_unit(mode: str) -> int:
    """Progress over which :func:`judge` reports a metric's trend: 1,000 cycles or 1M steps."""
    return 1000 if mode == "cycles" else 1_000_000


# -- the three modes ----------------------------------------------------------------------------


def _make_cartpole(num_envs: int, num_workers: int, **kwargs: Any) -> vecenv.SubprocVectorEnv:
    """``vecenv.make("CartPole-v1", ...)``, checked to be the process-backed vector env."""
    envs = vecenv.make("CartPole-v1", num_envs, num_workers, **kwargs)
    if not isinstance(envs, vecenv.SubprocVectorEnv):
        envs.close()
        raise TypeError(f"vecenv.make returned {type(envs).__name__}, expected SubprocVectorEnv")
    return envs


def _progress(total: int, desc: str, enabled: bool):
    from vecenv.progress import progress_bar

    return progress_bar(
        total=total,
        desc=desc,
        unit="step" if desc != "cycles" else "cycle",
        unit_scale=True,
        disable=not enabled,
        dynamic_ncols=True,
    )


def _sample_points(total: int, samples: int) -> set[int]:
    """Which of ``total`` iterations (0-based, after which we sample) get a sample."""
    samples = max(2, min(samples, total))
    return {min(total - 1, round(i * (total - 1) / (samples - 1))) for i in range(samples)}


def run_steps(
    steps: int = 10_000_000,
    num_envs: int = 128,
    num_workers: int = 2,
    samples: int = 200,
    context: str | None = None,
    seed: int = 0,
    progress: bool = True,
) -> SoakResult:
    """``steps`` env steps (``steps // num_envs`` vector steps) of CartPole through ``step``."""
    if steps < num_envs * 2:
        raise ValueError(f"`steps` must be at least 2 vector steps ({2 * num_envs}), got {steps}")
    vector_steps = steps // num_envs
    points = _sample_points(vector_steps, samples)
    rng = np.random.default_rng(seed)
    t0 = time.monotonic()
    with _make_cartpole(num_envs, num_workers, context=context) as envs:
        envs.reset(seed=seed)
        rows = _recorder(len(points))
        # Precomputed actions: the soak measures the vector env, not the sampler.
        actions = rng.integers(0, 2, size=(1024, num_envs))
        with _progress(vector_steps * num_envs, "steps", progress) as bar:
            for i in range(vector_steps):
                envs.step(actions[i % len(actions)])
                if i in points:
                    rows.add(sample((i + 1) * num_envs, t0))
                if i % 64 == 63:
                    bar.update(64 * num_envs)
            bar.update(vector_steps * num_envs - bar.n)
    params = dict(
        steps=vector_steps * num_envs,
        num_envs=num_envs,
        num_workers=num_workers,
        context=context or multiprocessing.get_start_method(),
        seed=seed,
    )
    judged = tuple(f"{who}_{k}" for who in ("parent", "workers") for k in PROC_FIELDS)
    return SoakResult("steps", params, rows.rows(), judged, ("children", "shm_vecenv"), time.monotonic() - t0)


def run_recv_send(
    steps: int = 1_000_000,
    num_envs: int = 128,
    num_workers: int = 4,
    batch_size: int = 64,
    samples: int = 200,
    context: str | None = None,
    seed: int = 0,
    progress: bool = True,
) -> SoakResult:
    """``steps`` env steps through ``async_reset``/``recv``/``send`` with random batch orders.

    Every batch that ``recv`` returns is sent back with its env ids shuffled (the actions
    shuffled with them) and, at random, either in one ``send`` or group by group in a random
    order, so the workers see every interleaving the API allows.
    """
    if num_envs % num_workers:
        raise ValueError(f"`num_envs` ({num_envs}) must be a multiple of `num_workers` ({num_workers}) here")
    group = num_envs // num_workers
    if batch_size % group:
        raise ValueError(f"`batch_size` ({batch_size}) must be a multiple of the group size ({group})")
    batches = max(2, steps // batch_size)
    points = _sample_points(batches, samples)
    rng = np.random.default_rng(seed)
    t0 = time.monotonic()
    with _make_cartpole(num_envs, num_workers, batch_size=batch_size, context=context) as envs:
        rows = _recorder(len(points))
        envs.async_reset(seed=seed)
        with _progress(batches * batch_size, "recv/send", progress) as bar:
            for i in range(batches):
                _obs, _rew, _term, _trunc, _info, ids = envs.recv()
                order = rng.permutation(len(ids))
                ids, actions = ids[order], rng.integers(0, 2, size=len(ids))
                if rng.random() < 0.5:
                    envs.send(actions, ids)
                else:
                    groups = ids // group
                    for g in rng.permutation(np.unique(groups)):
                        mask = groups == g
                        envs.send(actions[mask], ids[mask])
                if i in points:
                    rows.add(sample((i + 1) * batch_size, t0))
                if i % 64 == 63:
                    bar.update(64 * batch_size)
            bar.update(batches * batch_size - bar.n)
    params = dict(
        steps=batches * batch_size,
        num_envs=num_envs,
        num_workers=num_workers,
        batch_size=batch_size,
        context=context or multiprocessing.get_start_method(),
        seed=seed,
    )
    judged = tuple(f"{who}_{k}" for who in ("parent", "workers") for k in PROC_FIELDS)
    return SoakResult("recv-send", params, rows.rows(), judged, ("children", "shm_vecenv"), time.monotonic() - t0)


def run_cycles(
    cycles: int = 1000,
    methods: Sequence[str] = ("fork", "spawn"),
    num_envs: int = 8,
    num_workers: int = 2,
    steps_per_cycle: int = 10,
    seed: int = 0,
    progress: bool = True,
) -> SoakResult:
    """``cycles`` create/reset/step/close cycles under each start method in ``methods``.

    The parent is sampled after every close, when no worker should be left: child processes,
    descriptors, memory maps and ``/dev/shm`` entries must not grow from one cycle to the next
    (judged exactly after warm-up); RSS and threads are judged with the tolerance.
    """
    available = multiprocessing.get_all_start_methods()
    for m in methods:
        if m not in available:
            raise ValueError(f"start method {m!r} is not available here; choose from {available}")
    rows = _recorder(cycles + 1)
    t0 = time.monotonic()
    actions = np.random.default_rng(seed).integers(0, 2, size=(steps_per_cycle, num_envs))
    total = cycles * len(methods)
    rows.add(sample(0, t0))  # before the first cycle: nothing of vecenv's is running
    with _progress(total, "cycles", progress) as bar:
        for i in range(cycles):
            for m in methods:  # interleaved, so the methods share the warm-up and the drift
                envs = _make_cartpole(num_envs, num_workers, context=m)
                try:
                    envs.reset(seed=seed + i)
                    for a in actions:
                        envs.step(a)
                finally:
                    envs.close()
                bar.update(1)
            rows.add(sample(i + 1, t0))
    params = dict(
        cycles=cycles,
        methods=list(methods),
        num_envs=num_envs,
        num_workers=num_workers,
        steps_per_cycle=steps_per_cycle,
        seed=seed,
    )
    return SoakResult(
        "cycles",
        params,
        rows.rows(),
        ("parent_rss_kb", "parent_threads"),
        EXACT_CYCLE_METRICS,
        time.monotonic() - t0,
        {"parent_maps": MAPS_SLACK},
    )


# -- output ---------------------------------------------------------------------------------------


def write_csv(result: SoakResult, path: pathlib.Path) -> None:
    """All samples, one row each, columns in a stable order."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(result.rows[0]) if result.rows else []
    with replaced(path) as temporary, open(temporary, "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(result.rows)


def plot(result: SoakResult, path: pathlib.Path) -> str | None:
    """A PNG of every judged metric against progress; returns a note if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not installed (pip install matplotlib, or the `bench` extra)"
    names = list(result.judged) + [n for n in result.exact if n not in result.judged]
    cols = 2
    rows_n = -(-len(names) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(11, 2.4 * rows_n), squeeze=False)
    xlabel = "cycle" if result.mode == "cycles" else "env steps"
    x = [r["step"] for r in result.rows]
    for ax, name in zip(axes.flat, names):
        y = [r[name] for r in result.rows]
        if name.endswith("rss_kb"):
            y, label = [v / 1024 for v in y], name.replace("_kb", "") + " (MiB)"
        else:
            label = name
        ax.plot(x, y, lw=1)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(labelsize=7)
        lo, hi = min(y), max(y)
        if hi - lo < max(1e-9, 0.02 * abs(hi)):  # a flat line: show a +-5% band, not noise
            ax.set_ylim(lo * 0.95 - 0.5, hi * 1.05 + 0.5)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    p = result.params
    fig.suptitle(f"vecenv soak, mode={result.mode}: " + ", ".join(f"{k}={v}" for k, v in p.items()), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced(path) as temporary:
        fig.savefig(temporary, dpi=100)
    plt.close(fig)
    return None


def summary_table(result: SoakResult, verdict: Verdict) -> str:
    """Baseline, end and growth per judged metric, as aligned text."""
    unit = "/1k cycles" if result.mode == "cycles" else "/1M steps"
    lines = [f"{'metric':<22}{'first':>12}{'baseline':>12}{'end':>12}{'max':>12}{'growth':>10}{'trend' + unit:>18}"]
    first = result.rows[0]
    for name, m in verdict.metrics.items():
        mark = "  <-- grew" if name in verdict.grew else ""
        lines.append(
            f"{name:<22}{first[name]:>12g}{m['baseline']:>12g}{m['end']:>12g}{m['max']:>12g}"
            f"{m['growth'] * 100:>9.1f}%{round(m.get('slope', 0.0), 1) + 0.0:>+18.1f}{mark}"
        )
    return "\n".join(lines)


# -- command line ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="soak.py",
        description=__doc__.split("\n\n")[0] + " Modes: steps (long run through step), cycles "
        "(create/step/close under fork and spawn), recv-send (async_reset/recv/send with random "
        "batch orders). Samples RSS, open fds, threads and memory maps of the parent and each "
        "worker, child processes and /dev/shm entries from /proc, then says whether anything grew.",
        epilog="Examples: soak.py --mode steps --steps 1000000;  soak.py --mode cycles --cycles 200;  "
        "soak.py --mode recv-send --steps 1000000. Exit status 0 when flat, 1 when something grew.",
    )
    parser.add_argument(
        "--mode", choices=("steps", "cycles", "recv-send"), default="steps", help="what to soak (default: steps)"
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="env steps in total (steps: default 10,000,000; recv-send: default 1,000,000)",
    )
    parser.add_argument(
        "--num-envs", type=positive_int, default=None, help="envs in the vector env (default 128; cycles: 8)"
    )
    parser.add_argument(
        "--num-workers",
        type=positive_int,
        default=None,
        help="worker processes, at most --num-envs (default: steps 2, recv-send 4, cycles 2); recv-send: "
        "a divisor of --num-envs",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=64,
        help="recv-send: envs per recv, at most --num-envs and a multiple of the group size "
        "(--num-envs / --num-workers) (default 64)",
    )
    parser.add_argument(
        "--cycles",
        type=positive_int,
        default=1000,
        help="cycles: create/step/close cycles per start method (default 1,000)",
    )
    parser.add_argument(
        "--methods",
        default="fork,spawn",
        help="cycles: comma-separated start methods, interleaved, among "
        f"{','.join(multiprocessing.get_all_start_methods())} (default fork,spawn)",
    )
    parser.add_argument(
        "--steps-per-cycle",
        type=positive_int,
        default=10,
        help="cycles: vector steps between reset and close (default 10)",
    )
    parser.add_argument(
        "--context",
        choices=multiprocessing.get_all_start_methods(),
        default=None,
        help="steps/recv-send: start method (default: the platform's)",
    )
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=200,
        help="steps/recv-send: samples taken evenly through the run (default 200; cycles samples after every cycle)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.1,
        help="fraction of the samples ignored as warm-up before the baseline (default 0.1)",
    )
    parser.add_argument(
        "--tolerance",
        type=non_negative_float,
        default=0.05,
        help="relative growth allowed after warm-up for RSS/fds/threads/maps (default 0.05); "
        "cycles judges fds, children and /dev/shm exactly, maps within +2 in all",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for resets and actions (default 0)")
    parser.add_argument(
        "--out",
        type=out_folder,
        default=DEFAULT_OUT,
        help=f"folder for soak-<mode>.csv/.json/.png (default {DEFAULT_OUT})",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def run(args: argparse.Namespace) -> tuple[SoakResult, Verdict]:
    """Run the mode the arguments ask for; return its samples and verdict."""
    progress = not args.no_progress
    if args.mode == "steps":
        result = run_steps(
            args.steps or 10_000_000,
            args.num_envs or 128,
            args.num_workers or 2,
            args.samples,
            args.context,
            args.seed,
            progress,
        )
    elif args.mode == "recv-send":
        result = run_recv_send(
            args.steps or 1_000_000,
            args.num_envs or 128,
            args.num_workers or 4,
            args.batch_size,
            args.samples,
            args.context,
            args.seed,
            progress,
        )
    else:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        result = run_cycles(
            args.cycles, methods, args.num_envs or 8, args.num_workers or 2, args.steps_per_cycle, args.seed, progress
        )
    return result, judge(result, args.tolerance, args.warmup)


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What one option's ``type=`` cannot check alone, with the defaults of ``args.mode`` (as
    :func:`run` applies them); a bad value is a usage error (one line, exit status 2) here,
    before any worker starts."""
    if not 0 <= args.warmup < 1:
        parser.error(f"argument --warmup: expected a number in [0, 1), got {args.warmup}")
    num_envs = args.num_envs or (8 if args.mode == "cycles" else 128)
    num_workers = args.num_workers or (4 if args.mode == "recv-send" else 2)
    if num_workers > num_envs:
        parser.error(f"argument --num-workers: expected at most --num-envs={num_envs}, got {num_workers}")
    if args.mode == "steps":
        steps = args.steps or 10_000_000
        if steps < 2 * num_envs:
            parser.error(f"argument --steps: expected at least 2 vector steps (2 x {num_envs} envs), got {steps}")
    elif args.mode == "recv-send":
        if num_envs % num_workers:
            parser.error(
                f"argument --num-workers: expected a divisor of --num-envs={num_envs} in recv-send mode, "
                f"got {num_workers}"
            )
        group = num_envs // num_workers
        if args.batch_size > num_envs or args.batch_size % group:
            parser.error(
                f"argument --batch-size: expected a multiple of the group size {group} (--num-envs / "
                f"--num-workers) up to --num-envs={num_envs}, got {args.batch_size}"
            )
    else:
        available = multiprocessing.get_all_start_methods()
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        unknown = [m for m in methods if m not in available]
        if unknown or not methods:
            parser.error(
                f"argument --methods: expected comma-separated start methods among {','.join(available)}, "
                f"got {args.methods!r}"
            )


def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(None if argv is None else list(argv))
    _check_args(parser, args)
    if not os.path.isdir("/proc/self/fd"):
        raise SystemExit("soak.py: needs Linux /proc to read process resources")
    result, verdict = run(args)
    out = pathlib.Path(args.out)
    stem = out / f"soak-{result.mode}"
    write_csv(result, stem.with_suffix(".csv"))
    note = plot(result, stem.with_suffix(".png"))
    write_text_atomically(
        stem.with_suffix(".json"),
        json_text(
            {
                "mode": result.mode,
                "params": result.params,
                "elapsed_s": round(result.elapsed_s, 1),
                "tolerance": args.tolerance,
                "warmup": args.warmup,
                "flat": verdict.flat,
                "grew": verdict.grew,
                "metrics": verdict.metrics,
                "first": result.rows[0],
                "last": result.rows[-1],
                "children_at_end": describe_children(),
            },
            indent=2,
        ),
    )
    print(f"\nmode={result.mode} {result.params} in {result.elapsed_s:.0f} s, {len(result.rows)} samples")
    print(summary_table(result, verdict))
    children = describe_children()
    print("child processes left at the end: " + ("; ".join(children) if children else "none"))
    print(f"wrote {stem}.csv, {stem}.json" + ("" if note else f", {stem}.png"))
    if note:
        print(note)
    print(verdict.describe())
    return 0 if verdict.flat else 1


if __name__ == "__main__":
    raise SystemExit(run_main("soak.py", main))
