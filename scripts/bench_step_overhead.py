"""The parent's cost of one ``step()``: CPU time of the calling process per step, and wall steps/s.

Rows, CartPole-v1 at ``--num-envs`` envs (default 8), each measured in a fresh process:

* ``sync``: Gymnasium's ``SyncVectorEnv`` (the floor: every env stepped in this process);
* ``vecenv-w0``: ``SubprocVectorEnv(num_workers=0)``, every env in the parent (the inline
  transport): what is left over Sync is the vector env's own bookkeeping;
* ``vecenv-w2``: ``SubprocVectorEnv(num_workers=2)``, two worker processes.

With ``--baseline DIR`` (a checkout of an earlier commit, e.g. made with ``git worktree add``)
the vecenv rows are measured with that code too, interleaved with this checkout's over
``--reps`` repetitions, so a before/after comparison comes from one run on one machine state.
Medians are reported (and the best parent CPU of the repetitions); the ratios to Sync are the
numbers to quote on a shared machine ("CPU vs Sync": Sync's parent CPU per step over the row's,
which other processes' load disturbs least).

    python scripts/bench_step_overhead.py
    python scripts/bench_step_overhead.py --baseline /tmp/base --steps 20000 --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# No import of vecenv at the top: a measurement process (--child) imports vecenv from the
# checkout it measures (PYTHONPATH), which may be a --baseline from before this script's helpers
# (vecenv.argtypes, vecenv.bench.stopping, vecenv.files) existed. Only main() uses them.

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("sync", "vecenv-w0", "vecenv-w2")


def _build(kind: str, n: int) -> Any:
    import gymnasium as gym

    fns = [lambda: gym.make("CartPole-v1") for _ in range(n)]
    if kind == "sync":
        return gym.vector.SyncVectorEnv(fns)
    import vecenv

    return vecenv.SubprocVectorEnv(fns, num_workers=int(kind.rsplit("w", 1)[1]))


def child(kind: str, n: int, steps: int) -> dict[str, Any]:
    """Build, warm up, then time ``steps`` steps: parent CPU per step and wall steps/s."""
    import numpy as np

    envs = _build(kind, n)
    try:
        envs.reset(seed=0)
        rows = np.random.default_rng(0).integers(2, size=(1024, n)).astype(np.int64)
        for i in range(min(1000, steps)):
            envs.step(rows[i % 1024])
        cpu0, t0 = time.process_time(), time.perf_counter()
        for i in range(steps):
            envs.step(rows[i % 1024])
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        envs.close()
    return {"cpu_us_per_step": cpu / steps * 1e6, "steps_per_s": steps / wall}


def measure(code: Path, kind: str, n: int, steps: int) -> dict[str, Any]:
    """One fresh process that imports vecenv from ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--num-envs", str(n), "--steps", str(steps)]
    out = subprocess.run(argv, env=env, cwd=code, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:  # one line, the child's last: its error, not a traceback of this process
        last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        raise SystemExit(f"bench_step_overhead.py: the {kind} row with {code} failed: {last}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def child_main(argv: list[str]) -> int:
    """A measurement process: one row, its result as one JSON line. It runs on the standard
    library and the vecenv it measures, whatever that checkout holds besides the vector env."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=KINDS, required=True)
    parser.add_argument("--num-envs", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    args = parser.parse_args(argv)
    print(json.dumps(child(args.child, args.num_envs, args.steps)))
    return 0


def main(argv: list[str] | None = None) -> int:
    from vecenv.argtypes import positive_int
    from vecenv.files import json_text, write_text_atomically

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=positive_int, default=8, help="envs per vector env (default 8)")
    parser.add_argument("--steps", type=positive_int, default=20000, help="timed steps per measurement (default 20000)")
    parser.add_argument(
        "--reps", type=positive_int, default=3, help="repetitions, interleaved; medians reported (default 3)"
    )
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit to measure beside this one")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"rows to measure (default {','.join(KINDS)})")
    parser.add_argument("--json", type=Path, help="also write the medians here")
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        parser.error(f"argument --kinds: expected comma-separated rows among {','.join(KINDS)}, got {args.kinds!r}")
    if args.baseline is not None and not (args.baseline / "vecenv").is_dir():
        parser.error(f"argument --baseline: expected a checkout holding vecenv/, got {str(args.baseline)!r}")
    codes = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rows = [("sync", "this", ROOT)] if "sync" in kinds else []
    rows += [(k, label, code) for k in kinds if k != "sync" for label, code in codes.items()]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {(k, label): [] for k, label, _ in rows}
    for rep in range(args.reps):
        for kind, label, code in rows:
            results[kind, label].append(measure(code, kind, args.num_envs, args.steps))
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    medians = {
        f"{kind} ({label})": {key: statistics.median(r[key] for r in rs) for key in ("cpu_us_per_step", "steps_per_s")}
        | {"best_cpu_us_per_step": min(r["cpu_us_per_step"] for r in rs)}
        for (kind, label), rs in results.items()
    }
    sync = medians.get("sync (this)")
    print(f"CartPole-v1, {args.num_envs} envs, {args.steps} steps x {args.reps} reps, {os.cpu_count()} cores")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (wall rates mean little when it exceeds the cores)")
    print(f"{'row':<26} {'parent CPU us/step':>19} {'(best)':>7} {'CPU vs Sync':>12} {'steps/s':>10} {'vs Sync':>8}")
    for name, m in medians.items():
        cpu = f"{sync['cpu_us_per_step'] / m['cpu_us_per_step']:.2f}x" if sync else "-"
        ratio = f"{m['steps_per_s'] / sync['steps_per_s']:.2f}x" if sync else "-"
        print(
            f"{name:<26} {m['cpu_us_per_step']:>19.1f} {m['best_cpu_us_per_step']:>7.1f} {cpu:>12} "
            f"{m['steps_per_s']:>10.0f} {ratio:>8}"
        )
    if args.json:
        write_text_atomically(args.json, json_text(medians))
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv[1:]:  # measure() runs these with the measured checkout's vecenv
        raise SystemExit(child_main(sys.argv[1:]))
    from vecenv.bench.stopping import run_main

    raise SystemExit(run_main("bench_step_overhead.py", main))
