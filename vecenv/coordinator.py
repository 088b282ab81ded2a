"""The coordinator: the parent side of a vector env whose envs run in worker groups.

::

                        parent process (SubprocVectorEnv: coordinator.py, batches.py)
    actions --> [ shared action rows ]         input checks (checks.py), then
                 one command per worker per call through the WorkerPool (pool.py):
                 a status per worker, call ids, deadlines, late replies, breakage
          .--------------------.--------------------.   transport: pipes + process
          | pipe 0             | pipe 1             |   sentinels (process_pool.py),
          v                    v                    v   or Ray actors (ray_transport.py)
    +-----------+        +-----------+        +-----------+   shared memory block (buffers.py)
    | worker 0  |        | worker 1  |  ...   | worker k  |   obs | actions |
    | EnvGroup  |        | EnvGroup  |        | EnvGroup  |   rewards | terms | truncs
    | [0, s1)   |        | [s1, s2)  |        | [sk, n)   |   rows [start_w, stop_w)
    +-----------+        +-----------+        +-----------+   written in place by worker w
          |  replies: (id, ok, non-empty infos | exception) |
          '--------------------'--------------------'-------> parent merges infos with
                                                              VectorEnv._add_info, copies rows out

Start-up: the pool launches one worker per group; each builds its envs and sends a ``Hello``
(env count, spaces, metadata); the parent checks the spaces, gives each worker its starting
index and the shared block in an ``Attach``. After that every call is one command per worker
and one reply per worker. This module is the ``gymnasium.vector.VectorEnv`` API over the pool;
:mod:`vecenv.batches` is the EnvPool-style ``async_reset``/``recv``/``send`` API over the same
pool. Neither knows which transport the pool has.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from copy import deepcopy
from multiprocessing import util
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import logger
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_differing_spaces, batch_space, iterate

from vecenv.batches import AsyncBatches
from vecenv.buffers import Buffers, BufferSpec
from vecenv.checks import (
    check_autoreset_mode,
    check_batch_size,
    check_context,
    check_env_fns,
    check_flag,
    check_group_fns,
    check_num_workers,
    check_observation_mode,
    check_options,
    check_reset_mask,
    check_restarts,
    check_threads,
    check_timeout,
    seed_list,
)
from vecenv.errors import NeedsResetError, SpaceMismatchError, WorkerDiedError, describe
from vecenv.pool import RestartPolicy, State, Transport, Worker, WorkerPool
from vecenv.process_pool import ProcessTransport
from vecenv.protocol import CallArgs, Command, Hello, ResetArgs
from vecenv.sizing import WorkerChoice, choose_num_workers
from vecenv.spaces import is_array_batch, is_fixed, to_batch, tree_assign, tree_copy, tree_leaves, tree_map, tree_slice

__all__ = ["GroupVectorEnv", "SubprocVectorEnv", "State", "DEFAULT_CLOSE_TIMEOUT"]

#: Seconds ``close()`` waits for workers to close their envs before terminating them.
DEFAULT_CLOSE_TIMEOUT = 3.0


class _GroupOfFns:
    """A picklable group builder: calls each env constructor of one worker, in order."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], first: int) -> None:
        self.env_fns = list(env_fns)
        self.first = first

    def __call__(self) -> list[gym.Env]:
        envs = []
        for i, fn in enumerate(self.env_fns, start=self.first):
            try:
                envs.append(fn())
            except Exception as exc:
                exc.add_note(f"raised by env_fns[{i}] (env {i})")
                raise
        return envs


def split_groups(env_fns: Sequence[Callable[[], gym.Env]], k: int) -> list[_GroupOfFns]:
    """``k`` contiguous group builders over ``env_fns`` whose sizes differ by at most one."""
    base, extra = divmod(len(env_fns), k)
    bounds = list(itertools.accumulate((base + (i < extra) for i in range(k)), initial=0))
    return [_GroupOfFns(env_fns[a:b], a) for a, b in itertools.pairwise(bounds)]


def _close_at_exit(ref: weakref.ReferenceType[GroupVectorEnv]) -> None:
    envs = ref()
    if envs is not None:
        envs._close(timeout=None, terminate=False, warn=False)


class GroupVectorEnv(VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over a :class:`~vecenv.pool.WorkerPool` of env groups.

    The subclasses choose the transport (:class:`SubprocVectorEnv`: processes;
    :class:`~vecenv.ray_transport.RayVectorEnv`: Ray actors); everything here is the same for
    both. Results are identical to ``SyncVectorEnv`` for the same seeds and actions.
    """

    _pool: WorkerPool
    _buffers: Buffers

    def _open(
        self,
        transport: Transport,
        group_fns: Sequence[Callable[[], Any]],
        *,
        autoreset_mode: AutoresetMode,
        copy: bool,
        observation_mode: str | tuple[gym.Space, gym.Space],
        shared_memory: bool,
        batch_size: int | None,
        start_timeout: float | None,
        restarts: tuple[int, float] | None = None,
    ) -> None:
        """Start the workers and run the handshake; on any failure release everything.

        ``restarts``: ``(max_restarts, window)`` to replace workers that die, else ``None``.
        """
        self.autoreset_mode = autoreset_mode
        self.copy = copy
        self.closed = False
        self._state = State.DEFAULT
        self._needs_reset: str | None = None  # why the next step would give wrong data
        self._pending: list[Worker] = []
        self._reset_mask: np.ndarray | None = None
        self._finalizer: util.Finalize | None = None
        self._seeds: list[int | None] = []  # each env's last reset seed: restarts derive theirs
        policy = None if restarts is None else RestartPolicy(restarts[0], restarts[1], self._reseed, start_timeout)
        try:
            self._pool = WorkerPool(transport, group_fns, policy)
        except BaseException:
            transport.stop(0.0)
            self.closed = True
            raise
        try:
            # Closes the envs at interpreter exit, before multiprocessing joins its children
            # (non-daemon workers of an env never closed would otherwise block the exit).
            self._finalizer = util.Finalize(self, _close_at_exit, args=(weakref.ref(self),), exitpriority=100)
            hellos: list[Hello] = self._pool.hellos(start_timeout)
            self._configure(hellos, observation_mode)
            spec = BufferSpec.plan(
                self.num_envs,
                self.single_observation_space,
                self.single_action_space,
                shared_memory and transport.shares_memory,
            )
            self._buffers = self._pool.attach([h.num_envs for h in hellos], spec, autoreset_mode)
            self._fixed_actions = is_fixed(self.single_action_space)
            self._action_dtypes = [a.dtype for a in tree_leaves(self._buffers.actions)] if self._fixed_actions else []
            self._ended = np.zeros(self.num_envs, dtype=np.bool_)
            self._seeds = [None] * self.num_envs
            self._batches = AsyncBatches(self, check_batch_size(batch_size, [w.size for w in self._pool.workers]))
        except BaseException:
            self._close(timeout=0.0, terminate=True, warn=False)
            raise

    def _configure(self, hellos: list[Hello], observation_mode: str | tuple[gym.Space, gym.Space]) -> None:
        """Check every worker's spaces and set the vector env's spaces and metadata."""
        first = hellos[0]
        mode_name = observation_mode if isinstance(observation_mode, str) else "custom space"
        start = 0
        for w, hello in zip(self._pool.workers, hellos):
            if hello.native_autoreset is not None and AutoresetMode(hello.native_autoreset) is not self.autoreset_mode:
                raise ValueError(
                    f"worker {w.index} hosts a native vector env with autoreset mode "
                    f"{AutoresetMode(hello.native_autoreset)}, but `autoreset_mode` is {self.autoreset_mode}; "
                    "they must match"
                )
            # The group's first env against env 0 first, then the group's own check.
            m = hello.mismatch
            if hello.action_space != first.action_space:
                m_index, which, expected, received = start, "action_space", first.action_space, hello.action_space
            elif observation_mode == "same" and hello.observation_space != first.observation_space:
                m_index, which, expected, received = (
                    start,
                    "observation_space",
                    first.observation_space,
                    hello.observation_space,
                )
            elif observation_mode == "different" and not gym.spaces.utils.is_space_dtype_shape_equiv(
                first.observation_space, hello.observation_space
            ):
                m_index, which, expected, received = (
                    start,
                    "observation_space",
                    first.observation_space,
                    hello.observation_space,
                )
            elif m is not None:
                m_index, which, expected, received = start + m.local_index, m.which, m.expected, m.received
            else:
                start += hello.num_envs
                continue
            if which == "action_space":
                raise SpaceMismatchError(
                    f"Some environments have an action space different from `{expected}`. In order to batch "
                    "actions, the action spaces from all environments must be equal: "
                    f"env {m_index} has action_space {received}."
                )
            if observation_mode == "same":
                raise SpaceMismatchError(
                    f"{type(self).__name__}(..., observation_mode='same') however some of the sub-environments "
                    f"observation spaces are not equivalent: env {m_index} has observation_space {received}, "
                    f"expected {expected}. "
                    "If this is intentional, use `observation_mode='different'` instead."
                )
            raise SpaceMismatchError(
                f"{type(self).__name__}(..., observation_mode='{mode_name}') however the sub-environment's "
                "observation spaces do not share a common shape and dtype: "
                f"env {m_index} has observation_space {received}, "
                f"expected the shape and dtype of {expected}."
            )
        self.num_envs = start
        if isinstance(observation_mode, tuple):
            self.observation_space, self.single_observation_space = observation_mode
        elif observation_mode == "different":
            self.single_observation_space = first.observation_space
            spaces = [s for h in hellos for s in (h.observation_spaces or [h.observation_space] * h.num_envs)]
            self.observation_space = batch_differing_spaces(spaces)
        else:
            self.single_observation_space = first.observation_space
            self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = first.action_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(first.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.render_mode
        self._env_spec = first.spec

    def _reseed(self, worker: Worker, restart: int) -> ResetArgs:
        """The reset of a restarted worker's envs: env ``i`` last reset with seed ``s`` gets
        ``s + restart * num_envs`` (``restart`` counts this vector env's restarts), so a rerun
        with the same crash reproduces; an env never seeded stays unseeded."""
        n = self.num_envs
        return ResetArgs(
            [None if s is None else s + restart * n for s in self._seeds[worker.start : worker.stop]], None, None
        )

    # -- state checks (pure: they raise or return, never change anything) -----------------

    @property
    def state(self) -> State:
        """What the vector env is waiting for (``BROKEN`` once a worker died)."""
        if self.closed:
            return State.CLOSED
        if getattr(self, "_pool", None) is not None and self._pool.broken is not None:
            return State.BROKEN
        return self._state

    def _check_open(self, call: str) -> None:
        if self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")
        broken = self._pool.broken
        if broken is not None:
            raise WorkerDiedError(
                f"`{call}` cannot run: {broken}", worker=broken.worker, envs=broken.envs, exitcode=broken.exitcode
            ) from broken

    def _check_can_start(self, call: str) -> None:
        """A new call may start: nothing pending (envs of a finished async batch count as idle)."""
        self._check_open(call)
        state = self._state
        if state is State.POOL and not any(w.in_flight for w in self._pool.workers):
            return
        if state is not State.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{call}` while waiting for a pending call to `{state.value}` to complete.", state.value
            )

    def _check_waiting(self, expected: State, call: str, starter: str) -> None:
        self._check_open(call)
        if self._state is not expected:
            raise NoAsyncCallError(f"Calling `{call}` without any prior call to `{starter}`.", expected.value)

    def _check_steppable(self, call: str, how: str) -> None:
        if self._needs_reset is not None:
            raise NeedsResetError(f"Calling `{call}` after {self._needs_reset}: call `{how}` first.")

    # -- waiting -------------------------------------------------------------------------------

    def _finish(self, call: str, timeout: float | None, poisons: bool) -> list[Any]:
        """Gather the pending call's replies and return to ``DEFAULT`` whatever happens.

        ``poisons``: a timeout or env error leaves some envs stepped and others not, so the
        next step must be refused until a full reset.
        """
        try:
            return self._pool.gather(self._pending, timeout, call)
        except WorkerDiedError:
            raise
        except BaseException as exc:
            if poisons:
                self._needs_reset = f"`{call}` failed ({type(exc).__name__})"
            raise
        finally:
            self._state = State.DEFAULT

    def _merge(self, replies: list[Any]) -> dict[str, Any]:
        """Store the non-shared rows and merge infos in env order, as ``SyncVectorEnv`` does."""
        infos: dict[str, Any] = {}
        for w, (entries, payload) in zip(self._pending, replies):
            self._buffers.receive(w.start, w.stop, payload)
            for j, info in entries:
                infos = self._add_info(infos, info, w.start + j)
        return infos

    def _observations(self) -> Any:
        obs = self._buffers.batched_observations()
        if not self.copy:
            return obs
        if type(obs) is np.ndarray:
            return obs.copy()
        return tree_copy(obs) if self._buffers.fixed_observations else deepcopy(obs)

    # -- reset ---------------------------------------------------------------------------------

    def reset_async(
        self, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Send a reset to the workers; :meth:`reset_wait` collects it.

        ``seed``: ``None``, an int (env ``i`` gets ``seed + i``) or one seed (or ``None``) per env.
        ``options`` goes to every env; ``options["reset_mask"]`` (a bool array, one per env)
        resets only the masked envs.
        """
        self._check_can_start("reset_async")
        seeds = seed_list(seed, self.num_envs)
        options = check_options(options)
        mask = None
        if options is not None and "reset_mask" in options:
            options = dict(options)  # unlike SyncVectorEnv, leave the caller's dict as it was
            mask = check_reset_mask(options.pop("reset_mask"), self.num_envs)
        pending = [w for w in self._pool.workers if mask is None or mask[w.start : w.stop].any()]
        self._remember_seeds(seeds, mask)
        self._pool.send(
            pending,
            Command.RESET,
            [
                ResetArgs(seeds[w.start : w.stop], options, None if mask is None else mask[w.start : w.stop])
                for w in pending
            ],
            "reset_async",
        )
        self._pending, self._reset_mask = pending, mask
        self._state = State.WAITING_RESET

    def _remember_seeds(self, seeds: list[int | None], mask: np.ndarray | None) -> None:
        for i, seed in enumerate(seeds):
            if seed is not None and (mask is None or mask[i]):
                self._seeds[i] = seed

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for the reset sent by :meth:`reset_async`; raises the timeout error after ``timeout`` s."""
        timeout = check_timeout(timeout)
        self._check_waiting(State.WAITING_RESET, "reset_wait", "reset_async")
        infos = self._merge(self._finish("reset_wait", timeout, poisons=True))
        if self._reset_mask is None:
            self._needs_reset = None
            self._ended[:] = False
        else:
            self._ended[self._reset_mask] = False
        return self._observations(), infos

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the envs (all, or those in ``options["reset_mask"]``), as ``SyncVectorEnv.reset``.

        ``timeout``: seconds to wait at most (default: no limit).
        """
        timeout = check_timeout(timeout)
        self.reset_async(seed=seed, options=options)
        return self.reset_wait(timeout)

    # -- step ----------------------------------------------------------------------------------

    def step_async(self, actions: Any) -> None:
        """Write ``actions`` (an element of :attr:`action_space`) and start every worker stepping."""
        self._check_can_start("step_async")
        self._check_steppable("step_async", "reset()")
        if self.autoreset_mode is AutoresetMode.DISABLED and self._ended.any():
            ended = np.flatnonzero(self._ended).tolist()
            raise NeedsResetError(
                f"Calling `step_async` with autoreset_mode=DISABLED while envs {ended} have terminated or "
                f"truncated: reset them first, e.g. reset(options={{'reset_mask': mask}})."
            )
        workers = self._pool.workers
        self._pool.send(workers, Command.STEP, self._action_payloads(actions, workers), "step_async")
        self._pending = workers
        self._state = State.WAITING_STEP

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for the step sent by :meth:`step_async`; raises the timeout error after ``timeout`` s."""
        timeout = check_timeout(timeout)
        self._check_waiting(State.WAITING_STEP, "step_wait", "step_async")
        infos = self._merge(self._finish("step_wait", timeout, poisons=True))
        b = self._buffers
        np.logical_or(b.terminations, b.truncations, out=self._ended)
        return self._observations(), b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos

    def step(
        self, actions: Any, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with its action, as ``SyncVectorEnv.step``; ``timeout`` as in :meth:`step_wait`."""
        timeout = check_timeout(timeout)
        self.step_async(actions)
        return self.step_wait(timeout)

    def _action_payloads(self, actions: Any, workers: Sequence[Worker], env_ids: np.ndarray | None = None) -> list[Any]:
        """Check ``actions`` for ``workers``' envs and place them: in shared rows, or as payloads.

        ``env_ids`` gives the env of each action when they are not in worker order (``send``).
        Nothing is written anywhere until the whole batch has passed the checks. A batch whose
        dtype or shape differs from the space's travels through the pipe as items, so each env
        receives exactly what ``SyncVectorEnv`` would give it.
        """
        if env_ids is None and self._copy_actions_directly(actions):
            return [None] * len(workers)
        n = sum(w.size for w in workers)
        order = None if env_ids is None else np.argsort(env_ids, kind="stable")
        offsets = list(itertools.accumulate((w.size for w in workers), initial=0))
        if not self._fixed_actions:
            if actions is None or isinstance(actions, (str, bytes)):
                raise TypeError(f"`actions` must be a batch of {n} actions, got {describe(actions)}")
            return self._action_items(actions, n, order, offsets)
        batch = to_batch(self.single_action_space, actions, n, "actions")
        exact = [a.shape[1:] for a in tree_leaves(batch)] == [a.shape[1:] for a in tree_leaves(self._buffers.actions)]
        if not (exact and is_array_batch(self.single_action_space, actions)):
            # Lists reach the envs as lists and Python ints as ints, as in SyncVectorEnv.
            return self._action_items(actions, n, order, offsets)
        if order is not None:
            batch = tree_map(lambda a: a[order], batch)
        rows = [tree_slice(batch, a, b) for a, b in itertools.pairwise(offsets)]
        same_dtypes = [a.dtype for a in tree_leaves(batch)] == self._action_dtypes
        if not (self._buffers.spec.shared_actions and same_dtypes):
            return rows
        for w, part in zip(workers, rows):
            tree_assign(tree_slice(self._buffers.actions, w.start, w.stop), part)
        return [None] * len(workers)

    def _copy_actions_directly(self, actions: Any) -> bool:
        """The common case: one array, exactly the shared buffer's shape and dtype.

        A method of its own so that no frame which may raise holds a view of the block (a
        traceback kept by the caller would keep the block mapped after ``close()``).
        """
        shared = self._buffers.actions if self._buffers.spec.shared_actions else None
        if (
            type(actions) is np.ndarray
            and type(shared) is np.ndarray
            and actions.shape == shared.shape
            and actions.dtype == shared.dtype
        ):
            np.copyto(shared, actions)
            return True
        return False

    def _action_items(self, actions: Any, n: int, order: np.ndarray | None, offsets: list[int]) -> list[Any]:
        """One action object per env, sliced per worker (sent through the pipes)."""
        items = list(iterate(batch_space(self.single_action_space, n), actions))
        if len(items) != n:
            raise ValueError(f"`actions` must hold {n} actions (one per env), got {len(items)}")
        if order is not None:
            items = [items[k] for k in order]
        return [items[a:b] for a, b in itertools.pairwise(offsets)]

    # -- asynchronous batches (EnvPool-style; see vecenv.batches) ------------------------------

    @property
    def batch_size(self) -> int:
        """Envs returned by each :meth:`recv`."""
        return self._batches.batch_size

    def async_reset(
        self, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Reset every env and put them all in flight; :meth:`recv` returns them as groups finish.

        May be called while envs are in flight: their pending results are dropped.
        """
        self._batches.async_reset(seed, options)

    def recv(
        self, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
        """The first groups to finish, ``batch_size`` envs: ``(obs, rewards, terminations,
        truncations, infos, env_ids)``, with ``env_ids`` the global index of each row.

        Infos are batched over the returned rows. A timeout leaves the envs in flight (call
        ``recv`` again). An env error or a dead worker is raised here.
        """
        return self._batches.recv(timeout)

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray) -> None:
        """Step exactly the envs ``env_ids`` (whole groups returned by :meth:`recv`), one action each.

        Misuse (ids unknown, duplicated, still in flight, not whole groups, or a count that
        differs from the actions') raises before anything is sent.
        """
        self._batches.send(actions, env_ids)

    # -- calls, attributes, render -------------------------------------------------------------

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start calling method ``name`` (or reading attribute ``name``) on every env."""
        self._check_can_start("call_async")
        if not isinstance(name, str):
            raise TypeError(f"`name` must be a str, got {describe(name)}")
        workers = self._pool.workers
        self._pool.send(workers, Command.CALL, [CallArgs(name, args, kwargs)] * len(workers), "call_async")
        self._pending = workers
        self._state = State.WAITING_CALL

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """The results of :meth:`call_async`, one per env."""
        timeout = check_timeout(timeout)
        self._check_waiting(State.WAITING_CALL, "call_wait", "call_async")
        replies = self._finish("call_wait", timeout, poisons=False)
        return tuple(r for reply in replies for r in reply)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` with the arguments on every env (or read attribute ``name``).

        For a time limit use :meth:`call_async` and ``call_wait(timeout=...)``.
        """
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def get_attr(self, name: str, timeout: float | None = None) -> tuple[Any, ...]:
        """Attribute ``name`` of every env (a callable attribute is called, as ``SyncVectorEnv`` does)."""
        timeout = check_timeout(timeout)
        self.call_async(name)
        return self.call_wait(timeout)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any, timeout: float | None = None) -> None:
        """Set attribute ``name`` on every env: one value for all, or a list/tuple of one per env."""
        timeout = check_timeout(timeout)
        self._check_can_start("set_attr")
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        workers = self._pool.workers
        self._run(Command.SET_ATTR, [(name, list(values[w.start : w.stop])) for w in workers], "set_attr", timeout)

    def render(self, timeout: float | None = None) -> tuple[Any, ...]:
        """The rendered frame of every env."""
        timeout = check_timeout(timeout)
        self._check_can_start("render")
        replies = self._run(Command.RENDER, [None] * len(self._pool.workers), "render", timeout)
        return tuple(r for reply in replies for r in reply)

    def _run(self, command: Command, payloads: list[Any], call: str, timeout: float | None) -> list[Any]:
        workers = self._pool.workers
        self._pool.send(workers, command, payloads, call)
        self._pending = workers
        self._state = State.WAITING_CALL
        return self._finish(call, timeout, poisons=False)

    @property
    def num_workers(self) -> int:
        """The number of workers (one env group each)."""
        return len(self._pool.workers)

    # Per env, as SyncVectorEnv's (Gymnasium's base class types them as single values).
    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """The seed of each env's random generator."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each env's random generator (copies: changing them does not reach the workers)."""
        return self.get_attr("np_random")

    # -- closing -------------------------------------------------------------------------------

    # AsyncVectorEnv's signature (the base class takes **kwargs).
    def close(self, timeout: float | None = None, terminate: bool = False) -> None:  # type: ignore[override]
        """Close the envs and release every worker, pipe and shared-memory block.

        Idempotent. Workers are asked to close their envs and given ``timeout`` seconds
        (default :data:`DEFAULT_CLOSE_TIMEOUT`) to do so; a worker still busy with a call that
        timed out gets no grace unless ``timeout`` is given. Stragglers are terminated, then
        killed. ``terminate=True`` skips the polite part. Closing while a ``*_async`` call is
        pending warns, as Gymnasium's ``AsyncVectorEnv`` does. An exception raised by an env's
        ``close()`` is re-raised after everything is released.
        """
        timeout = check_timeout(timeout)
        self._close(timeout, terminate, warn=True)

    def _close(self, timeout: float | None, terminate: bool, warn: bool) -> None:
        if self.closed or getattr(self, "_pool", None) is None:
            self.closed = True
            return
        if warn and self.state in (State.WAITING_RESET, State.WAITING_STEP, State.WAITING_CALL):
            logger.warn(f"Calling `close` while waiting for a pending call to `{self._state.value}` to complete.")
        grace = 0.0 if terminate else (DEFAULT_CLOSE_TIMEOUT if timeout is None else timeout)
        try:
            error = self._pool.shutdown(grace, wait_late=timeout is not None)
        finally:
            self._state = State.CLOSED
            self.closed = True
            if self._finalizer is not None:
                self._finalizer.cancel()
        if error is not None:
            raise error

    def __enter__(self) -> GroupVectorEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True):
            try:
                self._close(timeout=None, terminate=True, warn=False)
            except Exception:
                pass

    def __repr__(self) -> str:
        spec = getattr(self, "spec", None)
        n = getattr(self, "num_envs", "?")
        pool = getattr(self, "_pool", None)
        name = f"{spec.id}, " if spec is not None else ""
        return f"{type(self).__name__}({name}num_envs={n}, num_workers={len(pool.workers) if pool else 0})"


class SubprocVectorEnv(GroupVectorEnv):
    """A Gymnasium vector env whose envs run in a few worker processes, a group per worker.

    Results are identical to ``gymnasium.vector.SyncVectorEnv`` for the same seeds and actions,
    in every autoreset mode. Observations, actions, rewards and flags live in shared memory;
    pipes carry only commands, non-empty infos and errors.

    Args:
        env_fns: callables that each return a ``gymnasium.Env``; they are called in the workers
            (never in the parent), split into ``num_workers`` contiguous groups whose sizes
            differ by at most one.
        num_workers: env groups; default ``min(len(env_fns), available cores)``, the cores this
            process may run on (its affinity mask, which container limits set). ``0`` keeps
            every env in this process (one inline group, no worker process). ``"auto"`` builds
            one extra env from ``env_fns[0]`` here, times a few of its steps, closes it, and
            picks 0 when all the envs' work per step is too small to pay for processes (a few
            cheap envs), else one group per core with the parent stepping one of them
            (``inline_group``); :attr:`worker_choice` says what it chose and why (see
            :mod:`vecenv.sizing`).
        inline_group: the parent hosts the first group itself and steps it while the workers
            step theirs: one process fewer and no wake-up for that group. Where the vector
            env's processes are no more than the cores (as with ``inline_group`` and one group
            per core), parent and workers poll for each other's messages for up to 0.2 ms
            before sleeping, which saves the wake-up of a sleeping process on every step. That
            group runs in the parent: its env errors surface as any env's, but a hang there
            cannot be timed out and a crash there is the parent's.
        on_worker_death: ``"raise"`` (a dead worker breaks the vector env: ``WorkerDiedError``)
            or ``"restart"``: a new process rebuilds the same envs on the same rows and resets
            them; the call that saw the death returns normally. A step reports the restarted
            envs with ``truncations`` True, reward 0, their fresh reset observation and
            ``infos["worker_restarted"]``, in every autoreset mode (no ``final_obs`` under
            SAME_STEP: none survived; the next step steps the new episode); a reset, call or
            attribute read is answered by the new envs. Env ``i`` last reset with seed ``s`` is
            reseeded ``s + r * num_envs`` at the vector env's ``r``-th restart.
        threads_per_worker: BLAS/OpenMP threads in each worker (``OMP_NUM_THREADS`` and the
            like, set before the env module is imported, plus the libraries already loaded),
            so W workers do not run W x cores threads; variables you set yourself win.
            ``None`` leaves the libraries' defaults. The parent is never changed.
        max_restarts, restart_window: more than ``max_restarts`` restarts within
            ``restart_window`` seconds (a death during a rebuild counts) raise
            ``WorkerDiedError`` as ``"raise"`` does.
        autoreset_mode: Gymnasium's autoreset mode (an ``AutoresetMode`` or its string value).
        copy: return copies of the observations. With ``copy=False`` the observations returned
            by ``reset``/``step`` are views into shared buffers that the next call overwrites.
        context: multiprocessing start method (``"fork"``, ``"forkserver"``, ``"spawn"``) or
            ``None`` for the platform default, except that a parent already running other
            threads (Ray, a notebook kernel, torch's pools) is not forked: it uses
            ``forkserver``, as Python 3.14 does by default, because a forked worker can inherit
            a lock one of those threads held and wait for it forever. Env constructors are sent
            with cloudpickle, so envs defined in ``__main__`` or as lambdas work with every
            method.
        daemon: start the workers as daemon processes.
        shared_memory: with ``False`` every array travels through the pipes (for debugging and
            custom spaces); results are the same.
        observation_mode: as Gymnasium's: ``"same"`` (every env's observation space is equal),
            ``"different"`` (same shape and dtype; the batched space is built from every env's
            space), or ``(batched space, single space)``.
        batch_size: envs returned by each :meth:`recv` (asynchronous batches); ``num_envs``
            (the default) or, with groups of equal size, a multiple of the group size.
        pin_cpus: pin worker ``w`` to the ``w``-th core this process may run on (round robin).
        start_timeout: seconds the workers may take to build their envs (default: no limit);
            past it the constructor raises :class:`~vecenv.errors.VecEnvTimeoutError`.

    Raises:
        ValueError, TypeError: bad arguments, named with what was expected and what was given.
        SpaceMismatchError: two envs report different spaces.
        WorkerDiedError: a worker died while building its envs.
    """

    #: What ``num_workers="auto"`` chose and why (``None`` for an explicit count).
    worker_choice: WorkerChoice | None = None

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | str | None = None,
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        shared_memory: bool = True,
        observation_mode: str | tuple[gym.Space, gym.Space] = "same",
        batch_size: int | None = None,
        pin_cpus: bool = False,
        start_timeout: float | None = None,
        inline_group: bool = False,
        on_worker_death: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        threads_per_worker: int | None = 1,
    ) -> None:
        fns = check_env_fns(env_fns)
        check_flag(inline_group, "inline_group")  # before auto may set it
        if num_workers == "auto":
            self.worker_choice = choose_num_workers(fns[0], len(fns))
            num_workers = self.worker_choice.num_workers
            inline_group = inline_group or self.worker_choice.inline_group
        workers = check_num_workers(num_workers, len(fns))
        groups = split_groups(fns, max(1, workers))
        check_batch_size(batch_size, [len(g.env_fns) for g in groups])
        restarts = check_restarts(on_worker_death, max_restarts, restart_window)
        self._start(
            groups,
            autoreset_mode,
            copy,
            context,
            daemon,
            shared_memory,
            observation_mode,
            batch_size,
            pin_cpus,
            start_timeout,
            inline=inline_group or workers == 0,
            restarts=restarts,
            threads=check_threads(threads_per_worker),
        )

    @classmethod
    def from_groups(
        cls,
        group_fns: Sequence[Callable[[], Sequence[gym.Env] | gym.vector.VectorEnv]],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        shared_memory: bool = True,
        observation_mode: str | tuple[gym.Space, gym.Space] = "same",
        batch_size: int | None = None,
        pin_cpus: bool = False,
        start_timeout: float | None = None,
        on_worker_death: str = "raise",
        max_restarts: int = 3,
        restart_window: float = 60.0,
        threads_per_worker: int | None = 1,
        inline_group: bool = False,
    ) -> SubprocVectorEnv:
        """One worker per callable; each returns the list of envs that worker hosts (or a
        native ``gymnasium.vector.VectorEnv``).

        The group sizes are learned in the handshake; env indices follow the order of
        ``group_fns`` and, within a group, the order of the returned list. The other
        arguments are the constructor's (``inline_group``: the parent hosts the first group).
        """
        fns = check_group_fns(group_fns)
        restarts = check_restarts(on_worker_death, max_restarts, restart_window)
        threads = check_threads(threads_per_worker)
        inline = check_flag(inline_group, "inline_group")
        self = cls.__new__(cls)
        self._start(
            fns,
            autoreset_mode,
            copy,
            context,
            daemon,
            shared_memory,
            observation_mode,
            batch_size,
            pin_cpus,
            start_timeout,
            inline=inline,
            restarts=restarts,
            threads=threads,
        )
        return self

    def _start(
        self,
        groups: Sequence[Callable[[], Any]],
        autoreset_mode: AutoresetMode | str,
        copy: bool,
        context: str | None,
        daemon: bool,
        shared_memory: bool,
        observation_mode: str | tuple[gym.Space, gym.Space],
        batch_size: int | None,
        pin_cpus: bool,
        start_timeout: float | None,
        inline: bool,
        restarts: tuple[int, float] | None,
        threads: int | None,
    ) -> None:
        mode = check_autoreset_mode(autoreset_mode)
        ctx = check_context(context)
        #: The multiprocessing start method the workers were started with.
        self.start_method: str = ctx.get_start_method()
        obs_mode = check_observation_mode(observation_mode)
        start_timeout = check_timeout(start_timeout, "start_timeout")
        transport = ProcessTransport(
            ctx,
            daemon=daemon,
            pin_cpus=pin_cpus,
            observation_mode=obs_mode[1] if isinstance(obs_mode, tuple) else obs_mode,
            inline=inline,
            threads=threads,
        )
        self._open(
            transport,
            groups,
            autoreset_mode=mode,
            copy=copy,
            observation_mode=obs_mode,
            shared_memory=shared_memory,
            batch_size=batch_size,
            start_timeout=start_timeout,
            restarts=restarts,
        )
