"""The results: per-cell summaries (medians, min-max, ratios), the markdown tables and the chart."""

from __future__ import annotations

import os
import statistics
from typing import Any

import numpy as np

from vecenv.bench.envs import ALL_WORKLOADS
from vecenv.bench.measure import IDLE_S
from vecenv.bench.plan import Cell, key
from vecenv.bench.runners import Drive, runner_named
from vecenv.bench.suite import failed_footnotes as suite_failed_footnotes
from vecenv.bench.suite import failed_mark as suite_failed_mark
from vecenv.bench.suite import failures
from vecenv.files import replaced

#: Each table: its group, title, the name of its ratio column, and whether it has an ideal column.
_TABLES = (
    (
        "standard",
        "Throughput (× Sync = ratio to gymnasium SyncVectorEnv; ideal = {cores} × single-env rate)",
        "× Sync",
        True,
    ),
    (
        "async-batch",
        "Async batches (learner: ~0.5 ms inference per batch; heavy-tailed 100 µs envs); "
        "ratio to synchronous vecenv stepping with the same workers",
        "× sync",
        False,
    ),
    (
        "native-group",
        "Native vectorized groups (CartPole vector_entry_point); ratio to one make_vec of 2048",
        "× make_vec",
        False,
    ),
)


def _spread(name: str, values: list[float]) -> dict[str, float | None]:
    """``{name}_median``, ``_min`` and ``_max`` of ``values`` (``None`` each when there are none)."""
    if not values:
        return {f"{name}_median": None, f"{name}_min": None, f"{name}_max": None}
    return {f"{name}_median": statistics.median(values), f"{name}_min": min(values), f"{name}_max": max(values)}


def _summary(ok: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and min-max over the repetitions that succeeded."""
    pss = [r["pss_mib"] for r in ok if r.get("pss_mib") is not None]
    idle = [r["idle_cpu_cores"] for r in ok if r.get("idle_cpu_cores") is not None]
    chosen = sorted({r["workers_chosen"] for r in ok if r.get("workers_chosen") is not None})
    return {
        "reps": len(ok),
        **_spread("rate", [r["rate"] for r in ok]),
        **_spread("startup_s", [r["startup_s"] for r in ok]),
        **_spread("pss_mib", pss),
        "processes": ok[-1].get("processes"),
        **_spread("idle_cpu_cores", idle),
        "workers_chosen": chosen or None,  # vecenv-auto: the counts it chose (one per rep, deduplicated)
        "ratio_to_baseline": None,
        "ideal_fraction": None,
    }


def summarize(cells: list[Cell], cores: int) -> None:
    """Add a ``summary`` (medians, min-max, ratios) to every cell that has results; one whose
    other repetitions failed says so (``failed_reps``, ``failure``: the first one's error), as
    its figures are not those of a clean cell."""
    by_key = {key(c): c for c in cells}
    for c in cells:
        ok = [r for r in c["reps"] if "error" not in r]
        c["summary"] = {**_summary(ok), **failures([r["error"] for r in c["reps"] if "error" in r])} if ok else None
    for c in cells:
        s = c["summary"]
        if not s:
            continue
        single = runner_named(c["runner"], c["n"]).drive is Drive.SINGLE
        base = None if single else by_key.get((c["group"], c["workload"], c["n"], c["baseline"]))
        if base and base["summary"]:
            s["ratio_to_baseline"] = s["rate_median"] / base["summary"]["rate_median"]
        one = by_key.get(("standard", c["workload"], 1, "single"))
        if c["group"] == "standard" and one and one["summary"]:
            s["ideal_fraction"] = s["rate_median"] / (cores * one["summary"]["rate_median"])


def _fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def _label(cell: Cell) -> str:
    """The runner, with what ``vecenv-auto`` chose: ``vecenv-auto (0w)`` (``(0w/2w)`` if reps differ)."""
    chosen = (cell.get("summary") or {}).get("workers_chosen")
    return f"{cell['runner']} ({'/'.join(f'{k}w' for k in chosen)})" if chosen else cell["runner"]


def _method(meta: dict[str, Any]) -> list[str]:
    cal = meta["calibration"]
    return [
        f"Calibration: {cal['iterations_per_us']:.1f} loop iterations/µs → py100us = {cal['iters_100us']:,}, "
        f"py1ms = {cal['iters_1ms']:,}, obs84 = {cal['iters_50us']:,} iterations per step; inference = "
        f"{cal['inference_reps']} × (128×128 @ 128×128 float32) ≈ {cal['inference_ms']:.2f} ms. "
        f"{meta['seconds']} s of stepping after {meta['warmup']} s warm-up, {meta['reps']} interleaved reps, "
        "each in a fresh process; median (min–max). Idle CPU: cores that the cell's processes use "
        f"during {IDLE_S:g} s with the vector env open and nobody stepping it (~0 when workers block).",
        "",
    ]


def failed_mark(cell: Cell) -> str:
    """`` †`` after the figures of a cell some of whose repetitions failed, else ``""``."""
    return suite_failed_mark(cell.get("summary"))


def failed_footnotes(cells: list[Cell], planned: int) -> list[str]:
    """The lines under a table for its cells marked by :func:`failed_mark`
    (:func:`~vecenv.bench.suite.failed_footnotes`)."""
    rows = [(f"{c['workload']} N={c['n']} {c['runner']}", c.get("summary")) for c in cells]
    return suite_failed_footnotes(rows, planned, "cell")


def _row(c: Cell, ideal: bool, width: int) -> str:
    s = c["summary"]
    cols = [c["workload"], str(c["n"]), _label(c)]
    if not s:
        err = next((r["error"] for r in c["reps"] if "error" in r), None)
        cols += ["not measured" if err is None else f"failed: {err}".replace("|", "/")] + [""] * (width - 4)
        return "| " + " | ".join(cols) + " |"
    rate = f"**{_fmt_rate(s['rate_median'])}** ({_fmt_rate(s['rate_min'])}–{_fmt_rate(s['rate_max'])})"
    cols.append(rate + failed_mark(c))
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
    return "| " + " | ".join(cols) + " |"


def markdown(cells: list[Cell], meta: dict[str, Any]) -> str:
    """The step suite's markdown: the method, one table per group of cells (the notes are the
    command line's)."""
    cores = meta["cores"]
    lines = _method(meta)
    for group, title, ratio_name, ideal in _TABLES:
        rows = [c for c in cells if c["group"] == group]
        if not rows:
            continue
        lines += [f"## {title.format(cores=cores)}", ""]
        head = ["workload", "N", "runner", "env-steps/s", ratio_name]
        if ideal:
            head.append(f"of {cores}-core ideal")
        head += ["start-up s", "PSS MiB (procs)", "idle CPU (cores)"]
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
        lines += [_row(c, ideal, len(head)) for c in rows]
        lines.append("")
        lines += failed_footnotes(rows, meta["reps"])
    return "\n".join(lines)


def pyplot(path: str) -> Any:
    """matplotlib's ``pyplot`` drawing off-screen, or, when matplotlib is not installed, the
    note that says the chart at ``path`` was skipped and how to get it (a ``str``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f'chart: matplotlib not installed, {os.path.basename(path)} skipped (pip install -e ".[bench]")'
    return plt


def chart(cells: list[Cell], path: str, cores: int) -> str | None:
    """Bar chart of median rates with min-max whiskers; a note when matplotlib is missing."""
    plt = pyplot(path)
    if isinstance(plt, str):
        return plt
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
        colors = ["tab:green" if runner_named(c["runner"], c["n"]).ours else "tab:gray" for c in cs]
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
    with replaced(path) as temporary:  # a run cut while drawing leaves no partial PNG
        fig.savefig(temporary, dpi=110)
    plt.close(fig)
    return None
