"""Actions from the caller to the workers: checked, then written to the shared rows or made
into per-worker payloads.

Nothing is written anywhere until the whole batch has passed the checks. A batch whose dtype or
shape differs from the space's travels through the pipes as items, so each env receives exactly
what ``SyncVectorEnv`` would give it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, iterate

from vecenv.errors import ArgumentTypeError, InvalidArgumentError, describe
from vecenv.parent.records import WorkerRecord
from vecenv.spaces import (
    check_action_count,
    empty_part,
    is_array_batch,
    is_fixed,
    to_batch,
    tree_assign,
    tree_leaves,
    tree_map,
    tree_slice,
)
from vecenv.wire.buffers import Buffers

__all__ = ["ActionPlacer", "empty_action_space"]

#: Batched action spaces an :class:`ActionPlacer` keeps, one per count of envs: the whole batch
#: and a few ``send`` sizes, not one per size (a batched Box holds bounds of its size).
BATCHED_SPACES_KEPT = 4


def empty_action_space(space: gym.Space, part: str) -> str:
    """Why no env can be given an action of ``space``, whose :func:`~vecenv.spaces.empty_part`
    is ``part`` (named from ``actions``)."""
    where = "holds no values" if part == "actions" else f"holds an empty Dict or Tuple at {part}"
    return f"the action space {space} {where}, so no env can be given an action"


class ActionPlacer:
    """Places a batch of actions for some workers: in the shared action rows, or as payloads."""

    def __init__(self, single_action_space: gym.Space, buffers: Buffers) -> None:
        self.space = single_action_space
        self.buffers = buffers
        self.fixed = is_fixed(single_action_space)
        self.dtypes = [a.dtype for a in tree_leaves(buffers.actions)] if self.fixed else []
        # An empty Tuple or Dict anywhere in the space: its batches split into no actions at all
        # (a step would reach no env) or fail to split (SyncVectorEnv's step raises on every call).
        self.empty_part = empty_part(single_action_space, "actions")
        # The space batched for n envs, by n, the latest last: SyncVectorEnv batches it once,
        # and batching again at every step cost up to 0.65 s a step (a Text space, 4,096 envs).
        self._batched: dict[int, gym.Space] = {}

    def payloads(self, actions: Any, workers: Sequence[WorkerRecord], env_ids: np.ndarray | None = None) -> list[Any]:
        """One payload per worker (``None``: its actions are in the shared rows).

        ``env_ids`` gives the env of each action when they are not in worker order (``send``).

        Raises:
            InvalidArgumentError: the action space holds an empty Dict or Tuple, or the batch
                holds another number of actions than envs.
            ArgumentTypeError: the batch is not one of the space (see ``to_batch``).
        """
        if self.empty_part is not None:
            raise InvalidArgumentError(f"`actions`: {empty_action_space(self.space, self.empty_part)}")
        if env_ids is None and self._copy_directly(actions):
            return [None] * len(workers)
        n = sum(w.size for w in workers)
        order = None if env_ids is None else np.argsort(env_ids, kind="stable")
        offsets = list(itertools.accumulate((w.size for w in workers), initial=0))
        if not self.fixed:
            if actions is None or isinstance(actions, (str, bytes)):
                raise ArgumentTypeError(f"`actions` must be a batch of {n} actions, got {describe(actions)}")
            check_action_count(self.space, actions, n, "actions")
            return self._items(actions, n, order, offsets)
        buffers = self.buffers
        batch = to_batch(self.space, actions, n, "actions", same_kind=False)
        exact = [a.shape[1:] for a in tree_leaves(batch)] == [a.shape[1:] for a in tree_leaves(buffers.actions)]
        if not (exact and is_array_batch(self.space, actions)):
            # Lists reach the envs as lists and Python ints as ints, as in SyncVectorEnv.
            return self._items(actions, n, order, offsets)
        if order is not None:
            batch = tree_map(lambda a: a[order], batch)
        rows = [tree_slice(batch, a, b) for a, b in itertools.pairwise(offsets)]
        same_dtypes = [a.dtype for a in tree_leaves(batch)] == self.dtypes
        if not (buffers.spec.shared_actions and same_dtypes):
            return rows
        for w, part in zip(workers, rows):
            tree_assign(tree_slice(buffers.actions, w.start, w.stop), part)
        return [None] * len(workers)

    def _copy_directly(self, actions: Any) -> bool:
        """The common case: one array, exactly the shared buffer's shape and dtype.

        A method of its own so that no frame which may raise holds a view of the block (a
        traceback kept by the caller would keep the block mapped after ``close()``).
        """
        if type(actions) is not np.ndarray:
            return False
        buffers = self.buffers
        shared = buffers.actions if buffers.spec.shared_actions else None
        if type(shared) is np.ndarray and actions.shape == shared.shape and actions.dtype == shared.dtype:
            np.copyto(shared, actions)
            return True
        return False

    def _batched_space(self, n: int) -> gym.Space:
        """The action space batched for ``n`` envs, made once for each of the last
        :data:`BATCHED_SPACES_KEPT` counts (``send`` to some workers asks for fewer than all)."""
        space = self._batched.pop(n, None)
        if space is None:
            space = batch_space(self.space, n)
            if len(self._batched) >= BATCHED_SPACES_KEPT:
                del self._batched[next(iter(self._batched))]  # the least recently used
        self._batched[n] = space
        return space

    def _items(self, actions: Any, n: int, order: np.ndarray | None, offsets: list[int]) -> list[Any]:
        """One action object per env, sliced per worker (sent through the pipes)."""
        items = list(iterate(self._batched_space(n), actions))
        if len(items) != n:
            raise InvalidArgumentError(f"`actions` must hold {n} actions (one per env), got {len(items)}")
        if order is not None:
            items = [items[k] for k in order]
        return [items[a:b] for a, b in itertools.pairwise(offsets)]
