"""Rollouts in the workers against stepping, side by side in one run; prints ratios.

Every measurement runs in a fresh process (``--child NAME``); the rows of a section are
interleaved over ``--reps`` repetitions and reported as medians, with the ratio each target
is stated in. Sections:

* ``collect``: whole-process transitions/s (and per CPU-second, which a host shared with other
  jobs cannot take away) writing CartPole-v1 transitions to disk: a plain
  single-env Python loop into numpy arrays (``np.save`` at the end), Minari's own
  ``DataCollector`` on one env, and ``vecenv-collect`` (our format and ``--format minari``)
  at 8, 64 and 256 envs, with its policy in the workers (rollouts, the default) and in this
  process (``--rollout-steps 0``, one vector step at a time).
* ``rollout``: env-steps/s of ``envs.rollout(T)`` against ``envs.step`` with precomputed
  actions, CartPole N=128, T=128: the process backend (2 workers), the parent-hosted group
  (``inline_group``), every env in the parent (``num_workers=0``) and Ray (2 actors).
* ``native``: 2 workers of one ``make_vec(1024, vectorization_mode="vector_entry_point")``
  CartPole each, with T-step rollouts, against one ``make_vec`` of 2,048 in this process.
* ``step``: ``vecenv.make("CartPole-v1", 8)`` stepping, its defaults and
  ``num_workers="auto"``, against SyncVectorEnv; with ``--baseline DIR`` (a checkout of an
  earlier commit) the same rows with that code, to show the step path did not slow down.
* ``idle``: CPU (cores) that the parent and its workers use during 0.5 s after a rollout.
* ``exact``: how often a batched torch forward's rows differ from the whole batch's, by batch
  size (what makes a torch policy's data depend on the group sizes).

    python scripts/bench_rollouts.py                      # every section, 1,000,000 steps
    python scripts/bench_rollouts.py --sections collect --steps 300000 --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHILDREN: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {}


def child(name: str) -> Callable[[Callable[[argparse.Namespace], dict[str, Any]]], Any]:
    def register(fn: Callable[[argparse.Namespace], dict[str, Any]]) -> Any:
        CHILDREN[name] = fn
        return fn

    return register


# -- collection: whole processes ------------------------------------------------------------


@child("plain")
def _plain(args: argparse.Namespace) -> dict[str, Any]:
    """A plain single-env loop into preallocated numpy arrays, saved at the end."""
    import gymnasium as gym
    import numpy as np

    n = args.steps
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
        np.save(Path(args.out) / f"{name}.npy", column)
    return {"transitions": n}


@child("minari-collector")
def _minari_collector(args: argparse.Namespace) -> dict[str, Any]:
    """Minari's DataCollector on one env, then create_dataset."""
    import gymnasium as gym
    from minari import DataCollector

    env = DataCollector(gym.make("CartPole-v1"))
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(args.steps):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.create_dataset(dataset_id="bench/collector-v0", algorithm_name="random")
    return {"transitions": args.steps}


def _collect_command(steps: int, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "vecenv.datasets", "--steps", str(steps), "--out", out, "--quiet", *extra]


COLLECT_ROWS: dict[str, list[str]] = {
    "vecenv-collect (defaults: 8 envs, rollouts)": [],
    "vecenv-collect --rollout-steps 0 (8 envs, per step)": ["--rollout-steps", "0"],
    "vecenv-collect --num-envs 64": ["--num-envs", "64"],
    "vecenv-collect --num-envs 64 --rollout-steps 0": ["--num-envs", "64", "--rollout-steps", "0"],
    "vecenv-collect --num-envs 256": ["--num-envs", "256"],
    "vecenv-collect --num-envs 256 --rollout-steps 0": ["--num-envs", "256", "--rollout-steps", "0"],
    "vecenv-collect --format minari (defaults)": ["--format", "minari", "--dataset-id", "bench/vecenv-v0"],
}


def _child_env(code: Path) -> dict[str, str]:
    """The environment of a measured process: ``code`` first on the path, and bytecode caches
    written and used, as an installed package has them (a sandbox's PYTHONDONTWRITEBYTECODE
    would make every process compile its modules again)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the process and every descendant it
    waited for: the workers) of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed:\n{done.stderr[-2000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def section_collect(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Transitions/s of whole processes; the plain loop is the 1.00x."""
    rows: dict[str, list[float]] = {}
    per_cpu: dict[str, list[float]] = {}  # transitions per CPU-second: what a busy host cannot take away
    base_env = _child_env(args.code)
    minari_steps = max(1000, args.steps // 5)  # Minari's collector is far slower: fewer steps
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="bench-rollouts-") as tmp:
            env = {**base_env, "MINARI_DATASETS_PATH": str(Path(tmp) / "minari")}
            commands = {
                "plain single-env loop into numpy (np.save)": (
                    [sys.executable, __file__, "--child", "plain", "--steps", str(args.steps), "--out", tmp],
                    args.steps,
                ),
                "Minari DataCollector (1 env) + create_dataset": (
                    [sys.executable, __file__, "--child", "minari-collector", "--steps", str(minari_steps)],
                    minari_steps,
                ),
            }
            for index, (name, extra) in enumerate(COLLECT_ROWS.items()):
                # The per-step rows are slow and only compared with: a quarter of the steps.
                steps = args.steps // 4 if "--rollout-steps 0" in name else args.steps
                commands[name] = (_collect_command(steps, str(Path(tmp) / f"row{index}"), *extra), steps)
            for name, (command, steps) in commands.items():
                wall, cpu = _timed(command, env)
                rows.setdefault(name, []).append(steps / wall)
                per_cpu.setdefault(name, []).append(steps / cpu)
                shutil.rmtree(Path(tmp) / "minari", ignore_errors=True)
    # Ratios are taken within each repetition (the rows of one repetition ran minutes apart at
    # most), then the median over repetitions: a shared machine's load drifts between them.
    plain_name = "plain single-env loop into numpy (np.save)"
    plain = rows[plain_name]
    collector = rows["Minari DataCollector (1 env) + create_dataset"]
    table = []
    for name, rates in rows.items():
        entry = {
            "row": name,
            "rate": statistics.median(rates),
            "min": min(rates),
            "max": max(rates),
            "x_plain": statistics.median(r / p for r, p in zip(rates, plain)),
            "x_plain_best_rep": max(r / p for r, p in zip(rates, plain)),
            "x_plain_per_cpu_s": statistics.median(per_cpu[name]) / statistics.median(per_cpu[plain_name]),
        }
        if "minari" in name.lower():
            entry["x_minari_collector"] = statistics.median(r / c for r, c in zip(rates, collector))
        table.append(entry)
    return table


# -- in-process rates: rollouts against steps -------------------------------------------------


def _rate(work: Callable[[], int], seconds: float) -> float:
    work()  # warm-up
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += work()
    return done / (time.perf_counter() - start)


def _make(kind: str, n: int) -> Any:
    import gymnasium as gym

    import vecenv

    if kind == "process-2w":
        return vecenv.make("CartPole-v1", n, 2)
    if kind == "inline-2g":
        return vecenv.make("CartPole-v1", n, 2, vector_kwargs={"inline_group": True})
    if kind == "in-parent-0w":
        return vecenv.make("CartPole-v1", n, 0)
    if kind == "ray-2a":
        return vecenv.make("CartPole-v1", n, 2, backend="ray")
    if kind == "native-2x1024":
        import functools

        make = functools.partial(gym.make_vec, "CartPole-v1", n // 2, vectorization_mode="vector_entry_point")
        return vecenv.SubprocVectorEnv.from_groups([make, make])
    raise ValueError(kind)


@child("rollout")
def _rollout_child(args: argparse.Namespace) -> dict[str, Any]:
    """steps/s of one backend: ``rollout(T)`` (random policy in the workers) and ``step``."""
    import numpy as np

    envs = _make(args.kind, args.num_envs)
    try:
        envs.reset(seed=0)
        n, t = envs.num_envs, args.rollout_steps
        rollout = _rate(lambda: envs.rollout(t).rewards.size, args.seconds)
        stepped = _rate(_stepper(envs, np.random.default_rng(0).integers(0, 2, size=(256, n))), args.seconds)
    finally:
        envs.close()
    return {"rollout": rollout, "step": stepped}


@child("make-vec")
def _make_vec_child(args: argparse.Namespace) -> dict[str, Any]:
    """One in-process make_vec of N native CartPoles: precomputed actions, and sampled ones."""
    import gymnasium as gym
    import numpy as np

    envs = gym.make_vec("CartPole-v1", args.num_envs, vectorization_mode="vector_entry_point")
    envs.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, size=(256, args.num_envs))
    precomputed = _rate(_stepper(envs, actions), args.seconds)
    sampled = _rate(lambda: envs.step(envs.action_space.sample()) and args.num_envs, args.seconds)
    envs.close()
    return {"precomputed": precomputed, "sampled": sampled}


def _run_child(args: argparse.Namespace, name: str, code: Path, **options: Any) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", name, "--seconds", str(args.seconds)]
    for key, value in options.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    done = subprocess.run(command, env=_child_env(code), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median_of(results: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def section_rollout(args: argparse.Namespace) -> list[dict[str, Any]]:
    kinds = ["process-2w", "inline-2g", "in-parent-0w"] + ([] if args.no_ray else ["ray-2a"])
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for _ in range(args.reps):
        for kind in kinds:
            results[kind].append(_run_child(args, "rollout", args.code, kind=kind, num_envs=128, rollout_steps=128))
    medians = {k: _median_of(v) for k, v in results.items()}
    process_step = medians["process-2w"]["step"]
    process_rollout = medians["process-2w"]["rollout"]
    return [
        {
            "row": kind,
            "rollout": m["rollout"],
            "step": m["step"],
            "rollout_x_step": m["rollout"] / m["step"],
            "rollout_x_process_step": m["rollout"] / process_step,
            "rollout_x_process_rollout": m["rollout"] / process_rollout,
        }
        for kind, m in medians.items()
    ]


def section_native(args: argparse.Namespace) -> list[dict[str, Any]]:
    groups, single = [], []
    for _ in range(args.reps):
        groups.append(_run_child(args, "rollout", args.code, kind="native-2x1024", num_envs=2048, rollout_steps=128))
        single.append(_run_child(args, "make-vec", args.code, num_envs=2048))
    g, s = _median_of(groups), _median_of(single)
    return [
        {"row": "make_vec(2048), precomputed actions", "rate": s["precomputed"], "x_make_vec": 1.0},
        {
            "row": "make_vec(2048), action_space.sample()",
            "rate": s["sampled"],
            "x_make_vec": s["sampled"] / s["precomputed"],
        },
        {"row": "2 workers x make_vec(1024): step", "rate": g["step"], "x_make_vec": g["step"] / s["precomputed"]},
        {
            "row": "2 workers x make_vec(1024): rollout(128)",
            "rate": g["rollout"],
            "x_make_vec": g["rollout"] / s["precomputed"],
            "x_make_vec_sampled": g["rollout"] / s["sampled"],
        },
    ]


@child("step")
def _step_child(args: argparse.Namespace) -> dict[str, Any]:
    """CartPole N=8 steps/s: Sync, vecenv.make defaults, num_workers='auto'."""
    import gymnasium as gym
    import numpy as np

    import vecenv

    actions = np.random.default_rng(0).integers(0, 2, size=(256, 8))
    out = {}
    for name, build in (
        ("sync", lambda: gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 8)),
        ("make-default", lambda: vecenv.make("CartPole-v1", 8)),
        ("make-auto", lambda: vecenv.make("CartPole-v1", 8, "auto")),
    ):
        envs = build()
        envs.reset(seed=0)
        out[name] = _rate(_stepper(envs, actions), args.seconds)
        envs.close()
    return out


def _stepper(envs: Any, actions: Any) -> Callable[[], int]:
    """One step with the next of ``actions``' rows (cycled); returns the env-steps done."""
    count = [0]

    def step() -> int:
        envs.step(actions[count[0] % len(actions)])
        count[0] += 1
        return envs.num_envs

    return step


def section_step(args: argparse.Namespace) -> list[dict[str, Any]]:
    codes = {"this code": args.code} | ({"baseline": Path(args.baseline)} if args.baseline else {})
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in codes}
    for _ in range(args.reps):
        for name, code in codes.items():
            results[name].append(_run_child(args, "step", code))
    rows = []
    for name, rs in results.items():
        m = _median_of(rs)
        rows += [{"row": f"{name}: {k}", "rate": v, "x_sync": v / m["sync"]} for k, v in m.items()]
    return rows


@child("idle")
def _idle_child(args: argparse.Namespace) -> dict[str, Any]:
    """Cores used by the parent and the workers during 0.5 s after a rollout, nobody stepping."""
    import vecenv

    def ticks(pids: list[int]) -> int:
        total = 0
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total

    envs = vecenv.make("CartPole-v1", 8, 2)
    envs.reset(seed=0)
    for _ in range(5):
        envs.rollout(64)
    time.sleep(0.5)  # the workers' own start-up (lazy imports, a first collection) is not idling
    envs.rollout(64)
    pids = [os.getpid(), *[p for p in envs._pool.transport.pids if p]]
    before = ticks(pids)
    time.sleep(0.5)
    used = (ticks(pids) - before) / os.sysconf("SC_CLK_TCK") / 0.5
    envs.close()
    return {"idle_cores": used}


def section_idle(args: argparse.Namespace) -> list[dict[str, Any]]:
    values = [_run_child(args, "idle", args.code)["idle_cores"] for _ in range(args.reps)]
    return [{"row": "2 workers, after a rollout", "idle_cores": statistics.median(values), "max": max(values)}]


def section_exact(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Rows of a batched forward that differ (in any bit) from the same rows in a batch of 2,048."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    rows = []
    for sizes in [(4, 64, 64, 2), (84, 256, 256, 18)]:
        layers: list[Any] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
        module = torch.nn.Sequential(*layers[:-1])
        x = torch.randn(2048, sizes[0])
        with torch.no_grad():
            whole = module(x)
            for batch in (1, 2, 3, 4, 5, 8, 64):
                parts = torch.cat([module(x[i : i + batch]) for i in range(0, 2048, batch)])
                rows.append(
                    {
                        "row": f"MLP {'x'.join(map(str, sizes))}, batches of {batch}",
                        "rows_differing": float((parts != whole).any(dim=1).float().mean()),
                        "argmax_flips": int((parts.argmax(1) != whole.argmax(1)).sum()),
                        "max_abs_diff": float((parts - whole).abs().max()),
                    }
                )
    return rows


SECTIONS = {
    "collect": section_collect,
    "rollout": section_rollout,
    "native": section_native,
    "step": section_step,
    "idle": section_idle,
    "exact": section_exact,
}


def _print(name: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n## {name}")
    keys = list(dict.fromkeys(k for r in rows for k in r))
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        cells = []
        for k in keys:
            v = r.get(k, "")
            cells.append(
                f"{v:,.0f}" if isinstance(v, float) and v >= 100 else f"{v:.3g}" if isinstance(v, float) else str(v)
            )
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated, of: " + ", ".join(SECTIONS))
    parser.add_argument("--steps", type=int, default=1_000_000, help="transitions per collection row")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions (medians reported)")
    parser.add_argument("--seconds", type=float, default=1.5, help="seconds per in-process rate")
    parser.add_argument("--baseline", help="a checkout of an earlier commit: step rows with its code too")
    parser.add_argument("--no-ray", action="store_true", help="leave out the Ray row")
    parser.add_argument("--json", default="bench-results/rollouts.json", help="where to write every figure")
    # Children.
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--num-envs", type=int, default=8, help=argparse.SUPPRESS)
    parser.add_argument("--rollout-steps", type=int, default=128, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.code = ROOT
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return 0
    results = {}
    print(f"load average at start: {os.getloadavg()}")
    for name in args.sections.split(","):
        results[name] = SECTIONS[name](args)
        _print(name, results[name])
    print(f"load average at end: {os.getloadavg()}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
