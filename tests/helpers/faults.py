"""Faults on purpose and the checks that nothing leaked, importable by worker processes as
``tests.helpers.faults`` (cloudpickle pickles these classes by reference), so it must stay
importable from the repository root under every start method.

:class:`FaultEnv` is a small deterministic env (its trajectory depends only on the reset seed and
the actions) that injects one fault:

* ``fault``: what happens -- ``"raise"`` (``ValueError``), ``"exit"`` (``os._exit(3)``),
  ``"segv"`` (read address 0 with ctypes), ``"hang"`` (sleeps in a loop forever), ``"sleep"``
  (sleeps ``duration`` seconds once, then carries on), ``"unpicklable"`` (raises
  :class:`UnpicklableError`, which holds a lock), ``"unloadable"`` (raises
  :class:`UnloadableError`, which pickles but cannot be unpickled), or ``None`` (a healthy env).
* ``where``: in which method -- ``"init"``, ``"reset"``, ``"step"``, ``"call"`` (the method
  :meth:`FaultEnv.boom`) or ``"close"``.
* ``target``: the env index that faults (every env is told its own ``index``).
* ``at``: the fault fires on the ``at``-th call (1-based) of that method in the env's lifetime,
  once; resets do not restart the count, so an env that raised once behaves afterwards.

A healthy ``FaultEnv(index=i)`` in a ``SyncVectorEnv`` is the reference the tests compare with.
``pid_dir``: when given, each env writes a file named after its process id there on construction
(before any ``init`` fault), so tests can find worker pids even when the constructor fails.
``once``: a file path; the fault fires only if that file does not exist yet (the env creates it
first), so the replacement of a worker that a fault killed does not die the same way.

Also here: :class:`EndlessCounterEnv` and :class:`OddEnv` (the reliability tests),
:func:`open_fds` (this process's descriptors, for leak checks) and :func:`transport_of`, the one
place tests reach past a vector env's public API.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing.connection
import os
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.wire import fastpath

OBS_SHAPE = (3,)
ACT_SHAPE = (2,)


class UnpicklableError(Exception):
    """An exception that cannot be pickled: it holds a lock."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class UnloadableError(Exception):
    """Pickles, but unpickling calls ``__init__`` with the message only and fails (2 args needed)."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what}: {detail}")
        self.what = what
        self.detail = detail


def fire(fault: str, where: str, index: int, duration: float) -> None:
    """Inject ``fault`` now."""
    message = f"injected fault in {where} of env {index}"
    if fault == "raise":
        raise ValueError(message)
    if fault == "exit":
        os._exit(3)
    if fault == "segv":
        ctypes.string_at(0)  # SIGSEGV
        raise AssertionError("unreachable: reading address 0 did not crash")
    if fault == "hang":
        while True:  # waits for something that never comes
            time.sleep(0.05)
    if fault == "sleep":
        time.sleep(duration)
        return
    if fault == "unpicklable":
        raise UnpicklableError(message)
    if fault == "unloadable":
        raise UnloadableError("injected unloadable fault", f"{where} of env {index}")
    raise ValueError(f"unknown fault {fault!r}")


class FaultEnv(gym.Env):
    """A deterministic env with one optional injected fault (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(
        self,
        index: int = 0,
        fault: str | None = None,
        where: str = "step",
        target: int = 0,
        at: int = 1,
        duration: float = 1.0,
        horizon: int = 5,
        pid_dir: str | None = None,
        once: str | None = None,
    ) -> None:
        self.index = index
        self.fault = fault
        self.where = where
        self.at = at
        self.duration = duration
        self.armed = fault is not None and index == target
        self.once = once
        self.horizon = horizon + index % 3  # envs end at different steps
        self.counts = {"reset": 0, "step": 0, "call": 0, "close": 0}
        self.observation_space = spaces.Box(-10.0, 10.0, OBS_SHAPE, np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, ACT_SHAPE, np.float32)
        self.t = 0
        self.state = np.zeros(OBS_SHAPE, np.float32)
        if pid_dir is not None:
            with open(os.path.join(pid_dir, str(os.getpid())), "w") as f:
                f.write(str(self.index))
        if self.armed and where == "init":
            fire(fault, "init", index, duration)

    def _maybe_fault(self, where: str) -> None:
        if not self.armed or self.where != where:
            return
        self.counts[where] += 1
        if self.counts[where] == self.at:
            if self.once is not None:
                if os.path.exists(self.once):
                    return
                with open(self.once, "w") as f:
                    f.write(str(os.getpid()))
            fire(self.fault, where, self.index, self.duration)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._maybe_fault("reset")
        self.t = 0
        self.state = self.np_random.uniform(-1.0, 1.0, OBS_SHAPE).astype(np.float32)
        return self.state.copy(), {"index": self.index}

    def step(self, action):
        self._maybe_fault("step")
        self.t += 1
        action = np.asarray(action, dtype=np.float64)
        noise = self.np_random.normal(0.0, 0.1, OBS_SHAPE)
        delta = np.array([action[0], action[1], action[0] * action[1]]) + noise
        self.state = np.clip(self.state + delta, -10.0, 10.0).astype(np.float32)
        reward = float(action.sum() + self.np_random.uniform())
        terminated = self.t >= self.horizon
        return self.state.copy(), reward, terminated, False, {"t": self.t}

    def boom(self) -> int:
        """The method that ``call`` faults inject into."""
        self._maybe_fault("call")
        return self.index

    def ping(self) -> str:
        return f"pong {self.index}"

    def size_of(self, value: Any) -> int:
        """The bytes of ``value`` (a method that takes a large argument)."""
        return int(np.asarray(value).nbytes)

    def close(self) -> None:
        self._maybe_fault("close")


def healthy_fns(n: int, **kwargs: Any) -> list:
    """``n`` constructors of healthy envs (no fault)."""
    return [functools.partial(FaultEnv, index=i, **kwargs) for i in range(n)]


def fault_fns(n: int, fault: str, where: str, target: int, **kwargs: Any) -> list:
    """``n`` env constructors; env ``target`` injects ``fault`` in ``where``."""
    return [functools.partial(FaultEnv, index=i, fault=fault, where=where, target=target, **kwargs) for i in range(n)]


# -- the reliability tests ---------------------------------------------------------------------
# Envs for the reliability tests (``tests/engine/test_reliability.py``).
#
# * :class:`EndlessCounterEnv`: its observation is the number of steps since its last reset, so a
#   batch whose envs disagree shows a step that reached some envs and not others.
# * :class:`OddEnv`: the envs named in ``odds`` each do one odd thing (an unpicklable info value,
#   a reward too large for a float, a ``close()`` that raises or hangs); the others are ordinary.


class EndlessCounterEnv(gym.Env):
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
    return [EndlessCounterEnv for _ in range(n)]


class ElsewhereError(ValueError):
    """Raised by unpickling a :class:`HomeBound` in another process than the one that made it."""


def _rebuild_home_bound(pid: int) -> HomeBound:
    if pid != os.getpid():
        raise ElsewhereError(f"a HomeBound made in process {pid} cannot be rebuilt in process {os.getpid()}")
    return HomeBound(pid)


class HomeBound:
    """Pickles anywhere; unpickling it in any process but the one that made it raises
    :class:`ElsewhereError` (as a ``__setstate__`` that needs the worker's process would): a
    worker's reply that holds one cannot be rebuilt in the parent, on every backend."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = os.getpid() if pid is None else pid

    def __reduce__(self) -> Any:
        return _rebuild_home_bound, (self.pid,)


class OddEnv(gym.Env):
    """A small env that misbehaves as ``odd`` says (``None``: it does not).

    ``odd``: ``"lock-info"`` (its step info holds a lock), ``"lock-call"`` (:meth:`handle`
    returns a lock), ``"home-info"`` and ``"home-call"`` (the same with a :class:`HomeBound`,
    which pickles but cannot be rebuilt in the parent), ``"gen-info"`` and ``"gen-reset-info"``
    (its step's, or its reset's, info holds a generator two dicts down, beside values that
    pickle), ``"huge-reward"`` (its reward is
    ``10**400``, an int no float can hold), ``"close-raise"``, ``"close-hang"``.
    """

    def __init__(self, index: int, odd: str | None) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.index = index
        self.odd = odd

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        info = _generator_info() if self.odd == "gen-reset-info" else {}
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), info

    def step(self, action: Any) -> tuple[np.ndarray, Any, bool, bool, dict]:
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        info: dict[str, Any] = {}
        reward: Any = float(action)
        if self.odd == "lock-info":
            info["handle"] = threading.Lock()
        if self.odd == "home-info":
            info["handle"] = HomeBound()
        if self.odd == "gen-info":
            info = _generator_info()
        if self.odd == "huge-reward":
            reward = 10**400
        return obs, reward, False, False, info

    def handle(self) -> Any:
        """A method whose result cannot be pickled for ``odd="lock-call"``, nor rebuilt in another
        process for ``odd="home-call"``."""
        if self.odd == "lock-call":
            return threading.Lock()
        return HomeBound() if self.odd == "home-call" else self.index

    def close(self) -> None:
        if self.odd == "close-raise":
            raise ValueError(f"injected close error of env {self.index}")
        if self.odd == "close-hang":
            time.sleep(60)


def _generator_info() -> dict[str, Any]:
    """An info whose one value that cannot be pickled (a generator) is ``info['stats']['pending']``."""
    return {"count": 1, "stats": {"mean": 0.5, "pending": (i for i in range(3)), "seen": [1, 2]}}


def odd_fns(n: int, odds: dict[int, str]) -> list[Any]:
    """``n`` constructors; env ``i`` misbehaves as ``odds[i]`` says (if given)."""
    return [_Maker(i, odds.get(i)) for i in range(n)]


class _Maker:
    """A picklable constructor (a module-level class, so every start method can import it)."""

    def __init__(self, index: int, odd: str | None) -> None:
        self.args = (index, odd)

    def __call__(self) -> OddEnv:
        return OddEnv(*self.args)


class HeldEnv(FaultEnv):
    """A healthy :class:`FaultEnv` whose ``step`` waits (at most ``hold_s``) while the file
    ``{hold_dir}/env{index}`` exists: a test decides, after the envs are placed, which of them
    have a step in flight when it pulls something from under them (a Ray node)."""

    def __init__(self, index: int, hold_dir: str, hold_s: float = 60.0) -> None:
        super().__init__(index=index)
        self.hold_file = os.path.join(hold_dir, f"env{index}")
        self.hold_s = hold_s

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        end = time.monotonic() + self.hold_s
        while os.path.exists(self.hold_file) and time.monotonic() < end:
            time.sleep(0.01)  # the env's own stand-in for a slow step, not a test's synchronisation
        return super().step(action)


def held_fns(n: int, hold_dir: str) -> list:
    """``n`` constructors of :class:`HeldEnv` holding on files in ``hold_dir``."""
    return [functools.partial(HeldEnv, index=i, hold_dir=hold_dir) for i in range(n)]


# -- leak checks -------------------------------------------------------------------------------
# This process's open file descriptors, for the tests' leak checks.


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


def open_fds() -> dict[int, str]:
    """Each open descriptor and what it points to (``readlink`` of ``/proc/self/fd/N``)."""
    table = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            table[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the descriptor of the listing itself, closed by now
    return table


# -- internals -----------------------------------------------------------------------------------


class Silent(gym.Wrapper):
    """An env whose resets and steps return empty infos: a rollout of it answers with nothing
    but "done" (under SAME_STEP too, where its ends' infos are its final observations alone)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        return self.env.reset(seed=seed, options=options)[0], {}

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict]:
        return (*self.env.step(action)[:4], {})


def _silent(fn: Any) -> gym.Env:
    return Silent(fn())


def silent_fns(fns: list) -> list:
    """``fns`` whose envs return empty infos (see :class:`Silent`)."""
    return [functools.partial(_silent, fn) for fn in fns]


def done_words(envs: Any) -> list[int]:
    """Each worker's done word: the call id of its last reply posted there (0: none yet; see
    :mod:`vecenv.wire.fastpath`)."""
    control = transport_of(envs)._control
    assert control is not None and control.words is not None, "the fast path's words are not set up"
    return [control.words[control.index(i, fastpath.DONE)] for i in range(control.workers)]


def transport_of(envs: Any) -> Any:
    """The transport under a vector env (``SubprocVectorEnv``, ``RayVectorEnv``, or the engine
    vector env of a ``MultiAgentVectorEnv``): its worker processes (``processes``), pipe ends
    (``conns``) and poll setting (``spin``).

    The one place the tests reach past the public API (``worker_pids``, ``restart_count``): to
    end one worker's process, cut its pipe or check that every pipe was closed. Keeping it here
    keeps the engine's private attributes out of the test modules.
    """
    envs = getattr(envs, "rows", envs)  # MultiAgentVectorEnv: the engine vector env it drives
    return envs._pool.transport


def no_spinning(monkeypatch: Any) -> None:
    """Make vector envs made from now on never spin (3 processes on 1 core is past the yielding
    limit): every step's command and reply then go through the pipes, where a test can cut
    them."""
    from vecenv.transports import process as process_transport

    monkeypatch.setattr(process_transport, "available_cpus", lambda: 1)
    monkeypatch.setattr(fastpath, "YIELD_PROCESSES_PER_CORE", 1)


def late_replies_arrived(envs: Any, timeout: float) -> bool:
    """Whether every worker that still owes a reply has it arrived within ``timeout`` seconds,
    unread: on its pipe, or (a step answered on the fast path) in its done word."""
    transport = transport_of(envs)
    control = transport._control
    deadline = time.monotonic() + timeout
    pending = [i for i in range(len(transport.conns)) if transport._owed[i]]
    assert pending, "no worker owes a reply"
    while pending:
        still = []
        for i in pending:
            posted = transport._in_word[i]
            in_word = (
                posted is not None
                and control is not None
                and control.words is not None
                and control.words[control.index(i, fastpath.DONE)] == posted
            )
            if not in_word and not transport.conns[i].poll(0):
                still.append(i)
        pending = still
        if pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # Wakes as soon as a pipe has data; a done word is read again every 10 ms.
            multiprocessing.connection.wait([transport.conns[i] for i in pending], min(left, 0.01))
    return True
