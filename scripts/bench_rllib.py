"""Sampling throughput of one RLlib EnvRunner: RLlib's SYNC and ASYNC vectorization, and vecenv.

    pip install -e ".[rllib]"
    python scripts/bench_rllib.py cartpole                 # 32 envs per EnvRunner
    python scripts/bench_rllib.py py1ms --num-envs 16      # envs of ~1 ms per step (calibrated here)

Each mode gets one ``SingleAgentEnvRunner`` (RLlib's new API stack) built in this process from a
``PPOConfig`` (its default module, random weights, exploring): ``gym_env_vectorize_mode="sync"``
(every env in the EnvRunner's process), ``"async"`` (Gymnasium's ``AsyncVectorEnv``, one
process per env) and ``"vector_entry_point"`` with ``vecenv.integrations.rllib`` (``--workers``
vecenv worker processes). The EnvRunners are sampled in turn, one window of ``--seconds`` of
``runner.sample(num_timesteps=...)`` calls each, ``--windows`` times; the ratio to SYNC is taken per
pair of adjacent windows, which ran under nearly the same load, and reported as median (min-max).
What is measured is RLlib's whole sampling loop (module forward pass, connectors, episode
bookkeeping) around the env steps, with torch on one thread as in an EnvRunner actor of one
CPU, so it is what an RLlib user gets per EnvRunner.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from vecenv.argtypes import positive_float, positive_int
from vecenv.bench.stopping import run_main
from vecenv.files import json_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workload", choices=["py1ms", "cartpole"])
    parser.add_argument("--num-envs", type=positive_int, default=32, help="envs per EnvRunner (default: %(default)s)")
    parser.add_argument("--workers", type=positive_int, default=2, help="vecenv workers (default: %(default)s)")
    parser.add_argument("--seconds", type=positive_float, default=3.0, help="one window (default: %(default)s)")
    parser.add_argument("--windows", type=positive_int, default=5, help="windows per mode (default: %(default)s)")
    args = parser.parse_args()

    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
    from ray.tune.registry import register_env

    from vecenv.bench.calibration import calibrate
    from vecenv.integrations import rllib as vecenv_rllib

    if args.workload == "py1ms":
        spec = EnvSpec(
            "BenchBurn-v0", entry_point="vecenv.bench.envs:BurnEnv", kwargs={"iterations": calibrate()["iters_1ms"]}
        )
    else:
        spec = gym.spec("CartPole-v1")
    register_env("bench-single", lambda config: gym.make(spec))
    vecenv_rllib.register_env("bench-vecenv", spec, num_workers=args.workers)
    modes = {"sync": "bench-single", "async": "bench-single", "vector_entry_point": "bench-vecenv"}
    # One sample() call: 50 steps of every env (RLlib's default rollout_fragment_length is 200).
    timesteps = 50 * args.num_envs

    # An EnvRunner actor of one CPU runs torch on one thread (Ray sets OMP_NUM_THREADS to the
    # actor's CPUs); here, in the driver, torch would use every core, and on a loaded host its
    # spinning threads cost more than the envs (seen: 7x fewer steps/s with 2 threads).
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="vecenv-ray-") as temp_dir:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir)
        runners: dict[str, Any] = {}
        try:
            for mode, env in modes.items():
                config = (
                    PPOConfig()
                    .environment(env)
                    .env_runners(num_env_runners=0, num_envs_per_env_runner=args.num_envs, gym_env_vectorize_mode=mode)
                    .debugging(seed=0)
                )
                start = time.perf_counter()
                runners[mode] = SingleAgentEnvRunner(config=config)
                runners[mode].sample(num_timesteps=timesteps)  # warm up (and the first reset)
                print(f"{mode}: built and warmed up in {time.perf_counter() - start:.1f} s", flush=True)
            rates: dict[str, list[float]] = {mode: [] for mode in runners}
            for _ in range(args.windows):
                for mode, runner in runners.items():
                    done, start = 0, time.perf_counter()
                    while time.perf_counter() - start < args.seconds:
                        done += sum(len(episode) for episode in runner.sample(num_timesteps=timesteps))
                    rates[mode].append(done / (time.perf_counter() - start))
        finally:
            for runner in runners.values():
                runner.stop()
            ray.shutdown()

    out: dict[str, object] = {f"{mode} steps/s": round(statistics.median(r)) for mode, r in rates.items()}
    for mode in ("async", "vector_entry_point"):
        ratios = [x / y for x, y in zip(rates[mode], rates["sync"], strict=True)]
        out[f"{mode} / sync"] = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    out["load average (1, 5, 15 min)"] = [round(x, 1) for x in os.getloadavg()]
    results = {"workload": args.workload, "num_envs": args.num_envs, "vecenv workers": args.workers, **out}
    print(json_text(results, indent=1), end="")  # strict JSON: null for a NaN


if __name__ == "__main__":
    raise SystemExit(run_main("bench_rllib.py", main))
