"""Step CartPole-v1 across worker processes with random actions and print the throughput.

    python scripts/demo.py --num-envs 64 --num-workers 2 --seconds 3
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import vecenv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1", help="Gymnasium env id (default: %(default)s)")
    parser.add_argument("--num-envs", type=int, default=64, help="envs in the vector env (default: %(default)s)")
    parser.add_argument("--num-workers", type=int, default=min(64, os.cpu_count() or 1),
                        help="worker processes (default: cores, %(default)s here)")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long to step (default: %(default)s)")
    args = parser.parse_args(argv)
    with vecenv.make(args.env, args.num_envs, args.num_workers) as envs:
        envs.reset(seed=0)
        envs.action_space.seed(0)
        actions = [envs.action_space.sample() for _ in range(64)]
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            envs.step(actions[steps % len(actions)])
            steps += 1
        elapsed = time.perf_counter() - start
    rate = steps * args.num_envs / elapsed
    print(f"{args.env}: {args.num_envs} envs in {args.num_workers} workers: "
          f"{rate:,.0f} env-steps/s ({steps} vector steps in {elapsed:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
