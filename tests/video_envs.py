"""Envs for the render, video and seed tests, in a module that imports neither torch nor SB3.

:class:`FrameEnv`'s frames say which env drew them, at which step of which episode, so a test can
read a video's frames back and check its episode boundaries; it counts its renders, so a test can
check which envs were asked to render.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class FrameEnv(gym.Env):
    """Episodes of random length (from ``np_random``: 2 to 6 steps, ending by termination or
    truncation); ``render()`` returns a 6x8 RGB frame whose pixel ``[0, 0]`` is
    ``(index, step in episode, episode)`` (mod 256) and counts itself in :attr:`renders`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(self, index: int = 0, render_mode: str | None = "rgb_array") -> None:
        self.index = index
        self.render_mode = render_mode
        self.observation_space = spaces.Box(-10.0, 10.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0
        self.episode = -1
        self.length = 0
        self.renders = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.np_random.uniform(-1, 1)], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.episode += 1
        self.length = int(self.np_random.integers(2, 7))
        return self._obs(), {"seed": seed}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        ended = self.t >= self.length
        terminated = ended and bool(self.np_random.random() < 0.5)
        return self._obs(), float(action) + self.t, terminated, ended and not terminated, {}

    def render(self) -> np.ndarray | None:
        self.renders += 1
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((6, 8, 3), np.uint8)
        frame[0, 0] = (self.index % 256, self.t % 256, self.episode % 256)
        return frame


def frame_fns(num_envs: int, **kwargs: Any) -> list[Any]:
    """One picklable :class:`FrameEnv` constructor per env index."""
    return [functools.partial(FrameEnv, index=i, **kwargs) for i in range(num_envs)]
