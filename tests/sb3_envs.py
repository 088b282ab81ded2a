"""Envs for tests/test_sb3.py, in a module that imports neither SB3 nor torch.

Workers started with ``spawn`` import the module that defines an env class; keeping these here
keeps those workers light and fast to start.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class InfoEnv(gym.Env):
    """Random episodes that end by termination or truncation, with rich, irregular infos.

    Everything is drawn from ``self.np_random``, so an env's trajectory depends only on its seed
    and actions. Infos mix Python ints, floats and bools, arrays, nested dicts, and are empty on
    some steps, to catch any lossy batching. The reset info records the options received.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, dict_obs: bool = False, max_steps: int = 7, render_mode: str | None = None) -> None:
        self.dict_obs = dict_obs
        self.max_steps = max_steps
        self.render_mode = render_mode
        box = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        if dict_obs:
            self.observation_space = spaces.Dict({"pos": box, "count": spaces.Discrete(16)})
        else:
            self.observation_space = box
        self.action_space = spaces.Discrete(3)
        self.steps = 0
        self.last_options: dict[str, Any] | None = None
        self.resets = 0

    def _obs(self) -> Any:
        pos = self.np_random.uniform(-1.0, 1.0, size=3).astype(np.float32)
        return {"pos": pos, "count": self.steps} if self.dict_obs else pos

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.steps = 0
        self.resets += 1
        self.last_options = options
        info: dict[str, Any] = {"resets": self.resets, "seeded": seed is not None}
        if options is not None:
            info["options"] = options
        return self._obs(), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps += 1
        reward = float(self.np_random.normal()) + int(action)
        terminated = bool(self.np_random.random() < 0.15)
        truncated = self.steps >= self.max_steps
        info: dict[str, Any] = {}
        if self.steps % 2 == 0:
            info = {
                "step": self.steps,
                "score": reward * 2.0,
                "even": True,
                "vec": np.arange(self.steps, dtype=np.int16),
                "nested": {"action": int(action), "tag": "x" * self.steps},
            }
        if terminated:
            info["why"] = "terminated"
        return self._obs(), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode == "rgb_array":
            frame = np.zeros((4, 6, 3), dtype=np.uint8)
            frame[..., 0] = self.steps
            return frame
        return None

    def scaled(self, x: float, factor: float = 1.0) -> float:
        """A method for env_method tests: depends on the env's state and both arguments."""
        return (x + self.steps) * factor

    def process_info(self) -> tuple[int, str | None, list[int]]:
        """Where this env runs: its process id, OMP_NUM_THREADS there, and the cores it may use."""
        import os

        return os.getpid(), os.environ.get("OMP_NUM_THREADS"), sorted(os.sched_getaffinity(0))


class Mark(gym.Wrapper):
    """A wrapper for env_is_wrapped tests."""
