"""Step and reset replies into the parent's rows and infos, as ``SyncVectorEnv`` batches them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from vecenv.parent.records import WorkerRecord
from vecenv.spaces import tree_containers, tree_copy
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import StepReply

__all__ = ["InfoMerger", "current_observations"]


# Gymnasium's own batching of one env's info into the batch; it reads only ``self.num_envs``.
_add_info: Callable[[Any, dict[str, Any], dict[str, Any], int], dict[str, Any]] = VectorEnv._add_info


class InfoMerger:
    """Gymnasium's own info batching (``VectorEnv._add_info``) over ``num_envs`` rows."""

    _add_info = _add_info  # it recurses through ``self._add_info``

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def add(self, infos: dict[str, Any], info: dict[str, Any], row: int) -> dict[str, Any]:
        """``info`` of the env at batch row ``row`` merged into ``infos``, as a step batches it."""
        return self._add_info(infos, info, row)

    def merge(
        self,
        buffers: Buffers,
        workers: Sequence[WorkerRecord],
        replies: Sequence[StepReply],
        rows: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """Store each worker's non-shared rows and merge its infos, in worker and env order;
        ``rows[k]`` is the batch row of worker ``k``'s first env (``None``: its env index)."""
        infos: dict[str, Any] = {}
        for k, (w, reply) in enumerate(zip(workers, replies)):
            if reply.rows is not None:
                buffers.receive(w.start, w.stop, reply.rows)
            if reply.infos:
                row = w.start if rows is None else rows[k]
                for j, info in reply.infos:
                    infos = self._add_info(infos, info, row + j)
        return infos


def current_observations(buffers: Buffers, copy: bool) -> Any:
    """The batched observations in the parent's buffers, as ``step`` returns them: copies, or
    with ``copy=False`` the buffers themselves, in dicts and tuples of their own (a caller that
    replaces a key of the dict it got, ``obs["image"] = obs["image"] / 255``, must not cut the
    buffers' own dict off from the shared rows)."""
    obs = buffers.batched_observations()
    if not copy:
        return obs if type(obs) is np.ndarray else tree_containers(obs)
    if type(obs) is np.ndarray:
        return obs.copy()
    return tree_copy(obs) if buffers.fixed_observations else deepcopy(obs)
