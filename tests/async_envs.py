"""Envs for the asynchronous-batch tests: seeded results, step times that vary at random.

The delay comes from an unseeded generator, so the order in which worker groups finish changes
from run to run while every env's trajectory stays a function of its seed and actions.
"""

from __future__ import annotations

import random
import time

import gymnasium as gym
import numpy as np


class JitterEnv(gym.Env):
    """Episodes of random length; infos now and then; each step sleeps 0-2 ms at random."""

    metadata = {"render_modes": []}

    def __init__(self, max_delay: float = 0.002) -> None:
        self.observation_space = gym.spaces.Box(-1e6, 1e6, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.max_delay = max_delay
        self._jitter = random.Random()
        self._t = 0
        self._total = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self._t, self._total, self.np_random.random()], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t, self._total = 0, 0.0
        return self._obs(), {"start": int(self.np_random.integers(100))}

    def step(self, action):
        time.sleep(self._jitter.random() * self.max_delay)
        self._t += 1
        self._total += float(action)
        reward = float(self.np_random.normal())
        terminated = bool(self.np_random.random() < 0.08)
        truncated = self._t >= 20
        info = {"odd": self._t} if self._t % 3 == 0 else {}
        return self._obs(), reward, terminated, truncated, info


class GateEnv(JitterEnv):
    """A JitterEnv whose steps wait until the test opens the gate: one byte written to a FIFO.

    The test decides when the step finishes, so "still in flight" is a fact, not a race.
    """

    def __init__(self, gate: str) -> None:
        super().__init__(max_delay=0.0)
        self.gate = gate

    def step(self, action):
        with open(self.gate, "rb") as fifo:
            fifo.read(1)
        return super().step(action)
