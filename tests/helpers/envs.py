"""Deterministic single-agent test envs, importable by worker processes as ``tests.helpers.envs``.

Everything an env does depends only on its seed (its own ``np_random``), its constructor
arguments and the actions it receives, so ``SyncVectorEnv`` and ``SubprocVectorEnv`` built from
the same constructors must produce identical results. The module imports neither torch nor SB3,
so workers started with ``spawn`` start fast. Sections, in order:

* the differential tests' envs (:class:`DiffEnv` over every observation and action kind);
* one behaviour each (:class:`PayEnv` and its kin: a reward after a reset, an argument a worker
  cannot unpickle, a pipe that hangs up, an observation that does not fit, ...);
* :class:`JitterEnv` and :class:`GateEnv` for the asynchronous batches (seeded results, random
  step times);
* :class:`CounterEnv` and its kin for the datasets (a wrong record is visible), registered as
  ``tests.helpers.envs:RolloutCounter-v0`` and friends;
* :class:`ImageEnv` (images, or a Dict holding one) for the vector wrappers, as ``WrapperImage-v0``;
* :class:`FrameEnv` for render, video and seeds (its frames say who drew them, and when);
* :class:`InfoEnv` and :class:`Mark` for the SB3 drop-in.
"""

from __future__ import annotations

import collections
import functools
import multiprocessing
import os
import random
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.helpers.faults import open_fds

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


class SharedInfoEnv(ReusedInfoEnv):
    """A ReusedInfoEnv whose one info dict is shared by every instance in the process (a class
    attribute, a common slip). ``SyncVectorEnv`` batches each env's info as soon as that env
    returns it, so every env still reports its own values."""

    _shared: dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._info = SharedInfoEnv._shared


class ScalarObsEnv(gym.Env):
    """A shape-() ``Box`` of ``dtype`` whose observation is always ``value`` (a Python scalar),
    for how such values are cast into the batch."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, index: int = 0, dtype: Any = np.int8, value: Any = 1000) -> None:
        self.index = index
        low = 0 if np.dtype(dtype).kind == "b" else -5
        self.observation_space = spaces.Box(low, 1 if low == 0 else 5, (), dtype)
        self.action_space = spaces.Discrete(2)
        self.value = value

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self.value, {}

    def step(self, action: Any):
        return self.value, 0.0, False, False, {}


class DictActionEnv(gym.Env):
    """A ``Dict`` action space (``move``, ``force``); the observation and ``info["keys"]`` say
    what the env received."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.observation_space = spaces.Box(-1e3, 1e3, (2,), np.float32)
        self.action_space = spaces.Dict({"move": spaces.Discrete(3), "force": spaces.Box(-1, 1, (2,), np.float32)})

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return np.array([self.index, 0], np.float32), {}

    def step(self, action: Any):
        obs = np.array([self.index, int(action["move"]) + float(np.sum(action["force"]))], np.float32)
        return obs, float(action["move"]), False, False, {"keys": ",".join(sorted(action))}


def diff_env_fns(num_envs: int, cls: type = DiffEnv, **kwargs: Any) -> list[Any]:
    """One picklable constructor per env index."""
    return [functools.partial(cls, index=i, **kwargs) for i in range(num_envs)]


def make_group(indices: list[int], cls: type = DiffEnv, **kwargs: Any) -> list[gym.Env]:
    """The envs of one worker for ``SubprocVectorEnv.from_groups``: one env per global index."""
    return [cls(index=i, **kwargs) for i in indices]


def sync_group(indices: list[int], mode: Any) -> gym.vector.VectorEnv:
    """A native vectorized group: a SyncVectorEnv over DiffEnvs with global indices."""
    return gym.vector.SyncVectorEnv([functools.partial(DiffEnv, index=i) for i in indices], autoreset_mode=mode)


class OldApiVectorEnv(gym.vector.SyncVectorEnv):
    """A native vector env of :class:`PayEnv`s whose ``step`` returns the old Gym API's 4
    values (``dones`` for terminations and truncations) and whose ``reset`` with ``kind="reset"``
    returns the observations alone."""

    def __init__(self, indices: list[int], kind: str = "step") -> None:
        super().__init__([functools.partial(PayEnv, index=i) for i in indices])
        self.kind = kind

    def reset(self, **kwargs: Any) -> Any:
        obs, infos = super().reset(**kwargs)
        return obs if self.kind == "reset" else (obs, infos)

    def step(self, actions: Any) -> Any:
        obs, rewards, terminations, truncations, infos = super().step(actions)
        return obs, rewards, terminations | truncations, infos


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


# -- one behaviour each ------------------------------------------------------------------------
# Small envs and argument types for the tests of one behaviour each (a reward after a reset,
# an argument a worker cannot unpickle, a pipe that hangs up, an observation that does not fit,
# a slow step, an info that cannot be deep-copied, spaces of different bounds, the action an env
# receives).
#
# Each env is deterministic: what it returns depends only on its constructor arguments, its seed
# and the actions it receives, so ``SyncVectorEnv`` built from the same constructors is the
# reference.


class PayEnv(gym.Env):
    """Pays ``pay`` per step; episodes end after ``horizon`` steps (stale rewards)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, index: int = 0, pay: float = 7.0, horizon: int = 1000) -> None:
        self.index = index
        self.pay = pay
        self.horizon = horizon
        self.observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.index, self.t], np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any):
        self.t += 1
        return self._obs(), float(self.pay), False, self.t >= self.horizon, {}


class NotADictInfoEnv(PayEnv):
    """Returns ``info`` (``None`` by default) instead of a dict, from ``when`` ("reset" or
    "step"); ``SyncVectorEnv`` fails on it when it batches the info."""

    def __init__(self, index: int = 0, when: str = "step", info: Any = None) -> None:
        super().__init__(index)
        self.when, self.info = when, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, self.info if self.when == "reset" else info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, self.info if self.when == "step" else info


class OldApiEnv(PayEnv):
    """Env ``bad`` returns what the old Gym API (or a typo) returns, from its ``reset`` or
    ``step`` (``kind``): ``"step-4"`` (obs, reward, done, info), ``"step-6"`` (an extra value),
    ``"reset-obs"`` (the observation alone), ``"reset-3"`` (an extra value), ``"reset-None"``
    (``None``). The other envs, and env ``bad`` otherwise, behave as :class:`PayEnv`."""

    def __init__(self, index: int = 0, bad: int = 1, kind: str = "step-4") -> None:
        super().__init__(index)
        self.is_bad, self.kind = index == bad, kind

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)
        if not self.is_bad or not self.kind.startswith("reset"):
            return obs, info
        return {"reset-obs": obs, "reset-3": (obs, info, 0), "reset-None": None}[self.kind]

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        if self.is_bad and self.kind == "step-4":
            return obs, reward, terminated or truncated, info
        if self.is_bad and self.kind == "step-6":
            return obs, reward, terminated, truncated, info, 0
        return obs, reward, terminated, truncated, info


class OddValueEnv(PayEnv):
    """Env ``bad`` returns ``value`` as its step's ``column`` (``"reward"``, ``"terminated"`` or
    ``"truncated"``), such as an array of two rewards, which no float array's row holds."""

    def __init__(self, index: int = 0, bad: int = 1, column: str = "reward", value: Any = None) -> None:
        super().__init__(index)
        self.is_bad, self.column, self.value = index == bad, column, value

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        values = {"reward": reward, "terminated": terminated, "truncated": truncated}
        if self.is_bad:
            values[self.column] = self.value
        return obs, values["reward"], values["terminated"], values["truncated"], info


class InfoShapeEnv(PayEnv):
    """Its step's info holds ``{"v": np.zeros(2 * index)}``: an array of another shape in each
    env, which ``SyncVectorEnv`` cannot batch under one key (numpy's broadcasting error)."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"v": np.zeros(2 * self.index)}


class SpacelessEnv(PayEnv):
    """Env ``bad`` has ``space`` (``None`` by default, no ``gymnasium.spaces.Space``) as its
    ``which`` (``"observation_space"`` or ``"action_space"``); ``bad=-1``: every env has."""

    def __init__(self, index: int = 0, bad: int = 0, which: str = "observation_space", space: Any = None) -> None:
        super().__init__(index)
        if bad in (index, -1):
            setattr(self, which, space)


class BareEnv:
    """An env that is no ``gymnasium.Env``: reset, step, its spaces and close, and no
    ``metadata``, ``render_mode`` or ``spec`` (``SyncVectorEnv`` reads env 0's ``metadata`` and
    ``render_mode`` only, and no env's ``spec``). Observations as :class:`PayEnv`'s."""

    def __init__(self, index: int = 0) -> None:
        self.index, self.t = index, 0
        self.observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.t = 0
        return np.array([self.index, self.t], np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return np.array([self.index, self.t], np.float32), 1.0, False, self.t >= 3, {}

    def close(self) -> None:
        pass


def bare_env_at(bad: int, index: int) -> Any:
    """Env ``index`` of a vector env whose env ``bad`` is a :class:`BareEnv`, the others
    :class:`PayEnv`s with the same observations (for ``fns(bare_env_at, n, bad=...)``)."""
    return BareEnv(index) if index == bad else PayEnv(index, pay=1.0, horizon=3)


class MappingInfoEnv(PayEnv):
    """Returns its infos as a mapping that is not a dict (``kind``: ``"UserDict"`` or
    ``"MappingProxyType"``), or, with ``kind="None"``, dict infos but ``None`` from each step
    that ends an episode (after ``2 + index`` steps); ``SyncVectorEnv`` batches the items of a
    mapping, and keeps a final step's info as it is in ``final_info`` under ``SAME_STEP``."""

    def __init__(self, index: int = 0, kind: str = "UserDict") -> None:
        super().__init__(index, horizon=2 + index)
        self.kind = kind

    def _info(self, info: dict[str, Any], ends: bool = False) -> Any:
        if self.kind == "UserDict":
            return collections.UserDict(info)
        if self.kind == "MappingProxyType":
            return types.MappingProxyType(info)
        return None if ends else info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, self._info({"index": self.index, "t": self.t})

    def step(self, action: Any):
        obs, reward, terminated, truncated, _ = super().step(action)
        info = {"t": self.t, "nested": {"x": float(self.t), "arr": np.full(2, self.index)}}
        return obs, reward, terminated, truncated, self._info(info, truncated)


class FinalKeysInfoEnv(PayEnv):
    """Ends an episode every ``2 + index`` steps; its own reset infos hold the keys ``final_obs``
    (a scalar, which fits no observation) and ``final_info``, as an env wrapped in a vector env
    of its own might report them. Under ``SAME_STEP`` those are the reset's info, not the
    step's final observation."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index, horizon=2 + index)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"final_obs": -self.index, "final_info": {"from": "reset"}}


class MixedEndsEnv(PayEnv):
    """Episodes end at random (a quarter of the steps, by termination or truncation); an
    ended episode's final info is empty on most ends and not on the others, its reset info
    too, and now and then the observation comes as float64 (the space is float32): under
    SAME_STEP the final entries come in every mix of these."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, ({} if self.np_random.uniform() < 0.7 else {"reset_draw": int(self.np_random.integers(100))})

    def step(self, action: Any):
        self.t += 1
        u = self.np_random.uniform(size=4)
        obs = self._obs() if u[0] > 0.15 else self._obs().astype(np.float64)
        info = {} if u[1] < 0.6 else {"draw": int(self.np_random.integers(100))}
        return obs, float(self.pay), bool(u[2] < 0.12), bool(0.12 <= u[2] < 0.25), info


class ClashingInfoEnv(PayEnv):
    """Episodes of 2 steps; its infos hold ``"m": 1``, but env ``bad``'s holds the string
    ``"s"`` at the step that ends an episode, and at a reset given ``options={"clash": True}``:
    batched after an earlier env's int, it does not fit the int array (``ValueError``, in
    ``SyncVectorEnv`` too)."""

    def __init__(self, index: int = 0, bad: int = 1) -> None:
        super().__init__(index, horizon=2)
        self.bad = bad

    def _m(self, clash: bool) -> dict[str, Any]:
        return {"m": "s" if clash and self.index == self.bad else 1}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, self._m(bool((options or {}).get("clash")))

    def step(self, action: Any):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, self._m(truncated)


class SlowReplacementEnv(PayEnv):
    """Env ``dies`` ends its worker (``os._exit``) at its second step, after creating
    ``marker``; built again while ``marker`` exists (its replacement), it takes ``build_s`` to
    build: a restart whose rebuild outlasts the call that found the death."""

    def __init__(self, index: int = 0, marker: str = "", dies: int = 1, build_s: float = 60.0) -> None:
        super().__init__(index)
        self.marker, self.dies = marker, index == dies
        if self.dies and os.path.exists(marker):
            time.sleep(build_s)

    def step(self, action: Any):
        if self.dies and self.t == 1:
            open(self.marker, "w").close()
            os._exit(7)
        return super().step(action)


# -- an argument the worker cannot unpickle -------------------------------------------


class UnloadableArgError(ValueError):
    """Raised while rebuilding an :class:`UnloadableArg` in a worker."""


def _rebuild_unloadable(tag: str) -> UnloadableArg:
    if multiprocessing.parent_process() is not None:  # in a worker (a child process) only
        raise UnloadableArgError(f"cannot rebuild UnloadableArg({tag!r}) in this process")
    return UnloadableArg(tag)


class UnloadableArg:
    """Pickles in the parent; unpickling it in a worker raises :class:`UnloadableArgError` (as a
    class defined in a notebook, or a ``__setstate__`` that fails, would)."""

    def __init__(self, tag: str = "x") -> None:
        self.tag = tag

    def __reduce__(self) -> Any:
        return _rebuild_unloadable, (self.tag,)


# -- a worker whose pipe hangs up while its process lives -----------------------------


class HangupEnv(PayEnv):
    """``hangup()`` closes every socket of its process (the worker's end of its pipe is one) and
    starts a non-daemon thread that keeps the process alive ``linger`` seconds."""

    def hangup(self, linger: float = 6.0) -> int:
        threading.Thread(target=time.sleep, args=(linger,), name="linger", daemon=False).start()
        closed = 0
        for fd, target in open_fds().items():
            if target.startswith("socket:"):
                os.close(fd)
                closed += 1
        return closed


# -- observations that do not fit the space ------------------------------------------


class BadObsEnv(gym.Env):
    """Env ``bad`` returns a scalar for ``Box((4,))`` (``kind="box"``) or a float for ``Discrete``
    (``kind="discrete"``), at reset (``when="reset"``) or at the first step (``when="step"``)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, index: int = 0, bad: int = 3, kind: str = "box", when: str = "reset") -> None:
        self.index = index
        self.is_bad = index == bad
        self.kind = kind
        self.when = when
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32) if kind == "box" else spaces.Discrete(5)
        self.action_space = spaces.Discrete(2)

    def _obs(self, phase: str) -> Any:
        bad = self.is_bad and phase == self.when
        if self.kind == "box":
            return np.float32(0.5) if bad else np.full((4,), 0.25, np.float32)
        return 1.5 if bad else 1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self._obs("reset"), {}

    def step(self, action: Any):
        return self._obs("step"), 0.0, False, False, {}


class LooseStructEnv(gym.Env):
    """Structured observations in the loose forms ``SyncVectorEnv`` batches: a ``Tuple`` value as
    a list (``kind="tuple-list"``), a ``Tuple`` value with an extra item (``"tuple-extra"``), a
    ``Dict`` value with an extra key (``"dict-extra"``). Values count the steps."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, index: int = 0, kind: str = "tuple-list") -> None:
        self.index, self.kind, self.t = index, kind, 0
        parts = (spaces.Discrete(50), spaces.Box(-1e3, 1e3, (2,), np.float32))
        self.observation_space = spaces.Dict(dict(zip("ab", parts))) if kind == "dict-extra" else spaces.Tuple(parts)
        self.action_space = spaces.Discrete(2)

    def _obs(self) -> Any:
        a, b = self.t + self.index, np.array([self.index, self.t], np.float32)
        if self.kind == "dict-extra":
            return {"b": b, "debug": "not in the space", "a": a}
        return [a, b] if self.kind == "tuple-list" else (a, b, "not in the space")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any):
        self.t += 1 + int(action)
        return self._obs(), 1.0, False, self.t >= 6, {}


class ActionReprEnv(PayEnv):
    """A ``Discrete(3)`` action space; the env takes ``int(action)`` and reports what it got."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index)
        self.action_space = spaces.Discrete(3)

    def step(self, action: Any):
        obs, reward, terminated, truncated, _ = super().step(0)
        return obs, reward + int(action), terminated, truncated, {"action": repr(action)}


# -- close() after a timed-out step --------------------------------------------------


class MarkerEnv(PayEnv):
    """Sleeps ``delay`` seconds in every step; ``close()`` writes ``<marker_dir>/closed-<index>``."""

    def __init__(self, index: int = 0, marker_dir: str = "", delay: float = 0.5) -> None:
        super().__init__(index)
        self.marker_dir = marker_dir
        self.delay = delay

    def step(self, action: Any):
        time.sleep(self.delay)
        return super().step(action)

    def close(self) -> None:
        with open(os.path.join(self.marker_dir, f"closed-{self.index}"), "w") as f:
            f.write(str(os.getpid()))


# -- an info value that pickles but cannot be deep-copied ---------------------------


class NoDeepcopy:
    """Pickles (it crosses a pipe) but ``copy.deepcopy`` raises, like a handle would."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __deepcopy__(self, memo: Any) -> NoDeepcopy:
        raise TypeError("NoDeepcopy cannot be deep-copied")

    def __eq__(self, other: object) -> bool:
        return type(other) is NoDeepcopy and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"NoDeepcopy({self.value})"


class NoDeepcopyInfoEnv(PayEnv):
    """Episodes of ``2 + index`` steps; the last step's info holds a :class:`NoDeepcopy`."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index, pay=1.0, horizon=2 + index)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = super().step(action)
        if truncated:
            info = {"handle": NoDeepcopy(100 * self.index + self.t), "t": self.t}
        return obs, reward, terminated, truncated, info


# -- observation spaces of different bounds -----------------------------------------


class BoundsEnv(PayEnv):
    """A ``Box((2,))`` observation space whose bounds depend on ``index``: equal shape and dtype,
    different spaces."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index)
        self.observation_space = spaces.Box(-1e3 * (1 + index), 1e3 * (1 + index), (2,), np.float32)


class LooseEnv(BoundsEnv):
    """Observation and action bounds of its own (``BoundsEnv``); a ``Box`` action it echoes into
    its reward, so each env is seen to get its own row; ``size`` sets the observation's length.
    (Here, not in ``tests/integrations/test_sb3.py``: a worker that unpickles it imports its
    module, and that one imports SB3 and torch, seconds of CPU in every Ray actor.)"""

    def __init__(self, index: int = 0, size: int = 2) -> None:
        super().__init__(index)
        self.size = size
        self.observation_space = spaces.Box(-1e3 * (1 + index), 1e3 * (1 + index), (size,), np.float32)
        self.action_space = spaces.Box(-1.0 - index, 1.0 + index, (1,), np.float32)

    def _obs(self) -> np.ndarray:
        return np.resize(super()._obs(), self.size)

    def step(self, action: Any):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float(np.asarray(action).item()), terminated, truncated, info


# -- what action each env is handed -------------------------------------------------


class ActionRecorderEnv(PayEnv):
    """A ``Box((1,))`` action space; :meth:`last_action` describes the action it last received."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.last: Any = None

    def step(self, action: Any):
        self.last = action
        return super().step(0)

    def last_action(self) -> tuple[str, str, tuple[int, ...], float]:
        a = self.last
        return type(a).__name__, str(np.asarray(a).dtype), tuple(np.shape(a)), float(np.sum(a))


class AnyActionEnv(PayEnv):
    """Takes actions of any given ``action_space`` and reports each one's ``repr`` in its info,
    so what the env was handed shows in the results (a step that skipped it shows no info)."""

    def __init__(self, index: int = 0, action_space: spaces.Space | None = None) -> None:
        super().__init__(index)
        self.action_space = action_space if action_space is not None else spaces.Discrete(2)

    def step(self, action: Any):
        obs, reward, terminated, truncated, _ = super().step(0)
        return obs, reward, terminated, truncated, {"action": repr(action)}


def any_action_group(indices: list[int], action_space: spaces.Space) -> gym.vector.VectorEnv:
    """A native vectorized group: a SyncVectorEnv over :class:`AnyActionEnv` with global indices."""
    envs = [functools.partial(AnyActionEnv, index=i, action_space=action_space) for i in indices]
    return gym.vector.SyncVectorEnv(envs)


class EmptyObservationEnv(PayEnv):
    """Observes an empty ``Tuple``: every observation is ``()``; pays, steps and ends as
    :class:`PayEnv` does."""

    def __init__(self, index: int = 0) -> None:
        super().__init__(index)
        self.observation_space = spaces.Tuple(())

    def _obs(self) -> Any:
        return ()


class OneLeafEnv(PayEnv):
    """Observes a ``Tuple`` holding one ``Box`` and takes a ``Dict`` holding one ``Box``: trees
    of one array, which reach the env and a policy as trees. The observation records the
    action received (``(index, t, action)``), the info its type; episodes end after
    ``horizon`` steps."""

    def __init__(self, index: int = 0, horizon: int = 3) -> None:
        super().__init__(index, horizon=horizon)
        self.observation_space = spaces.Tuple((spaces.Box(-1e6, 1e6, (3,), np.float32),))
        self.action_space = spaces.Dict({"move": spaces.Box(-1.0, 1.0, (1,), np.float32)})
        self.received = 0.0

    def _obs(self) -> Any:
        return (np.array([self.index, self.t, self.received], np.float32),)

    def step(self, action: Any):
        self.received = float(action["move"][0])
        obs, reward, terminated, truncated, _ = super().step(0)
        return obs, reward, terminated, truncated, {"action": type(action).__name__}


def one_leaf_policy(observations: Any) -> dict[str, np.ndarray]:
    """A row-wise policy for :class:`OneLeafEnv`: takes its Tuple, returns its Dict."""
    (rows,) = observations  # a bare array here would fail to unpack into one row per env
    return {"move": (rows[:, :1] % 3 - 1).astype(np.float32) / 2}


def fns(cls: type, n: int, **kwargs: Any) -> list[Any]:
    """``n`` picklable constructors, env ``i`` built as ``cls(index=i, **kwargs)``."""
    return [functools.partial(cls, index=i, **kwargs) for i in range(n)]


#: Held by a thread of the test process in ``test_host``: a worker forked while it is held
#: would inherit it held, and :func:`locked_cartpole` would wait for it forever.
BUILD_LOCK = threading.Lock()


def locked_cartpole() -> gym.Env:
    """A CartPole built under :data:`BUILD_LOCK`, as a library's init may take a lock of its own."""
    with BUILD_LOCK:
        return gym.make("CartPole-v1")


# -- asynchronous batches ----------------------------------------------------------------------
# Envs for the asynchronous-batch tests: seeded results, step times that vary at random.
#
# The delay comes from an unseeded generator, so the order in which worker groups finish changes
# from run to run while every env's trajectory stays a function of its seed and actions.


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


# -- datasets ----------------------------------------------------------------------------------
# Environments and policies for the dataset tests (tests/datasets/).
#
# ``CounterEnv`` makes a wrong record visible: its observation is the number of steps taken
# in the current episode, so every real transition has ``next_obs == obs + 1``, a reset
# observation is 0, and an episode of length L is the records ``0 .. L-1``. Episode lengths
# and whether an episode ends by termination or truncation come from the seeded
# ``np_random``, so different envs finish at different, reproducible times. The reward is
# the action, which shows the record pairs an action with the step that consumed it.


class CounterEnv(gym.Env):
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


class GlobalDrawsEnv(gym.Env):
    """obs = draws from the process's global generators (numpy's legacy ``np.random``, ``random``),
    as env code that never touches its own ``np_random`` makes them, in ``reset`` and ``step``."""

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float64)
    action_space = spaces.Discrete(2)

    def _obs(self) -> np.ndarray:
        return np.array([np.random.rand(), random.random()])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return self._obs(), 0.0, False, False, {}


def global_draws_seeded_in_constructor(seed: int = 7) -> GlobalDrawsEnv:
    """A :class:`GlobalDrawsEnv` whose constructor seeds the global generators, as legacy env
    code does."""
    np.random.seed(seed)
    random.seed(seed)
    return GlobalDrawsEnv()


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


class DictEndsAtEnv(gym.Env):
    """A Dict observation whose episodes end after ``length`` steps: each env ends at its own.
    (Here, not in a test module that imports TorchRL: spawned workers import the env's module.)"""

    def __init__(self, length: int) -> None:
        self.length = length
        self.observation_space = spaces.Dict(
            {"pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "count": spaces.Box(0, 100, (1,), np.int64)}
        )
        self.action_space = spaces.Discrete(3)
        self.t = 0

    def _obs(self) -> dict:
        return {"pos": self.np_random.uniform(-1, 1, 2).astype(np.float32), "count": np.array([self.t])}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        self.t += 1
        return self._obs(), float(action), self.t >= self.length, False, {}


class LongEpisodeEnv(gym.Env):
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


def constant_policy_with_extras(observation: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """:func:`constant_policy`'s actions, with a value per row beside them (as a learner's
    policy returns them)."""
    actions = constant_policy(observation)
    return actions, {"value": np.zeros(len(actions), np.float32)}


class RecurrentConstantPolicy:
    """:func:`constant_policy` with a per-env state (a step count): a recurrent policy."""

    def initial_state(self, num_envs: int) -> np.ndarray:
        return np.zeros(num_envs, np.int64)

    def __call__(self, observation: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, None, np.ndarray]:
        return constant_policy(observation), None, state + 1


recurrent_constant_policy = RecurrentConstantPolicy()


def out_of_space_policy(observation: np.ndarray) -> np.ndarray:
    """Returns action 7 for every env: outside Discrete(3)."""
    return np.full(len(observation), 7, dtype=np.int64)


def out_of_space_at_step_5_policy(observation: np.ndarray) -> np.ndarray:
    """:func:`constant_policy`, until an episode of CounterEnv reaches step 5: action 7 there."""
    actions = np.asarray(constant_policy(observation), dtype=np.int64)
    return np.where(np.asarray(observation).reshape(len(actions), -1).max(axis=1) >= 5, 7, actions)


def raising_policy(observation: np.ndarray) -> np.ndarray:
    """:func:`constant_policy`, until an episode of CounterEnv reaches step 5: it raises there."""
    if (np.asarray(observation) >= 5).any():
        raise RuntimeError("the policy refuses step 5")
    return constant_policy(observation)


gym.register(id="RolloutCounter-v0", entry_point="tests.helpers.envs:CounterEnv")
gym.register(id="RolloutDictCounter-v0", entry_point="tests.helpers.envs:DictCounterEnv")
gym.register(id="RolloutLong-v0", entry_point="tests.helpers.envs:LongEpisodeEnv")
gym.register(id="RolloutContinuous-v0", entry_point="tests.helpers.envs:ContinuousCounterEnv")


class ImageEnv(gym.Env):
    """Random 8x6 RGB images (or, with ``dict_obs=True``, a Dict of such an image, a 2x2 Box
    and a Discrete) and a 2-d Box action, for the observation and action wrappers of
    ``tests/engine/test_wrappers.py``. Episodes end after 3 to 8 steps, by termination or
    truncation; the reward is the action's sum, which reaches past the bounds it is drawn in."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, dict_obs: bool = False, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.dict_obs = dict_obs
        image = spaces.Box(0, 255, (8, 6, 3), np.uint8)
        self.observation_space: spaces.Space = image
        if dict_obs:
            parts = {"image": image, "vec": spaces.Box(-5.0, 5.0, (2, 2), np.float32), "d": spaces.Discrete(3)}
            self.observation_space = spaces.Dict(parts)
        self.action_space = spaces.Box(-2.0, 2.0, (2,), np.float32)
        self.t = 0
        self.length = 0

    def _obs(self) -> Any:
        image = self.np_random.integers(0, 256, (8, 6, 3), dtype=np.uint8)
        if not self.dict_obs:
            return image
        vec = self.np_random.uniform(-5.0, 5.0, (2, 2)).astype(np.float32)
        return {"image": image, "vec": vec, "d": int(self.np_random.integers(3))}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(3, 9))
        return self._obs(), {"length": self.length}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        ended = self.t >= self.length
        terminated = ended and self.t % 2 == 0
        return self._obs(), float(np.sum(action)), terminated, ended and not terminated, {"action": np.asarray(action)}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((8, 6, 3), np.uint8)
        frame[0, 0, 0] = self.t
        return frame


gym.register(id="WrapperImage-v0", entry_point="tests.helpers.envs:ImageEnv")


# -- render, video and seeds -------------------------------------------------------------------
# Envs for the render, video and seed tests, in a module that imports neither torch nor SB3.
#
# :class:`FrameEnv`'s frames say which env drew them, at which step of which episode, so a test can
# read a video's frames back and check its episode boundaries; it counts its renders, so a test can
# check which envs were asked to render.


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


class BadFrameEnv(FrameEnv):
    """A :class:`FrameEnv` whose env ``bad`` renders ``spoil(frame)`` instead of its frame from
    step ``at`` of each episode on (``spoil`` a module-level function, so that it pickles); the
    other envs render as FrameEnv. The spoilers are the ``*_frame`` functions below."""

    def __init__(self, spoil: Callable[[np.ndarray], Any], index: int = 0, bad: int = 1, at: int = 1) -> None:
        super().__init__(index)
        self.bad, self.spoil, self.at = bad, spoil, at

    def render(self) -> Any:
        frame = super().render()
        return self.spoil(frame) if self.index == self.bad and self.t >= self.at else frame


def listed_frame(frame: np.ndarray) -> Any:
    """Not an array: the frame as nested lists."""
    return frame.tolist()


def flat_frame(frame: np.ndarray) -> np.ndarray:
    """An array, but 1-d: no image."""
    return frame.ravel()


def five_channel_frame(frame: np.ndarray) -> np.ndarray:
    """An array of (height, width, 5): no image format has 5 channels."""
    return np.zeros(frame.shape[:2] + (5,), frame.dtype)


def taller_frame(frame: np.ndarray) -> np.ndarray:
    """An image one row taller than the episode's first frame: no movie changes size."""
    return np.zeros((frame.shape[0] + 1,) + frame.shape[1:], frame.dtype)


def float_frame(frame: np.ndarray) -> np.ndarray:
    """The frame as float64, each value plus 0.75 (a cast to uint8 drops it), and its last pixel
    (300, -5, 255.9): beyond uint8's range, clipped to (255, 0, 255)."""
    spoilt = frame.astype(np.float64) + 0.75
    spoilt[-1, -1] = (300.0, -5.0, 255.9)
    return spoilt


def complex_frame(frame: np.ndarray) -> np.ndarray:
    """An image-shaped array of complex numbers: no pixels."""
    return frame.astype(np.complex128)


def frame_fns(num_envs: int, **kwargs: Any) -> list[Any]:
    """One picklable :class:`FrameEnv` constructor per env index."""
    return [functools.partial(FrameEnv, index=i, **kwargs) for i in range(num_envs)]


# -- the SB3 drop-in ---------------------------------------------------------------------------
# Envs for tests/integrations/test_sb3.py; this module imports neither SB3 nor torch.
#
# Workers started with ``spawn`` import the module that defines an env class; keeping these here
# keeps those workers light and fast to start.


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


def greedy_module() -> Any:
    """A CPU torch module for Box(3) observations and Discrete(4) actions: the argmax of a linear
    map, its weights zero and its bias picking action 2 (so a weight push is seen in the actions).
    The class is made here, so that it travels to the workers by value, as a user's would."""
    import torch

    class Greedy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 4)

        def forward(self, obs: Any) -> Any:
            return self.linear(obs).argmax(dim=1)

    module = Greedy()
    with torch.no_grad():
        module.linear.weight.zero_()
        module.linear.bias.copy_(torch.tensor([0.0, 0.0, 5.0, 0.0]))
    return module
