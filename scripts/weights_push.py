"""What pushing new weights to the workers costs the training process, per rollout.

    python scripts/weights_push.py                                  # ~1 minute
    python scripts/weights_push.py --workers 2,8 --hidden 64,1024 --rounds 30
    python scripts/weights_push.py --backend ray --workers 2,8      # Ray actors on a local Ray

A learner that trains with the policy in the workers calls ``update_policy_weights()`` after
each update and then ``rollout_async`` (or ``rollout``): the new weights travel with the
rollout's command to every worker. For each worker count (``--workers``, CartPole, 2 envs per
worker) and each size of a torch MLP policy (``--hidden`` units in its two hidden layers; 64 is
~4,600 parameters, 1,024 ~1.05 million, 4.2 MB), this times, in the training process:

- ``update``: ``update_policy_weights()`` (reading the module's ``state_dict``);
- ``send``: ``rollout_async(2, policy)`` right after it: the weights encoded and sent to
  every worker;
- the whole rollout: that ``rollout_async`` and its ``rollout_wait`` (each worker loads the
  weights before its first step);

and, for comparison, the same calls when no new weights go out. Medians over
``--rounds`` rollouts (each collected with ``rollout_wait`` before the next round).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # also runs from a checkout
import vecenv  # noqa: E402
from vecenv.argtypes import positive_int  # noqa: E402
from vecenv.bench.stopping import run_main  # noqa: E402


@functools.cache
def mlp_class() -> Any:
    """The policy's class, defined once the options are read: torch takes seconds to import,
    which ``--help`` and a usage error have no need of. (Like a class of ``__main__``, which it
    was, cloudpickle sends it to the workers by value.)"""
    try:
        import torch
        from torch import nn
    except ImportError:  # pragma: no cover - the message is the point
        raise SystemExit('weights_push.py needs torch: pip install -e ".[train]"') from None

    class MLP(nn.Module):
        """CartPole's observations to the argmax of two logits, through two hidden layers."""

        def __init__(self, hidden: int) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
            self.head = nn.Linear(hidden, 2)

        def forward(self, observations: torch.Tensor) -> torch.Tensor:
            return self.head(self.body(observations)).argmax(-1)

    return MLP


def measure(workers: int, hidden: int, rounds: int, backend: str) -> tuple[float, float, float, float, float, float]:
    """(MB of weights, then medians in ms: update, send with new weights, send without, whole
    rollout with new weights, whole rollout without)."""
    module = mlp_class()(hidden)
    megabytes = sum(p.numel() * p.element_size() for p in module.parameters()) / 1e6
    updates: list[float] = []
    sends: list[float] = []
    plain: list[float] = []
    whole: list[float] = []
    plain_whole: list[float] = []
    # Ray actors take a fraction of a CPU each here, so that more of them than cores can start.
    extra = {"actor_options": {"num_cpus": 0.1}} if backend == "ray" else {}
    with vecenv.make("CartPole-v1", 2 * workers, workers, backend=backend, **extra) as envs:
        envs.reset(seed=0)
        envs.rollout(2, module)  # installs the policy in every worker
        for _ in range(rounds):
            start = time.perf_counter()
            envs.update_policy_weights()
            sent = time.perf_counter()
            envs.rollout_async(2, module)
            done = time.perf_counter()
            envs.rollout_wait()
            updates.append(sent - start)
            sends.append(done - sent)
            whole.append(time.perf_counter() - sent)
            start = time.perf_counter()
            envs.rollout_async(2, module)
            plain.append(time.perf_counter() - start)
            envs.rollout_wait()
            plain_whole.append(time.perf_counter() - start)
    return megabytes, *(statistics.median(t) * 1e3 for t in (updates, sends, plain, whole, plain_whole))


def _ints(text: str, name: str, parser: argparse.ArgumentParser) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        parser.error(f"{name} takes comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        parser.error(f"{name} takes integers >= 1, got {text!r}")
    return values


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", default="2,8,16", help="comma-separated worker counts (default: %(default)s)")
    p.add_argument("--hidden", default="64,1024", help="comma-separated hidden sizes (default: %(default)s)")
    p.add_argument("--rounds", type=positive_int, default=20, help="rollouts per cell (default: %(default)s)")
    p.add_argument(
        "--backend",
        choices=("process", "ray"),
        default="process",
        help="worker processes, or Ray actors on a local Ray (pip install -e '.[ray]') (default: %(default)s)",
    )
    args = p.parse_args(argv)
    workers = _ints(args.workers, "--workers", p)
    hidden = _ints(args.hidden, "--hidden", p)
    mlp_class()  # torch, or the one line saying how to install it
    import torch

    torch.set_num_threads(1)
    print(
        "| workers | weights MB | update_policy_weights ms | rollout_async with them ms | without ms "
        "| rollout_async + rollout_wait with them ms | without ms |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size in hidden:
        for count in workers:
            megabytes, *times = measure(count, size, args.rounds, args.backend)
            print(f"| {count} | {megabytes:.2f} | " + " | ".join(f"{t:.2f}" for t in times) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("weights_push.py", main))
