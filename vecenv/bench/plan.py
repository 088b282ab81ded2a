"""What to measure: the cells (workload, N, runner) in the order they are interleaved, and
notes on what is skipped (a library that is not installed, the atari workload without ALE)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vecenv.bench.envs import STANDARD_WORKLOADS, atari_missing
from vecenv.bench.runners import NATIVE, NATIVE_N, REQUIREMENTS, RUNNERS, Drive, Runner, async_batch_runners

Cell = dict[str, Any]


def plan(
    workloads: Sequence[str], sizes: Sequence[int], runners: Sequence[str], quick: bool
) -> tuple[list[Cell], list[str]]:
    """The cells to measure (in interleaving order) and notes on what is skipped."""
    available, notes = _importable([RUNNERS[name] for name in runners])
    if "atari" in workloads:
        missing = atari_missing()
        if missing:
            notes.append(missing)
            workloads = [w for w in workloads if w != "atari"]
    cells, skipped = _standard_cells(workloads, sizes, available)
    notes += skipped
    if "async-batch" in workloads:
        cells += _async_batch_cells(sizes, quick)
    if "native-group" in workloads:
        for r in NATIVE.values():
            cells.append(
                dict(group="native-group", workload="native-group", n=NATIVE_N, runner=r.name, baseline="gym-make_vec")
            )
    return cells, notes


def _importable(selected: list[Runner]) -> tuple[list[Runner], list[str]]:
    """The selected runners whose modules import, and a note for each module that does not."""
    needed = {r.needs for r in selected}
    missing = [q for q in REQUIREMENTS if q in needed and q.missing()]
    return [r for r in selected if r.needs not in missing], [q.note for q in missing]


def _standard_cells(
    workloads: Sequence[str], sizes: Sequence[int], runners: list[Runner]
) -> tuple[list[Cell], list[str]]:
    """The standard workloads' cells, and a note for each runner left out of a workload it
    cannot step."""
    cells, notes = [], []
    for w in workloads:
        if w not in STANDARD_WORKLOADS:
            continue
        for r in runners:
            if not r.steps(w):
                notes.append(f"{r.name}: skipped for {w} (it steps only {', '.join(sorted(r.workloads or ()))})")
                continue
            for n in [1] if r.drive is Drive.SINGLE else sizes:
                if not r.fits(n):
                    continue
                cell = dict(group="standard", workload=w, n=n, runner=r.name, baseline="sync")
                if r.half_batch:
                    cell.update(workers=r.fixed_workers(), batch_size=r.batch_at(n))
                cells.append(cell)
    return cells, notes


def _async_batch_cells(sizes: Sequence[int], quick: bool) -> list[Cell]:
    cells: list[Cell] = []
    for n in sizes:
        for base, batches in async_batch_runners(n, (2,) if quick else (2, 4), (1,) if quick else (1, 2)):
            common = dict(group="async-batch", workload="async-batch", n=n)
            k = base.fixed_workers()
            cells.append(dict(common, runner=base.name, workers=k, infer=True, baseline=base.name))
            for r in batches:
                cells.append(
                    dict(common, runner=r.name, workers=k, batch_size=r.batch_size, infer=True, baseline=base.name)
                )
    return cells


def key(cell: Cell) -> tuple[str, str, int, str]:
    """A cell's identity: (group, workload, N, runner)."""
    return cell["group"], cell["workload"], cell["n"], cell["runner"]
