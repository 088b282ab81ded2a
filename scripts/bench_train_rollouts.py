"""Benchmark: PPO with the policy in the workers against the same trainer stepping.

Runs ``scripts/train_ppo_rollouts.py`` in fresh processes, the configurations interleaved over
``--seeds``, with the same hyperparameters and total steps, and prints for each: training
env-steps/s, the split of the wall time between collecting (env steps and policy forwards)
and updating, collection seconds per 1,000 env steps, and the steps and seconds to the solve
threshold when reached. Ratios are taken against ``step-sync`` (the same trainer stepping
Gymnasium's ``SyncVectorEnv``) within each seed.

    python scripts/bench_train_rollouts.py --total-timesteps 50000 --seeds 1,2,3
    python scripts/bench_train_rollouts.py --env-step-ms 1 --total-timesteps 20000
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

from vecenv.argtypes import int_list, non_negative_float, positive_int
from vecenv.bench.stopping import run_main

SCRIPT = pathlib.Path(__file__).resolve().with_name("train_ppo_rollouts.py")
#: The trainer's defaults that --num-envs must suit: steps per env in each rollout, transitions
#: per minibatch, and vecenv workers.
STEPS, MINIBATCH, WORKERS = 32, 256, 2
CONFIGS = {
    "rollout": ["--collect", "rollout"],
    "rollout-pinned": ["--collect", "rollout", "--pin-cpus"],
    "rollout-inline": ["--collect", "rollout", "--inline-group"],
    "rollout-overlap": ["--collect", "rollout", "--overlap"],  # (its workers niced by 5: the trainer's default)
    "rollout-overlap-nice0": ["--collect", "rollout", "--overlap", "--worker-nice", "0"],
    "step-vecenv": ["--collect", "step", "--vector", "vecenv"],
    "step-sync": ["--collect", "step", "--vector", "sync"],
}


def _configs(text: str) -> list[str]:
    """``--configs``: comma-separated names of :data:`CONFIGS`, at least one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or any(name not in CONFIGS for name in names):
        raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(CONFIGS)}, got {text!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--total-timesteps", type=positive_int, default=50_000, help="env steps per run (default: %(default)s)"
    )
    p.add_argument("--num-envs", type=positive_int, default=8, help="envs per run (default: %(default)s)")
    p.add_argument(
        "--env-step-ms",
        type=non_negative_float,
        default=0.0,
        help="extra pure-Python CPU per env step, in ms (default: 0)",
    )
    p.add_argument(
        "--seeds", type=int_list, default="1", help="comma-separated seeds; each runs every config (default: 1)"
    )
    p.add_argument(
        "--configs",
        type=_configs,
        default=list(CONFIGS),
        help=f"comma-separated, in order, of {', '.join(CONFIGS)} (default: all)",
    )
    p.add_argument(
        "--stop-when-solved", action="store_true", help="end a run at the solve threshold (mean return >= 475 over 20)"
    )
    args = p.parse_args(argv)
    # What the trainer would refuse at its defaults (32 steps per env, minibatches of 256, 2
    # vecenv workers): refused here, naming this script's option, before any run starts.
    if args.num_envs * STEPS % min(MINIBATCH, args.num_envs * STEPS):
        p.error(
            f"argument --num-envs: expected at most {MINIBATCH // STEPS} or a multiple of {MINIBATCH // STEPS} "
            f"({STEPS} steps per env fill minibatches of {MINIBATCH}), got {args.num_envs}"
        )
    vecenv_configs = [c for c in args.configs if c != "step-sync"]
    if args.num_envs < WORKERS and vecenv_configs:
        p.error(
            f"argument --num-envs: expected at least {WORKERS} (the {WORKERS} workers of {vecenv_configs[0]}), "
            f"got {args.num_envs}"
        )
    seeds = args.seeds
    configs = args.configs
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for config in configs:
                out = pathlib.Path(tmp) / f"{config}-{seed}"
                cmd = [
                    sys.executable, str(SCRIPT), "--quiet", "--out", str(out), "--seed", str(seed),
                    "--total-timesteps", str(args.total_timesteps), "--num-envs", str(args.num_envs),
                    "--env-step-ms", str(args.env_step_ms), *CONFIGS[config],
                ]  # fmt: skip
                if args.stop_when_solved:
                    cmd.append("--stop-when-solved")
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:  # its own error's last line, not a traceback of ours
                    lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
                    print(f"{p.prog}: error: seed {seed} {config} failed: {lines[-1]}", file=sys.stderr)
                    return 1
                run = json.loads((out / "summary.json").read_text())["run"]
                runs[config].append(run)
                print(
                    f"seed {seed} {config:16s} {run['sps']:8.0f} SPS  collect {run['collect_s']:7.2f}s  "
                    f"update {run['update_s']:7.2f}s  solved at {run['solved_at_step']} ({run['solved_at_s']} s)",
                    flush=True,
                )
    print()
    # The shares are of the whole wall time, which counts the start-up (workers, the policy's
    # copies) as the trainer's SPS does: on small runs that is a large part, so it has a column,
    # and the three add up to 100%. Totals over the seeds, so that they still add up.
    print("| config | env-steps/s | collect s per 1k steps | collect, % of wall | update, % of wall "
          "| start-up and rest, % of wall | x step-sync SPS | x step-sync collection speed "
          "| solved (steps, s) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    base = runs.get("step-sync")
    for config, rs in runs.items():
        sps = statistics.median(r["sps"] for r in rs)
        per_k = statistics.median(1000 * r["collect_s"] / r["env_steps"] for r in rs)
        wall = sum(r["wall_time_s"] for r in rs)
        share_c = sum(r["collect_s"] for r in rs) / wall
        share_u = sum(r["update_s"] for r in rs) / wall
        if base:
            x_sps = statistics.median(r["sps"] / b["sps"] for r, b in zip(rs, base))
            x_col = statistics.median(
                (b["collect_s"] / b["env_steps"]) / (r["collect_s"] / r["env_steps"]) for r, b in zip(rs, base)
            )
            ratios = f"{x_sps:.2f} | {x_col:.2f}"
        else:
            ratios = "- | -"
        solved = ", ".join(f"{r['solved_at_step']}/{r['solved_at_s']}" for r in rs)
        shares = f"{share_c:.0%} | {share_u:.0%} | {1 - share_c - share_u:.0%}"
        print(f"| {config} | {sps:,.0f} | {per_k:.3f} | {shares} | {ratios} | {solved} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("bench_train_rollouts.py", main, "the runs printed above are all there is"))
