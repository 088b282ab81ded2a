"""The native multi-agent API: :class:`MultiAgentVectorEnv` and :func:`make_parallel`.

::

    MultiAgentVectorEnv (this module): copies -> rows, seeds and masks per copy, the active mask
        |  one row per (copy, agent): row = copy * num_agents + agent
        v
    the engine's vector env over the rows (SubprocVectorEnv.from_groups or RayVectorEnv.from_groups)
        |  one ParallelCopiesFn per worker: the engine's workers, buffers, pool, restarts, faults
        v
    ParallelGroup in each worker (group.py): autoreset per copy, agent death, batched infos

The engine below runs with ``NEXT_STEP`` and never autoresets a row itself: the groups apply the
chosen autoreset mode per copy, so every mode is the same engine underneath. What this layer adds
is translation only: a seed per copy becomes the seed of each of its rows, a reset mask per copy
becomes a mask over its rows, an inactive mark on a row becomes ``infos["active"]``.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from vecenv.backends import BACKENDS, other_backends_keyword, vector_class
from vecenv.checks import (
    check_autoreset_mode,
    check_count,
    check_env_fns,
    check_flag,
    check_num_workers,
    check_options,
    check_reset_mask,
    check_timeout,
    seed_list,
)
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, NeedsResetError, SpaceMismatchError, describe
from vecenv.multiagent.copies import COPY_CALL, INACTIVE_KEY, CopyCall, CopyOp, per_row
from vecenv.multiagent.errors import AgentSpaceMismatchError
from vecenv.multiagent.group import ParallelCopiesFn
from vecenv.parent.call_lock import CallLock, serialised
from vecenv.parent.groups import contiguous_bounds
from vecenv.parent.restart import RESTART_INFO_KEY
from vecenv.parent.vector_env import Uncopyable
from vecenv.seeding import SeedPolicy

if TYPE_CHECKING:
    from vecenv.parent.rollouts import Rollout

__all__ = ["MultiAgentVectorEnv", "make_parallel", "BACKENDS"]


def split_copies(env_fns: Sequence[Callable[[], Any]], k: int, autoreset_mode: AutoresetMode) -> list[ParallelCopiesFn]:
    """``k`` contiguous group builders over the copies, whose sizes differ by at most one."""
    return [ParallelCopiesFn(env_fns[a:b], a, autoreset_mode) for a, b in contiguous_bounds(len(env_fns), k)]


def open_rows(
    groups: Sequence[Callable[[], Any]], backend: str, inline: bool, kwargs: dict[str, Any], name: str
) -> Any:
    """The engine's vector env over the rows of ``groups`` (one group per worker); its messages
    name ``name``, the class the caller built, not the engine it never saw."""
    if "observation_mode" in kwargs:
        raise ArgumentTypeError(
            "`observation_mode` does not apply: every agent of every copy shares one observation space"
        )
    cls = vector_class(backend)
    # What the engine takes, but for what this module sets itself: another keyword is the
    # caller's mistake, said as Python says it, of the class the caller built.
    takes = set(inspect.signature(cls.from_groups).parameters)
    takes -= {"group_fns", "autoreset_mode", "inline_group", "observation_mode"}
    unknown = sorted(set(kwargs) - takes)
    if unknown:
        raise ArgumentTypeError(
            f"{name}() got an unexpected keyword argument {unknown[0]!r}; it takes backend, autoreset_mode"
            f"{', inline_group' if backend == 'process' else ''} and {', '.join(sorted(takes))}"
        )
    kwargs = {"display_name": name, **kwargs}
    if backend == "process":
        kwargs = {**kwargs, "inline_group": inline}
    try:
        return cls.from_groups(groups, autoreset_mode=AutoresetMode.NEXT_STEP, **kwargs)
    except SpaceMismatchError as exc:
        m = exc.mismatch
        if isinstance(exc, AgentSpaceMismatchError) or m is None:
            raise
        # Copies in different workers (each worker checks its own copies, so the row found is
        # the first of another worker's): said in copies, and in rows where that is unknown.
        where = f"row {m.local_index} (an agent of a copy in another worker than copy 0's)"
        group = None if exc.worker is None else groups[exc.worker]
        if isinstance(group, ParallelCopiesFn) and exc.worker_row == 0:
            where = f"copy {group.first} (the first of worker {exc.worker}'s)"
        raise AgentSpaceMismatchError(
            f"{where} has {m.which.label} {m.received}, but copy 0's agents have {m.expected}: every agent "
            "of every copy must share them"
        ) from None


def describe_agents(rows: Any) -> tuple[str, ...]:
    """The agents every copy has, asked of the workers; copies that differ raise."""
    per_row = rows.call(COPY_CALL, CopyCall(CopyOp.DESCRIBE))
    agents = per_row[0]
    for row, other in enumerate(per_row):
        if other != agents:
            raise AgentSpaceMismatchError(
                f"row {row} belongs to a copy with agents {list(other)}, but copy 0 has {list(agents)}: "
                "every copy must have the same possible_agents"
            )
    return tuple(agents)


def with_active(infos: dict[str, Any], n: int) -> np.ndarray:
    """Replace the groups' inactive marks by ``infos["active"]`` (all ``n`` rows, ``_active``
    all True), also inside ``final_info``; returns the mask."""
    mask = infos.pop(f"_{INACTIVE_KEY}", None)
    infos.pop(INACTIVE_KEY, None)
    active = np.ones(n, dtype=np.bool_) if mask is None else ~mask
    infos["active"], infos["_active"] = active, np.ones(n, dtype=np.bool_)
    final = infos.get("final_info")
    if isinstance(final, dict) and "_final_info" in infos:
        ended = infos["_final_info"]
        final_mask = final.pop(f"_{INACTIVE_KEY}", None)
        final.pop(INACTIVE_KEY, None)
        final["active"] = ended.copy() if final_mask is None else ended & ~final_mask
        final["_active"] = ended.copy()
    return active


class MultiAgentVectorEnv(Uncopyable, VectorEnv):
    """A ``gymnasium.vector.VectorEnv`` over copies of a PettingZoo ``ParallelEnv``, one row per
    (copy, agent), the copies stepped in a few worker processes (or Ray actors).

    Row ``copy * num_agents + agent`` holds that agent of that copy, agents in
    ``possible_agents`` order; every agent must share one observation and one action space
    (pad them first otherwise, e.g. with SuperSuit's ``pad_observations_v0`` and
    ``pad_action_space_v0``). A step takes one action per row and returns one observation,
    reward and pair of flags per row, and Gymnasium's batched infos: each agent's info on its
    row (``_key`` masks), a copy's infos that name no agent under ``infos["copy_info"]`` on each
    of its rows, and ``infos["active"]``. An agent's info holding one of those keys (or their
    ``_`` masks) is refused with ``InvalidInfoError``, not silently replaced.

    **Agent death**: an agent absent from its env (it left ``env.agents``, or has not joined yet)
    gets a zero observation, reward 0, ``terminated`` True and ``active`` False until its copy
    resets; its action is not used. ``active`` is True where the row's observation and reward
    came from the env in that call; it is in every ``infos`` and in :attr:`active`.

    **Autoreset** (``autoreset_mode``, Gymnasium's three modes) acts per copy: a copy is done
    when every one of its rows is terminated or truncated, and is then reset as one env of
    ``SyncVectorEnv`` is in that mode (``NEXT_STEP``: at its next step; ``SAME_STEP``: at once,
    with ``final_obs``/``final_info`` per row; ``DISABLED``: by ``reset(options={"reset_mask":
    ...})`` with one bool per copy).

    Args:
        env_fns: one callable per copy, each returning a ``ParallelEnv``; called in the workers
            (sent with cloudpickle, so lambdas work with every start method).
        num_workers: worker processes, each hosting a contiguous group of copies; default
            ``min(copies, available cores)``; ``0`` steps every copy in this process.
        backend: ``"process"`` (worker processes) or ``"ray"`` (Ray actors).
        autoreset_mode: an ``AutoresetMode`` or its string value.
        **kwargs: the engine's options, as ``vecenv.SubprocVectorEnv.from_groups`` (or
            ``RayVectorEnv.from_groups``) takes them: ``copy``, ``context``, ``batch_size`` (rows,
            whole groups), ``on_worker_death``, ``threads_per_worker``, ``inline_group``,
            ``start_timeout``, ``address``, ``actor_options``, ...

    Attributes:
        num_copies, agents, num_agents: the copies and their agents (``num_envs`` is
            ``num_copies * num_agents``).
        active: per row, whether the last call's row came from the env (see above).
        rows: the engine's vector env over the rows (for its per-row tools).

    Raises:
        AgentSpaceMismatchError: agents (or copies) whose spaces differ, or copies whose agents do.
    """

    #: The engine's vector env over the rows; ``None`` until it started (a constructor that
    #: raised before leaves nothing to close).
    rows: Any = None

    def __init__(
        self,
        env_fns: Iterable[Callable[[], Any]],
        num_workers: int | None = None,
        *,
        backend: str = "process",
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        **kwargs: Any,
    ) -> None:
        fns = check_env_fns(env_fns)
        found = other_backends_keyword(backend, kwargs)
        if found is not None:  # (before Ray is imported, where it would be a bare TypeError)
            keyword, other = found
            raise InvalidArgumentError(
                f"`{keyword}` is for backend={other!r} only, got backend={backend!r} and {keyword}="
                f"{describe(kwargs[keyword])}"
            )
        self.autoreset_mode = check_autoreset_mode(autoreset_mode)
        workers = check_num_workers(num_workers, len(fns), in_process=backend != "ray", auto=False)
        self.num_copies = len(fns)
        inline = check_flag(kwargs.pop("inline_group", False), "inline_group") or workers == 0
        groups = split_copies(fns, max(1, workers), self.autoreset_mode)
        self.rows = open_rows(groups, backend, inline, kwargs, type(self).__name__)
        try:
            self.agents = describe_agents(self.rows)
        except BaseException:
            self.rows.close(terminate=True)
            raise
        rows = self.rows
        self.num_agents = len(self.agents)
        self.num_envs = rows.num_envs
        self.single_observation_space, self.observation_space = rows.single_observation_space, rows.observation_space
        self.single_action_space, self.action_space = rows.single_action_space, rows.action_space
        self.metadata = {**rows.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = rows.render_mode
        self.closed = False
        self.active = np.ones(self.num_envs, dtype=np.bool_)
        self._copy_done = np.zeros(self.num_copies, dtype=np.bool_)

    @property
    def call_lock(self) -> CallLock:
        """The engine's call lock, held by every public call of this vector env as by the
        engine's own: threads sharing it take turns, each call whole (a ``step`` is its send
        and its wait, and updates :attr:`active` with them)."""
        return self.rows.call_lock

    # -- copies and rows -----------------------------------------------------------------------

    @property
    def seed_policy(self) -> SeedPolicy:
        """How ``reset(seed=int)`` seeds the copies: copy ``c`` gets ``seed + c``
        (``"sequential"``) or ``spawn_seeds(seed, num_copies)[c]`` (``"spawn"``)."""
        return SeedPolicy(self.rows.seed_policy)

    def _row_seeds(self, seed: Any) -> list[int | None]:
        """One seed per row: each copy's (see :attr:`seed_policy`) on its rows."""
        return per_row(seed_list(seed, self.num_copies, self.seed_policy, count="num_copies"), self.num_agents)

    def _row_options(self, options: Any) -> tuple[dict[str, Any] | None, np.ndarray | None]:
        """Options for the rows, with ``reset_mask`` spread over each copy's rows, and the mask
        of copies it chose."""
        options = check_options(options)
        if options is None or "reset_mask" not in options:
            return options, None
        mask = self._copy_mask(options["reset_mask"])
        return {**options, "reset_mask": np.repeat(mask, self.num_agents)}, mask

    def _copy_mask(self, reset_mask: Any) -> np.ndarray:
        """One bool per copy from a ``reset_mask`` given per copy or, as Gymnasium's contract
        (and its wrappers, such as ``RecordEpisodeStatistics``) gives it, per row: the rows of a
        copy reset together, so a row mask must keep each copy's rows alike."""
        shape = getattr(reset_mask, "shape", None)
        if shape != (self.num_envs,) or self.num_envs == self.num_copies:
            if isinstance(reset_mask, np.ndarray) and shape not in ((self.num_copies,), (self.num_envs,)):
                raise InvalidArgumentError(
                    f"`options['reset_mask']` must have shape `({self.num_copies},)` (one bool per copy) or "
                    f"`({self.num_envs},)` (one per row, alike over each copy's rows), got {shape}"
                )
            return check_reset_mask(reset_mask, self.num_copies)
        rows = check_reset_mask(reset_mask, self.num_envs).reshape(self.num_copies, self.num_agents)
        split = np.flatnonzero(rows.any(axis=1) != rows.all(axis=1))
        if split.size:
            c, a_n = int(split[0]), self.num_agents
            raise InvalidArgumentError(
                f"`options['reset_mask']` with one bool per row must give every row of a copy the same "
                f"value (a copy resets as a whole): copy {c}, rows [{c * a_n}, {(c + 1) * a_n}), got "
                f"{rows[c].tolist()}"
            )
        return rows[:, 0].copy()

    def _check_copies(self, copies: Any) -> list[int]:
        if isinstance(copies, (str, bytes)) or not isinstance(copies, Iterable):
            raise ArgumentTypeError(f"`copies` must be a sequence of copy indices or None, got {describe(copies)}")
        chosen = []
        for c in copies:
            try:
                i = operator.index(c)
            except TypeError:
                raise ArgumentTypeError(f"`copies` must hold int copy indices, got {describe(c)}") from None
            if not 0 <= i < self.num_copies:
                raise InvalidArgumentError(f"`copies` must lie in [0, {self.num_copies}), got {i}")
            if i in chosen:
                raise InvalidArgumentError(f"`copies` must not repeat a copy, got copy {i} twice")
            chosen.append(i)
        if not chosen:  # the engine refuses an empty choice of rows: say it of the copies
            raise InvalidArgumentError(
                f"`copies` must choose one copy or more (None: every copy), got {describe(copies)}"
            )
        return chosen

    def _per_copy(self, per_row: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(per_row[:: self.num_agents])

    # -- reset and step ----------------------------------------------------------------------

    @serialised
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every copy (or those of ``options["reset_mask"]``: one bool per copy, or one
        per row as Gymnasium's wrappers pass it, alike over each copy's rows).

        ``seed``: ``None``, an int (copy ``c`` is reset with ``seed + c``) or one seed per copy.
        ``timeout``: seconds to wait at most (default: no limit), as the engine's ``reset``.
        """
        row_options, mask = self._row_options(options)
        obs, infos = self.rows.reset(seed=self._row_seeds(seed), options=row_options, timeout=timeout)
        active = with_active(infos, self.num_envs)
        if mask is None:
            self.active[:] = active
            self._copy_done[:] = False
        else:  # the other copies' rows keep their state, in the mask returned too
            rows = np.repeat(mask, self.num_agents)
            restarted = infos.get(f"_{RESTART_INFO_KEY}")
            if restarted is not None:  # copies a restarted worker rebuilt and reset, in the mask or not
                rows |= np.asarray(restarted, dtype=np.bool_)
            self.active[rows] = active[rows]
            infos["active"] = self.active.copy()
            self._copy_done[rows.reshape(self.num_copies, self.num_agents).any(axis=1)] = False
        return obs, infos

    @serialised
    def step_async(self, actions: Any) -> None:
        """Start stepping every copy with one action per row."""
        if self.autoreset_mode is AutoresetMode.DISABLED and self._copy_done.any():
            raise NeedsResetError(
                f"Calling `step` with autoreset_mode=DISABLED while copies {np.flatnonzero(self._copy_done).tolist()} "
                "are done: reset them first, e.g. reset(options={'reset_mask': mask}) with one bool per copy."
            )
        self.rows.step_async(actions)

    @serialised
    def step_wait(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of :meth:`step_async`."""
        obs, rewards, terms, truncs, infos = self.rows.step_wait(timeout)
        self.active[:] = with_active(infos, self.num_envs)
        if self.autoreset_mode is AutoresetMode.DISABLED:  # only that mode refuses to step done copies
            self._copy_done[:] = (terms | truncs).reshape(self.num_copies, self.num_agents).all(axis=1)
        return obs, rewards, terms, truncs, infos

    @serialised
    def step(
        self, actions: Any, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every copy with one action per row (rows of absent agents: ignored);
        ``timeout`` as in :meth:`step_wait`, checked before anything is sent."""
        timeout = check_timeout(timeout)
        self.step_async(actions)
        return self.step_wait(timeout)

    # -- asynchronous batches (whole worker groups, hence whole copies) ------------------------

    @serialised
    def async_reset(
        self, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Reset every copy and put them all in flight; :meth:`recv` returns them as groups finish."""
        if self.autoreset_mode is AutoresetMode.DISABLED:
            raise InvalidArgumentError("async_reset/recv/send need autoreset_mode NEXT_STEP or SAME_STEP, got DISABLED")
        self.rows.async_reset(self._row_seeds(seed), check_options(options))

    @serialised
    def recv(
        self, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any], np.ndarray]:
        """The first worker groups to finish: ``(obs, rewards, terminations, truncations, infos,
        env_ids)`` over their rows (``env_ids``: the row indices); see the engine's ``recv``."""
        obs, rewards, terms, truncs, infos, env_ids = self.rows.recv(timeout)
        self.active[env_ids] = with_active(infos, len(env_ids))
        return obs, rewards, terms, truncs, infos, env_ids

    @serialised
    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray) -> None:
        """Step exactly the rows ``env_ids`` (whole groups returned by :meth:`recv`)."""
        self.rows.send(actions, env_ids)

    @property
    def batch_size(self) -> int:
        """Rows returned by each :meth:`recv`."""
        return int(self.rows.batch_size)

    # -- rollouts in the workers (NEXT_STEP) ---------------------------------------------------

    def _check_rollout_mode(self) -> None:
        """Rollouts keep their bookkeeping per row as the engine's NEXT_STEP does (the mode the
        rows run under): only a NEXT_STEP vector env of copies autoresets as that bookkeeping
        reads it."""
        if self.autoreset_mode is not AutoresetMode.NEXT_STEP:
            raise InvalidArgumentError(
                f"`rollout` needs autoreset_mode NEXT_STEP, got {self.autoreset_mode.name}: a rollout keeps its "
                "episode starts and final observations per row, while copies of agents autoreset as a whole "
                "(and under DISABLED a done copy cannot wait unstepped in a rollout); call `step` in a loop, "
                "or make the vector env with autoreset_mode=AutoresetMode.NEXT_STEP"
            )

    def _rollout_with_active(self, batch: Rollout) -> Rollout:
        """Each step's inactive marks made ``infos["active"]``, as ``step`` makes them, and
        :attr:`active` set from the last step."""
        for infos in batch.infos:
            with_active(infos, self.num_envs)
        if batch.infos:
            self.active[:] = batch.infos[-1]["active"]
        return batch

    @serialised
    def rollout_async(self, num_steps: int, policy: Any = "random") -> None:
        """Start a rollout of ``num_steps`` steps of every copy, actions chosen for every row
        by ``policy`` in the workers (as the engine's ``rollout_async``); :meth:`rollout_wait`
        collects it. NEXT_STEP only."""
        self._check_rollout_mode()
        self.rows.rollout_async(num_steps, policy)

    @serialised
    def rollout_wait(self, timeout: float | None = None) -> Rollout:
        """The rollout started by :meth:`rollout_async`, ``infos`` with ``active`` as ``step``
        gives them; ``timeout`` as the engine's ``rollout_wait``."""
        return self._rollout_with_active(self.rows.rollout_wait(timeout))

    @serialised
    def rollout(self, num_steps: int, policy: Any = "random", *, timeout: float | None = None) -> Rollout:
        """``num_steps`` steps of every copy with ``policy`` choosing each row's action in the
        workers: one command and one reply per worker. Row for row, the steps ``step`` gives
        with the same actions (the actions of absent agents' rows are not used); each step's
        infos carry ``active``. NEXT_STEP only. See ``SubprocVectorEnv.rollout``."""
        self._check_rollout_mode()
        return self._rollout_with_active(self.rows.rollout(num_steps, policy, timeout=timeout))

    @serialised
    def update_policy_weights(self, weights: Any = None) -> None:
        """New weights for the workers' copies of the last rollout's policy, sent with the next
        rollout; as the engine's ``update_policy_weights``."""
        self.rows.update_policy_weights(weights)

    @property
    def policy_weights_version(self) -> int:
        """The version of the weights the next rollout acts with, as the engine's (each
        :class:`~vecenv.Rollout` says its own ``weights_version``)."""
        return int(self.rows.policy_weights_version)

    # -- calls, attributes, render -------------------------------------------------------------

    @serialised
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every copy (or read attribute ``name``): one result per copy.
        For a time limit use :meth:`call_async` and ``call_wait(timeout=...)``."""
        return self._per_copy(self.rows.call(name, *args, **kwargs))

    @serialised
    def call_async(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Start :meth:`call`; :meth:`call_wait` collects it."""
        self.rows.call_async(name, *args, **kwargs)

    @serialised
    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """The results of :meth:`call_async`, one per copy; raises the timeout error after
        ``timeout`` seconds."""
        return self._per_copy(self.rows.call_wait(timeout))

    @serialised
    def get_attr(self, name: str, timeout: float | None = None) -> tuple[Any, ...]:
        """Attribute ``name`` of every copy; ``timeout``: seconds to wait at most."""
        return self._per_copy(self.rows.get_attr(name, timeout=timeout))

    @serialised
    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any, timeout: float | None = None) -> None:
        """Set attribute ``name`` of every copy: one value for all, or a list/tuple of one per
        copy; ``timeout``: seconds to wait at most."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_copies
        if len(values) != self.num_copies:
            raise InvalidArgumentError(f"`values` must hold one value per copy ({self.num_copies}), got {len(values)}")
        self.rows.set_attr(name, per_row(values, self.num_agents), timeout=timeout)

    @serialised
    def render(self, copies: Iterable[int] | None = None, timeout: float | None = None) -> tuple[Any, ...]:
        """The frame of every copy, or of the ``copies`` chosen (in that order); ``timeout``:
        seconds to wait at most."""
        if copies is None:
            return self._per_copy(self.rows.render(timeout=timeout))
        chosen = self._check_copies(copies)
        return tuple(self.rows.render(env_ids=[c * self.num_agents for c in chosen], timeout=timeout))

    # -- state and closing -----------------------------------------------------------------------

    @property
    def num_workers(self) -> int:
        """Worker processes (or actors), one group of copies each."""
        return int(self.rows.num_workers)

    # Per copy, as SubprocVectorEnv's and SyncVectorEnv's are per env (Gymnasium's base class
    # types it as a single value, and would give a seed of its own generator, which steps nothing).
    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """The seed of each copy's random generator: its env's own ``np_random_seed`` where it
        has one, else the seed this vector env last reset it with (``reset(seed=s)`` gives copy
        ``c`` ``s + c``), else -1, Gymnasium's value for a generator of unknown seed."""
        return self._per_copy(self.rows.call(COPY_CALL, CopyCall(CopyOp.NP_RANDOM_SEED)))

    @property
    def worker_pids(self) -> list[int | None]:
        """The process id of each worker (or actor), in worker order; ``None`` for a group this
        process hosts. As the engine's ``GroupVectorEnv.worker_pids``."""
        return list(self.rows.worker_pids)

    @property
    def restart_count(self) -> int:
        """How many workers ``on_worker_death="restart"`` has replaced so far (0 without it)."""
        return int(self.rows.restart_count)

    def close(self, **kwargs: Any) -> None:
        """Close every copy and release the workers (idempotent); ``kwargs`` as the engine's
        ``close`` (``timeout``, ``terminate``)."""
        if self.rows is not None:
            self.rows.close(**kwargs)
        self.closed = True

    def __enter__(self) -> MultiAgentVectorEnv:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_copies={self.num_copies}, agents={len(self.agents)}, num_envs={self.num_envs})"
        )


def make_parallel(
    env: Any,
    num_copies: int = 1,
    num_workers: int | None = None,
    *,
    env_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> MultiAgentVectorEnv:
    """``num_copies`` copies of a PettingZoo parallel env in a :class:`MultiAgentVectorEnv`.

    ``env`` is a PettingZoo env module (``pistonball_v6``: its ``parallel_env`` is used) or a
    callable returning a ``ParallelEnv``; it is called with ``env_kwargs`` in the workers::

        envs = vecenv.make_parallel(pistonball_v6, 4, num_workers=2, env_kwargs={"continuous": False})

    ``kwargs`` go to :class:`MultiAgentVectorEnv` (``backend``, ``autoreset_mode``, engine options).
    """
    constructor = getattr(env, "parallel_env", env)
    if not callable(constructor):
        raise ArgumentTypeError(
            f"`env` must be a PettingZoo env module (with `parallel_env`) or a callable returning a "
            f"ParallelEnv, got {describe(env)}"
        )
    num_copies = check_count(num_copies, "num_copies")
    if env_kwargs is not None and not isinstance(env_kwargs, dict):
        raise ArgumentTypeError(f"`env_kwargs` must be a dict or None, got {describe(env_kwargs)}")
    env_fn = _Constructor(constructor, dict(env_kwargs or {}))
    return MultiAgentVectorEnv([env_fn] * num_copies, num_workers, **kwargs)


class _Constructor:
    """A picklable ``lambda: constructor(**kwargs)``."""

    def __init__(self, constructor: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        self.constructor = constructor
        self.kwargs = kwargs

    def __call__(self) -> Any:
        return self.constructor(**self.kwargs)
