"""Ray against the process backend, measured in pairs so that a shared host's load cancels out.

    python scripts/ray_paired.py py1ms        # N=128 envs of ~1 ms each (calibrated here)
    python scripts/ray_paired.py cartpole --windows 8 --seconds 1.5

Both backends are built once in this process, with 2 workers each: synchronous ``step`` and
``batch_size=N/2`` with ``async_reset``/``recv``/``send``. They are then stepped in turn, one
window of ``--seconds`` each, ``--windows`` times; the ratio Ray / process is taken per pair of
adjacent windows, which ran under nearly the same load, and reported as median (min-max). The
benchmark (``vecenv-bench --runners ...,ray-2w``) measures each cell in a fresh
process instead, start-up included, and on a busy host its cells vary more than the backends do.

Ray runs locally with 2 CPUs, its actors at half a CPU each so that both Ray vector envs fit;
Ray does not pin processes, so this changes scheduling bookkeeping only.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from vecenv.argtypes import positive_float, positive_int
from vecenv.bench.stopping import run_main
from vecenv.files import json_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", choices=["py1ms", "cartpole"])
    parser.add_argument("--num-envs", type=positive_int, default=128, help="envs (default: %(default)s)")
    parser.add_argument("--seconds", type=positive_float, default=1.5, help="one window (default: %(default)s)")
    parser.add_argument("--windows", type=positive_int, default=8, help="windows per runner (default: %(default)s)")
    args = parser.parse_args()

    import ray

    import vecenv
    from vecenv.bench.calibration import calibrate
    from vecenv.bench.envs import BurnEnv
    from vecenv.integrations.ray.vector_env import RayVectorEnv

    n = args.num_envs
    if args.workload == "py1ms":
        env_fn: Callable[[], gym.Env] = functools.partial(BurnEnv, calibrate()["iters_1ms"])
    else:
        env_fn = functools.partial(gym.make, "CartPole-v1")
    fns = [env_fn] * n
    actions = np.random.default_rng(0).integers(0, 2, size=(256, n))
    half = {"num_cpus": 0.5}

    def synchronous(envs: vecenv.GroupVectorEnv) -> Callable[[], int]:
        envs.reset(seed=0)
        count = iter(range(1 << 62))

        def step() -> int:
            envs.step(actions[next(count) % 256])
            return n

        return step

    def batches(envs: vecenv.GroupVectorEnv) -> Callable[[], int]:
        envs.async_reset(seed=0)
        count = iter(range(1 << 62))

        def step() -> int:
            *_, ids = envs.recv()
            envs.send(actions[next(count) % 256][ids], ids)
            return len(ids)

        return step

    with tempfile.TemporaryDirectory(prefix="vecenv-ray-") as temp_dir:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir)
        made = [
            vecenv.SubprocVectorEnv(fns, 2),
            RayVectorEnv(fns, 2, actor_options=half),
            vecenv.SubprocVectorEnv(fns, 2, batch_size=n // 2),
            RayVectorEnv(fns, 2, batch_size=n // 2, actor_options=half),
        ]
        try:
            runners = {
                "vecenv-2w": synchronous(made[0]),
                "ray-2w": synchronous(made[1]),
                "vecenv-2w-half": batches(made[2]),
                "ray-2w-half": batches(made[3]),
            }
            rates: dict[str, list[float]] = {name: [] for name in runners}
            for step in runners.values():  # warm up
                for _ in range(3):
                    step()
            for _ in range(args.windows):
                for name, step in runners.items():
                    done, start = 0, time.perf_counter()
                    while time.perf_counter() - start < args.seconds:
                        done += step()
                    rates[name].append(done / (time.perf_counter() - start))
        finally:
            for envs in made:
                envs.close()
            ray.shutdown()

    out: dict[str, object] = {name: round(statistics.median(r)) for name, r in rates.items()}
    for a, b in (("ray-2w", "vecenv-2w"), ("ray-2w-half", "vecenv-2w-half"), ("ray-2w-half", "vecenv-2w")):
        ratios = [x / y for x, y in zip(rates[a], rates[b])]
        out[f"{a} / {b}"] = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    out["load average (1, 5, 15 min)"] = [round(x, 1) for x in os.getloadavg()]
    print(json_text({"workload": args.workload, "num_envs": n, **out}, indent=1), end="")  # strict JSON: null for a NaN


if __name__ == "__main__":
    raise SystemExit(run_main("ray_paired.py", main))
