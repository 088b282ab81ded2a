"""Envs for the reliability tests (``tests/test_reliability.py``).

Workers import this module as ``tests.reliability_envs`` (cloudpickle pickles these classes by
reference), so it must stay importable from the repository root under every start method.

* :class:`CounterEnv`: its observation is the number of steps since its last reset, so a batch
  whose envs disagree shows a step that reached some envs and not others.
* :class:`OddEnv`: the envs named in ``odds`` each do one odd thing (an unpicklable info value,
  a reward too large for a float, a ``close()`` that raises or hangs); the others are ordinary.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["CounterEnv", "FrameEnv", "OddEnv", "counter_fns", "odd_fns"]


class CounterEnv(gym.Env):
    """Observation ``[steps since reset, seed]``; never ends."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, np.inf, (2,), np.float64)
        self.action_space = spaces.Discrete(2)
        self.count = 0
        self.seed_ = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.count = 0
        self.seed_ = -1 if seed is None else seed
        return np.array([0.0, self.seed_], np.float64), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.count += 1
        return np.array([self.count, self.seed_], np.float64), float(action), False, False, {}


def counter_fns(n: int) -> list[Any]:
    return [CounterEnv for _ in range(n)]


class OddEnv(gym.Env):
    """A small env that misbehaves as ``odd`` says (``None``: it does not).

    ``odd``: ``"lock-info"`` (its step info holds a lock), ``"lock-call"`` (:meth:`handle`
    returns a lock), ``"huge-reward"`` (its reward is
    ``10**400``, an int no float can hold), ``"close-raise"``, ``"close-hang"``.
    """

    def __init__(self, index: int, odd: str | None) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.index = index
        self.odd = odd

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict]:
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        info: dict[str, Any] = {}
        reward: Any = float(action)
        if self.odd == "lock-info":
            info["handle"] = threading.Lock()
        if self.odd == "huge-reward":
            reward = 10**400
        return obs, reward, False, False, info

    def handle(self) -> Any:
        """A method whose result cannot be pickled for ``odd="lock-call"``."""
        return threading.Lock() if self.odd == "lock-call" else self.index

    def close(self) -> None:
        if self.odd == "close-raise":
            raise ValueError(f"injected close error of env {self.index}")
        if self.odd == "close-hang":
            time.sleep(60)


def odd_fns(n: int, odds: dict[int, str]) -> list[Any]:
    """``n`` constructors; env ``i`` misbehaves as ``odds[i]`` says (if given)."""
    return [_Maker(i, odds.get(i)) for i in range(n)]


class _Maker:
    """A picklable constructor (a module-level class, so every start method can import it)."""

    def __init__(self, index: int, odd: str | None) -> None:
        self.args = (index, odd)

    def __call__(self) -> OddEnv:
        return OddEnv(*self.args)


class FrameEnv(gym.Env):
    """Atari-sized frames (84x84x4 uint8), all zeros: cheap to step, large to store."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (84, 84, 4), np.uint8)
        self.action_space = spaces.Discrete(4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros((84, 84, 4), np.uint8), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros((84, 84, 4), np.uint8), 0.0, False, False, {}
