"""Step and reset replies into the parent's rows and infos, as ``SyncVectorEnv`` batches them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gymnasium.vector import VectorEnv

from vecenv.parent.records import WorkerRecord
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import StepReply

__all__ = ["InfoMerger"]


# Gymnasium's own batching of one env's info into the batch; it reads only ``self.num_envs``.
_add_info: Callable[[Any, dict[str, Any], dict[str, Any], int], dict[str, Any]] = VectorEnv._add_info


class InfoMerger:
    """Gymnasium's own info batching (``VectorEnv._add_info``) over ``num_envs`` rows."""

    _add_info = _add_info  # it recurses through ``self._add_info``

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def merge(
        self, buffers: Buffers, workers: Sequence[WorkerRecord], replies: Sequence[StepReply], rows: Sequence[int]
    ) -> dict[str, Any]:
        """Store each worker's non-shared rows and merge its infos, in worker and env order;
        ``rows[k]`` is the batch row of worker ``k``'s first env."""
        infos: dict[str, Any] = {}
        for w, reply, row in zip(workers, replies, rows):
            buffers.receive(w.start, w.stop, reply.rows)
            for j, info in reply.infos:
                infos = self._add_info(infos, info, row + j)
        return infos
