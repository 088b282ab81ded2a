"""The benchmark's workloads and its busy envs, also used by ``scripts/train_ppo.py``.

Busy work is a fixed number of pure-Python loop iterations (:func:`burn`), calibrated to time on
this machine by :func:`iterations_per_us`, not a wall-clock spin: it holds the GIL and costs
what a Python env's own step code costs.
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.errors import InvalidArgumentError

STANDARD_WORKLOADS = ("cartpole", "py100us", "py1ms", "wait1ms", "obs84", "atari")
EXTRA_WORKLOADS = ("async-batch", "native-group")
ALL_WORKLOADS = STANDARD_WORKLOADS + EXTRA_WORKLOADS
ATARI_MISSING = "atari: skipped, needs ale-py and opencv-python-headless (pip install -e '.[bench]')"


def burn(iterations: int) -> int:
    """Pure-Python busy work: a fixed number of loop iterations (not a wall-clock spin)."""
    x = 0
    for i in range(iterations):
        x += i
    return x


def iterations_per_us(chunk: int = 50_000, tries: int = 40) -> float:
    """Loop iterations of :func:`burn` per µs here: the fastest of ``tries`` chunks of ``chunk``
    iterations (short chunks, many tries: the minimum dodges a noisy machine's interruptions)."""
    burn(chunk)
    best = float("inf")
    for _ in range(tries):
        t = time.perf_counter()
        burn(chunk)
        best = min(best, time.perf_counter() - t)
    return chunk / (best * 1e6)


class BurnEnv(gym.Env):
    """Burns ``iterations`` Python loop iterations per step; 4 float32 observations, 2 actions.

    With ``tail_prob > 0`` a step costs ``tail_factor`` times more with that probability, drawn
    from the env's own seeded RNG. Episodes end with probability ``1 / episode_len`` per step.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, iterations: int, tail_prob: float = 0.0, tail_factor: int = 10, episode_len: int = 200) -> None:
        self.iterations = int(iterations)
        self.tail_prob = float(tail_prob)
        self.tail_factor = int(tail_factor)
        self.end_prob = 1.0 / episode_len
        self.observation_space = spaces.Box(-1e7, 1e7, (4,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        rng = self.np_random
        n = self.iterations
        if self.tail_prob and rng.random() < self.tail_prob:
            n *= self.tail_factor
        burn(n)
        self._t += 1
        obs = np.array([self._t, action, n, 0.0], np.float32)
        return obs, 1.0, bool(rng.random() < self.end_prob), False, {}


class WaitEnv(BurnEnv):
    """Waits ``seconds`` per step (``time.sleep``) and computes almost nothing: an env whose step
    waits for something outside the process (a simulator, a socket, a device), which leaves its
    core free while it waits. Otherwise a :class:`BurnEnv` of no iterations."""

    def __init__(self, seconds: float, episode_len: int = 200) -> None:
        super().__init__(0, episode_len=episode_len)
        self.seconds = float(seconds)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(self.seconds)
        return super().step(action)


class FrameEnv(gym.Env):
    """84x84x4 uint8 observations (a frame stack), ``iterations`` Python loop iterations per step."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, iterations: int, episode_len: int = 200) -> None:
        self.iterations = int(iterations)
        self.end_prob = 1.0 / episode_len
        self.observation_space = spaces.Box(0, 255, (84, 84, 4), np.uint8)
        self.action_space = spaces.Discrete(2)
        self._frames = np.zeros((84, 84, 4), np.uint8)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._frames[:] = 0
        return self._frames.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        burn(self.iterations)
        self._t += 1
        self._frames[:, :, self._t % 4] = (self._t + int(action)) & 0xFF
        return self._frames.copy(), 1.0, bool(self.np_random.random() < self.end_prob), False, {}


class StepCost(gym.Wrapper):
    """Burns a fixed number of :func:`burn` iterations in every step of the wrapped env, to model
    an env whose step is expensive."""

    def __init__(self, env: gym.Env, iterations: int) -> None:
        super().__init__(env)
        self.iterations = iterations

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        burn(self.iterations)
        return self.env.step(action)


def costly_env(env_id: str, iterations: int) -> gym.Env:
    """``gym.make(env_id)``, in :class:`StepCost` when ``iterations`` is not 0. A module-level
    function, so that worker processes (of any start method) can build it by name."""
    env = gym.make(env_id)
    return StepCost(env, iterations) if iterations else env


def make_atari() -> gym.Env:
    """Pong as Atari agents see it: ``ALE/Pong-v5`` (frameskip=1) in ``AtariPreprocessing``
    (84x84 grayscale, frame_skip=4, no-op starts) and a 4-frame ``FrameStackObservation``:
    (4, 84, 84) uint8 observations, 6 actions, ~500 µs per step."""
    # Imported here, not at module level, so that a spawned or forkserver worker registers the ALE
    # envs too; by name, so that mypy needs no ale_py where the bench extra is not installed.
    gym.register_envs(importlib.import_module("ale_py"))
    env = gym.make("ALE/Pong-v5", frameskip=1)
    env = gym.wrappers.AtariPreprocessing(env)
    return gym.wrappers.FrameStackObservation(env, 4)


def atari_missing() -> str | None:
    """``None`` when the atari workload can run (ale_py and cv2 import), else the note saying why not."""
    try:
        for module in ("ale_py", "cv2"):
            importlib.import_module(module)
    except Exception:  # not installed, or installed but broken (e.g. an OpenCV that needs libGL)
        return ATARI_MISSING
    return None


#: Each workload's env constructor, from the calibration (which sizes the busy envs).
_ENV_FNS: dict[str, Callable[[dict[str, Any]], Callable[[], gym.Env]]] = {
    "cartpole": lambda calib: functools.partial(gym.make, "CartPole-v1"),
    "native-group": lambda calib: functools.partial(gym.make, "CartPole-v1"),
    "py100us": lambda calib: functools.partial(BurnEnv, calib["iters_100us"]),
    "py1ms": lambda calib: functools.partial(BurnEnv, calib["iters_1ms"]),
    "wait1ms": lambda calib: functools.partial(WaitEnv, 1e-3),
    "obs84": lambda calib: functools.partial(FrameEnv, calib["iters_50us"]),
    "atari": lambda calib: make_atari,
    "async-batch": lambda calib: functools.partial(BurnEnv, calib["iters_100us"], tail_prob=0.1, tail_factor=10),
}


def env_fn(workload: str, calib: dict[str, Any]) -> Callable[[], gym.Env]:
    """The env constructor of ``workload``; ``calib`` (from calibration) sizes the busy envs."""
    if workload not in _ENV_FNS:
        raise InvalidArgumentError(f"env_fn: expected a workload of {', '.join(_ENV_FNS)}, got {workload!r}")
    return _ENV_FNS[workload](calib)
