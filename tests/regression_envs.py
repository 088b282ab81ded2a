"""Small envs and argument types for the tests of one behaviour each (a reward after a reset,
an argument a worker cannot unpickle, a pipe that hangs up, an observation that does not fit,
a slow step, an info that cannot be deep-copied, spaces of different bounds, the action an env
receives), importable by worker processes as ``tests.regression_envs`` under every start method.

Each env is deterministic: what it returns depends only on its constructor arguments, its seed
and the actions it receives, so ``SyncVectorEnv`` built from the same constructors is the
reference.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.fds import open_fds

__all__ = [
    "PayEnv",
    "UnloadableArgError",
    "UnloadableArg",
    "HangupEnv",
    "BadObsEnv",
    "MarkerEnv",
    "NoDeepcopy",
    "NoDeepcopyInfoEnv",
    "BoundsEnv",
    "ActionRecorderEnv",
    "fns",
    "BUILD_LOCK",
    "locked_cartpole",
]


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
