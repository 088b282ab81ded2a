"""The ``multiagent`` suite: agent-steps/s (rows x vector steps / s) and CPU per agent-step of
``vecenv.MultiAgentVectorEnv`` and the SuperSuit drop-in against SuperSuit itself, in process and
in its own processes, on PettingZoo workloads; and an agent-death run on knights-archers-zombies."""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from vecenv.bench.child import run_child, run_many
from vecenv.bench.suite import (
    Outcome,
    Repetitions,
    Suite,
    csv,
    failed_footnotes,
    failed_mark,
    failures,
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
from vecenv.errors import InvalidArgumentError

BASELINE = "supersuit-0"
CEILING = "ceiling"
#: What brings every workload's modules (pettingzoo, supersuit, mpe2, pymunk), for the skip notes.
INSTALL = '-e ".[test]"'


@dataclasses.dataclass(frozen=True)
class Workload:
    """A PettingZoo parallel env and the copies each runner steps."""

    label: str
    copies: int
    needs: tuple[str, ...]


WORKLOADS = {
    "simple_spread": Workload("simple_spread_v3 (MPE2, 3 agents)", 16, ("pettingzoo", "supersuit", "mpe2")),
    "pistonball": Workload("pistonball_v6 (20 pistons, 84x84x3)", 4, ("pettingzoo", "supersuit", "pymunk")),
    # knights_archers_zombies_v11: PettingZoo 1.27 or newer (1.25 and 1.26 have v10).
    "kaz": Workload(
        "knights_archers_zombies_v11 (agents die)",
        16,
        ("pettingzoo", "supersuit", "pymunk", "pettingzoo.butterfly.knights_archers_zombies_v11"),
    ),
}
RUNNERS = {
    BASELINE: "SuperSuit in-process (`num_cpus=0`)",
    "supersuit-2": "SuperSuit `num_cpus=2` (its own processes)",
    "vecenv-0w": "vecenv, every copy in the parent",
    "vecenv-2w": "vecenv, 2 workers",
    "vecenv-inline": "vecenv, 2 groups, one in the parent",
    "dropin-2": "drop-in `vecenv.supersuit`, `num_cpus=2`",
    CEILING: "2-core ceiling (2 independent SuperSuit in-process halves)",
}
WARMUP_STEPS = 20
ACTION_ROWS = 16

DOC = """\
Runners (--runners):
  supersuit-0   supersuit.concat_vec_envs_v1(..., num_cpus=0): SuperSuit in-process (the 1.00x)
  supersuit-2   num_cpus=2: SuperSuit's own processes (ProcConcatVec)
  vecenv-0w     vecenv.MultiAgentVectorEnv, every copy in the measuring process
  vecenv-2w     vecenv.MultiAgentVectorEnv, 2 worker processes
  vecenv-inline vecenv.MultiAgentVectorEnv, 2 groups: one in a worker, one in the parent
  dropin-2      vecenv.supersuit.concat_vec_envs_v1(..., num_cpus=2)
  ceiling       two processes at once, each stepping half the copies with supersuit-0, no
                communication at all: what 2 cores give (their rates added)

Workloads (--workloads): simple_spread (MPE2, 3 agents, 16 copies), pistonball (20 pistons,
SuperSuit's 84x84x3 preprocessing as in PettingZoo's SB3 tutorial, 4 copies) and kaz
(knights-archers-zombies, 16 copies: agents die; SuperSuit needs black_death_v3, vecenv does
not). Needs pettingzoo, supersuit, mpe2 and pymunk (pip install -e ".[test]").

Method: each measurement runs in a fresh process: build, seeded reset, 20 warm-up steps, then
--seconds of stepping with precomputed random actions; the CPU time (user + system) of the
process tree from /proc over the stepping, per agent-step. Repetitions are interleaved; the
tables give medians of the rates (min-max), ratios of the medians to supersuit-0 and to the
ceiling, the ratio of the best repetitions (on a machine that others load, the best is nearest
to a run with the cores free) and CPU per agent-step as a ratio to supersuit-0, which load on
the machine disturbs far less than the wall clock.

--kaz-steps N also runs vecenv's native API on KAZ (16 copies or --copies, 2 workers, no wrapper) for N
agent-steps and reports the agents that left their episodes early (the agent-death check).
Writes multiagent.md and multiagent.json.

Examples:
  vecenv-bench --suite multiagent --seconds 1.5 --reps 5
  vecenv-bench --suite multiagent --workloads "" --kaz-steps 1000000   # the agent-death run alone"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The multiagent suite's options."""
    p.add_argument(
        "--workloads",
        type=csv(str, tuple(WORKLOADS), empty_ok=True),
        default=list(WORKLOADS),
        help=f'comma-separated workloads (default: all: {",".join(WORKLOADS)}; "" for none, '
        "with --kaz-steps: the agent-death run alone)",
    )
    p.add_argument(
        "--runners",
        type=csv(str, tuple(RUNNERS)),
        default=list(RUNNERS),
        help=f"comma-separated runners (default: all: {','.join(RUNNERS)})",
    )
    p.add_argument(
        "--copies", type=int, default=None, help="copies per workload (default: 16, 4 for pistonball; --quick: 2)"
    )
    p.add_argument(
        "--seconds", type=float, default=None, help="seconds of stepping per measurement (default: 3; --quick: 0.3)"
    )
    p.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default: 3; --quick: 1)")
    p.add_argument(
        "--kaz-steps",
        type=int,
        default=0,
        help="also run KAZ (agents die) for this many agent-steps, once; a failed run is a row marked † (default: 0)",
    )


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the defaults that depend on ``--quick``; ``OptionError`` for values out of range."""
    args.seconds = pick(args.seconds, 3.0, 0.3, args)
    args.reps = pick(args.reps, 3, 1, args)
    args.copies = pick(args.copies, None, 2, args)
    require(0 < args.seconds < math.inf, "--seconds", "a finite number > 0", args.seconds)
    require(args.reps >= 1, "--reps", "an int >= 1", args.reps)
    require(args.copies is None or args.copies >= 2, "--copies", "an int >= 2", args.copies)
    require(args.kaz_steps >= 0, "--kaz-steps", "an int >= 0", args.kaz_steps)
    return args


# -- the measuring process ----------------------------------------------------------------------


def make_env(workload: str, black_death: bool = False) -> Any:
    """One parallel env of ``workload`` (built where it runs)."""
    import supersuit as ss

    with warnings.catch_warnings():  # PettingZoo 1.27 warns on the module API that SuperSuit's users use
        warnings.simplefilter("ignore", DeprecationWarning)
        if workload == "simple_spread":
            from mpe2 import simple_spread_v3

            return simple_spread_v3.parallel_env()
        if workload == "pistonball":
            from pettingzoo.butterfly import pistonball_v6

            env = pistonball_v6.parallel_env()
            env = ss.color_reduction_v0(env, mode="B")
            env = ss.resize_v1(env, x_size=84, y_size=84)
            return ss.frame_stack_v1(env, 3)
        from pettingzoo.butterfly import knights_archers_zombies_v11

        env = knights_archers_zombies_v11.parallel_env()
        return ss.black_death_v3(env) if black_death else env


@dataclasses.dataclass(frozen=True)
class EnvFn:
    """A picklable constructor for the native API (no wrapper: agent death is built in)."""

    workload: str

    def __call__(self) -> Any:
        return make_env(self.workload)


def build(runner: str, workload: str, copies: int) -> Any:
    """The vector env of ``runner``: SuperSuit's gymnasium-style API or vecenv's native one."""
    import vecenv

    black_death = workload == "kaz"
    if runner in (BASELINE, "supersuit-2", CEILING):
        import supersuit as ss

        cpus = 2 if runner == "supersuit-2" else 0
        return ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(make_env(workload, black_death)), copies, cpus)
    if runner == "dropin-2":
        import vecenv.supersuit as vs

        return vs.concat_vec_envs_v1(vs.pettingzoo_env_to_vec_env_v1(make_env(workload, black_death)), copies, 2)
    fn = EnvFn(workload)
    if runner == "vecenv-0w":
        return vecenv.MultiAgentVectorEnv([fn] * copies, 0)
    if runner == "vecenv-2w":
        return vecenv.MultiAgentVectorEnv([fn] * copies, 2)
    if runner == "vecenv-inline":
        return vecenv.MultiAgentVectorEnv([fn] * copies, 2, inline_group=True)
    raise InvalidArgumentError(f"multiagent suite: expected a runner of {', '.join(RUNNERS)}, got {runner!r}")


def _actions(envs: Any, seed: int) -> list[Any]:
    import numpy as np

    space = getattr(envs, "single_action_space", envs.action_space)
    space.seed(seed)
    return [np.stack([space.sample() for _ in range(envs.num_envs)]) for _ in range(ACTION_ROWS)]


def _stepping(spec: dict[str, Any]) -> dict[str, Any]:
    """Agent-steps/s of one runner, and CPU seconds of the process tree per agent-step."""
    from vecenv.bench import procfs

    envs = build(spec["runner"], spec["workload"], spec["copies"])
    try:
        actions = _actions(envs, 0)
        envs.reset(seed=0)
        for i in range(WARMUP_STEPS):
            envs.step(actions[i % ACTION_ROWS])
        steps, cpu, start = 0, procfs.tree_cpu_seconds(), time.perf_counter()
        deadline = start + spec["seconds"]
        while time.perf_counter() < deadline:
            envs.step(actions[steps % ACTION_ROWS])
            steps += 1
        elapsed, cpu = time.perf_counter() - start, procfs.tree_cpu_seconds() - cpu
        rows = envs.num_envs
    finally:
        envs.close()
    return {"rate": rows * steps / elapsed, "cpu_per_step": cpu / (rows * steps), "rows": rows}


def _kaz_deaths(spec: dict[str, Any]) -> dict[str, Any]:
    """vecenv's native API on KAZ, no wrapper, for ``agent_steps``: deaths seen, episodes, rate."""
    import vecenv

    copies = spec["copies"]
    envs = vecenv.MultiAgentVectorEnv([EnvFn("kaz")] * copies, 2)
    try:
        actions = _actions(envs, 1)
        envs.reset(seed=1)
        deaths = episodes = done = 0
        was_active = envs.active.copy()
        start = time.perf_counter()
        while done < spec["agent_steps"]:
            _, _, terms, truncs, infos = envs.step(actions[(done // envs.num_envs) % ACTION_ROWS])
            active = infos["active"]
            deaths += int((was_active & ~active).sum())
            episodes += int((terms | truncs).reshape(copies, -1).all(axis=1).sum())
            was_active = active
            done += envs.num_envs
        seconds = time.perf_counter() - start
    finally:
        envs.close()
    return {"agent_steps": done, "agents_left_early": deaths, "copy_episodes": episodes, "rate": done / seconds}


def measure_row(spec: dict[str, Any], on_result: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The ``multiagent`` task of a measuring process: one runner's stepping, or the KAZ run."""
    return _kaz_deaths(spec) if spec.get("kaz_deaths") else _stepping(spec)


# -- the suite ----------------------------------------------------------------------------------


def _ceiling(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Two processes at once, half the copies each, SuperSuit in-process: their rates added, and
    the CPU per agent-step over both (each half weighted by its share of the steps)."""
    half = spec["copies"] // 2
    halves = [dict(spec, runner=BASELINE, copies=c) for c in (half, spec["copies"] - half)]
    results = run_many(halves, timeout)
    failed = [r for r in results if "error" in r]
    if failed:
        return failed[0]
    rate = sum(r["rate"] for r in results)
    return {"rate": rate, "cpu_per_step": sum(r["rate"] * r["cpu_per_step"] for r in results) / rate}


def summarize(
    results: dict[str, dict[str, list[dict[str, Any]]]], reps: Repetitions[tuple[str, str]]
) -> dict[str, list[dict[str, Any]]]:
    """Per workload, the table's rows: rates' median (min-max), the ratios of the medians to
    SuperSuit in-process and to the ceiling, of the best repetitions, and of CPU per agent-step.
    A runner whose measurement failed after some repetitions says so
    (:meth:`~vecenv.bench.suite.Repetitions.failures` of ``reps``, by (workload, runner))."""
    out = {}
    for workload, by_runner in results.items():
        by_runner = {r: v for r, v in by_runner.items() if v}
        med = {r: statistics.median(x["rate"] for x in v) for r, v in by_runner.items()}
        best = {r: max(x["rate"] for x in v) for r, v in by_runner.items()}
        cpu = {r: statistics.median(x["cpu_per_step"] for x in v) for r, v in by_runner.items()}
        out[workload] = [
            {
                "runner": r,
                "label": RUNNERS[r],
                **spread("rate", [x["rate"] for x in v]),
                "x_baseline": ratio(med[r], med.get(BASELINE)),
                "x_ceiling": ratio(med[r], med.get(CEILING)),
                "best_x_baseline": ratio(best[r], best.get(BASELINE)),
                "cpu_x_baseline": ratio(cpu[r], cpu.get(BASELINE)),
                "reps": len(v),
                **reps.failures((workload, r)),
            }
            for r, v in by_runner.items()
        ]
    return out


def markdown(summary: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> list[str]:
    """One table per workload."""
    lines: list[str] = []
    head = [
        "runner",
        "agent-steps/s",
        "× in-process",
        "× ceiling",
        "best rep: × in-process",
        "CPU per agent-step: × in-process",
    ]
    for workload, rows in summary.items():
        if not rows:
            continue
        body = [
            [
                s["label"],
                rate_text(s) + failed_mark(s),
                ratio_text(s["x_baseline"]),
                ratio_text(s["x_ceiling"]),
                ratio_text(s["best_x_baseline"]),
                ratio_text(s["cpu_x_baseline"]),
            ]
            for s in rows
        ]
        copies = args.copies or WORKLOADS[workload].copies
        lines += [f"## {WORKLOADS[workload].label}, {copies} copies", "", *table(head, body)]
        lines += failed_footnotes([(s["label"], s) for s in rows], args.reps, "row")
    return lines


def run(args: argparse.Namespace) -> Outcome:
    """Every (workload, runner), interleaved over the repetitions, each in fresh processes; then
    the agent-death run. A run that Ctrl+C or SIGTERM cut after some measurements ends in
    :class:`~vecenv.bench.suite.PartialRun` with the tables of what they measured."""
    args = resolve(args)
    notes: list[str] = []
    workloads = []
    for w in args.workloads:
        missing = missing_modules(WORKLOADS[w].needs)
        if missing:
            notes.append(f"{w}: {', '.join(missing)} not importable, skipped (pip install {INSTALL} to include it)")
        else:
            workloads.append(w)
    reps: Repetitions[tuple[str, str]] = Repetitions(notes)
    kaz: dict[str, Any] = {}  # the agent-death run's result, once it ran
    kaz_lines: list[str] = []

    def measure() -> None:
        for rep in range(args.reps):
            for w in workloads:
                for r in args.runners:
                    if (w, r) not in reps.failed:
                        reps.record((w, r), f"{w} {r}", rep, _measure(w, r, args), _shown)
        if args.kaz_steps:
            kaz_lines.extend(_kaz(args, kaz, notes))

    total = len(workloads) * len(args.runners) * args.reps + _kaz_planned(args)
    cut = measure_all(measure, lambda: reps.ran() + len(kaz), total, notes)
    results = {w: {r: reps.results.get((w, r), []) for r in args.runners} for w in workloads}
    summary = summarize(results, reps)
    data: dict[str, Any] = {
        "settings": {k: getattr(args, k) for k in ("workloads", "runners", "copies", "seconds", "reps", "kaz_steps")},
        "summary": summary,
        "results": results,
        **kaz,
    }
    return finished(Outcome("\n".join(markdown(summary, args) + kaz_lines), data, notes), cut)


def _measure(w: str, r: str, args: argparse.Namespace) -> dict[str, Any]:
    """One repetition of runner ``r`` on workload ``w``, in fresh processes: its result or error."""
    spec = {"task": "multiagent", "runner": r, "workload": w, "seconds": args.seconds}
    spec["copies"] = args.copies or WORKLOADS[w].copies
    timeout = args.seconds + 180
    return _ceiling(spec, timeout) if r == CEILING else run_child(spec, timeout)


def _shown(res: dict[str, Any]) -> str:
    """A result's rate, for its progress line."""
    return f"{res['rate']:,.0f} agent-steps/s"


def _kaz_planned(args: argparse.Namespace) -> int:
    """1 when the agent-death run is asked for and can run, else 0."""
    return int(bool(args.kaz_steps) and not missing_modules(WORKLOADS["kaz"].needs))


def _kaz(args: argparse.Namespace, data: dict[str, Any], notes: list[str]) -> list[str]:
    """The agent-death run, in a fresh process (its result into ``data``): its table lines (none
    when it failed)."""
    missing = missing_modules(WORKLOADS["kaz"].needs)
    if missing:
        notes.append(
            f"kaz agent-death run: {', '.join(missing)} not importable, skipped (pip install {INSTALL} to include it)"
        )
        return []
    copies = args.copies or WORKLOADS["kaz"].copies
    spec = {"task": "multiagent", "kaz_deaths": True, "copies": copies, "agent_steps": args.kaz_steps}
    res = run_child(spec, timeout=180 + args.kaz_steps / 1000)
    data["kaz_deaths"] = res
    head = ["agent-steps", "agents that left early", "copy episodes", "agent-steps/s"]
    title = f"## Agent death: knights_archers_zombies_v11, {copies} copies, 2 workers, native API, no wrapper"
    if "error" in res:  # its one run failed: the table says so, as a failed row's does
        notes.append(f"kaz agent-death run: failed, {res['error']}")
        failed = {"reps": 0, **failures([res["error"]])}
        data["kaz_deaths"] = {**res, **failed}
        body = [[f"{args.kaz_steps:,} planned", "—", "—", "failed" + failed_mark(failed)]]
        return [title, "", *table(head, body, left=0), *failed_footnotes([("agent-death run", failed)], 1, "run")]
    body = [
        [f"{res['agent_steps']:,}", f"{res['agents_left_early']:,}", f"{res['copy_episodes']:,}", f"{res['rate']:,.0f}"]
    ]
    return [title, "", *table(head, body, left=0)]


SUITE = Suite(
    name="multiagent",
    summary="agent-steps/s and CPU per agent-step of vecenv.MultiAgentVectorEnv and the SuperSuit "
    "drop-in against SuperSuit (in-process, num_cpus=2) and the 2-core ceiling on PettingZoo envs; "
    "an agent-death run",
    doc=DOC,
    add_arguments=add_arguments,
    run=run,
)
