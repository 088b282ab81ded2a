"""The ``collection`` suite: whole-process transitions/s of writing a CartPole-v1 dataset to disk:
a plain single-env Python loop into numpy arrays (the 1.00x), Minari's own ``DataCollector``,
and ``vecenv-collect`` (its format and ``--format minari``) at 8, 64 and 256 envs, with its
policy in the workers (rollouts, the default) and in the collecting process (``--rollout-steps 0``)."""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vecenv.bench.child import child_env, run_child, run_process
from vecenv.bench.suite import (
    OptionError,
    Outcome,
    Repetitions,
    Suite,
    csv,
    failed_footnotes,
    failed_mark,
    finished,
    measure_all,
    missing_modules,
    pick,
    rate_text,
    ratio,
    ratio_text,
    require,
    spread,
    table,
)

PLAIN = "plain"
MINARI_COLLECTOR = "minari-collector"


@dataclasses.dataclass(frozen=True)
class Row:
    """One collector: its label, its ``vecenv-collect`` options (``None``: a measuring task of
    this module), the share of ``--steps`` it writes, and the module it needs."""

    label: str
    collect: tuple[str, ...] | None = None
    share: float = 1.0
    needs: str | None = None


#: The rows, by the names --rows takes. The per-step rows are slow and only compared with: a
#: quarter of the steps; Minari's collector is far slower: a fifth.
ROWS: dict[str, Row] = {
    PLAIN: Row("a plain single-env Python loop into numpy arrays, `np.save` at the end"),
    MINARI_COLLECTOR: Row("Minari's own `DataCollector` on one env, then `create_dataset`", share=0.2, needs="minari"),
    "collect": Row("`vecenv-collect` defaults (rollouts; 8 envs, more for long runs)", ()),
    "collect-8": Row("`vecenv-collect --num-envs 8`", ("--num-envs", "8")),
    "collect-8-step": Row(
        "`vecenv-collect --num-envs 8 --rollout-steps 0` (one round trip per step)",
        ("--num-envs", "8", "--rollout-steps", "0"),
        0.25,
    ),
    "collect-16": Row("`vecenv-collect --num-envs 16`", ("--num-envs", "16")),
    "collect-32": Row("`vecenv-collect --num-envs 32`", ("--num-envs", "32")),
    "collect-64": Row("`vecenv-collect --num-envs 64`", ("--num-envs", "64")),
    "collect-64-step": Row(
        "`vecenv-collect --num-envs 64 --rollout-steps 0`", ("--num-envs", "64", "--rollout-steps", "0"), 0.25
    ),
    "collect-256": Row("`vecenv-collect --num-envs 256`", ("--num-envs", "256")),
    "collect-256-step": Row(
        "`vecenv-collect --num-envs 256 --rollout-steps 0`", ("--num-envs", "256", "--rollout-steps", "0"), 0.25
    ),
    "collect-minari": Row(
        "`vecenv-collect --format minari` (defaults)",
        ("--format", "minari", "--dataset-id", "bench/vecenv-v0"),
        needs="minari",
    ),
    "collect-minari-arrow": Row(
        "`vecenv-collect --format minari --minari-storage arrow`",
        ("--format", "minari", "--dataset-id", "bench/vecenv-arrow-v0", "--minari-storage", "arrow"),
        needs="pyarrow",
    ),
}

DOC = """\
Rows (--rows; each writes --steps CartPole-v1 transitions, a whole process timed from start to
exit, interpreter start-up and imports included):
  plain         a plain single-env Python loop into preallocated numpy arrays, np.save at the
                end: the 1.00x
  minari-collector   Minari's DataCollector on one env, then create_dataset (a fifth of the
                steps: it is far slower); needs minari
  collect       vecenv-collect with its defaults: the random policy in the workers (rollouts),
                8 envs, more for long runs (see vecenv-collect --help)
  collect-N     the same with --num-envs N (8, 16, 32, 64, 256)
  collect-N-step    the same with --rollout-steps 0: one vector step at a time, the policy in
                the collecting process (a quarter of the steps)
  collect-minari    vecenv-collect --format minari (defaults); needs minari
  collect-minari-arrow   the same in Minari's Arrow storage; needs pyarrow (minari[arrow])

Columns: transitions/s (wall clock), x the plain loop (the ratio taken within each repetition,
then the median), and x per CPU-second: transitions per CPU-second of the whole process tree
against the plain loop's, which a busy host cannot take away. Repetitions are interleaved;
medians (min-max). Writes collection.md and collection.json.

Examples:
  vecenv-bench --suite collection --steps 1000000 --reps 3
  vecenv-bench --suite collection --rows plain,collect,collect-8,collect-64 --steps 300000"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The collection suite's options."""
    p.add_argument(
        "--rows",
        type=csv(str, tuple(ROWS)),
        default=None,
        help=f"comma-separated rows (default: all; choices: {','.join(ROWS)})",
    )
    p.add_argument("--steps", type=int, default=None, help="transitions per row (default: 1000000; --quick: 20000)")
    p.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default: 2; --quick: 1)")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the defaults that depend on ``--quick``; ``OptionError`` for values out of range."""
    args.rows = args.rows or list(ROWS)
    args.steps = pick(args.steps, 1_000_000, 20_000, args)
    args.reps = pick(args.reps, 2, 1, args)
    require(args.steps >= 1000, "--steps", "an int >= 1000", args.steps)
    require(args.reps >= 1, "--reps", "an int >= 1", args.reps)
    if PLAIN not in args.rows:
        raise OptionError(f"--rows must include {PLAIN!r}: every ratio is to it")
    return args


# -- the measuring process ----------------------------------------------------------------------


def _plain(spec: dict[str, Any]) -> dict[str, Any]:
    """A plain single-env loop into preallocated numpy arrays, saved at the end."""
    import gymnasium as gym
    import numpy as np

    n = spec["steps"]
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    columns = {
        "observations": np.zeros((n, 4), np.float32),
        "next_observations": np.zeros((n, 4), np.float32),
        "actions": np.zeros(n, np.int64),
        "rewards": np.zeros(n, np.float64),
        "terminations": np.zeros(n, np.bool_),
        "truncations": np.zeros(n, np.bool_),
    }
    o, no, a, r, te, tr = columns.values()
    for i in range(n):
        action = env.action_space.sample()
        o[i] = obs
        obs, reward, terminated, truncated, _ = env.step(action)
        no[i], a[i], r[i], te[i], tr[i] = obs, action, reward, terminated, truncated
        if terminated or truncated:
            obs, _ = env.reset()
    for name, column in columns.items():
        np.save(Path(spec["out"]) / f"{name}.npy", column)
    return {"transitions": n}


def _minari_collector(spec: dict[str, Any]) -> dict[str, Any]:
    """Minari's DataCollector on one env, then create_dataset (under $MINARI_DATASETS_PATH)."""
    import gymnasium as gym
    from minari import DataCollector

    env = DataCollector(gym.make("CartPole-v1"))
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(spec["steps"]):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.create_dataset(dataset_id="bench/collector-v0", algorithm_name="random")
    return {"transitions": spec["steps"]}


def measure_row(spec: dict[str, Any], on_result: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The ``collection`` task of a measuring process: the plain loop or Minari's collector."""
    return _plain(spec) if spec["row"] == PLAIN else _minari_collector(spec)


# -- the suite ----------------------------------------------------------------------------------


def _steps(row: Row, steps: int) -> int:
    return max(1000, int(steps * row.share))


def _measure(name: str, steps: int, tmp: Path) -> dict[str, Any]:
    """One whole-process run of row ``name``: its wall and CPU seconds, or an error."""
    row = ROWS[name]
    extra = {"MINARI_DATASETS_PATH": str(tmp / "minari")}
    timeout = 60 + steps / 1000  # even Minari's collector writes more than 1,000 a second
    if row.collect is None:
        spec = {"task": "collection", "row": name, "steps": steps, "out": str(tmp)}
        res = run_child(spec, timeout, extra)
        if "error" in res:
            return res
        wall, cpu = res["process_wall_s"], res["process_cpu_s"]
    else:
        out = tmp / name
        command = [sys.executable, "-m", "vecenv.datasets", "--steps", str(steps), "--out", str(out), "--quiet"]
        done = run_process([*command, *row.collect], timeout, child_env(extra))
        if done.returncode != 0:
            err = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
            return {"error": "timed out" if done.timed_out else (err[-1] if err else f"exit {done.returncode}")[:300]}
        wall, cpu = done.wall_s, done.cpu_s
    return {"transitions": steps, "wall_s": wall, "cpu_s": cpu, "rate": steps / wall, "per_cpu_s": steps / cpu}


def summarize(reps: Repetitions[str]) -> list[dict[str, Any]]:
    """The table's rows: rates' median (min-max); × the plain loop taken within each repetition
    (its rows ran minutes apart at most), then the median, since a shared machine's load drifts
    between repetitions; × per CPU-second from the medians. A row whose measurement failed after
    some repetitions says so (:meth:`~vecenv.bench.suite.Repetitions.failures`)."""
    results = reps.results
    plain = results.get(PLAIN)
    if not plain:
        return []
    plain_per_cpu = statistics.median(r["per_cpu_s"] for r in plain)
    plain_by_rep = {p["rep"]: p for p in plain}
    out = []
    for name, rs in results.items():
        pairs = [(r, plain_by_rep[r["rep"]]) for r in rs if r["rep"] in plain_by_rep]
        out.append(
            {
                "row": name,
                "label": ROWS[name].label,
                "transitions": rs[0]["transitions"],
                **spread("rate", [r["rate"] for r in rs]),
                "x_plain": statistics.median(r["rate"] / p["rate"] for r, p in pairs) if pairs else None,
                "x_plain_per_cpu_s": ratio(statistics.median(r["per_cpu_s"] for r in rs), plain_per_cpu),
                "reps": len(rs),
                **reps.failures(name),
            }
        )
    return out


def markdown(summary: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The suite's table."""
    if not summary:
        return ""
    body = [
        [
            s["label"],
            f"{s['transitions']:,}",
            rate_text(s) + failed_mark(s),
            ratio_text(s["x_plain"]),
            ratio_text(s["x_plain_per_cpu_s"]),
        ]
        for s in summary
    ]
    head = ["collector", "transitions", "transitions/s", "× plain loop", "× per CPU-second"]
    title = f"## Writing CartPole-v1 transitions to disk (whole processes, --steps {args.steps:,})"
    footnotes = failed_footnotes([(s["label"], s) for s in summary], args.reps, "row")
    return "\n".join([title, "", *table(head, body), *footnotes])


def run(args: argparse.Namespace) -> Outcome:
    """Every row, interleaved over the repetitions, each a fresh process; then the table. A run
    that Ctrl+C or SIGTERM cut after some measurements ends in
    :class:`~vecenv.bench.suite.PartialRun` with the table of what they measured."""
    args = resolve(args)
    notes: list[str] = []
    rows = []
    for name in args.rows:
        needs = ROWS[name].needs
        if needs and missing_modules([needs]):
            extra = '"minari[arrow]"' if needs == "pyarrow" else '-e ".[minari]"'
            notes.append(f"{name}: {needs} not importable, skipped (pip install {extra})")
        else:
            rows.append(name)
    reps: Repetitions[str] = Repetitions(notes)

    def measure() -> None:
        for rep in range(args.reps):
            with tempfile.TemporaryDirectory(prefix="vecenv-bench-collection-") as tmp:
                for name in rows:
                    if name not in reps.failed:
                        res = _measure(name, _steps(ROWS[name], args.steps), Path(tmp))
                        shutil.rmtree(Path(tmp) / "minari", ignore_errors=True)
                        reps.record(name, name, rep, {**res, "rep": rep}, lambda r: f"{r['rate']:,.0f} transitions/s")

    cut = measure_all(measure, reps.ran, len(rows) * args.reps, notes)
    settings = {"rows": rows, "steps": args.steps, "reps": args.reps}
    summary = summarize(reps)
    data = {"settings": settings, "summary": summary, "results": reps.results}
    return finished(Outcome(markdown(summary, args), data, notes), cut)


SUITE = Suite(
    name="collection",
    summary="whole-process transitions/s writing a dataset: vecenv-collect (rollouts and per "
    "step, 8 to 256 envs, its format and Minari's) against a plain single-env loop and "
    "Minari's DataCollector",
    doc=DOC,
    add_arguments=add_arguments,
    run=run,
)
