"""PettingZoo's SB3 pistonball tutorial, trained through SuperSuit and through vecenv's drop-in.

PettingZoo's ``tutorials/SB3/pistonball/sb3_pistonball_vector.py`` builds pistonball with
SuperSuit's preprocessing (``color_reduction_v0``, ``resize_v1`` to 84x84, ``frame_stack_v1``
of 3), resets it with the seed, vectorizes it with ``pettingzoo_env_to_vec_env_v1`` and
``concat_vec_envs_v1(env, 4, num_cpus=2, base_class="stable_baselines3")`` and trains SB3's PPO
with a CNN policy. This script does the same with ``ss`` bound once to ``supersuit``
(``num_cpus=0``: SuperSuit in-process, the reference) and once to ``vecenv.supersuit`` (with the
tutorial's ``num_cpus=2``), with the same seeds (Python, numpy and torch through SB3's
``set_random_seed``; the copies through the vector env's ``reset(seed=...)``, see :func:`train`),
and checks that both runs see the same episode returns and end with the same policy parameters,
bit for bit. The tutorial's hyperparameters are used, with ``n_steps`` and the length of the run
scaled down by default so that it takes a few minutes on two cores::

    python scripts/tutorial_equivalence.py                       # 2 rollouts of 32 steps
    python scripts/tutorial_equivalence.py --n-steps 256 --rollouts 4
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np

from vecenv.argtypes import non_negative_int, positive_int
from vecenv.bench.stopping import run_main

#: The tutorial's environment arguments.
ENV_KWARGS = {
    "n_pistons": 20,
    "time_penalty": -0.1,
    "continuous": True,
    "random_drop": True,
    "random_rotate": True,
    "ball_mass": 0.75,
    "ball_friction": 0.3,
    "ball_elasticity": 1.5,
    "max_cycles": 25,
}


def tutorial_env(ss: Any, seed: int, num_cpus: int) -> Any:
    """The tutorial's vector env, built with the vectorizers of ``ss``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pettingzoo.butterfly import pistonball_v6

    env = pistonball_v6.parallel_env(**ENV_KWARGS)
    env = ss.color_reduction_v0(env, mode="B")
    env = ss.resize_v1(env, x_size=84, y_size=84)
    env = ss.frame_stack_v1(env, 3)
    env.reset(seed=seed)
    env = ss.pettingzoo_env_to_vec_env_v1(env)
    return ss.concat_vec_envs_v1(env, 4, num_cpus=num_cpus, base_class="stable_baselines3")


def train(ss: Any, num_cpus: int, seed: int, n_steps: int, rollouts: int) -> tuple[list[float], np.ndarray, float]:
    """Train as the tutorial does; returns the episode returns seen, the final parameters, seconds."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.ppo import CnnPolicy

    class Returns(BaseCallback):
        """Each slot's episode returns, in the order the episodes end."""

        def __init__(self) -> None:
            super().__init__()
            self.running: np.ndarray | None = None
            self.episodes: list[float] = []

        def _on_step(self) -> bool:
            rewards, dones = self.locals["rewards"], np.asarray(self.locals["dones"], dtype=bool)
            self.running = rewards.astype(np.float64) if self.running is None else self.running + rewards
            self.episodes += self.running[dones].tolist()
            self.running[dones] = 0.0
            return True

    torch.set_num_threads(1)
    set_random_seed(seed)
    envs = tutorial_env(ss, seed, num_cpus)
    # The tutorial's env.reset(seed) before vectorizing does not make a run repeatable (two
    # SuperSuit runs built that way already differ), and SuperSuit's SB3 wrapper drops reset
    # seeds: seed the copies underneath, where both vectorizers take it; PPO's first (unseeded)
    # reset then continues from there.
    envs.venv.reset(seed=seed)
    model = PPO(
        CnnPolicy,
        envs,
        verbose=0,
        gamma=0.95,
        n_steps=n_steps,
        ent_coef=0.0905168,
        learning_rate=0.00062211,
        vf_coef=0.042202,
        max_grad_norm=0.9,
        gae_lambda=0.99,
        n_epochs=5,
        clip_range=0.3,
        batch_size=256,
    )
    callback = Returns()
    start = time.perf_counter()
    model.learn(total_timesteps=n_steps * envs.num_envs * rollouts, callback=callback)
    seconds = time.perf_counter() - start
    params = torch.cat([p.detach().flatten() for p in model.policy.parameters()]).numpy().copy()
    envs.close()
    return callback.episodes, params, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of both runs (default: %(default)s)")
    parser.add_argument(
        "--n-steps", type=positive_int, default=32, help="PPO's n_steps (default: %(default)s; the tutorial's: 256)"
    )
    parser.add_argument("--rollouts", type=positive_int, default=2, help="rollouts to train for (default: %(default)s)")
    args = parser.parse_args(argv)

    import supersuit

    import vecenv.supersuit

    runs = {}
    for label, ss, cpus in (
        ("supersuit num_cpus=0", supersuit, 0),
        ("vecenv.supersuit num_cpus=2", vecenv.supersuit, 2),
    ):
        runs[label] = train(ss, cpus, args.seed, args.n_steps, args.rollouts)
        episodes, params, seconds = runs[label]
        print(f"{label}: {len(episodes)} episodes, mean return {np.mean(episodes):.4f}, {seconds:.1f} s", flush=True)
    (ref_eps, ref_params, _), (our_eps, our_params, _) = runs.values()
    same_returns = ref_eps == our_eps
    same_params = bool(np.array_equal(ref_params, our_params))
    print(f"same episode returns: {same_returns}; same final parameters: {same_params}")
    return 0 if same_returns and same_params else 1


if __name__ == "__main__":
    raise SystemExit(run_main("tutorial_equivalence.py", main))
