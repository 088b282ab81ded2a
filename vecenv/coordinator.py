"""The coordinator: the parent side of a vector env whose envs run in worker groups.

::

                        parent process (SubprocVectorEnv)
    actions --> [ shared action rows ] ------------------------------.
                  commands, one per worker per call: (Command, id, payload)
          .--------------------.--------------------.                |
          | pipe 0             | pipe 1             | pipe k         |
          v                    v                    v                v
    +-----------+        +-----------+        +-----------+   shared memory block
    | worker 0  |        | worker 1  |  ...   | worker k  |   obs | actions |
    | EnvGroup  |        | EnvGroup  |        | EnvGroup  |   rewards | terms | truncs
    | envs      |        | envs      |        | envs      |   rows [start_w, stop_w)
    | [0, s1)   |        | [s1, s2)  |        | [sk, n)   |   written in place
    +-----------+        +-----------+        +-----------+   by worker w
          |  replies: (id, ok, non-empty infos | exception) |
          '--------------------'--------------------'-------> parent merges infos with
                                                              VectorEnv._add_info, copies rows out

The coordinator starts one process per group and runs the handshake: each worker builds its
envs and sends a ``Hello`` (env count, spaces, metadata); the parent checks the spaces, gives each
worker its starting index and the shared block in an ``Attach``. After that, every call is one
command per worker and one reply per worker. The parent waits on the pipes *and* the process
sentinels together, so a worker that dies is reported within the wait, never waited on forever.

The worker side is :mod:`vecenv.worker`; the in-process group logic (autoreset) is
:mod:`vecenv.group`; the arrays are :mod:`vecenv.buffers`.
"""

from __future__ import annotations

import collections
import itertools
import math
import multiprocessing
import os
import select
import signal
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from copy import deepcopy
from enum import Enum
from multiprocessing import reduction, resource_tracker, util
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from vecenv.buffers import HAVE_MEMFD, Buffers, BufferSpec
from vecenv.errors import (
    NeedsResetError,
    PackedException,
    SpaceMismatchError,
    VecEnvTimeoutError,
    WorkerDiedError,
    describe,
)
from vecenv.protocol import Attach, CallArgs, Command, Hello, ResetArgs, decode_reply, encode_command
from vecenv.spaces import is_array_batch, is_fixed, to_batch, tree_assign, tree_copy, tree_leaves, tree_map, tree_slice
from vecenv.worker import worker_main

__all__ = ["SubprocVectorEnv", "State", "DEFAULT_CLOSE_TIMEOUT"]

#: Seconds ``close()`` waits for workers to close their envs before terminating them.
DEFAULT_CLOSE_TIMEOUT = 3.0
# After terminate(), how long to wait before SIGKILL.
_KILL_GRACE = 1.0


class State(Enum):
    """What the parent is waiting for; the values name the call, as Gymnasium's ``AsyncState``."""

    DEFAULT = "default"
    WAITING_RESET = "reset"
    WAITING_STEP = "step"
    WAITING_CALL = "call"
    POOL = "recv"  # envs in flight through async_reset/send, collected by recv
    BROKEN = "broken"
    CLOSED = "closed"


class _Worker:
    """The parent's handle on one worker: its process, pipe, env range and awaited reply."""

    __slots__ = ("index", "process", "conn", "start", "stop", "expect", "late")

    def __init__(self, index: int, process: multiprocessing.process.BaseProcess, conn: Connection) -> None:
        self.index = index
        self.process = process
        self.conn = conn
        self.start = 0
        self.stop = 0
        self.expect: int | None = None  # call id of the reply still owed, if any
        self.late = 0  # replies still owed to calls that timed out (to be dropped)

    @property
    def envs(self) -> range:
        return range(self.start, self.stop)


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


def _close_at_exit(ref: weakref.ReferenceType[SubprocVectorEnv]) -> None:
    envs = ref()
    if envs is not None:
        envs.close()


class _InfoBatch:
    """Gymnasium's info batching (``VectorEnv._add_info``) over the rows of one ``recv`` batch."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def _split(n: int, k: int) -> list[range]:
    """``k`` contiguous ranges over ``range(n)`` whose sizes differ by at most one."""
    base, extra = divmod(n, k)
    bounds = [0]
    for i in range(k):
        bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    return [range(a, b) for a, b in itertools.pairwise(bounds)]


def _died_message(worker: _Worker, call: str) -> str:
    code = worker.process.exitcode
    if code is not None and code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    span = f"envs {worker.start}..{worker.stop - 1}" if worker.stop > worker.start else "envs not yet assigned"
    return f"worker {worker.index} ({span}) {how} during `{call}`"


class SubprocVectorEnv(VectorEnv):
    """A Gymnasium vector env whose envs run in a few worker processes, a group per worker.

    Results are identical to ``gymnasium.vector.SyncVectorEnv`` for the same seeds and actions,
    in every autoreset mode. Observations, actions, rewards and flags live in shared memory;
    pipes carry only commands, non-empty infos and errors.

    Args:
        env_fns: callables that each return a ``gymnasium.Env``; they are called in the workers
            (never in the parent), split into ``num_workers`` contiguous groups whose sizes
            differ by at most one.
        num_workers: processes to start; default ``min(len(env_fns), os.cpu_count())``.
        autoreset_mode: Gymnasium's autoreset mode (an ``AutoresetMode`` or its string value).
        copy: return copies of the observations. With ``copy=False`` the observations returned
            by ``reset``/``step`` are views into shared buffers that the next call overwrites.
        context: multiprocessing start method (``"fork"``, ``"forkserver"``, ``"spawn"``) or
            ``None`` for the platform default. Env constructors are sent with cloudpickle, so
            envs defined in ``__main__`` or as lambdas work with every method.
        daemon: start the workers as daemon processes.
        shared_memory: with ``False`` every array travels through the pipes (for debugging and
            custom spaces); results are the same.
        batch_size: envs returned by each :meth:`recv` (asynchronous batches); a multiple of the
            group size, default ``num_envs``. Plain ``step`` is unaffected.
        pin_cpus: pin worker ``w`` to the ``w``-th core this process may run on (round robin).

    Raises:
        ValueError: bad ``num_workers``, empty ``env_fns``.
        SpaceMismatchError: two envs report different spaces.
        WorkerDiedError: a worker died while building its envs.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None = None,
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        shared_memory: bool = True,
        batch_size: int | None = None,
        pin_cpus: bool = False,
    ) -> None:
        if isinstance(env_fns, (str, bytes)) or not isinstance(env_fns, Iterable):
            raise TypeError(f"`env_fns` must be an iterable of env constructors, got {describe(env_fns)}")
        env_fns = list(env_fns)  # any iterable, as SyncVectorEnv takes
        if len(env_fns) == 0:
            raise ValueError("`env_fns` must hold at least one env constructor, got an empty sequence")
        for i, fn in enumerate(env_fns):
            if not callable(fn):
                raise TypeError(f"`env_fns[{i}]` must be callable (returning a gymnasium.Env), got {describe(fn)}")
        n = len(env_fns)
        if num_workers is None:
            num_workers = min(n, os.cpu_count() or 1)
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or not 1 <= num_workers <= n:
            raise ValueError(
                f"`num_workers` must be an int in [1, {n}] (1 to len(env_fns)), got {describe(num_workers)}"
            )
        groups = [_GroupOfFns([env_fns[i] for i in r], r.start) for r in _split(n, int(num_workers))]
        self._launch(groups, autoreset_mode, copy, context, daemon, shared_memory, batch_size, pin_cpus)

    @classmethod
    def from_groups(
        cls,
        group_fns: Sequence[Callable[[], Sequence[gym.Env]]],
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        shared_memory: bool = True,
        batch_size: int | None = None,
        pin_cpus: bool = False,
    ) -> SubprocVectorEnv:
        """One worker per callable; each returns the list of envs that worker hosts.

        The group sizes are learned in the handshake; env indices follow the order of
        ``group_fns`` and, within a group, the order of the returned list.
        """
        if isinstance(group_fns, (str, bytes)) or not isinstance(group_fns, Sequence) or not group_fns:
            raise ValueError(f"`group_fns` must be a non-empty sequence of callables, got {describe(group_fns)}")
        for i, fn in enumerate(group_fns):
            if not callable(fn):
                raise TypeError(f"`group_fns[{i}]` must be callable (returning a list of envs), got {describe(fn)}")
        self = cls.__new__(cls)
        self._launch(list(group_fns), autoreset_mode, copy, context, daemon, shared_memory, batch_size, pin_cpus)
        return self

    # -- start-up ------------------------------------------------------------------------------

    def _launch(
        self,
        group_fns: list[Callable[[], Sequence[gym.Env]]],
        autoreset_mode: AutoresetMode | str,
        copy: bool,
        context: str | None,
        daemon: bool,
        shared_memory: bool,
        batch_size: int | None,
        pin_cpus: bool,
    ) -> None:
        try:
            self.autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(
                f"`autoreset_mode` must be one of {[m.value for m in AutoresetMode]} or an AutoresetMode, "
                f"got {describe(autoreset_mode)}"
            ) from None
        try:
            ctx = multiprocessing.get_context(context)
        except ValueError:
            raise ValueError(
                f"`context` must be None or one of {multiprocessing.get_all_start_methods()}, got {describe(context)}"
            ) from None
        self.copy = copy
        self.closed = False
        self._state = State.DEFAULT
        self._broken: WorkerDiedError | None = None
        self._buffers: Buffers | None = None
        self._workers: list[_Worker] = []
        self._call_ids = itertools.count(1)
        self._needs_reset: str | None = None  # why the next step would give wrong data
        self._pending: list[_Worker] = []
        self._reset_mask: np.ndarray | None = None
        self._ready: collections.deque[tuple[_Worker, Any]] = collections.deque()
        self._pollers: dict[tuple[int, ...], tuple[dict[int, _Worker], dict[int, _Worker], Any]] = {}
        if not HAVE_MEMFD:
            # Workers must share the parent's resource tracker: one they started themselves
            # would unlink the named block, as "leaked", when they exit.
            resource_tracker.ensure_running()
        try:
            cpus = sorted(os.sched_getaffinity(0)) if pin_cpus else []
            for index, group_fn in enumerate(group_fns):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                process = ctx.Process(
                    target=worker_main,
                    args=(index, child_conn, cloudpickle.dumps(group_fn), cpus[index % len(cpus)] if cpus else None),
                    name=f"vecenv-worker-{index}",
                    daemon=daemon,
                )
                process.start()
                child_conn.close()
                self._workers.append(_Worker(index, process, parent_conn))
            # Closes the envs at interpreter exit, before multiprocessing joins its children
            # (non-daemon workers of an env never closed would otherwise block the exit).
            self._finalizer = util.Finalize(self, _close_at_exit, args=(weakref.ref(self),), exitpriority=100)
            self._handshake(shared_memory)
            self._set_batch_size(batch_size)
        except BaseException:
            self._shutdown(timeout=0.0)
            self._state = State.CLOSED
            self.closed = True
            raise

    def _handshake(self, shared_memory: bool) -> None:
        for w in self._workers:
            w.expect = 0
        hellos: list[Hello] = self._gather(self._workers, None, "__init__", fail_fast=True)
        start = 0
        for w, hello in zip(self._workers, hellos):
            w.start, w.stop = start, start + hello.num_envs
            start = w.stop
            if hello.mismatch is not None:
                m = hello.mismatch
                raise SpaceMismatchError(
                    f"env {w.start + m.local_index} has {m.which} {m.received}, but env {w.start} "
                    f"(the first of worker {w.index}) has {m.expected}; all envs must share their spaces"
                )
        first = hellos[0]
        for w, hello in zip(self._workers, hellos):
            native = hello.native_autoreset
            if native is not None and AutoresetMode(native) is not self.autoreset_mode:
                raise ValueError(
                    f"worker {w.index} hosts a native vector env with autoreset mode {AutoresetMode(native)}, "
                    f"but `autoreset_mode` is {self.autoreset_mode}; they must match"
                )
            for which in ("observation_space", "action_space"):
                if getattr(hello, which) != getattr(first, which):
                    raise SpaceMismatchError(
                        f"env {w.start} has {which} {getattr(hello, which)}, but env 0 has "
                        f"{getattr(first, which)}; all envs must share their spaces"
                    )
        self.num_envs = start
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = dict(first.metadata)
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = first.render_mode
        self._env_spec = first.spec
        spec = BufferSpec.plan(self.num_envs, self.single_observation_space, self.single_action_space,
                               shared_memory)
        self._buffers = Buffers.create(spec)
        self._fixed_actions = is_fixed(self.single_action_space)
        self._action_dtypes = (
            [a.dtype for a in tree_leaves(self._buffers.actions)] if self._fixed_actions else []
        )
        self._ended = np.zeros(self.num_envs, dtype=np.bool_)
        by_fd = Buffers.needs_fd(spec)
        for w in self._workers:
            try:
                w.conn.send(Attach(w.start, w.stop - w.start, self.autoreset_mode, spec))
                if by_fd:
                    reduction.send_handle(w.conn, self._buffers.block.fd, w.process.pid)
            except OSError:  # it died after its Hello
                w.process.join(1.0)
                self._break(w, "__init__")

    # -- talking to workers --------------------------------------------------------------------

    def _send(self, worker: _Worker, command: Command, payload: Any, call: str) -> None:
        call_id = next(self._call_ids)
        worker.expect = call_id
        try:
            worker.conn.send_bytes(encode_command(command, call_id, payload))
        except (OSError, EOFError):  # a broken or reset pipe: the worker is gone
            worker.process.join(1.0)
            self._break(worker, call)

    def _receive(
        self, workers: Sequence[_Worker], timeout: float | None, deadline: float | None, call: str
    ) -> list[tuple[_Worker, bool, Any]]:
        """Block until one or more of ``workers`` answer their current call; return those answers.

        Replies to earlier calls that timed out are read and dropped here, so they can never be
        taken for a later call's.

        Raises:
            WorkerDiedError: a worker died before answering; the vector env is then broken.
            VecEnvTimeoutError: ``deadline`` (``time.monotonic()`` + ``timeout``) passed first.
        """
        pipes, sentinels, poller = self._poller(workers)
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = poller.poll(None if remaining is None else math.ceil(remaining * 1000))
            if not ready:
                raise VecEnvTimeoutError(f"The call to `{call}` has timed out after {timeout} second(s).")
            answers = []
            hung_up = set()
            # Pipes first: a reply may precede an exit. One message per readable pipe; the
            # poll reports the pipe again while more is waiting.
            for fd, _ in ready:
                w = pipes.get(fd)
                if w is None or w.expect is None:
                    continue
                try:
                    call_id, ok, result = decode_reply(w.conn.recv_bytes())
                except (EOFError, OSError):
                    hung_up.add(w.index)  # the worker is gone; its sentinel says so
                    continue
                if call_id != w.expect:
                    w.late = max(0, w.late - 1)  # a reply to a call that timed out
                    continue
                w.expect = None
                answers.append((w, ok, result))
            for fd, _ in ready:
                w = sentinels.get(fd)
                if w is not None and w.expect is not None and (w.index in hung_up or not w.conn.poll()):
                    w.process.join()
                    self._break(w, call)
            if answers:
                return sorted(answers, key=lambda a: a[0].index)

    def _poller(self, workers: Sequence[_Worker]) -> tuple[dict[int, _Worker], dict[int, _Worker], Any]:
        """A poll object over the pipes and sentinels of ``workers``, kept for the next wait."""
        key = tuple(w.index for w in workers)
        cached = self._pollers.get(key)
        if cached is None:
            if len(self._pollers) > 64:
                self._pollers.clear()
            pipes = {w.conn.fileno(): w for w in workers}
            sentinels = {w.process.sentinel: w for w in workers}
            poller = select.poll()
            for fd in itertools.chain(pipes, sentinels):
                poller.register(fd, select.POLLIN)
            cached = self._pollers[key] = (pipes, sentinels, poller)
        return cached

    def _gather(
        self, workers: Sequence[_Worker], timeout: float | None, call: str, fail_fast: bool = False
    ) -> list[Any]:
        """Wait for the reply each of ``workers`` owes; results in worker order.

        An error reply is raised (the first, by worker order) only once every worker has
        answered, so no reply is left in a pipe to be mistaken for a later one. On a timeout
        the unanswered workers are marked late: their replies will be dropped on arrival.
        ``fail_fast`` raises the first error at once, for start-up, where nothing is kept.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        results: dict[int, Any] = {}
        failures: list[tuple[_Worker, PackedException]] = []
        waiting = list(workers)
        while waiting:
            try:
                answers = self._receive(waiting, timeout, deadline, call)
            except VecEnvTimeoutError:
                for w in waiting:
                    w.late += 1
                raise
            for w, ok, result in answers:
                if ok:
                    results[w.index] = result
                elif fail_fast:
                    self._raise_remote(w, result, call)
                else:
                    failures.append((w, result))
            waiting = [w for w in waiting if w.expect is not None]
        if failures:
            self._raise_remote(*failures[0], call)
        return [results[w.index] for w in workers]

    def _raise_remote(self, w: _Worker, packed: PackedException, call: str) -> None:
        if packed.env_index is not None:
            where = f"env {w.start + packed.env_index}"
        elif w.stop > w.start:
            where = f"envs {w.start}..{w.stop - 1}"
        else:
            where = "its env group"
        raise packed.rebuild(f"raised in {where} (worker {w.index}) during `{call}`")

    def _break(self, worker: _Worker, call: str) -> None:
        """A worker died: stop the others (their peers' envs are gone) and raise."""
        error = WorkerDiedError(
            _died_message(worker, call) + "; the vector env is unusable, close it and make a new one",
            worker=worker.index, envs=worker.envs, exitcode=worker.process.exitcode,
        )
        self._broken = error
        self._state = State.BROKEN
        for w in self._workers:
            if w.process.is_alive():
                w.process.kill()
        raise error

    def _assert_usable(self, call: str) -> None:
        if self._state is State.CLOSED or self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")
        if self._state is State.BROKEN:
            assert self._broken is not None
            raise WorkerDiedError(
                f"`{call}` cannot run: {self._broken}", worker=self._broken.worker,
                envs=self._broken.envs, exitcode=self._broken.exitcode,
            ) from self._broken
        if self._state is State.POOL and not self._ready and all(w.expect is None for w in self._workers):
            self._state = State.DEFAULT  # every env of the pool is back: synchronous calls are safe
        if self._state is not State.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{call}` while waiting for a pending call to `{self._state.value}` to complete.",
                self._state.value,
            )

    def _begin_wait(self, expected: State, call: str, starter: str) -> None:
        if self._state is State.CLOSED or self.closed:
            raise ClosedEnvironmentError(f"Trying to operate on `{type(self).__name__}`, after a call to `close()`.")
        if self._state is State.BROKEN:
            self._assert_usable(call)
        if self._state is not expected:
            raise NoAsyncCallError(f"Calling `{call}` without any prior call to `{starter}`.", expected.value)

    def _finish(self, call: str, timeout: float | None, poisons: bool) -> list[Any]:
        """Gather the pending call's replies and return to ``DEFAULT`` whatever happens.

        ``poisons``: a timeout or env error leaves some envs stepped and others not, so the
        next step must be refused until a full reset.
        """
        try:
            return self._gather(self._pending, timeout, call)
        except WorkerDiedError:
            raise
        except BaseException as exc:
            if poisons:
                self._needs_reset = f"`{call}` failed ({type(exc).__name__})"
            raise
        finally:
            if self._state is not State.BROKEN:
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

    def reset_async(self, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Send a reset to the workers; :meth:`reset_wait` collects it.

        ``seed``: ``None``, an int (env ``i`` gets ``seed + i``) or one seed (or ``None``) per env.
        ``options`` goes to every env; ``options["reset_mask"]`` (a bool array, one per env)
        resets only the masked envs.
        """
        self._assert_usable("reset_async")
        seeds = self._seed_list(seed)
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"`options` must be a dict or None, got {describe(options)}")
        mask = None
        if options is not None and "reset_mask" in options:
            options = dict(options)  # unlike SyncVectorEnv, leave the caller's dict as it was
            mask = self._check_reset_mask(options.pop("reset_mask"))
        self._pending = [w for w in self._workers if mask is None or mask[w.start:w.stop].any()]
        for w in self._pending:
            rows = mask[w.start:w.stop] if mask is not None else None
            self._send(w, Command.RESET, ResetArgs(seeds[w.start:w.stop], options, rows), "reset_async")
        self._reset_mask = mask
        self._state = State.WAITING_RESET

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for the reset sent by :meth:`reset_async`; raises the timeout error after ``timeout`` s."""
        self._begin_wait(State.WAITING_RESET, "reset_wait", "reset_async")
        infos = self._merge(self._finish("reset_wait", timeout, poisons=True))
        if self._reset_mask is None:
            self._needs_reset = None
            self._ended[:] = False
        else:
            self._ended[self._reset_mask] = False
        return self._observations(), infos

    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset the envs (all, or those in ``options["reset_mask"]``), as ``SyncVectorEnv.reset``."""
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def _seed_list(self, seed: Any) -> list[int | None]:
        n = self.num_envs
        if seed is None:
            return [None] * n
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)):
            if seed < 0:
                raise ValueError(f"`seed` must be a non-negative int, a list of {n} seeds or None, got {seed}")
            return [int(seed) + i for i in range(n)]
        if isinstance(seed, (str, bytes)) or not isinstance(seed, (Sequence, np.ndarray)):
            raise TypeError(f"`seed` must be an int, a list of {n} seeds or None, got {describe(seed)}")
        if len(seed) != n:
            raise ValueError(
                f"If seeds are passed as a list the length must match num_envs={n} but got length={len(seed)}."
            )
        seeds: list[int | None] = []
        for i, s in enumerate(seed):
            if s is None:
                seeds.append(None)
            elif isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)):
                if s < 0:
                    raise ValueError(f"`seed[{i}]` must be a non-negative int or None, got {s}")
                seeds.append(int(s))
            else:
                raise TypeError(f"`seed[{i}]` must be an int or None, got {describe(s)}")
        return seeds

    def _check_reset_mask(self, reset_mask: Any) -> np.ndarray:
        # Gymnasium's own checks and messages.
        if not isinstance(reset_mask, np.ndarray):
            raise TypeError(f"`options['reset_mask']` must be a numpy array, got {type(reset_mask)}")
        if reset_mask.shape != (self.num_envs,):
            raise ValueError(f"`options['reset_mask']` must have shape `({self.num_envs},)`, got {reset_mask.shape}")
        if reset_mask.dtype != np.bool_:
            raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {reset_mask.dtype}")
        if not np.any(reset_mask):
            raise ValueError(
                f"`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask={reset_mask}"
            )
        return reset_mask.copy()

    # -- step ----------------------------------------------------------------------------------

    def step_async(self, actions: Any) -> None:
        """Write ``actions`` (an element of :attr:`action_space`) and start every worker stepping."""
        self._assert_usable("step_async")
        if self._needs_reset is not None:
            raise NeedsResetError(f"Calling `step_async` after {self._needs_reset}: call `reset()` first.")
        if self.autoreset_mode is AutoresetMode.DISABLED and self._ended.any():
            ended = np.flatnonzero(self._ended).tolist()
            raise NeedsResetError(
                f"Calling `step_async` with autoreset_mode=DISABLED while envs {ended} have terminated or "
                f"truncated: reset them first, e.g. reset(options={{'reset_mask': mask}})."
            )
        payloads = self._action_payloads(actions, self._workers)
        self._pending = self._workers
        for w, payload in zip(self._workers, payloads):
            self._send(w, Command.STEP, payload, "step_async")
        self._state = State.WAITING_STEP

    def _action_payloads(self, actions: Any, workers: Sequence[_Worker], env_ids: np.ndarray | None = None) -> list[Any]:
        """Check ``actions`` for ``workers``' envs and place them: in shared rows, or as payloads.

        ``env_ids`` gives the env of each action when they are not in worker order (``send``).
        Nothing is written anywhere until the whole batch has passed the checks. A batch whose
        dtype differs from the space's travels through the pipe as it is, so the env receives
        exactly what ``SyncVectorEnv`` would give it.
        """
        if env_ids is None and self._copy_actions_directly(actions):
            return [None] * len(workers)
        n = sum(w.stop - w.start for w in workers)
        order = None if env_ids is None else np.argsort(env_ids, kind="stable")
        offsets = list(itertools.accumulate((w.stop - w.start for w in workers), initial=0))
        if not self._fixed_actions:
            if actions is None or isinstance(actions, (str, bytes)):
                raise TypeError(f"`actions` must be a batch of {n} actions, got {describe(actions)}")
            return self._action_items(actions, n, order, offsets)
        batch = to_batch(self.single_action_space, actions, n, "actions")
        if not is_array_batch(self.single_action_space, actions):
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
        if (type(actions) is np.ndarray and type(shared) is np.ndarray
                and actions.shape == shared.shape and actions.dtype == shared.dtype):
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

    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for the step sent by :meth:`step_async`; raises the timeout error after ``timeout`` s."""
        self._begin_wait(State.WAITING_STEP, "step_wait", "step_async")
        infos = self._merge(self._finish("step_wait", timeout, poisons=True))
        b = self._buffers
        np.logical_or(b.terminations, b.truncations, out=self._ended)
        return self._observations(), b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with its action, as ``SyncVectorEnv.step``."""
        self.step_async(actions)
        return self.step_wait()

    # -- asynchronous batches (EnvPool-style) ----------------------------------------------------

    def _set_batch_size(self, batch_size: int | None) -> None:
        sizes = {w.stop - w.start for w in self._workers}
        if batch_size is None or batch_size == self.num_envs:
            self.batch_size = self.num_envs
        elif (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
              or len(sizes) != 1 or not 0 < batch_size <= self.num_envs or batch_size % min(sizes)):
            raise ValueError(
                f"`batch_size` must be a multiple of the group size in [1, num_envs={self.num_envs}] "
                f"with groups of equal size, got batch_size={describe(batch_size)} for group sizes "
                f"{sorted(sizes)}"
            )
        else:
            self.batch_size = int(batch_size)
        self._owner = np.repeat(np.arange(len(self._workers)), [w.stop - w.start for w in self._workers])
        self._idle = np.zeros(len(self._workers), dtype=np.bool_)  # returned by recv, awaiting send

    def async_reset(self, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset every env and put them all in flight; :meth:`recv` returns them as groups finish.

        May be called while envs are in flight: their pending results are dropped.
        """
        if self._state is State.POOL:
            self._state = State.DEFAULT
            for w in self._workers:
                if w.expect is not None:
                    w.late += 1  # its step reply belongs to the pool we are abandoning
                    w.expect = None
            self._ready.clear()
        self._assert_usable("async_reset")
        if self.autoreset_mode is AutoresetMode.DISABLED:
            raise ValueError("async_reset/recv/send need autoreset_mode NEXT_STEP or SAME_STEP, got DISABLED")
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"`options` must be a dict or None, got {describe(options)}")
        if options is not None and "reset_mask" in options:
            raise ValueError("`options['reset_mask']` is not supported by `async_reset`: it resets every env")
        seeds = self._seed_list(seed)
        for w in self._workers:
            self._send(w, Command.RESET, ResetArgs(seeds[w.start:w.stop], options, None), "async_reset")
        self._idle[:] = False
        self._needs_reset = None
        self._state = State.POOL

    def recv(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
        """The first groups to finish, ``batch_size`` envs: ``(obs, rewards, terminations,
        truncations, infos, env_ids)``, with ``env_ids`` the global index of each row.

        Infos are batched over the returned rows. A timeout leaves the envs in flight (call
        ``recv`` again). An env error or a dead worker is raised here.
        """
        if self._state is not State.POOL:
            self._begin_wait(State.POOL, "recv", "async_reset")
        if self._needs_reset is not None:
            raise NeedsResetError(f"Calling `recv` after {self._needs_reset}: call `async_reset()` first.")
        deadline = None if timeout is None else time.monotonic() + timeout
        group_size = self._workers[0].stop - self._workers[0].start
        per_batch = self.batch_size // group_size
        while len(self._ready) < per_batch:
            running = [w for w in self._workers if w.expect is not None]
            if len(running) + len(self._ready) < per_batch:
                raise NoAsyncCallError(
                    f"Calling `recv` with only {(len(running) + len(self._ready)) * group_size} "
                    f"envs in flight, fewer than batch_size={self.batch_size}: `send` actions for the envs "
                    f"the last `recv` returned first.", State.POOL.value)
            for w, ok, result in self._receive(running, timeout, deadline, "recv"):
                if not ok:
                    self._needs_reset = "an env raised during `recv`"
                    self._raise_remote(w, result, "recv")
                self._ready.append((w, result))
        groups = [self._ready.popleft() for _ in range(per_batch)]
        b = self._buffers
        infos: dict[str, Any] = {}
        batch = _InfoBatch(self.batch_size)
        offset = 0
        for w, (entries, payload) in groups:
            b.receive(w.start, w.stop, payload)
            for j, info in entries:
                infos = batch._add_info(infos, info, offset + j)
            offset += w.stop - w.start
            self._idle[w.index] = True
        env_ids = np.concatenate([np.arange(w.start, w.stop) for w, _ in groups])
        if b.fixed_observations:
            obs = tree_map(lambda a: a[env_ids], b.observations)
        else:
            obs = concatenate(self.single_observation_space, [b.observations[i] for i in env_ids],
                              create_empty_array(self.single_observation_space, len(env_ids)))
        return obs, b.rewards[env_ids], b.terminations[env_ids], b.truncations[env_ids], infos, env_ids

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray) -> None:
        """Step exactly the envs ``env_ids`` (whole groups returned by :meth:`recv`), one action each.

        Misuse (ids unknown, duplicated, still in flight, not whole groups, or a count that
        differs from the actions') raises before anything is sent.
        """
        if self._state is not State.POOL:
            self._begin_wait(State.POOL, "send", "async_reset")
        if self._needs_reset is not None:
            raise NeedsResetError(f"Calling `send` after {self._needs_reset}: call `async_reset()` first.")
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"`env_ids` must be a non-empty 1-d array of int env indices, got {describe(env_ids)}")
        unknown = ids[(ids < 0) | (ids >= self.num_envs)]
        if unknown.size:
            raise ValueError(f"`env_ids` must lie in [0, {self.num_envs}), got unknown ids {unknown.tolist()}")
        uniq, counts = np.unique(ids, return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"`env_ids` must not repeat an env, got duplicated ids {uniq[counts > 1].tolist()}")
        owners = np.unique(self._owner[ids])
        busy = [int(i) for i in ids if not self._idle[self._owner[i]]]
        if busy:
            raise ValueError(
                f"`env_ids` must be envs returned by `recv` and not sent since, got envs {busy} "
                f"that are still in flight")
        workers = [self._workers[i] for i in owners]
        missing = sorted(set(itertools.chain.from_iterable(w.envs for w in workers)) - set(ids.tolist()))
        if missing:
            raise ValueError(f"`env_ids` must cover whole groups (one group per worker), envs {missing} are missing")
        payloads = self._action_payloads(actions, workers, ids)
        for w, payload in zip(workers, payloads):
            self._send(w, Command.STEP, payload, "send")
            self._idle[w.index] = False

    # -- calls, attributes, render -------------------------------------------------------------

    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start calling method ``name`` (or reading attribute ``name``) on every env."""
        self._assert_usable("call_async")
        if not isinstance(name, str):
            raise TypeError(f"`name` must be a str, got {describe(name)}")
        self._pending = self._workers
        for w in self._workers:
            self._send(w, Command.CALL, CallArgs(name, args, kwargs), "call_async")
        self._state = State.WAITING_CALL

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """The results of :meth:`call_async`, one per env."""
        self._begin_wait(State.WAITING_CALL, "call_wait", "call_async")
        replies = self._finish("call_wait", timeout, poisons=False)
        return tuple(r for reply in replies for r in reply)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` with the arguments on every env (or read attribute ``name``)."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every env (a callable attribute is called, as ``SyncVectorEnv`` does)."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set attribute ``name`` on every env: one value for all, or a list/tuple of one per env."""
        self._assert_usable("set_attr")
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise ValueError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        self._run(Command.SET_ATTR, [(name, list(values[w.start:w.stop])) for w in self._workers], "set_attr")

    def render(self) -> tuple[Any, ...]:
        """The rendered frame of every env."""
        self._assert_usable("render")
        replies = self._run(Command.RENDER, [None] * len(self._workers), "render")
        return tuple(r for reply in replies for r in reply)

    def _run(self, command: Command, payloads: list[Any], call: str) -> list[Any]:
        self._pending = self._workers
        for w, payload in zip(self._workers, payloads):
            self._send(w, command, payload, call)
        self._state = State.WAITING_CALL
        return self._finish(call, None, poisons=False)

    @property
    def num_workers(self) -> int:
        """The number of worker processes (one env group each)."""
        return len(self._workers)

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """The seed of each env's random generator."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Each env's random generator (copies: changing them does not reach the workers)."""
        return self.get_attr("np_random")

    # -- closing -------------------------------------------------------------------------------

    def close(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Close the envs and release every process, pipe and shared-memory block.

        Idempotent. Workers are asked to close their envs and given ``timeout`` seconds
        (default :data:`DEFAULT_CLOSE_TIMEOUT`) to do so; a worker still busy with a call that
        timed out gets no grace unless ``timeout`` is given. Stragglers are terminated, then
        killed. ``terminate=True`` skips the polite part. An exception raised by an env's
        ``close()`` is re-raised after everything is released.
        """
        if self.closed or not hasattr(self, "_state"):
            return
        try:
            self._shutdown(timeout=0.0 if terminate else timeout)
        finally:
            self._state = State.CLOSED
            self.closed = True
            if getattr(self, "_finalizer", None) is not None:
                self._finalizer.cancel()

    def _shutdown(self, timeout: float | None) -> None:
        """Close politely within one deadline, then terminate, then kill; release everything."""
        error: BaseException | None = None
        grace = DEFAULT_CLOSE_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + grace

        def left(until: float) -> float:
            return max(0.0, until - time.monotonic())

        closing = []
        if self._state is not State.BROKEN and grace > 0:
            for w in self._workers:
                if not w.process.is_alive() or (w.late and timeout is None):
                    continue
                try:
                    w.expect = next(self._call_ids)
                    w.conn.send_bytes(encode_command(Command.CLOSE, w.expect, None))
                    closing.append(w)
                except OSError:
                    pass
        if closing:
            try:
                self._gather(closing, left(deadline), "close")
            except (VecEnvTimeoutError, WorkerDiedError):
                pass
            except Exception as exc:
                error = exc
            for w in closing:
                w.process.join(left(deadline))
        for w in self._workers:
            if w.process.is_alive():
                w.process.terminate()
        kill_deadline = time.monotonic() + _KILL_GRACE
        for w in self._workers:
            w.process.join(left(kill_deadline))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.process.close()
            w.conn.close()
        if self._buffers is not None:
            self._buffers.close()
        if error is not None:
            raise error

    def __enter__(self) -> SubprocVectorEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and hasattr(self, "_state"):
            try:
                self.close(terminate=True)
            except Exception:
                pass

    def __repr__(self) -> str:
        spec = getattr(self, "spec", None)
        n = getattr(self, "num_envs", "?")
        workers = len(getattr(self, "_workers", []))
        name = f"{spec.id}, " if spec is not None else ""
        return f"{type(self).__name__}({name}num_envs={n}, num_workers={workers})"
