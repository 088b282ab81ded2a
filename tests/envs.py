"""Deterministic test envs for the differential tests, importable by worker processes.

Everything an env does depends only on its seed (its own ``np_random``), its constructor
arguments and the actions it receives, so ``SyncVectorEnv`` and ``SubprocVectorEnv`` built from
the same constructors must produce identical results.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "OBS_KINDS",
    "ACT_KINDS",
    "DiffEnv",
    "ReusedInfoEnv",
    "make_obs_space",
    "make_act_space",
    "diff_env_fns",
    "make_group",
    "sync_group",
]

_CHARSET = "abcdefghij"

OBS_KINDS = ("box", "discrete", "dict", "tuple", "text", "tuple_text")
ACT_KINDS = ("discrete", "box", "multidiscrete")


def make_obs_space(kind: str, shape: int = 3) -> spaces.Space:
    """The observation space of ``kind`` (``shape`` varies the box size, for mismatch tests)."""
    if kind == "box":
        return spaces.Box(-100.0, 100.0, (shape,), np.float32)
    if kind == "discrete":
        return spaces.Discrete(1000)
    if kind == "dict":
        return spaces.Dict(
            {
                "pos": spaces.Box(-100.0, 100.0, (2,), np.float32),
                "count": spaces.Discrete(10_000),
                "inner": spaces.Dict(
                    {
                        "flags": spaces.MultiBinary(3),
                        "grid": spaces.Box(0.0, 1.0, (2, 2), np.float64),
                    }
                ),
                "pair": spaces.Tuple((spaces.Discrete(5), spaces.MultiDiscrete([3, 4]))),
            }
        )
    if kind == "tuple":
        return spaces.Tuple(
            (
                spaces.Box(-100.0, 100.0, (2,), np.float32),
                spaces.Dict({"a": spaces.Discrete(7), "b": spaces.Box(-50, 50, (3,), np.int16)}),
                spaces.MultiDiscrete([2, 3]),
            )
        )
    if kind == "text":
        return spaces.Text(max_length=12, min_length=1, charset=_CHARSET)
    if kind == "tuple_text":
        return spaces.Tuple(
            (
                spaces.Text(max_length=8, min_length=1, charset=_CHARSET),
                spaces.Box(-100.0, 100.0, (2,), np.float32),
                spaces.Discrete(4),
            )
        )
    raise ValueError(f"unknown observation kind {kind!r}")


def make_act_space(kind: str) -> spaces.Space:
    if kind == "discrete":
        return spaces.Discrete(4)
    if kind == "box":
        return spaces.Box(-1.0, 1.0, (2,), np.float32)
    if kind == "multidiscrete":
        return spaces.MultiDiscrete([3, 5])
    raise ValueError(f"unknown action kind {kind!r}")


class DiffEnv(gym.Env):
    """An env whose episodes end at random times, with infos that appear only sometimes.

    * Episodes end by termination (probability ``p_term`` per step) or truncation (probability
      ``p_trunc`` per step, or at a per-episode step limit drawn at reset), all drawn from the
      env's own seeded ``np_random``.
    * Infos carry, each only on some steps: a Python int, float and bool, numpy scalars
      (float32, int16, bool_), an array, a string, a list, None, NaN, a nested dict and ``"mixed"`` -- an int in
      even-indexed envs and a float in odd-indexed ones (the batched dtype comes from the first
      env that has the key). ``"act"`` records the type and dtype of the received action, so a
      difference in what the env is handed shows up in the infos.
    * Reset infos record the seed and options the env was given.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        index: int = 0,
        obs_kind: str = "box",
        act_kind: str = "discrete",
        p_term: float = 0.04,
        p_trunc: float = 0.03,
        obs_shape: int = 3,
        render_mode: str | None = None,
        fail_step: int | None = None,
        fail_close: bool = False,
    ) -> None:
        self.index = index
        self.obs_kind = obs_kind
        self.act_kind = act_kind
        self.p_term = p_term
        self.p_trunc = p_trunc
        self.observation_space = make_obs_space(obs_kind, obs_shape)
        self.action_space = make_act_space(act_kind)
        self.render_mode = render_mode
        self.fail_step = fail_step
        self.fail_close = fail_close
        self.closed = False
        self.scale = 1.0  # an attribute for get_attr / set_attr tests
        self.t = 0
        self.limit = 10
        self.total = 0.0
        self.episodes = 0
        self.text = "a"

    # -- helpers ---------------------------------------------------------------------------

    def _action_value(self, action: Any) -> float:
        return float(np.sum(np.asarray(action, dtype=np.float64)))

    def _new_text(self, max_length: int) -> str:
        r = self.np_random
        length = int(r.integers(1, max_length + 1))
        return "".join(_CHARSET[int(i)] for i in r.integers(0, len(_CHARSET), size=length))

    def _obs(self) -> Any:
        r = self.np_random
        k = self.obs_kind
        base = float(np.clip(self.total, -90.0, 90.0))
        if k == "box":
            shape = self.observation_space.shape
            v = r.uniform(-1.0, 1.0, size=shape).astype(np.float32)
            v[0] = base
            v[-1] = self.t
            return v
        if k == "discrete":
            return int(self.t * 7 + int(r.integers(0, 7))) % 1000
        if k == "dict":
            return {
                "pos": np.array([base, r.uniform(-1, 1)], dtype=np.float32),
                "count": np.int64(self.t + 100 * self.episodes),
                "inner": {
                    "flags": r.integers(0, 2, size=3).astype(np.int8),
                    "grid": r.uniform(0.0, 1.0, size=(2, 2)),
                },
                "pair": (int(r.integers(0, 5)), r.integers(0, [3, 4]).astype(np.int64)),
            }
        if k == "tuple":
            return (
                np.array([base, self.t], dtype=np.float32),
                {"a": int(r.integers(0, 7)), "b": r.integers(-50, 51, size=3).astype(np.int16)},
                r.integers(0, [2, 3]).astype(np.int64),
            )
        if k == "text":
            self.text = self._new_text(12)
            return self.text
        if k == "tuple_text":
            self.text = self._new_text(8)
            return (self.text, np.array([base, r.uniform(-1, 1)], dtype=np.float32), self.t % 4)
        raise AssertionError(k)

    def _sometimes_info(self) -> dict[str, Any]:
        r = self.np_random
        u = r.uniform(size=14)
        info: dict[str, Any] = {}
        if u[0] < 0.3:
            info["i_int"] = int(r.integers(-1000, 1000))
        if u[1] < 0.3:
            info["f_float"] = float(r.normal())
        if u[2] < 0.3:
            info["b_bool"] = bool(u[3] < 0.5)
        if u[4] < 0.3:
            info["np_f32"] = np.float32(r.normal())
        if u[5] < 0.3:
            info["np_i16"] = np.int16(r.integers(-300, 300))
        if u[6] < 0.3:
            info["np_bool"] = np.bool_(u[3] < 0.3)
        if u[7] < 0.3:
            info["arr"] = r.normal(size=2)
        if u[8] < 0.3:
            info["s"] = f"env{self.index}-t{self.t}"
        if u[9] < 0.3:
            info["nested"] = {
                "x": int(self.t),
                "deep": {"y": float(r.uniform()), "z": np.arange(3, dtype=np.int32) + self.t},
            }
        if u[10] < 0.3:
            # int in even envs, float in odd ones: the dtype of the batch comes from the first
            # env (in index order) that has the key.
            info["mixed"] = self.t if self.index % 2 == 0 else self.t + 0.5
        if u[11] < 0.2:
            info["nan"] = float("nan")
        if u[12] < 0.2:
            info["lst"] = [self.t, self.index]
        if u[13] < 0.2:
            info["none"] = None
        return info

    # -- the Env API -----------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.total = float(self.np_random.uniform(-1.0, 1.0))
        self.limit = int(self.np_random.integers(3, 40))
        self.episodes += 1
        info = self._sometimes_info()
        info["episode"] = self.episodes
        if seed is not None:
            info["seed"] = seed
        if options is not None:
            info["options"] = repr(sorted(options.items()))
        return self._obs(), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        if self.fail_step is not None and self.t + 1 >= self.fail_step:
            raise RuntimeError(f"env {self.index} fails at step {self.t + 1}")
        self.t += 1
        a = self._action_value(action)
        self.total += a * 0.1 * self.scale
        r = self.np_random
        reward = float(a + r.normal())
        terminated = bool(r.uniform() < self.p_term)
        truncated = bool(r.uniform() < self.p_trunc or self.t >= self.limit)
        info = self._sometimes_info()
        info["act"] = f"{type(action).__name__}:{getattr(action, 'dtype', None)}"
        return self._obs(), reward, terminated, truncated, info

    def render(self) -> Any:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((4, 5, 3), dtype=np.uint8)
        frame[..., 0] = (self.t * 13 + self.index) % 256
        frame[0, 0, 1] = self.episodes % 256
        return frame

    def double(self, x: float, *, plus: float = 0.0) -> float:
        return 2 * x + plus + self.index

    def unpicklable(self) -> Any:
        """A result that cannot cross a pipe (SyncVectorEnv returns it as it is)."""
        return (x for x in range(self.index + 1))

    def close(self) -> None:
        self.closed = True
        if self.fail_close:
            raise RuntimeError(f"env {self.index} fails to close")


class ReusedInfoEnv(DiffEnv):
    """A DiffEnv that returns the same info dict object every time, refilled in place.

    Many envs keep one ``self._info`` dict. ``SyncVectorEnv`` merges an info into the batch
    right when the env returns it, so a later ``reset()`` that refills the dict (as under
    ``SAME_STEP`` autoreset, between ``step`` and the merge of ``final_info``) must not change
    the ``final_info`` already reported.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._info: dict[str, Any] = {}

    def _refill(self, info: dict[str, Any]) -> dict[str, Any]:
        self._info.clear()
        self._info.update(info)
        return self._info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = super().reset(seed=seed, options=options)
        info["phase"] = "reset"
        return obs, self._refill(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        info["phase"] = "step"
        info["step_t"] = self.t
        return obs, reward, terminated, truncated, self._refill(info)


def diff_env_fns(num_envs: int, cls: type = DiffEnv, **kwargs: Any) -> list[Any]:
    """One picklable constructor per env index."""
    return [functools.partial(cls, index=i, **kwargs) for i in range(num_envs)]


def make_group(indices: list[int], cls: type = DiffEnv, **kwargs: Any) -> list[gym.Env]:
    """The envs of one worker for ``SubprocVectorEnv.from_groups``: one env per global index."""
    return [cls(index=i, **kwargs) for i in indices]


def sync_group(indices: list[int], mode: Any) -> gym.vector.VectorEnv:
    """A native vectorized group: a SyncVectorEnv over DiffEnvs with global indices."""
    return gym.vector.SyncVectorEnv([functools.partial(DiffEnv, index=i) for i in indices], autoreset_mode=mode)


class ThreadVarsEnv(gym.Env):
    """Reports the thread-count variables its process sees (``call("thread_vars")``)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def thread_vars(self):
        import os

        return os.environ.get("OMP_NUM_THREADS"), os.environ.get("OPENBLAS_NUM_THREADS")
