"""The ``rollouts`` suite: ``envs.rollout(T)`` (the policy in the workers, one message per worker
per T steps) against ``envs.step`` (one round trip per step) on the same envs, per backend; native
vectorized groups with rollouts against one ``make_vec``; and how exact a batched torch forward
is (what makes a torch policy's data depend on how the envs are grouped)."""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
from collections.abc import Callable
from typing import Any

from vecenv.bench.child import run_child
from vecenv.bench.suite import (
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
from vecenv.errors import InvalidArgumentError

#: The backends compared, by row name: their labels.
BACKENDS = {
    "process": "worker processes (2)",
    "inline": "parent-hosted group + 1 worker (`inline_group`)",
    "parent": "every env in the parent (`num_workers=0`)",
    "ray": "Ray, 2 actors on a local Ray (opt-in)",
}
ROWS = (*BACKENDS, "native", "exact")
OPT_IN = ("ray",)  # starts a Ray per measurement: seconds each
IDLE_S = 0.5

DOC = """\
Rows (--rows):
  process, inline, parent, ray   CartPole, N=--num-envs (128), T=--rollout-steps (128), random
                policy: env-steps/s of envs.rollout(T) and of envs.step with precomputed
                actions, in the same process, after a warm-up; then the idle CPU (cores) of
                the process tree during 0.5 s after a rollout. Backends: 2 worker processes;
                the parent-hosted group and one worker (inline_group=True); every env in the
                parent (num_workers=0); 2 Ray actors on a local Ray (only when named: it
                starts a Ray, seconds). Ratios: rollout / its own step, and / the process
                backend's step.
  native        2 workers of one gymnasium make_vec(N/2, vectorization_mode="vector_entry_point")
                CartPole each (N=--native-envs, 2048), step and rollout(T), against one
                make_vec(N) stepped in one process with precomputed actions (1.00x) and with
                action_space.sample() each step.
  exact         torch, one thread: the share of rows of MLPs 4x64x64x2 and 84x256x256x18 whose
                output in batches of 1..64 rows differs (in any bit) from the same rows in a
                batch of 2048, and the argmax flips. Needs torch (skipped with a note otherwise).
                Runs once, after the repetitions; a failed run is a row marked †.

Each row runs in a fresh process per repetition; repetitions are interleaved; medians
(min-max). Writes rollouts.md and rollouts.json.

Examples:
  vecenv-bench --suite rollouts --reps 3
  vecenv-bench --suite rollouts --rows process,ray --num-envs 64"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The rollouts suite's options."""
    p.add_argument(
        "--rows",
        type=csv(str, ROWS),
        default=None,
        help=f"comma-separated rows (default: all but {', '.join(OPT_IN)}; choices: {','.join(ROWS)})",
    )
    p.add_argument("--num-envs", type=int, default=None, help="N of the backend rows (default: 128; --quick: 16)")
    p.add_argument("--native-envs", type=int, default=None, help="N of the native rows (default: 2048; --quick: 64)")
    p.add_argument("--rollout-steps", type=int, default=None, help="T of rollout(T) (default: 128; --quick: 16)")
    p.add_argument(
        "--seconds", type=float, default=None, help="seconds per rate, after a warm-up (default: 1.5; --quick: 0.3)"
    )
    p.add_argument("--reps", type=int, default=None, help="interleaved repetitions (default: 3; --quick: 1)")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the defaults that depend on ``--quick``; ``OptionError`` for values out of range."""
    args.rows = args.rows or [r for r in ROWS if r not in OPT_IN]
    args.num_envs = pick(args.num_envs, 128, 16, args)
    args.native_envs = pick(args.native_envs, 2048, 64, args)
    args.rollout_steps = pick(args.rollout_steps, 128, 16, args)
    args.seconds = pick(args.seconds, 1.5, 0.3, args)
    args.reps = pick(args.reps, 3, 1, args)
    require(0 < args.seconds < math.inf, "--seconds", "a finite number > 0", args.seconds)
    require(args.reps >= 1, "--reps", "an int >= 1", args.reps)
    require(args.rollout_steps >= 1, "--rollout-steps", "an int >= 1", args.rollout_steps)
    require(args.num_envs >= 2, "--num-envs", "an int >= 2", args.num_envs)
    require(
        args.native_envs >= 2 and args.native_envs % 2 == 0,
        "--native-envs",
        "an even int >= 2 (2 groups of N/2)",
        args.native_envs,
    )
    return args


# -- the measuring process ----------------------------------------------------------------------


def _make(row: str, n: int) -> Any:
    import gymnasium as gym

    import vecenv

    if row == "process":
        return vecenv.make("CartPole-v1", n, 2)
    if row == "inline":
        return vecenv.make("CartPole-v1", n, 2, vector_kwargs={"inline_group": True})
    if row == "parent":
        return vecenv.make("CartPole-v1", n, 0)
    if row == "ray":
        return vecenv.make("CartPole-v1", n, 2, backend="ray")
    if row == "native":
        make = functools.partial(gym.make_vec, "CartPole-v1", n // 2, vectorization_mode="vector_entry_point")
        return vecenv.SubprocVectorEnv.from_groups([make, make])
    raise InvalidArgumentError(f"rollouts suite: expected a row of {', '.join([*BACKENDS, 'native'])}, got {row!r}")


def _rate(seconds: float, fn: Callable[[int], int]) -> float:
    """Env-steps/s of ``fn`` after one warm-up call (:func:`~vecenv.bench.measure.step_for`)."""
    from vecenv.bench.measure import step_for

    fn(0)
    _, steps, elapsed = step_for(seconds, fn, start=1)
    return steps / elapsed


def _stepper(envs: Any, actions: Any, n: int) -> Callable[[int], int]:
    """``step(i)``: one vector step with action row ``i`` (cycled); the env-steps it did."""
    from vecenv.bench.measure import ACTION_ROWS

    def step(i: int) -> int:
        envs.step(actions[i % ACTION_ROWS])
        return n

    return step


def _backend(spec: dict[str, Any]) -> dict[str, Any]:
    """rollout(T) and step rates of one backend, and the idle CPU after a rollout."""
    from vecenv.bench import procfs
    from vecenv.bench.calibration import SEED
    from vecenv.bench.measure import action_rows

    envs = _make(spec["row"], spec["n"])
    try:
        envs.reset(seed=SEED)
        n, t = envs.num_envs, spec["t"]
        rollout = _rate(spec["seconds"], lambda i: envs.rollout(t).rewards.size)
        envs.rollout(t)
        procs = procfs.tree(os.getpid())
        idle = procfs.idle_cpu(IDLE_S, procs)  # nobody stepping, the workers between rollouts
        actions = action_rows(envs.single_action_space, n)
        step = _rate(spec["seconds"], _stepper(envs, actions, n))
    finally:
        envs.close()
    return {
        "rollout": rollout,
        "step": step,
        "processes": len(procs),
        "idle_cpu_cores": None if idle is None or idle[1] <= 0 else idle[0] / idle[1],
    }


def _make_vec(spec: dict[str, Any]) -> dict[str, Any]:
    """One make_vec of N native CartPoles in this process: precomputed actions, and sampled ones."""
    import gymnasium as gym

    from vecenv.bench.calibration import SEED
    from vecenv.bench.measure import action_rows

    n = spec["n"]
    envs = gym.make_vec("CartPole-v1", n, vectorization_mode="vector_entry_point")
    try:
        envs.reset(seed=SEED)
        actions = action_rows(envs.single_action_space, n)

        def sampled_step(i: int) -> int:
            envs.step(envs.action_space.sample())
            return n

        precomputed = _rate(spec["seconds"], _stepper(envs, actions, n))
        sampled = _rate(spec["seconds"], sampled_step)
    finally:
        envs.close()
    return {"precomputed": precomputed, "sampled": sampled}


def _exact(spec: dict[str, Any]) -> dict[str, Any]:
    """Rows of a batched forward that differ (in any bit) from the same rows in one batch of
    ``spec["rows"]`` (default 2,048)."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    total = spec.get("rows", 2048)
    rows = []
    for sizes in [(4, 64, 64, 2), (84, 256, 256, 18)]:
        layers: list[Any] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
        module = torch.nn.Sequential(*layers[:-1])
        x = torch.randn(total, sizes[0])
        with torch.no_grad():
            whole = module(x)
            for batch in (1, 2, 3, 4, 5, 8, 64):
                parts = torch.cat([module(x[i : i + batch]) for i in range(0, total, batch)])
                rows.append(
                    {
                        "mlp": "x".join(map(str, sizes)),
                        "batch": batch,
                        "whole_batch": total,
                        "rows_differing": float((parts != whole).any(dim=1).float().mean()),
                        "argmax_flips": int((parts.argmax(1) != whole.argmax(1)).sum()),
                        "max_abs_diff": float((parts - whole).abs().max()),
                    }
                )
    return {"rows": rows}


def measure_row(spec: dict[str, Any], on_result: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The ``rollouts`` task of a measuring process: the row ``spec["row"]``."""
    if spec["row"] == "exact":
        return _exact(spec)
    if spec["row"] == "make_vec":
        return _make_vec(spec)
    return _backend(spec)


# -- the suite ----------------------------------------------------------------------------------


def _specs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One repetition's measurements, in order."""
    common = {"task": "rollouts", "seconds": args.seconds, "t": args.rollout_steps}
    specs = [dict(common, row=r, n=args.num_envs) for r in BACKENDS if r in args.rows]
    if "native" in args.rows:
        specs += [dict(common, row="native", n=args.native_envs), dict(common, row="make_vec", n=args.native_envs)]
    return specs


def _median(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(reps: Repetitions[str], args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """The tables' rows: medians (min-max) of the repetitions and the ratios of the medians; a
    row whose measurement failed after some repetitions says so
    (:meth:`~vecenv.bench.suite.Repetitions.failures`)."""
    results, failure = reps.results, reps.failures
    out: dict[str, list[dict[str, Any]]] = {"backends": [], "native": [], "exact": [], "exact_failed": []}
    base = _median(results.get("process", []), "step")
    for r in (r for r in BACKENDS if results.get(r)):
        rs = results[r]
        roll, step = _median(rs, "rollout"), _median(rs, "step")
        out["backends"].append(
            {
                "row": r,
                "label": BACKENDS[r],
                **spread("rollout", [x["rollout"] for x in rs]),
                **spread("step", [x["step"] for x in rs]),
                "rollout_x_step": ratio(roll, step),
                "rollout_x_process_step": ratio(roll, base),
                "idle_cpu_cores": _median(rs, "idle_cpu_cores"),
                "processes": rs[-1]["processes"],
                "reps": len(rs),
                **failure(r),
            }
        )
    one, native = results.get("make_vec"), results.get("native")
    if one and native:
        n, t = args.native_envs, args.rollout_steps
        base = _median(one, "precomputed")
        for label, row, rs, key in (
            (f"make_vec({n}), precomputed actions", "make_vec", one, "precomputed"),
            (f"make_vec({n}), action_space.sample()", "make_vec", one, "sampled"),
            (f"2 workers × make_vec({n // 2}): step", "native", native, "step"),
            (f"2 workers × make_vec({n // 2}): rollout({t})", "native", native, "rollout"),
        ):
            rates = [x[key] for x in rs]
            ratios = {"x_make_vec": ratio(_median(rs, key), base), "reps": len(rs), **failure(row)}
            out["native"].append({"label": label, **spread("rate", rates), **ratios})
    if results.get("exact"):
        out["exact"] = results["exact"][0]["rows"]
    elif "exact" in reps.failed:  # its one run failed: the table says so, as a failed row's does
        out["exact_failed"] = [{"row": "exact", "reps": 0, **failure("exact")}]
    return out


def markdown(summary: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    """The suite's tables."""
    lines = []
    if summary["backends"]:
        t = args.rollout_steps
        lines += [f"## Rollouts against steps (CartPole, N={args.num_envs}, T={t}, env-steps/s)", ""]
        head = [
            "backend",
            f"`rollout({t})`",
            "`step`",
            "rollout × its step",
            "rollout × process step",
            "idle CPU (procs)",
        ]
        body = [
            [
                s["label"],
                rate_text(s, "rollout") + failed_mark(s),
                rate_text(s, "step"),
                ratio_text(s["rollout_x_step"]),
                ratio_text(s["rollout_x_process_step"]),
                "—" if s["idle_cpu_cores"] is None else f"{s['idle_cpu_cores']:.2f} ({s['processes']})",
            ]
            for s in summary["backends"]
        ]
        lines += table(head, body)
        lines += failed_footnotes([(s["label"], s) for s in summary["backends"]], args.reps, "row")
    if summary["native"]:
        lines += [f"## Native vectorized groups (CartPole `vector_entry_point`, {args.native_envs} envs)", ""]
        body = [[s["label"], rate_text(s) + failed_mark(s), ratio_text(s["x_make_vec"])] for s in summary["native"]]
        lines += table(["row", "env-steps/s", "× make_vec"], body)
        lines += failed_footnotes([(s["label"], s) for s in summary["native"]], args.reps, "row")
    if summary["exact"]:
        lines += ["## How exact a batched forward is (torch, CPU, one thread)", ""]
        whole = summary["exact"][0]["whole_batch"]
        head = ["network", "batch rows", f"rows differing from a batch of {whole}", "argmax flips", "max |diff|"]
        body = [
            [
                f"MLP {r['mlp']}",
                str(r["batch"]),
                f"{r['rows_differing']:.2%}",
                str(r["argmax_flips"]),
                f"{r['max_abs_diff']:.2g}",
            ]
            for r in summary["exact"]
        ]
        lines += table(head, body, left=2)
    if summary["exact_failed"]:
        (s,) = summary["exact_failed"]
        lines += ["## How exact a batched forward is (torch, CPU, one thread)", ""]
        lines += table(["network", "rows differing from one batch"], [["MLPs", "failed" + failed_mark(s)]])
        lines += failed_footnotes([("exact", s)], 1, "row")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> Outcome:
    """Every row, interleaved over the repetitions, each in a fresh process; then the tables. A
    run that Ctrl+C or SIGTERM cut after some measurements ends in
    :class:`~vecenv.bench.suite.PartialRun` with the tables of what they measured."""
    args = resolve(args)
    notes: list[str] = []
    if "ray" in args.rows and missing_modules(["ray"]):
        notes.append('ray: not importable, its row skipped (pip install -e ".[ray]")')
        args.rows = [r for r in args.rows if r != "ray"]
    exact = "exact" in args.rows
    if exact and missing_modules(["torch"]):
        notes.append('exact: torch not importable, skipped (pip install -e ".[train]" to include it)')
        exact = False
    reps: Repetitions[str] = Repetitions(notes)
    specs = _specs(args)

    def measure() -> None:
        for rep in range(args.reps):
            for spec in specs:
                if spec["row"] not in reps.failed:
                    res = run_child(spec, timeout=4 * args.seconds + 180)
                    reps.record(spec["row"], spec["row"], rep, res, _shown)
        if exact:
            reps.record("exact", "exact", 0, run_child({"task": "rollouts", "row": "exact"}, timeout=300), _shown)

    cut = measure_all(measure, reps.ran, len(specs) * args.reps + exact, notes)
    summary = summarize(reps, args)
    settings = {k: getattr(args, k) for k in ("rows", "num_envs", "native_envs", "rollout_steps", "seconds", "reps")}
    data = {"settings": settings, "summary": summary, "results": reps.results}
    return finished(Outcome(markdown(summary, args), data, notes), cut)


def _shown(res: dict[str, Any]) -> str:
    """A result's rates, for its progress line."""
    return ", ".join(f"{k} {v:,.0f}" for k, v in res.items() if k in ("rollout", "step", "precomputed"))


SUITE = Suite(
    name="rollouts",
    summary="envs.rollout(T) against envs.step per backend (processes, parent-hosted group, all in "
    "the parent, Ray), native groups with rollouts against one make_vec, and how exact a "
    "batched torch forward is",
    doc=DOC,
    add_arguments=add_arguments,
    run=run,
)
