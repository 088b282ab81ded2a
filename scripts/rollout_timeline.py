"""Where a rollout's time goes inside a trainer: what each rollout pays once, and per step.

    python scripts/rollout_timeline.py                      # ~1 minute
    python scripts/rollout_timeline.py --total-timesteps 30000 --long-steps 512

Times every ``envs.rollout`` call of ``scripts/train_ppo_rollouts.py``'s MLP policy (its numpy
copy in 2 workers, 8 CartPole envs, the trainer's defaults; ``--pin-cpus`` pins each worker to a
core of its own, ``--inline-group`` runs the first group and its copy in the training process), in
four settings:

- ``trainer``: inside the trainer itself (``train_ppo_rollouts.train``, rollouts of its 32
  steps), a PPO update between one rollout and the next;
- ``idle`` ("asleep"): the same rollouts with the process asleep for ``--idle-ms`` between them;
- ``back-to-back``: the same rollouts one after the other;
- ``long``: rollouts of ``--long-steps`` back to back.

A rollout costs a part per step (each worker's envs, its policy and the recording) and a part
it pays once (the parent's checks and messages, waking the workers, their replies, assembling
the ``Rollout``). The two back-to-back lengths give both: the per-step part is the slope between
them. "Beyond the steps" is what a rollout took beyond that many steps at the slope's rate:
for the back-to-back rollouts, the part paid once; for the trainer's and the idle ones, that
and how much slower their steps ran than back to back (the processes come back from sleep, or
from the update, to each rollout). For comparison it also runs the trainer stepping
Gymnasium's ``SyncVectorEnv`` (``--collect step --vector sync``: the same policy and sampling in
the training process) and prints its collection time per vector step. Medians over the rollout
calls after the first five, and the parent's CPU time per call.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import cloudpickle

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # also runs from a checkout
from vecenv.argtypes import non_negative_float, non_negative_int, positive_int  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402


@functools.cache
def trainer() -> Any:
    """``scripts/train_ppo_rollouts.py`` as a module, loaded once the options are read: it imports
    torch (seconds), which ``--help`` and a usage error have no need of."""
    path = pathlib.Path(__file__).resolve().with_name("train_ppo_rollouts.py")
    spec = importlib.util.spec_from_file_location("_vecenv_scripts_train_ppo_rollouts", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    # The workers get its policy by value, whatever the start method (fork, forkserver, spawn).
    cloudpickle.register_pickle_by_value(module)
    return module


class Timings:
    """Wall and parent CPU time (µs) of every ``rollout`` call of one vector env."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def wrap(self, envs: Any) -> Any:
        rollout = envs.rollout

        def timed(*args: Any, **kwargs: Any) -> Any:
            cpu, start = time.thread_time_ns(), time.perf_counter_ns()
            result = rollout(*args, **kwargs)
            self.wall.append((time.perf_counter_ns() - start) / 1e3)
            self.cpu.append((time.thread_time_ns() - cpu) / 1e3)
            return result

        envs.rollout = timed
        return envs

    def medians(self) -> tuple[float, float]:
        skip = 5 if len(self.wall) > 10 else 0
        return statistics.median(self.wall[skip:]), statistics.median(self.cpu[skip:])


def _trainer_args(args: argparse.Namespace, out: pathlib.Path | None, collect: str) -> argparse.Namespace:
    argv = ["--collect", collect, "--quiet", "--seed", str(args.seed), "--total-timesteps", str(args.total_timesteps)]
    if collect == "step":
        argv += ["--vector", "sync"]
    else:
        argv += ["--pin-cpus"] if args.pin_cpus else []
        argv += ["--inline-group"] if args.inline_group else []
    if out is not None:
        argv += ["--out", str(out)]
    return trainer().parse_args(argv)


def in_trainer(args: argparse.Namespace, out: pathlib.Path) -> Timings:
    """The trainer itself, its vector env's ``rollout`` calls timed."""
    timings = Timings()
    module = trainer()
    make_envs = module.make_envs
    module.make_envs = lambda targs: timings.wrap(make_envs(targs))
    try:
        module.train(_trainer_args(args, out, "rollout"))
    finally:
        module.make_envs = make_envs
    return timings


def in_a_loop(args: argparse.Namespace, num_steps: int, idle_s: float) -> Timings:
    """The trainer's envs and policy, rollouts of ``num_steps`` with ``idle_s`` between them."""
    targs = _trainer_args(args, None, "rollout")
    timings = Timings()
    module = trainer()
    envs = timings.wrap(module.make_envs(targs))
    try:
        obs_dim = int(envs.single_observation_space.shape[0])
        policy = module.NumpyActorCritic(module.ppo.Agent(obs_dim, int(envs.single_action_space.n)), "mlp", 0)
        envs.reset(seed=args.seed)
        calls = max(15, args.total_timesteps // (targs.num_envs * num_steps))
        for _ in range(calls):
            if idle_s:
                time.sleep(idle_s)
            envs.rollout(num_steps, policy)
    finally:
        envs.close()
    return timings


def sync_collection_us(args: argparse.Namespace, out: pathlib.Path) -> float:
    """The trainer stepping SyncVectorEnv: its collection time per vector step, in µs."""
    targs = _trainer_args(args, out, "step")
    summary, _ = trainer().train(targs)
    return summary.collect_s / (summary.env_steps / targs.num_envs) * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--total-timesteps", type=positive_int, default=30_000, help="env steps per setting (default: %(default)s)"
    )
    p.add_argument(
        "--long-steps", type=positive_int, default=512, help="steps of the long rollouts (default: %(default)s)"
    )
    p.add_argument(
        "--idle-ms",
        type=non_negative_float,
        default=20.0,
        help="sleep between the idle rollouts (default: %(default)s)",
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=1, help="seed of the trainer and the envs (default: %(default)s)"
    )
    p.add_argument("--pin-cpus", action="store_true", help="pin the workers to a core each (the trainer's --pin-cpus)")
    p.add_argument(
        "--inline-group",
        action="store_true",
        help="this process hosts the first group and its policy copy (the trainer's --inline-group)",
    )
    p.add_argument("--no-sync", action="store_true", help="skip the SyncVectorEnv comparison")
    args = p.parse_args(argv)
    steps = trainer().parse_args([]).num_steps
    if args.long_steps <= steps:
        p.error(f"--long-steps must be more than the trainer's {steps} steps per rollout, got {args.long_steps}")
    if args.idle_ms < 0:
        p.error(f"--idle-ms must be >= 0, got {args.idle_ms}")
    import torch

    torch.set_num_threads(1)  # as train_ppo_rollouts.py runs

    def note(what: str) -> None:
        print(f"timing {what} ...", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        runs: dict[str, tuple[int, Timings]] = {}
        note("the trainer's rollouts")
        runs["trainer"] = (steps, in_trainer(args, pathlib.Path(tmp) / "rollout"))
        note(f"rollouts {args.idle_ms:g} ms apart")
        runs["idle"] = (steps, in_a_loop(args, steps, args.idle_ms / 1e3))
        note(f"rollouts of {steps} steps back to back")
        runs["back-to-back"] = (steps, in_a_loop(args, steps, 0.0))
        note(f"rollouts of {args.long_steps} steps back to back")
        runs["long"] = (args.long_steps, in_a_loop(args, args.long_steps, 0.0))
        sync = None
        if not args.no_sync:
            note("the trainer stepping SyncVectorEnv")
            sync = sync_collection_us(args, pathlib.Path(tmp) / "sync")
    medians = {name: (t, *timings.medians()) for name, (t, timings) in runs.items()}
    short, long_ = medians["back-to-back"], medians["long"]
    per_step = (long_[1] - short[1]) / (long_[0] - short[0])
    labels = {
        "trainer": "in the trainer (a PPO update between)",
        "idle": f"asleep {args.idle_ms:g} ms between",
        "back-to-back": "back to back",
        "long": "back to back",
    }
    columns = ("rollouts", "steps", "ms per rollout", "µs per vector step", "beyond the steps, ms", "parent CPU, ms")
    print("| " + " | ".join(columns) + " |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, (t, wall, cpu) in medians.items():
        beyond = wall - t * per_step
        print(f"| {labels[name]} | {t} | {wall / 1e3:.2f} | {wall / t:,.0f} | {beyond / 1e3:.2f} | {cpu / 1e3:.2f} |")
    print(f"\nPer vector step (the slope between {steps} and {args.long_steps} steps): {per_step:,.0f} µs.")
    if sync is not None:
        print(f"The trainer stepping SyncVectorEnv: {sync:,.0f} µs of collection per vector step.")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("rollout_timeline.py", main))
