"""The parent side of a vector env whose envs run in worker groups: the ``VectorEnv`` API.

::

          caller: reset / step / call / render / rollout       async_reset / recv / send
                 |                                                    |
      GroupVectorEnv (this module)                         AsyncBatches (envpool_api.py)
      Rollouts (rollouts.py)                                          |
         call lock (call_lock.py); input checks (checks.py); actions placed by ActionPlacer
         (action_rows.py); replies merged by InfoMerger (replies.py)  |
                 '--------------------------.-------------------------'
                                            v
      CallRunner (calls.py): the one door to the pool: sending, waiting, failure bookkeeping,
         late-reply rules; call state in one owner, CallState (state.py). With every env in
         this process (num_workers=0) a step runs the group's WorkerCore here, directly.
                                            v
      WorkerPool (pool.py): one WorkerRecord per worker (records.py), call ids, deadlines,
         late replies dropped, breakage, restarts (restart.py), shutdown
                                            |  Transport (transports/base.py)
          .---------------------------------+------------------------------.
          | pipe 0 (transports/process.py)  | pipe 1   ...   Ray actor (integrations/ray/transport.py)
          v                                 v                           v
    +-----------+                     +-----------+               +-----------+
    | worker 0  |  worker/loop.py     | worker 1  |               | worker k  |
    | core.py   |  WorkerCore         | core.py   |               | core.py   |
    | EnvGroup  |  worker/group.py    | EnvGroup  |               | EnvGroup  |
    | [0, s1)   |                     | [s1, s2)  |               | [sk, n)   |
    +-----------+                     +-----------+               +-----------+
          |  each writes its rows [start_w, stop_w) of the shared block (wire/buffers.py):
          |  obs | actions | rewards | terminations | truncations
          '--> one reply per worker per call (wire/protocol.py): a StepReply with the
               non-empty infos (and rows that are not shared), or an error

Start-up: the pool launches one worker per group; each builds its envs and sends a ``Hello``
(env count, spaces, metadata); :func:`~vecenv.parent.handshake.configure` checks the spaces,
and the pool gives each worker its starting index and the shared block in an ``Attach``. After
that every call is one command per worker and one reply per worker.

:class:`GroupVectorEnv` knows no transport: :class:`~vecenv.SubprocVectorEnv`
(:mod:`vecenv.parent.subproc`) and :class:`~vecenv.RayVectorEnv` (:mod:`vecenv.integrations.ray.vector_env`)
choose one and call this class's constructor (their ``from_groups`` calls their own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from vecenv.checks import check_batch_size, check_env_ids, check_options, check_reset_mask, check_timeout
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, NotCopyableError, describe
from vecenv.options import VectorOptions
from vecenv.parent.action_rows import ActionPlacer
from vecenv.parent.call_lock import CallLock, serialised
from vecenv.parent.calls import CallRunner
from vecenv.parent.closing import DEFAULT_CLOSE_TIMEOUT, Closer
from vecenv.parent.envpool_api import AsyncBatches
from vecenv.parent.handshake import configure
from vecenv.parent.pool import WorkerPool
from vecenv.parent.records import WorkerRecord
from vecenv.parent.render import EnvIds, RenderPlan
from vecenv.parent.replies import InfoMerger, current_observations
from vecenv.parent.restart import Restarter, RestartPolicy
from vecenv.parent.rollouts import RolloutMethods, Rollouts
from vecenv.parent.state import CallState, SeedBook, State
from vecenv.transports.base import Transport
from vecenv.wire.buffers import Buffers, BufferSpec
from vecenv.wire.protocol import CallArgs, Command, ResetArgs, SetAttrArgs

__all__ = ["GroupVectorEnv", "Uncopyable", "DEFAULT_CLOSE_TIMEOUT"]


class Uncopyable:
    """Refuses ``pickle``, ``copy.copy`` and ``copy.deepcopy`` with :class:`NotCopyableError`:
    for objects that own workers (processes or Ray actors) and what connects them (pipes,
    shared memory), which exist once (a shallow copy
    would share them, and its garbage collection would close them under the original)."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise NotCopyableError(
            f"a {type(self).__name__} cannot be pickled: its workers (processes or Ray actors) and what "
            "connects them belong to the process that made it. Pass what builds it (its env constructors "
            "or env id) and make one in the other process"
        )

    def __copy__(self) -> Any:
        raise NotCopyableError(
            f"a {type(self).__name__} cannot be copied: a copy would share its workers, and closing one "
            "(or its garbage collection) would close both. Use the same object, or make another vector env"
        )

    def __deepcopy__(self, memo: Any) -> Any:
        raise NotCopyableError(
            f"a {type(self).__name__} cannot be deep-copied: its workers (processes or Ray actors) and what "
            "connects them exist once. Make another vector env from the same env constructors instead"
        )


class GroupVectorEnv(Uncopyable, RolloutMethods, VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over a :class:`~vecenv.parent.pool.WorkerPool` of env groups.

    The subclasses choose the transport (:class:`~vecenv.SubprocVectorEnv`: processes;
    :class:`~vecenv.RayVectorEnv`: Ray actors) and call this constructor; everything here is the
    same for both. Results are identical to ``SyncVectorEnv`` for the same seeds and actions.
    Threads may share one: its calls run one at a time (:mod:`vecenv.parent.call_lock`).

    Args:
        transport: how commands reach the workers (it is stopped here if the start fails).
        group_fns: one group builder per worker.
        options: the checked keywords every vector env takes.
        shared_memory: whether the buffers may be one shared block (if the transport can).
    """

    _pool: WorkerPool
    _buffers: Buffers
    _calls: CallState
    _runner: CallRunner
    #: Until the pool has started there is nothing to close; a constructor that raised before
    #: leaves ``None`` here, which ``close()``, ``__del__`` and ``repr`` read.
    _closer: Closer | None = None
    num_envs: int = 0

    def __init__(
        self,
        transport: Transport,
        group_fns: Sequence[Callable[[], Any]],
        options: VectorOptions,
        shared_memory: bool,
    ) -> None:
        """Start the workers and run the handshake; on any failure release everything."""
        #: Held by every public call: threads sharing this vector env take turns.
        self.call_lock = CallLock()
        self.autoreset_mode = options.autoreset_mode
        self.copy = options.copy
        #: The class name every message of this vector env gives: its own, or the one a wrapping
        #: layer (the multi-agent and SB3/SuperSuit drop-ins) passed, the class its caller built.
        self.display_name = options.display_name or type(self).__name__
        self._calls = CallState(self.display_name)
        self.seed_policy = options.seed_policy  # how reset(seed=int) seeds the envs (vecenv.seeding)
        self._seeds = SeedBook(0, options.seed_policy)
        restarter = None
        if options.restarts is not None:
            budget = options.restarts
            # The policy holds the seed book, never the vector env: no cycle keeps it alive.
            restarter = Restarter(RestartPolicy(budget.max_restarts, budget.window, self._seeds, options.start_timeout))
        try:
            self._pool = WorkerPool(transport, group_fns, restarter)
        except BaseException:
            transport.stop(0.0)
            self._calls.mark_closed()
            raise
        self._runner = CallRunner(self._pool, self._calls)
        # Holds the runner, never this vector env: dropping it closes the workers at once.
        self._closer = Closer(self._runner, self.call_lock, self)
        try:
            self._handshake(options, shared_memory and transport.shares_memory)
        except BaseException:
            self._closer.close(0.0, terminate=True, warn=False)
            raise

    def _handshake(self, options: VectorOptions, shared_memory: bool) -> None:
        hellos = self._pool.hellos(options.start_timeout)
        spaces = configure(hellos, options.observation_mode, self.autoreset_mode, self.display_name, shared_memory)
        self.num_envs = spaces.num_envs
        self.observation_space = spaces.observation_space
        self.single_observation_space = spaces.single_observation_space
        self.action_space = spaces.action_space
        self.single_action_space = spaces.single_action_space
        self.metadata = spaces.metadata
        self.render_mode = spaces.render_mode
        self._env_spec = spaces.env_spec
        spec = BufferSpec.plan(self.num_envs, self.single_observation_space, self.single_action_space, shared_memory)
        self._buffers = self._pool.attach([h.num_envs for h in hellos], spec, self.autoreset_mode)
        self._calls.bind(self._pool, self.num_envs)
        self._seeds.seeds = [None] * self.num_envs
        self._seeds.native_groups = [
            (w.start, w.stop) for w, h in zip(self._pool.workers, hellos, strict=True) if h.native_autoreset is not None
        ]
        self._actions = ActionPlacer(self.single_action_space, self._buffers)
        self._infos = InfoMerger(self.num_envs)
        self._disabled = self.autoreset_mode is AutoresetMode.DISABLED
        batch_size = check_batch_size(options.batch_size, [w.size for w in self._pool.workers])
        self._batches = AsyncBatches(
            self._runner,
            self._buffers,
            self._actions,
            self._seeds,
            self.single_observation_space,
            self.autoreset_mode,
            batch_size,
        )
        self._rollouts = Rollouts(
            self._runner,
            self._buffers,
            (self.single_observation_space, self.single_action_space),
            self.autoreset_mode,
            self.copy,
            any(h.native_autoreset is not None for h in hellos),
        )

    # -- state -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran (or the vector env never started)."""
        closer = self._closer
        return closer is None or closer.closed

    @closed.setter
    def closed(self, value: bool) -> None:
        if value and self._closer is not None:
            self._closer.calls.mark_closed()

    @property
    def state(self) -> State:
        """What the vector env is waiting for (``BROKEN`` once a worker died)."""
        return self._calls.state

    def _observations(self) -> Any:
        return current_observations(self._buffers, self.copy)

    # -- reset ---------------------------------------------------------------------------------

    @serialised
    def reset_async(
        self, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Send a reset to the workers; :meth:`reset_wait` collects it.

        ``seed``: ``None``, an int (env ``i`` gets ``seed + i``, or see ``seed_policy``) or one per env.
        ``options`` goes to every env; ``options["reset_mask"]`` (a bool array, one per env)
        resets only the masked envs.
        """
        full = not (isinstance(options, Mapping) and "reset_mask" in options)
        drop_batches = self._calls.check_can_reset("reset_async", full)
        seeds = self._seeds.expand(seed, self.num_envs)
        sent = check_options(options)
        mask = None
        if sent is not None and "reset_mask" in sent:
            sent = dict(sent)  # unlike SyncVectorEnv, leave the caller's dict as it was (docs/semantics.md)
            mask = check_reset_mask(sent.pop("reset_mask"), self.num_envs)
            self._calls.check_mask_reaches_unreset("reset", mask)
        pending = [w for w in self._runner.workers if mask is None or mask[w.start : w.stop].any()]
        self._seeds.remember(seeds, mask)
        payloads = [
            ResetArgs(seeds[w.start : w.stop], sent, None if mask is None else mask[w.start : w.stop]) for w in pending
        ]
        if drop_batches:  # every check has passed: the failed batches' envs in flight are dropped
            self._runner.abandon(self._runner.workers)
        self._rollouts.give_set_state()
        self._runner.send(pending, Command.RESET, payloads, "reset_async", State.WAITING_RESET, mask)

    @serialised
    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Wait for the reset sent by :meth:`reset_async`; raises the timeout error after ``timeout`` s."""
        timeout = check_timeout(timeout)
        self._calls.check_waiting(State.WAITING_RESET, "reset_wait", "reset_async")
        workers, replies = self._runner.finish("reset_wait", timeout, poisons=True)
        # The envs were reset whether or not their infos can be batched: record it first.
        self._infos.receive(self._buffers, workers, replies)
        self._calls.reset_done()
        return self._observations(), self._infos.batch(workers, replies)

    @serialised
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
        with self._runner.whole("reset"):
            with self._runner.within(timeout):
                self.reset_async(seed=seed, options=options)
            return self.reset_wait(timeout)

    # -- step ----------------------------------------------------------------------------------

    @serialised
    def step_async(self, actions: Any) -> None:
        """Write ``actions`` (an element of :attr:`action_space`) and start every worker stepping."""
        workers = self._runner.workers
        payloads = self._step_payloads(actions, workers)
        self._runner.send(workers, Command.STEP, payloads, "step_async", State.WAITING_STEP)

    @serialised
    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for the step sent by :meth:`step_async`; raises the timeout error after ``timeout`` s."""
        timeout = check_timeout(timeout)
        self._calls.check_waiting(State.WAITING_STEP, "step_wait", "step_async")
        return self._step_result(*self._runner.finish("step_wait", timeout, poisons=True))

    @serialised
    def step(
        self, actions: Any, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with its action, as ``SyncVectorEnv.step``; ``timeout`` as in :meth:`step_wait`."""
        timeout = check_timeout(timeout)
        workers = self._runner.workers
        return self._step_result(*self._runner.step(workers, self._step_payloads(actions, workers), timeout))

    # The two halves of every step, under the call lock already.

    def _step_payloads(self, actions: Any, workers: list[WorkerRecord]) -> list[Any]:
        """Check that a step may start, and place ``actions`` (shared rows, or payloads)."""
        self._calls.check_step("step_async", self._disabled)
        self._rollouts.give_set_state()
        return self._actions.payloads(actions, workers)

    def _step_result(
        self, workers: list[WorkerRecord], replies: list[Any]
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """What a step returns, from the workers' replies. Every env has stepped: a Ctrl+C
        before the step returns loses it, so steps are then refused until a reset, as when
        the interrupt comes during the wait."""
        try:
            return self._results_of(workers, replies)
        except BaseException as exc:
            self._calls.interrupted_after_stepping("step", exc)
            raise

    def _results_of(
        self, workers: list[WorkerRecord], replies: list[Any]
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        b = self._buffers
        first = replies[0]
        # Nothing to merge: no infos, no rows in the reply, no native group's masked-out info keys.
        common = len(replies) == 1 and not first.infos and first.rows is None and first.masked is None
        if not common:
            try:
                self._infos.receive(b, workers, replies)
            except BaseException as exc:
                if self._disabled:
                    # The replies are taken and the envs stepped, but which of them ended is not
                    # recorded (nor, for rows that travel in replies, known): stepping on could
                    # step an ended env silently. Refuse steps until a reset instead.
                    self._calls.poison(
                        f"`step_wait` was cut short ({type(exc).__name__}) before it recorded which envs ended"
                    )
                raise
        if self._disabled:  # only DISABLED refuses to step an env whose episode ended
            # (recorded before the infos are batched: the envs ended whether or not they can be)
            self._calls.step_done(b.terminations, b.truncations)
        infos: dict[str, Any] = {} if common else self._infos.batch(workers, replies)
        obs = b.observations
        if type(obs) is np.ndarray and b.fixed_observations:  # a Box space: one array to copy
            obs = obs.copy() if self.copy else obs
        else:
            obs = self._observations()
        return obs, b.rewards.copy(), b.terminations.copy(), b.truncations.copy(), infos

    # -- asynchronous batches (EnvPool-style; see vecenv.parent.envpool_api) ------------------

    @property
    def batch_size(self) -> int:
        """Envs returned by each :meth:`recv`."""
        return self._batches.batch_size

    @serialised
    def async_reset(
        self, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Reset every env and put them all in flight; :meth:`recv` returns them as groups finish.

        May be called while envs are in flight: their pending results are dropped.
        """
        self._rollouts.give_set_state()
        self._batches.async_reset(seed, options)

    @serialised
    def recv(
        self, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
        """The first groups to finish, ``batch_size`` envs: ``(obs, rewards, terminations,
        truncations, infos, env_ids)``, with ``env_ids`` the global index of each row, ascending.

        Infos are batched over the returned rows. A timeout leaves the envs in flight (call
        ``recv`` again). An env error or a dead worker is raised here.
        """
        return self._batches.recv(timeout)

    @serialised
    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray) -> None:
        """Step exactly the envs ``env_ids`` (whole groups returned by :meth:`recv`), one action each.

        Misuse (ids unknown, duplicated, still in flight, not whole groups, or a count that
        differs from the actions') raises before anything is sent.
        """
        self._rollouts.give_set_state()
        self._batches.send(actions, env_ids)

    # -- calls, attributes, render -------------------------------------------------------------

    @serialised
    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start calling method ``name`` (or reading attribute ``name``) on every env."""
        self._calls.check_can_start("call_async")
        if not isinstance(name, str):
            raise ArgumentTypeError(f"`name` must be a str, got {describe(name)}")
        workers = self._runner.workers
        payloads = [CallArgs(name, args, kwargs)] * len(workers)
        self._runner.send(workers, Command.CALL, payloads, "call_async", State.WAITING_CALL)

    @serialised
    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """The results of :meth:`call_async`, one per env."""
        return self._call_results("call_wait", check_timeout(timeout))

    def _call_results(self, call: str, timeout: float | None) -> tuple[Any, ...]:
        """:meth:`call_async`'s results, one per env, waited for by ``call`` (named by its
        errors: ``get_attr``'s timeout is its own, not ``call_wait``'s)."""
        self._calls.check_waiting(State.WAITING_CALL, call, "call_async")
        _, replies = self._runner.finish(call, timeout, poisons=False)
        return tuple(r for reply in replies for r in reply)

    @serialised
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` with the arguments on every env (or read attribute ``name``).

        For a time limit use :meth:`call_async` and ``call_wait(timeout=...)``.
        """
        with self._runner.whole("call"):
            self.call_async(name, *args, **kwargs)
            return self.call_wait()

    @serialised
    def get_attr(self, name: str, timeout: float | None = None) -> tuple[Any, ...]:
        """Attribute ``name`` of every env (a callable attribute is called, as ``SyncVectorEnv`` does)."""
        timeout = check_timeout(timeout)
        with self._runner.whole("get_attr"):
            with self._runner.within(timeout):
                self.call_async(name)
            return self._call_results("get_attr", timeout)

    @serialised
    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any, timeout: float | None = None) -> None:
        """Set attribute ``name`` on every env: one value for all, or a list/tuple of one per env."""
        timeout = check_timeout(timeout)
        self._calls.check_can_start("set_attr")
        if not isinstance(name, str):  # as call_async: refused here, before any worker is asked
            raise ArgumentTypeError(f"`name` must be a str, got {describe(name)}")
        if not isinstance(values, (list, tuple)):
            values = [values for _ in range(self.num_envs)]
        if len(values) != self.num_envs:
            raise InvalidArgumentError(
                "Values must be a list or tuple with length equal to the number of environments. "
                f"Got `{len(values)}` values for {self.num_envs} environments."
            )
        workers = self._runner.workers
        payloads = [SetAttrArgs(name, list(values[w.start : w.stop])) for w in workers]
        self._run(Command.SET_ATTR, workers, payloads, "set_attr", timeout)

    @serialised
    def render(self, env_ids: EnvIds | None = None, timeout: float | None = None) -> tuple[Any, ...]:
        """The rendered frame of every env (``env_ids=None``), or of the envs ``env_ids`` in that
        order (distinct, in ``[0, num_envs)``): only the workers that host them render and send."""
        timeout = check_timeout(timeout)
        self._calls.check_can_start("render")
        ids = None if env_ids is None else check_env_ids(env_ids, self.num_envs)
        plan = RenderPlan.of(self._runner.workers, ids)
        return plan.frames(self._run(Command.RENDER, plan.workers, plan.payloads, "render", timeout))

    def _run(self, command: Command, workers: list[Any], payloads: list[Any], call: str, timeout: float | None) -> Any:
        with self._runner.whole(call):
            with self._runner.within(timeout):
                self._runner.send(workers, command, payloads, call, State.WAITING_CALL)
            return self._runner.finish(call, timeout, poisons=False)[1]

    @property
    def num_workers(self) -> int:
        """The number of env groups, one per worker (0 before they started). A group the parent
        hosts itself counts too (``num_workers=0`` gives 1, ``inline_group=True`` one more than
        the processes): :attr:`worker_pids` has ``None`` for it."""
        return 0 if self._closer is None else len(self._closer.runner.workers)

    @property
    def worker_pids(self) -> list[int | None]:
        """The process id of each worker, in worker order (worker ``w`` hosts a contiguous range
        of envs). ``None`` for a group the parent hosts itself (``num_workers=0`` or
        ``inline_group=True``: it runs in this process) and for a worker not started. A worker
        restarted by ``on_worker_death="restart"`` has a new id; on Ray, an id on the actor's node.
        For monitoring (CPU, memory per worker) and for tests that end a worker on purpose."""
        return list(self._pool.transport.pids)

    @property
    def restart_count(self) -> int:
        """How many workers ``on_worker_death="restart"`` has replaced since the vector env was
        built (always 0 without it). Each restart is also reported by the call that saw it."""
        return self._pool.restarts

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
        """Close the envs and release every worker, pipe and shared-memory block; from any thread.

        Idempotent. Workers are asked to close their envs and given ``timeout`` seconds
        (default :data:`DEFAULT_CLOSE_TIMEOUT`) to do so; a worker still busy with a call that
        timed out gets no grace unless ``timeout`` is given. Stragglers are terminated, then
        killed. ``terminate=True`` skips the polite part. Closing while a ``*_async`` call is
        pending warns, as Gymnasium's ``AsyncVectorEnv`` does. An exception raised by an env's
        ``close()`` is re-raised after everything is released. A call running in another
        thread is given the same grace, then its workers are ended (it raises there).
        """
        timeout = check_timeout(timeout)
        if self._closer is not None:
            self._closer.close(timeout, terminate, warn=True)

    def __enter__(self) -> GroupVectorEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        closer = self._closer
        if closer is not None and not closer.calls.closed:
            try:
                closer.close(None, terminate=True, warn=False)
            except Exception:
                pass

    def __repr__(self) -> str:
        name = f"{self.spec.id}, " if self.spec is not None else ""
        return f"{type(self).__name__}({name}num_envs={self.num_envs}, num_workers={self.num_workers})"
