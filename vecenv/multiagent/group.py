"""The in-process multi-agent group: copies of a parallel env stepped one after the other.

:class:`CopyGroup` is what both kinds of multi-agent group share: the row layout (row
``copy * num_agents + agent``), writing a copy's observations into its rows, calls, attributes,
rendering and closing, and blaming the copy whose code raised. :class:`ParallelGroup` adds the
native API's semantics: Gymnasium's three autoreset modes applied per copy (a copy is done when
every one of its rows is terminated or truncated), and agent death (an agent absent from its
env gets a zero observation, reward 0 and ``terminated`` True, and its row is marked inactive).
The SuperSuit drop-in's group is in :mod:`vecenv.integrations.supersuit.markov`.

Like the engine's ``EnvGroup`` it runs without any process around it; a worker is this class
plus a pipe. Methods take and return what ``EnvGroup``'s do: per-row seeds and mask (each row
of a copy carries the copy's), and ``(local row, info)`` entries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, create_empty_array, iterate

from vecenv.errors import InvalidArgumentError, InvalidInfoError, describe
from vecenv.multiagent.copies import (
    COPY_CALL,
    COPY_INFO_KEY,
    INACTIVE_KEY,
    RESERVED_INFO_KEYS,
    AgentCopies,
    CopyCall,
    CopyOp,
    build_copies,
    per_row,
)
from vecenv.spaces import tree_map
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import InfoEntries
from vecenv.worker.group import batched_view, close_each

__all__ = ["CopyGroup", "ParallelGroup", "ParallelCopies", "ParallelCopiesFn", "InfoEntries"]

_MISSING = object()


class CopyGroup:
    """The copies of one worker and their rows; subclasses say how a copy resets and steps.

    Attributes:
        blame: set when a method raises: the local row of the agent whose observation could not
            be stored, else of the first agent of the copy whose code raised (the worker clears
            it before each command).
    """

    def __init__(self, copies: AgentCopies, buffers: Buffers) -> None:
        self.envs = copies.envs
        self.agents = copies.agents
        self.num_agents = len(copies.agents)
        self.num_envs = copies.num_rows
        self.buffers = buffers
        self.blame: int | None = None
        self._write = buffers.observation_writer()
        self._batched_action_space = batch_space(copies.action_space, self.num_envs)
        self._first_copy = buffers.start // self.num_agents  # global index of this group's copy 0
        #: The seed each copy was last reset with by a ``reset`` that gave it one (``None``: none
        #: yet); an autoreset, like ``reset(seed=None)``, keeps the generator and so the seed.
        self.seeds: list[int | None] = [None] * len(self.envs)

    # -- reset and step ----------------------------------------------------------------------

    def reset(
        self, seeds: Sequence[int | None], options: dict[str, Any] | None, mask: Sequence[bool] | None
    ) -> InfoEntries:
        """Reset the copies selected by ``mask`` (all when ``None``); the seed and mask of a copy
        are those of its first row."""
        entries: InfoEntries = []
        a = self.num_agents

        def one(c: int) -> None:
            if mask is not None and not mask[c * a]:
                return
            if seeds[c * a] is not None:  # Gymnasium's Env takes the seed before anything can fail
                self.seeds[c] = seeds[c * a]
            self._reset_copy(c, seeds[c * a], options, entries)

        self._each_copy(one)
        return entries

    def step(self, actions: Any) -> InfoEntries:
        """Step every copy: ``actions`` is the group's rows of the batch, or a list of one action
        per row (the actions of agents absent from their env are not used)."""
        items = actions if isinstance(actions, list) else list(iterate(self._batched_action_space, actions))
        entries: InfoEntries = []
        self._each_copy(lambda c: self._step_copy(c, items, entries))
        return entries

    def _each_copy(self, run: Callable[[int], Any], copies: Sequence[int] | None = None) -> list[Any]:
        """``run(c)`` for each copy in order; an error is blamed on (and notes) the copy."""
        results = []
        for c in range(len(self.envs)) if copies is None else copies:
            try:
                results.append(run(c))
            except BaseException as exc:
                if self.blame is None:  # an agent's row, when one is to blame (_write_row)
                    self.blame = c * self.num_agents
                first = self._first_copy + c
                exc.add_note(f"in copy {first} (agents {', '.join(map(str, self.agents))})")
                raise
        return results

    def _write_row(self, row: int, observation: Any) -> None:
        """Store one agent's observation in local row ``row``; a value that cannot be stored is
        blamed on that agent's row."""
        try:
            self._write(row, observation)
        except BaseException:
            self.blame = row
            raise

    def _reset_copy(self, c: int, seed: int | None, options: dict[str, Any] | None, entries: InfoEntries) -> None:
        raise NotImplementedError

    def _step_copy(self, c: int, items: list[Any], entries: InfoEntries) -> None:
        raise NotImplementedError

    def _actions(self, c: int, items: list[Any]) -> dict[str, Any]:
        """Copy ``c``'s action dict: one action per agent that is in its env now."""
        live = set(self.envs[c].agents)
        base = c * self.num_agents
        return {agent: items[base + a] for a, agent in enumerate(self.agents) if agent in live}

    def _store(self, c: int, rewards: list[Any], terms: list[Any], truncs: list[Any]) -> None:
        rows = slice(c * self.num_agents, (c + 1) * self.num_agents)
        b = self.buffers
        b.rewards[rows], b.terminations[rows], b.truncations[rows] = rewards, terms, truncs

    # -- everything else ---------------------------------------------------------------------

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Call a method (or read an attribute) of every copy; every row of a copy gets its
        copy's result. ``COPY_CALL`` runs a :class:`CopyCall` instead."""
        if name == COPY_CALL:
            (request,) = args
            return self._copy_call(request)

        def one(c: int) -> Any:
            value = getattr(self.envs[c], name)
            return value(*args, **kwargs) if callable(value) else value

        return self._per_row(self._each_copy(one))

    def _copy_call(self, request: CopyCall) -> list[Any]:
        if request.op is CopyOp.DESCRIBE:
            return [self.agents] * self.num_envs
        if request.op is CopyOp.IS_WRAPPED:
            return [
                flag for flags in self._each_copy(lambda c: self._is_wrapped(c, request.argument)) for flag in flags
            ]
        if request.op is CopyOp.NP_RANDOM_SEED:
            return self._per_row(self._each_copy(self._np_random_seed))
        raise InvalidArgumentError(f"unknown copy operation {request.op!r}")

    def _np_random_seed(self, c: int) -> int:
        """Copy ``c``'s seed: its env's own ``np_random_seed`` where it has one (as a Gymnasium
        env's is read), else the seed it was last reset with, else -1 (Gymnasium's value for a
        generator of unknown seed; a PettingZoo env keeps no seed of its own)."""
        own = getattr(self.envs[c], "np_random_seed", None)
        if isinstance(own, (int, np.integer)) and not isinstance(own, bool):
            return int(own)
        seed = self.seeds[c]
        return -1 if seed is None else int(seed)

    def _is_wrapped(self, c: int, wrapper_class: type) -> list[bool]:
        return [False] * self.num_agents

    def _per_row(self, per_copy: list[Any]) -> list[Any]:
        return per_row(per_copy, self.num_agents)

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set an attribute on every copy: the value of the copy's first row."""
        self._each_copy(lambda c: setattr(self.envs[c], name, values[c * self.num_agents]))

    def render(self, env_ids: Sequence[int] | None = None) -> list[Any]:
        """The frame of each row's copy: every row (``None``), or the local rows ``env_ids`` in
        that order; each copy asked for renders once."""
        if env_ids is None:
            return self._per_row(self._each_copy(lambda c: self.envs[c].render()))
        copies = sorted({j // self.num_agents for j in env_ids})
        frames = dict(zip(copies, self._each_copy(lambda c: self.envs[c].render(), copies)))
        return [frames[j // self.num_agents] for j in env_ids]

    def close(self) -> None:
        """Close every copy, even when one raises; the first error is re-raised at the end."""
        failed = close_each(self.envs)
        if failed is not None:
            self.blame = failed[0] * self.num_agents  # the copy's first row
            raise failed[1]


class ParallelGroup(CopyGroup):
    """The native API's group: autoreset per copy, agent death built in, batched infos.

    Rows of agents absent from their env (dead, or not yet joined) hold a zero observation,
    reward 0, ``terminated`` True and an ``INACTIVE_KEY`` info; a copy's infos that name no
    agent reach each of its rows under ``COPY_INFO_KEY``.
    """

    def __init__(self, copies: AgentCopies, buffers: Buffers, autoreset_mode: AutoresetMode) -> None:
        super().__init__(copies, buffers)
        self.autoreset_mode = autoreset_mode
        space = copies.observation_space  # the zero observation of an absent agent: one row of zeros
        self._zero = next(iter(iterate(batch_space(space, 1), create_empty_array(space, 1, fn=np.zeros))))
        self._agent_set = frozenset(self.agents)
        self._pending_reset = [False] * len(self.envs)  # NEXT_STEP: reset at the copy's next step

    def _reset_copy(self, c: int, seed: int | None, options: dict[str, Any] | None, entries: InfoEntries) -> None:
        inactive = self._restart_copy(c, seed, options, entries)
        a = self.num_agents
        self._store(c, [0.0] * a, inactive, [False] * a)

    def _restart_copy(
        self, c: int, seed: int | None, options: dict[str, Any] | None, entries: InfoEntries
    ) -> list[bool]:
        """Reset copy ``c`` and write its observations and infos; returns its inactive rows."""
        obs, infos = self.envs[c].reset(seed=seed, options=options)
        self._pending_reset[c] = False
        inactive = self._write_copy(c, obs)
        base = c * self.num_agents
        entries.extend((base + a, info) for a, info in enumerate(self._row_infos(c, infos, inactive)) if info)
        return inactive

    def _step_copy(self, c: int, items: list[Any], entries: InfoEntries) -> None:
        if self._pending_reset[c]:
            self._reset_copy(c, None, None, entries)
            return
        obs, rewards, terms, truncs, infos = self.envs[c].step(self._actions(c, items))
        inactive = self._write_copy(c, obs)
        a = self.num_agents
        r, t, tr = [0.0] * a, [True] * a, [False] * a
        for i, agent in enumerate(self.agents):
            if not inactive[i]:
                r[i], t[i], tr[i] = rewards.get(agent, 0.0), terms.get(agent, False), truncs.get(agent, False)
        self._store(c, r, t, tr)
        row_infos = self._row_infos(c, infos, inactive)
        base = c * a
        done = all(x or y for x, y in zip(t, tr))
        if done and self.autoreset_mode is AutoresetMode.SAME_STEP:
            for i, agent in enumerate(self.agents):
                final_obs = self._zero if inactive[i] else obs[agent]
                entries.append(
                    (base + i, {"final_obs": _snapshot(final_obs), "final_info": _snapshot(row_infos[i] or {})})
                )
            self._restart_copy(c, None, None, entries)
            return
        if done and self.autoreset_mode is AutoresetMode.NEXT_STEP:
            self._pending_reset[c] = True
        entries.extend((base + i, info) for i, info in enumerate(row_infos) if info)

    def _write_copy(self, c: int, obs: dict[str, Any]) -> list[bool]:
        """Write copy ``c``'s observations, zeros for absent agents; returns the absent rows."""
        write, zero, base = self._write_row, self._zero, c * self.num_agents
        inactive = []
        for a, agent in enumerate(self.agents):
            value = obs.get(agent, _MISSING)
            absent = value is _MISSING
            write(base + a, zero if absent else value)
            inactive.append(absent)
        return inactive

    def _row_infos(self, c: int, infos: Any, inactive: list[bool]) -> list[dict[str, Any] | None]:
        """Each row's info: its agent's own, plus the copy's infos and the inactive mark, taken
        at once (a copy may hand out the same dicts and arrays at every call, or share them
        with the other copies: each row's values must be those of its own call). An info that
        is not a dict raises :class:`~vecenv.errors.InvalidInfoError`, as in a single-agent group."""
        if not isinstance(infos, dict):
            raise InvalidInfoError(f"copy {c}'s infos must be a dict of each agent's info, got {describe(infos)}")
        common = batched_view({k: v for k, v in infos.items() if k not in self._agent_set}) if infos else None
        rows: list[dict[str, Any] | None] = []
        for a, agent in enumerate(self.agents):
            info = infos.get(agent)
            if info is not None:
                if not isinstance(info, dict):
                    raise InvalidInfoError(f"copy {c}'s info of agent {agent!r} must be a dict, got {describe(info)}")
                _refuse_reserved(c, agent, info)
                info = batched_view(info)
            if common or inactive[a]:
                info = dict(info or {})
                if common:
                    info[COPY_INFO_KEY] = common
                if inactive[a]:
                    info[INACTIVE_KEY] = True
            rows.append(info or None)
        return rows


def _refuse_reserved(c: int, agent: str, info: dict[str, Any]) -> None:
    """Refuse an agent's info key that the vector env sets on the same row: its value would be
    replaced without a word (``active`` by the active mask, ``copy_info`` by the copy's infos)."""
    for key in RESERVED_INFO_KEYS:
        if key in info:
            raise InvalidInfoError(
                f"copy {c}'s info of agent {agent!r} holds the key {key!r} (= {describe(info[key])}), which "
                f"MultiAgentVectorEnv sets itself on every row (reserved: {', '.join(map(repr, RESERVED_INFO_KEYS))}): "
                "rename the key in a wrapper around the parallel env"
            )


def _snapshot(value: Any) -> Any:
    """``value`` with its arrays copied (nested dicts and tuples too): a final observation or
    info must not change when the env reuses its arrays in the reset that follows."""
    return tree_map(lambda v: v.copy() if isinstance(v, np.ndarray) else v, value)


class ParallelCopies(AgentCopies):
    """Copies for the native API (:class:`vecenv.MultiAgentVectorEnv`)."""

    def __init__(self, envs: Sequence[Any], autoreset_mode: AutoresetMode, first: int = 0) -> None:
        super().__init__(envs, first)
        self.autoreset_mode = autoreset_mode

    def make_group(self, buffers: Buffers) -> ParallelGroup:
        return ParallelGroup(self, buffers, self.autoreset_mode)


class ParallelCopiesFn:
    """A picklable group builder: builds one worker's copies, in order, in the worker."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], first: int, autoreset_mode: AutoresetMode) -> None:
        self.env_fns = list(env_fns)
        self.first = first
        self.autoreset_mode = autoreset_mode

    def __call__(self) -> ParallelCopies:
        return ParallelCopies(build_copies(self.env_fns, self.first), self.autoreset_mode, self.first)
