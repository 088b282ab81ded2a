"""Stable-Baselines3's own PPO on its ``DummyVecEnv``, its ``SubprocVecEnv`` and vecenv's drop-in,
with the hyperparameters of ``scripts/train_ppo_rollouts.py``, timed side by side.

    python scripts/sb3_ppo.py --vec dummy,subproc,vecenv --total-timesteps 30000
    python scripts/sb3_ppo.py --vec dummy,vecenv --env-step-ms 1 --total-timesteps 10240

Needs ``stable-baselines3`` and ``torch`` (the ``sb3`` extra). Each run is a fresh process that
builds the vector env (``dummy``: SB3's ``DummyVecEnv``; ``subproc``: SB3's ``SubprocVecEnv``,
one process per env, SB3's default start method; ``vecenv``: ``vecenv.sb3.SubprocVecEnv``,
vecenv's defaults), wraps it in ``VecMonitor`` and runs ``PPO("MlpPolicy", ...).learn()`` with
RL Baselines3 Zoo's CartPole hyperparameters, which ``train_ppo_rollouts.py`` uses too: 32
steps per env per rollout, minibatches of 256, 20 epochs, learning rate 1e-3 decaying linearly
to 0, gamma 0.98, GAE lambda 0.8, clip 0.2, no entropy bonus, two hidden layers of 64 (tanh).

Reported per run: env-steps/s over the whole ``learn``, the seconds SB3 spent collecting
rollouts (env steps and policy forwards, from its rollout-start and rollout-end callbacks) and
updating (the rest of ``learn``), and the env step and wall time at which the mean return of the
last 20 episodes first reached the solve threshold (475 on CartPole-v1).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runs from a checkout
from vecenv.argtypes import env_id, finite_float, non_negative_float, non_negative_int, positive_int  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402

VECS = ("dummy", "subproc", "vecenv")
SOLVE_WINDOW = 20


def _env_fn(env_id: str, step_ms: float, seed: int, index: int) -> Any:
    """Env ``index``'s constructor: ``train_ppo.py``'s env, with its ~``step_ms`` of pure-Python
    CPU per step (SB3 seeds the envs itself from ``PPO(seed=...)``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import train_ppo

    cost = round(step_ms * train_ppo.iterations_per_ms()) if step_ms > 0 else 0
    return functools.partial(train_ppo.costly_env, env_id, cost)


def _child(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecMonitor

    torch.manual_seed(args.seed)
    fns = [_env_fn(args.env_id, args.env_step_ms, args.seed, i) for i in range(args.num_envs)]
    if args.child == "dummy":
        venv = DummyVecEnv(fns)
    elif args.child == "subproc":
        venv = SubprocVecEnv(fns)
    else:
        import vecenv.sb3

        venv = vecenv.sb3.SubprocVecEnv(fns)
    venv = VecMonitor(venv)
    timing = {"collect_s": 0.0, "solved_at_step": None, "solved_at_s": None}

    class Timer(BaseCallback):
        def _on_training_start(self) -> None:
            self.learn_start = time.perf_counter()

        def _on_rollout_start(self) -> None:
            self.start = time.perf_counter()

        def _on_rollout_end(self) -> None:
            timing["collect_s"] += time.perf_counter() - self.start

        def _on_step(self) -> bool:
            buffer = self.model.ep_info_buffer
            if timing["solved_at_step"] is None and buffer is not None and len(buffer) >= SOLVE_WINDOW:
                recent = [info["r"] for info in list(buffer)[-SOLVE_WINDOW:]]
                if sum(recent) / SOLVE_WINDOW >= args.solve_return:
                    timing["solved_at_step"] = self.num_timesteps
                    timing["solved_at_s"] = round(time.perf_counter() - self.learn_start, 2)
            return True

    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=32,
        batch_size=256,
        n_epochs=20,
        learning_rate=lambda progress: 1e-3 * progress,
        gamma=0.98,
        gae_lambda=0.8,
        clip_range=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs={"net_arch": [64, 64]},
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.total_timesteps, callback=Timer())
    wall = time.perf_counter() - start
    steps = model.num_timesteps
    venv.close()
    return {
        "vec": args.child,
        "env_steps": steps,
        "learn_s": wall,
        "sps": steps / wall,
        "collect_s": timing["collect_s"],
        "update_s": wall - timing["collect_s"],
        "solved_at_step": timing["solved_at_step"],
        "solved_at_s": timing["solved_at_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vec", default="dummy,subproc,vecenv", help=f"comma-separated runs, in order, of {VECS}")
    parser.add_argument("--env-id", type=env_id, default="CartPole-v1", help="registered env id (default: %(default)s)")
    parser.add_argument("--num-envs", type=positive_int, default=8, help="envs per run (default: %(default)s)")
    parser.add_argument(
        "--total-timesteps", type=positive_int, default=30_000, help="env steps per run (default: %(default)s)"
    )
    parser.add_argument(
        "--env-step-ms", type=non_negative_float, default=0.0, help="extra pure-Python CPU time per env step, in ms"
    )
    parser.add_argument("--seed", type=non_negative_int, default=1, help="seed of every run (default: %(default)s)")
    parser.add_argument(
        "--solve-return",
        type=finite_float,
        default=475.0,
        help="mean return over 20 episodes that counts as solved (default: 475)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        Path(args.out).write_text(json.dumps(_child(args)))
        return 0
    vecs = [v.strip() for v in args.vec.split(",") if v.strip()]
    if not vecs or any(v not in VECS for v in vecs):
        parser.error(f"--vec: expected a comma-separated list of {', '.join(VECS)}, got {args.vec!r}")
    rows = []
    for i, vec in enumerate(vecs):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "run.json")
            command = [sys.executable, os.path.abspath(__file__), "--child", vec, "--out", out]
            for name in ("env_id", "num_envs", "total_timesteps", "env_step_ms", "seed", "solve_return"):
                command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
            if subprocess.run(command).returncode != 0:  # its error is on stderr already
                print(f"{parser.prog}: error: the {vec} run failed (see above)", file=sys.stderr)
                return 1
            row = json.loads(Path(out).read_text())
        rows.append(row)
        print(
            f"[{i + 1}/{len(vecs)}] {vec}: {row['sps']:.0f} env-steps/s, collect {row['collect_s']:.1f} s, "
            f"update {row['update_s']:.1f} s, solved at {row['solved_at_step']} ({row['solved_at_s']} s)",
            flush=True,
        )
    cost = f" (+{args.env_step_ms:g} ms/step)" if args.env_step_ms else ""
    print(f"\nSB3 PPO, {args.env_id}{cost}, {args.num_envs} envs, {args.total_timesteps:,} steps")
    print("| vector env | env-steps/s | collect s | update s | collect s per 1k steps | solved (steps, s) |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        per_k = 1000 * r["collect_s"] / r["env_steps"]
        print(
            f"| {r['vec']} | {r['sps']:.0f} | {r['collect_s']:.1f} | {r['update_s']:.1f} | {per_k:.3f} "
            f"| {r['solved_at_step']}, {r['solved_at_s']} |"
        )

    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("sb3_ppo.py", main, quiet="--child" in sys.argv))
