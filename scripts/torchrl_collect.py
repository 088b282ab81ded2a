"""TorchRL collectors over vecenv against TorchRL's own parallel collection, timed side by side.

    pip install -e ".[torchrl]"
    python scripts/torchrl_collect.py                                  # CartPole-v1, 8 envs
    python scripts/torchrl_collect.py --num-envs 32 --frames 200000
    python scripts/torchrl_collect.py --env burn --policy mlp          # ~100 us envs (calibrated here)

Each run collects ``--frames`` frames with one TorchRL collector, in a fresh Python process
(torch on one thread there), over one of these (``--runs`` picks and orders them):

* ``vecenv``: ``Collector(GymWrapper(vecenv.SubprocVectorEnv(fns, autoreset_mode=SAME_STEP)))``,
  vecenv's default worker count (one per core);
* ``vecenv-auto``: the same with ``num_workers="auto"``;
* ``sync``: ``Collector(GymWrapper(gymnasium.vector.SyncVectorEnv(fns, autoreset_mode=SAME_STEP)))``,
  every env in the collector's process;
* ``parallel``: TorchRL's own, ``Collector(ParallelEnv(2, make_serial))``: 2 worker processes,
  each a ``SerialEnv`` of N/2 ``GymEnv``;
* ``parallel-n``: ``Collector(ParallelEnv(N, GymEnv))``, one process per env, as users often write;
* ``multisync``: ``MultiSyncCollector([make_serial, make_serial])``, 2 collector processes each
  stepping a ``SerialEnv`` of N/2 ``GymEnv``;
* ``serial``: ``Collector(SerialEnv(N, GymEnv))``, TorchRL's single-process baseline.

``--env burn`` uses ``vecenv.bench.envs.BurnEnv`` calibrated to ~100 us of pure Python per step
(wrapped by ``GymWrapper`` where the others use ``GymEnv``). ``--policy random`` is the
collector's ``policy=None`` (random actions from torch's generator); ``--policy mlp`` is a
64-unit tanh MLP whose greedy action is taken (weights from ``--seed``).

The ``--repeat`` repetitions run interleaved (every run once, in order, then again); each ratio
is taken per repetition, against the ``sync`` and ``parallel`` runs of the same repetition, and
reported as median (min-max). Frames/s counts the frames after the first batch (the first
reset and the workers' start-up are left out). Every run digests the frames it collected
(observations, actions, rewards, flags); runs seeded the same way give the same digest, and the
``= sync`` column says whether a run's digest is ``sync``'s: vecenv's runs must say ``yes``.
TorchRL's parallel runs seed their envs their own way, so theirs differs (``-``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also runs from a checkout
from vecenv.argtypes import non_negative_int, positive_int  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402

RUNS = ("vecenv", "vecenv-auto", "sync", "parallel", "parallel-n", "multisync", "serial")
#: The runs whose data must equal ``sync``'s: the same envs, seeds and actions.
SAME_AS_SYNC = ("vecenv", "vecenv-auto", "sync")
#: The frames a digest covers, in this order.
KEYS = (
    "observation",
    "action",
    ("next", "observation"),
    ("next", "reward"),
    ("next", "terminated"),
    ("next", "truncated"),
    ("next", "done"),
)


def _gym_spec(env: str, iterations: int) -> Any:
    import gymnasium as gym
    from gymnasium.envs.registration import EnvSpec

    if env == "burn":
        return EnvSpec("BenchBurn-v0", entry_point="vecenv.bench.envs:BurnEnv", kwargs={"iterations": iterations})
    return gym.spec("CartPole-v1")


def make_torchrl_env(env: str, iterations: int) -> Any:
    """One TorchRL env of one Gymnasium env: ``GymEnv`` for CartPole, ``GymWrapper`` for BurnEnv
    (an id registered only here; module level, as TorchRL's processes may start with spawn)."""
    import gymnasium as gym
    from torchrl.envs import GymEnv, GymWrapper

    if env == "cartpole":
        return GymEnv("CartPole-v1")
    return GymWrapper(gym.make(_gym_spec(env, iterations)))


def make_serial(env: str, iterations: int, num_envs: int) -> Any:
    """A ``SerialEnv`` of ``num_envs`` TorchRL envs: one process of ``parallel`` or ``multisync``."""
    from torchrl.envs import SerialEnv

    return SerialEnv(num_envs, functools.partial(make_torchrl_env, env, iterations))


def _policy(kind: str, seed: int) -> Any:
    """``None`` (the collector's random policy) or a greedy MLP as a ``TensorDictModule``."""
    if kind == "random":
        return None
    import torch
    from tensordict.nn import TensorDictModule

    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))

    def act(observation: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            logits = net(observation)
        return torch.nn.functional.one_hot(logits.argmax(-1), 2)

    return TensorDictModule(act, in_keys=["observation"], out_keys=["action"])


def _child(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchRL 0.14's own, see docs/torchrl.md
        from torchrl.collectors import Collector, MultiSyncCollector
    from torchrl.envs import GymWrapper, ParallelEnv, SerialEnv

    import vecenv

    torch.set_num_threads(1)
    n, run = args.num_envs, args.child
    spec = _gym_spec(args.env, args.iterations)
    fns = [functools.partial(gym.make, spec)] * n
    one = functools.partial(make_torchrl_env, args.env, args.iterations)
    half = functools.partial(make_serial, args.env, args.iterations, n // 2)
    frames_per_batch = args.steps_per_batch * n
    policy = _policy(args.policy, args.seed)
    torch.manual_seed(args.seed)
    collector: Any
    if run == "multisync":
        collector = MultiSyncCollector(
            [half, half], policy=policy, frames_per_batch=frames_per_batch, total_frames=args.frames
        )
        collector.set_seed(args.seed)
    else:
        if run in ("vecenv", "vecenv-auto"):
            workers = "auto" if run == "vecenv-auto" else None
            env = GymWrapper(vecenv.SubprocVectorEnv(fns, workers, autoreset_mode=AutoresetMode.SAME_STEP))
        elif run == "sync":
            env = GymWrapper(SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP))
        elif run == "parallel":
            env = ParallelEnv(2, half)
        elif run == "parallel-n":
            env = ParallelEnv(n, one)
        else:
            env = SerialEnv(n, one)
        env.set_seed(args.seed)
        collector = Collector(env, policy=policy, frames_per_batch=frames_per_batch, total_frames=args.frames)
    digest = hashlib.sha256()
    frames = timed_frames = 0
    hashing = 0.0
    start = time.perf_counter()
    try:
        for i, batch in enumerate(collector):
            now = time.perf_counter()
            if i == 0:
                start = now  # the first batch (first reset, workers starting) is not timed
            else:
                timed_frames += batch.numel()
            frames += batch.numel()
            for key in KEYS:
                digest.update(batch[key].contiguous().numpy().tobytes())
            hashing += time.perf_counter() - now
        wall = time.perf_counter() - start - hashing
    finally:
        collector.shutdown()
    return {"run": run, "frames": frames, "fps": timed_frames / wall, "digest": digest.hexdigest()[:12]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"comma-separated runs, in order, of {', '.join(RUNS)} (default: all)"
    )
    parser.add_argument("--env", choices=["cartpole", "burn"], default="cartpole", help="(default: %(default)s)")
    parser.add_argument("--num-envs", type=positive_int, default=8, help="envs per run, even (default: %(default)s)")
    parser.add_argument("--frames", type=positive_int, default=100_000, help="frames per run (default: %(default)s)")
    parser.add_argument(
        "--steps-per-batch",
        type=positive_int,
        default=50,
        help="steps of every env per collector batch (default: %(default)s)",
    )
    parser.add_argument("--policy", choices=["random", "mlp"], default="random", help="(default: %(default)s)")
    parser.add_argument("--repeat", type=positive_int, default=3, help="interleaved repetitions (default: %(default)s)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of every run (default: %(default)s)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--iterations", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not runs or any(r not in RUNS for r in runs) or len(set(runs)) != len(runs):
        expected = f"a comma-separated list of distinct runs of {', '.join(RUNS)}"
        parser.error(f"--runs: expected {expected}, got {args.runs!r}")
    if args.num_envs % 2:
        parser.error(f"--num-envs: expected an even number (two TorchRL workers get half each), got {args.num_envs}")
    if args.frames < 2 * args.steps_per_batch * args.num_envs:
        parser.error(
            f"--frames: expected at least two batches, {2 * args.steps_per_batch * args.num_envs} frames "
            f"(--steps-per-batch x --num-envs x 2), got {args.frames}"
        )
    args.run_list = runs
    return args


def _ratios(rows: list[dict[str, Any]], run: str, reference: str) -> str:
    """``run``'s frames/s over ``reference``'s, per repetition: median (min-max); ``-`` when
    ``reference`` did not run."""
    by_rep = {(r["rep"], r["run"]): r["fps"] for r in rows}
    ratios = [
        fps / by_rep[(rep, reference)]
        for (rep, name), fps in by_rep.items()
        if name == run and (rep, reference) in by_rep
    ]
    if not ratios:
        return "-"
    if len(ratios) == 1:
        return f"{ratios[0]:.2f}"
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> int:
    args = parse_args()
    if args.child:
        Path(args.out).write_text(json.dumps(_child(args)))
        return 0
    iterations = 0
    if args.env == "burn":
        from vecenv.bench.calibration import calibrate

        iterations = calibrate()["iters_100us"]
    load_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for rep in range(args.repeat):
        for run in args.run_list:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "run.json")
                command = [sys.executable, os.path.abspath(__file__), "--child", run, "--out", out]
                command += ["--iterations", str(iterations)]
                for name in ("env", "num_envs", "frames", "steps_per_batch", "policy", "seed"):
                    command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
                if subprocess.run(command).returncode != 0:  # its error is on stderr already
                    print(f"torchrl_collect.py: error: the {run} run failed (see above)", file=sys.stderr)
                    return 1
                row = json.loads(Path(out).read_text())
            row["rep"] = rep
            rows.append(row)
            print(
                f"[{rep + 1}/{args.repeat}] {run}: {row['fps']:.0f} frames/s, {row['frames']} frames, "
                f"data {row['digest']}",
                flush=True,
            )
    load_end = os.getloadavg()
    sync_digests = {r["digest"] for r in rows if r["run"] == "sync"}
    env = "CartPole-v1" if args.env == "cartpole" else f"BurnEnv (~100 us, {iterations} iterations)"
    print(
        f"\nTorchRL collectors, {env}, {args.num_envs} envs, {args.frames:,} frames, {args.policy} policy, "
        f"{args.repeat} repetition(s); load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end"
    )
    print("| run | frames/s (median) | / sync | / parallel | data | = sync |")
    print("|---|---:|---:|---:|---|---|")
    for run in args.run_list:
        mine = [r for r in rows if r["run"] == run]
        digests = sorted({r["digest"] for r in mine})
        if run in SAME_AS_SYNC and sync_digests:
            same = "yes" if set(digests) == sync_digests and len(sync_digests) == 1 else "NO"
        else:
            same = "-"
        print(
            f"| {run} | {statistics.median(r['fps'] for r in mine):.0f} | {_ratios(rows, run, 'sync')} "
            f"| {_ratios(rows, run, 'parallel')} | {', '.join(digests)} | {same} |"
        )
    mismatched = [run for run in args.run_list if run in SAME_AS_SYNC and sync_digests]
    if any({r["digest"] for r in rows if r["run"] == run} != sync_digests for run in mismatched):
        print("torchrl_collect.py: error: a vecenv run collected other data than sync", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("torchrl_collect.py", main, quiet="--child" in sys.argv))
