"""CleanRL's single-file scripts with vecenv in place of their ``SyncVectorEnv``, without CleanRL.

The scripts build each env with a ``make_env`` closure that seeds the env's action space and
stacks Gymnasium wrappers, two of them over lambdas (``ppo_continuous_action.py``:
``RecordEpisodeStatistics``, ``ClipAction``, ``NormalizeObservation``, ``TransformObservation``,
``NormalizeReward``, ``TransformReward``); the Gymnasium 1.x branch of CleanRL steps them in
``SAME_STEP`` fashion and reads ``infos["final_info"]["episode"]`` with ``"_episode"`` and
``infos["final_obs"]``; the DQN family draws its exploration actions from
``envs.single_action_space.sample()`` in the training process. Each case runs that pattern over
``SyncVectorEnv`` and ``SubprocVectorEnv(..., num_workers=2)`` under every start method and
compares every array, info and sampled action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.engine.test_differential import assert_same
from vecenv.errors import InvalidArgumentError

SEED = 1
NUM_ENVS = 3
#: Pendulum ends every episode by truncation at step 200, so 230 steps cross one autoreset.
STEPS = 230


def make_env(env_id: str, seed: int) -> Callable[[], gym.Env]:
    """CleanRL's ``make_env`` for continuous control, lambdas included (pickled by value)."""

    def thunk() -> gym.Env:
        env = gym.make(env_id)
        env = gym.wrappers.FlattenObservation(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=0.99)
        env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
        env.action_space.seed(seed)
        return env

    return thunk


def drop_time(infos: dict[str, Any]) -> dict[str, Any]:
    """The infos without the episodes' wall-clock lengths (``"t"``), the one value that differs."""
    return {key: drop_time(value) if isinstance(value, dict) else value for key, value in infos.items() if key != "t"}


def rollout(envs: gym.vector.VectorEnv) -> list[Any]:
    """What a CleanRL script reads from the vector env, step by step."""
    seen: list[Any] = [envs.single_observation_space, envs.single_action_space]
    obs, infos = envs.reset(seed=SEED)
    seen += [obs, drop_time(infos)]
    for _ in range(STEPS):
        actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        obs, rewards, terminations, truncations, infos = envs.step(actions)
        seen += [actions, obs, rewards, terminations, truncations, drop_time(infos)]
    envs.close()
    return seen


@pytest.mark.timeout(120)
@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_cleanrl_continuous_pattern_equals_sync_under_every_start_method(context: str) -> None:
    fns = [make_env("Pendulum-v1", SEED + i) for i in range(NUM_ENVS)]
    sync = rollout(SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP))
    sub = rollout(vecenv.SubprocVectorEnv(fns, num_workers=2, autoreset_mode=AutoresetMode.SAME_STEP, context=context))
    assert len(sub) == len(sync)
    for index, (a, b) in enumerate(zip(sync, sub, strict=True)):
        assert_same(a, b, f"item {index}")
    finals = [i for i in sync if isinstance(i, dict) and "final_info" in i]
    assert finals, "the rollout never crossed an episode end"
    assert finals[0]["final_info"]["_episode"].all()


@pytest.mark.timeout(60)
def test_a_single_env_script_needs_num_workers_at_most_its_env_count() -> None:
    """CleanRL's DQN family runs one env: ``num_workers=2`` is refused naming both numbers;
    the default (or ``num_workers=1``) gives Sync's rollout."""
    fns = [make_env("MountainCarContinuous-v0", SEED)]
    with pytest.raises(InvalidArgumentError, match=r"`num_workers`.*\[0, 1\].*got 2"):
        vecenv.SubprocVectorEnv(fns, num_workers=2)
    sync = rollout(SyncVectorEnv(fns))
    sub = rollout(vecenv.SubprocVectorEnv(fns))
    for index, (a, b) in enumerate(zip(sync, sub, strict=True)):
        assert_same(a, b, f"item {index}")
