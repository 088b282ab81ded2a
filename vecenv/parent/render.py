"""``render(env_ids=...)``: which workers render which of their envs, and the frames put back in order.

Rendering a few envs of many (to record a video of one) should cost those envs' frames only, not
every env's: :class:`RenderPlan` sends a :class:`~vecenv.wire.protocol.RenderArgs` to the workers
that host a requested env, and to no other, and puts their frames back in the order asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from vecenv.parent.records import WorkerRecord
from vecenv.wire.protocol import RenderArgs

__all__ = ["EnvIds", "RenderPlan"]

#: What ``render(env_ids=...)`` takes: env indices, as a sequence or a 1-d int array.
EnvIds = Sequence[int] | np.ndarray


@dataclasses.dataclass(frozen=True)
class RenderPlan:
    """The render of envs ``env_ids``: one :class:`RenderArgs` per worker that hosts one of them.

    Attributes:
        workers: the workers asked, in worker order.
        payloads: what each of them is sent (local indices, in the order asked for; ``None``
            for all its envs).
        places: for each requested env, in the order asked for: ``(position in workers,
            position in that worker's reply)``; ``None`` when every env is rendered.
    """

    workers: list[WorkerRecord]
    payloads: list[RenderArgs | None]
    places: list[tuple[int, int]] | None

    @classmethod
    def of(cls, workers: Sequence[WorkerRecord], env_ids: np.ndarray | None) -> RenderPlan:
        """The plan for ``env_ids`` (checked: distinct and in range; ``None``: every env) over ``workers``."""
        if env_ids is None:
            return cls(list(workers), [None] * len(workers), None)
        starts = np.array([w.start for w in workers])
        owners = np.searchsorted(starts, env_ids, side="right") - 1
        asked = sorted(set(owners.tolist()))
        position = {w: k for k, w in enumerate(asked)}
        local: list[list[int]] = [[] for _ in asked]
        places = []
        for env, owner in zip(env_ids.tolist(), owners.tolist()):
            k = position[owner]
            places.append((k, len(local[k])))
            local[k].append(env - workers[owner].start)
        payloads: list[RenderArgs | None] = [RenderArgs(ids) for ids in local]
        return cls([workers[w] for w in asked], payloads, places)

    def frames(self, replies: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
        """The frames of the requested envs, in the order asked for, from each worker's reply."""
        if self.places is None:
            return tuple(frame for reply in replies for frame in reply)
        return tuple(replies[k][j] for k, j in self.places)
