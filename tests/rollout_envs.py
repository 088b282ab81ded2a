"""Environments and policies for tests/test_rollout.py, importable by worker processes.

``CounterEnv`` makes a wrong record visible: its observation is the number of steps taken
in the current episode, so every real transition has ``next_obs == obs + 1``, a reset
observation is 0, and an episode of length L is the records ``0 .. L-1``. Episode lengths
and whether an episode ends by termination or truncation come from the seeded
``np_random``, so different envs finish at different, reproducible times. The reward is
the action, which shows the record pairs an action with the step that consumed it.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces


class CounterEnv(gymnasium.Env):
    """obs = [t] (steps so far in the episode); episodes last 1..max_length steps."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, max_length: int = 7, delay: float = 0.0) -> None:
        self.max_length = max_length
        self.delay = delay  # seconds per step: makes a collection slow enough to interrupt
        self.observation_space = spaces.Box(0.0, float(max_length), shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self._t = 0
        self._length = 1
        self._truncate = False

    def _obs(self) -> np.ndarray:
        return np.array([self._t], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        self._length = int(self.np_random.integers(1, self.max_length + 1))
        self._truncate = bool(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.delay:
            time.sleep(self.delay)
        self._t += 1
        ended = self._t == self._length
        return self._obs(), float(action), ended and not self._truncate, ended and self._truncate, {}


class DictCounterEnv(CounterEnv):
    """CounterEnv with a nested Dict/Tuple observation and a Tuple action.

    obs = {"t": [t], "parity": t % 2, "pair": ([t % 2, t // 2 % 2], [t % 3, t % 4])};
    action = (Discrete(3), Box(-1, 1, (2,))); reward = the discrete part of the action.
    """

    def __init__(self, max_length: int = 7) -> None:
        super().__init__(max_length)
        self.observation_space = spaces.Dict(
            {
                "t": spaces.Box(0.0, float(max_length), shape=(1,), dtype=np.float32),
                "parity": spaces.Discrete(2),
                "pair": spaces.Tuple((spaces.MultiBinary(2), spaces.MultiDiscrete([3, 4]))),
            }
        )
        self.action_space = spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)))

    def _obs(self) -> dict[str, Any]:
        t = self._t
        return {
            "t": np.array([t], dtype=np.float32),
            "parity": np.int64(t % 2),
            "pair": (np.array([t % 2, t // 2 % 2], dtype=np.int8), np.array([t % 3, t % 4], dtype=np.int64)),
        }

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return super().step(action[0])


class LongEpisodeEnv(gymnasium.Env):
    """obs = [t]; every episode lasts exactly ``length`` steps (default: practically never ends).

    For memory tests: with ``episodes=N`` the collector must hold open episodes without
    keeping their rows in memory.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int = 2**62) -> None:
        self.length = length
        self.observation_space = spaces.Box(0.0, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self._t += 1
        return np.array([self._t], dtype=np.float32), float(action), self._t >= self.length, False, {}


class ContinuousCounterEnv(CounterEnv):
    """CounterEnv with a float32 ``Box(-1, 1, (2,))`` action; the reward is the action's sum."""

    def __init__(self, max_length: int = 7) -> None:
        super().__init__(max_length)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        observation, _, terminated, truncated, info = super().step(0)
        return observation, float(np.sum(action)), terminated, truncated, info


def constant_policy(observation: np.ndarray) -> np.ndarray:
    """Always action 2 (reward 2 in CounterEnv)."""
    return np.full(len(observation), 2, dtype=np.int64)


def out_of_space_policy(observation: np.ndarray) -> np.ndarray:
    """Returns action 7 for every env: outside Discrete(3)."""
    return np.full(len(observation), 7, dtype=np.int64)


gymnasium.register(id="RolloutCounter-v0", entry_point="tests.rollout_envs:CounterEnv")
gymnasium.register(id="RolloutDictCounter-v0", entry_point="tests.rollout_envs:DictCounterEnv")
gymnasium.register(id="RolloutLong-v0", entry_point="tests.rollout_envs:LongEpisodeEnv")
gymnasium.register(id="RolloutContinuous-v0", entry_point="tests.rollout_envs:ContinuousCounterEnv")
