"""The rollout block: the ``(T, num_envs, ...)`` arrays that worker-side rollouts write into.

A rollout of T steps fills, for every env, T rows of observations (the one each action was
chosen from), actions, rewards, terminations and truncations; under ``SAME_STEP`` also the true
final observation of each episode that ended (the step's own observation is then the reset's)
and which of those ends had an info with nothing else in it (``plain_ends``: the worker then
leaves that info out of its reply, and the parent makes it from the row), and under
``DISABLED`` whether the env was stepped at all (an env whose episode ended waits for the rest
of the rollout). Every rollout also records which observations are the first of an
episode (``episode_starts``), and the policy's extras (:mod:`vecenv.policy_outputs`): one
``(T, num_envs, ...)`` array per name, laid out from the policy's first call.
Worker ``w`` writes columns ``[start_w, stop_w)`` of every array, so a
rollout reply carries only infos and errors.

The layout follows :mod:`vecenv.wire.buffers`: a small picklable :class:`RolloutSpec` that both
sides turn into the same arrays, one shared block (a sealed memfd on Linux, passed over the
worker's pipe after a ``ROLLOUT_BLOCK`` command; elsewhere a named block) or, where nothing is
shared (Ray, ``shared_memory=False``), plain arrays on each side whose used rows travel in the
reply as :class:`RolloutRows`. The block is made for the longest rollout asked for so far; a
shorter rollout uses its first rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from gymnasium import Space
from gymnasium.vector import AutoresetMode

from vecenv.spaces import build_tree, leaf_layout, tree_leaves, tree_map
from vecenv.wire.buffers import SharedBlock, block_name, layout_nbytes, map_fields
from vecenv.wire.memory import check_block

__all__ = ["RolloutSpec", "RolloutRows", "RolloutBuffers"]


@dataclasses.dataclass(frozen=True)
class RolloutSpec:
    """Everything a worker needs to map (or make) its rows of the rollout block.

    Attributes:
        num_steps: rows per env (the block's capacity in steps).
        shared: the arrays are one shared block; else each side has its own.
        final_observations: keep the true final observation of episodes that ended (SAME_STEP).
        stepped: keep whether each env was stepped at each step (DISABLED).
        extras: ``(name, row shape, dtype)`` of each of the policy's extras.
    """

    num_steps: int
    num_envs: int
    observation_space: Space
    action_space: Space
    shm_name: str | None
    shared: bool
    final_observations: bool
    stepped: bool
    extras: tuple[tuple[str, tuple[int, ...], np.dtype], ...] = ()

    @classmethod
    def plan(
        cls,
        num_steps: int,
        num_envs: int,
        observation_space: Space,
        action_space: Space,
        shared_memory: bool,
        autoreset_mode: AutoresetMode,
        extras: tuple[tuple[str, tuple[int, ...], np.dtype], ...] = (),
    ) -> RolloutSpec:
        """The block for rollouts of up to ``num_steps`` steps (fixed spaces only)."""
        name = block_name(shared_memory)
        return cls(
            num_steps,
            num_envs,
            observation_space,
            action_space,
            name,
            shared_memory,
            autoreset_mode is AutoresetMode.SAME_STEP,
            autoreset_mode is AutoresetMode.DISABLED,
            tuple(extras),
        )

    def layout(self) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        """The arrays in block order: (field, shape, dtype); observation and action fields hold
        one entry per leaf of their space."""
        t, n = self.num_steps, self.num_envs
        obs = leaf_layout(self.observation_space, n)
        fields = [("observations", (t, *s), d) for s, d in obs]
        fields += [("actions", (t, *s), d) for s, d in leaf_layout(self.action_space, n)]
        fields += [
            ("rewards", (t, n), np.dtype(np.float64)),
            ("terminations", (t, n), np.dtype(np.bool_)),
            ("truncations", (t, n), np.dtype(np.bool_)),
        ]
        if self.final_observations:
            fields += [("final_observations", (t, *s), d) for s, d in obs]
            fields.append(("plain_ends", (t, n), np.dtype(np.bool_)))
        if self.stepped:
            fields.append(("stepped", (t, n), np.dtype(np.bool_)))
        fields.append(("episode_starts", (t, n), np.dtype(np.bool_)))
        fields += [("extras", (t, n, *shape), np.dtype(dtype)) for _, shape, dtype in self.extras]
        return fields


@dataclasses.dataclass(frozen=True)
class RolloutRows:
    """One group's used rows of every rollout array, sent where nothing is shared.

    Each field is the group's columns of the array of that name (``None`` where the spec has
    no such array), rows ``[first_step, num_steps)`` of the rollout.
    """

    first_step: int
    observations: Any
    actions: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    final_observations: Any
    stepped: np.ndarray | None
    episode_starts: np.ndarray | None = None
    extras: dict[str, np.ndarray] | None = None
    plain_ends: np.ndarray | None = None


#: What a closed RolloutBuffers holds instead of its arrays (their views would pin the block).
_RELEASED = np.zeros((0, 0))


class RolloutBuffers:
    """One side's view of the rollout arrays: the parent sees every env, a worker its own.

    Attributes:
        observations, actions: trees of ``(T, n, ...)`` arrays mirroring their spaces.
        rewards, terminations, truncations: ``(T, n)`` arrays.
        final_observations: a tree like ``observations`` (SAME_STEP), else ``None``.
        plain_ends: ``(T, n)`` bool (SAME_STEP), else ``None``: the env's episode ended at step
            ``t`` and its info was ``{"final_obs": final_observations[t], "final_info": {}}``
            alone, with the final observation an array as the row holds it (its dtype and
            shape); the worker's reply leaves that info out.
        stepped: ``(T, n)`` bool (DISABLED), else ``None``.
        episode_starts: ``(T, n)`` bool: the observation of row ``t`` is an episode's first.
        extras: name -> ``(T, n, ...)`` array of each of the policy's extras.
    """

    def __init__(self, spec: RolloutSpec, start: int, stop: int, *, create: bool, fd: int | None = None) -> None:
        self.spec = spec
        self.start, self.stop = start, stop
        self.block: SharedBlock | None = None
        self._owner = create
        layout = spec.layout()
        arrays: dict[str, list[np.ndarray]] = {}
        what = f"a rollout block of {spec.num_steps} steps of {spec.num_envs} envs"
        if spec.shared:
            self.block, views = map_fields(layout, spec.shm_name, create, fd, what)
            for field, array in views:
                arrays.setdefault(field, []).append(array[:, start:stop])
        else:
            n = stop - start
            if create:  # the parent's arrays of every env (each worker makes its own columns)
                check_block(layout_nbytes(layout), what, shared=False)
            for field, shape, dtype in layout:
                arrays.setdefault(field, []).append(np.zeros((shape[0], n, *shape[2:]), dtype))
        self.observations: Any = build_tree(spec.observation_space, iter(arrays["observations"]))
        self.actions: Any = build_tree(spec.action_space, iter(arrays["actions"]))
        self.rewards: np.ndarray = arrays["rewards"][0]
        self.terminations: np.ndarray = arrays["terminations"][0]
        self.truncations: np.ndarray = arrays["truncations"][0]
        final = arrays.get("final_observations")
        self.final_observations: Any = None if final is None else build_tree(spec.observation_space, iter(final))
        plain = arrays.get("plain_ends")
        self.plain_ends: np.ndarray | None = None if plain is None else plain[0]
        stepped = arrays.get("stepped")
        self.stepped: np.ndarray | None = None if stepped is None else stepped[0]
        self.episode_starts: np.ndarray = arrays["episode_starts"][0]
        names = [name for name, _, _ in spec.extras]
        self.extras: dict[str, np.ndarray] = dict(zip(names, arrays.get("extras", []), strict=True))

    @classmethod
    def create(cls, spec: RolloutSpec) -> RolloutBuffers:
        """The parent's view: every env, and the owner of the shared block."""
        return cls(spec, 0, spec.num_envs, create=True)

    @classmethod
    def attach(cls, spec: RolloutSpec, start: int, stop: int, fd: int | None = None) -> RolloutBuffers:
        """A worker's view: columns ``[start, stop)``; ``fd`` is the block's descriptor as
        received (this process takes ownership of it)."""
        return cls(spec, start, stop, create=False, fd=fd)

    def release_fd(self) -> None:
        """Parent: close the block's descriptor once every worker has mapped the block."""
        if self.block is not None:
            self.block.release_fd()

    @property
    def sendable(self) -> bool:
        """Parent: whether a worker can still be sent this block (a named block, a memfd whose
        descriptor the parent still holds, or nothing shared)."""
        return self.block is None or self.block.fd is not None or self.spec.shm_name is not None

    # -- what crosses the pipe where nothing is shared -----------------------------------------

    def payload(self, first_step: int, num_steps: int) -> RolloutRows | None:
        """A worker's rows ``[first_step, num_steps)`` for its reply, or ``None`` if shared."""
        if self.spec.shared:
            return None

        def rows(tree: Any) -> Any:
            return None if tree is None else tree_map(lambda a: a[first_step:num_steps], tree)

        return RolloutRows(
            first_step,
            rows(self.observations),
            rows(self.actions),
            self.rewards[first_step:num_steps],
            self.terminations[first_step:num_steps],
            self.truncations[first_step:num_steps],
            rows(self.final_observations),
            rows(self.stepped),
            self.episode_starts[first_step:num_steps],
            {name: array[first_step:num_steps] for name, array in self.extras.items()},
            rows(self.plain_ends),
        )

    def receive(self, start: int, stop: int, rows: RolloutRows | None) -> None:
        """Parent: store a worker's :meth:`payload` into columns ``[start, stop)``."""
        if rows is None:
            return
        first = rows.first_step
        pairs = [
            (self.observations, rows.observations),
            (self.actions, rows.actions),
            (self.rewards, rows.rewards),
            (self.terminations, rows.terminations),
            (self.truncations, rows.truncations),
            (self.final_observations, rows.final_observations),
            (self.stepped, rows.stepped),
            (self.episode_starts, rows.episode_starts),
            (self.plain_ends, rows.plain_ends),
        ]
        if rows.extras is not None:
            pairs += [(self.extras[name], array) for name, array in rows.extras.items()]
        for mine, theirs in pairs:
            if mine is None or theirs is None:
                continue
            for dst, src in zip(tree_leaves(mine), tree_leaves(theirs), strict=True):
                dst[first : first + len(src), start:stop] = src

    def close(self) -> None:
        """Unmap the block (the parent also unlinks a named one). Safe to call twice."""
        block, self.block = self.block, None
        self.observations = self.actions = self.final_observations = self.stepped = self.plain_ends = None
        self.rewards = self.terminations = self.truncations = self.episode_starts = _RELEASED
        self.extras = {}
        if block is not None:
            block.close(unlink=self._owner)
