"""Step and reset replies into the parent's rows and infos, as ``SyncVectorEnv`` batches them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

from vecenv.errors import describe
from vecenv.parent.records import WorkerRecord
from vecenv.spaces import tree_containers, tree_copy
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import MaskedKeys, StepReply

__all__ = ["InfoMerger", "current_observations"]


# Gymnasium's own batching of one env's info into the batch; it reads only ``self.num_envs``.
_add_info: Callable[[Any, dict[str, Any], dict[str, Any], int], dict[str, Any]] = VectorEnv._add_info


class InfoMerger:
    """Gymnasium's own info batching (``VectorEnv._add_info``) over ``num_envs`` rows."""

    _add_info = _add_info  # it recurses through ``self._add_info``

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def add(self, infos: dict[str, Any], info: dict[str, Any], row: int, env: int | None = None) -> dict[str, Any]:
        """``info`` of the env at batch row ``row`` (env index ``env``, when it differs) merged
        into ``infos``, as a step batches it. What Gymnasium's batching raises (a value that does
        not fit the array an earlier env's value of its key set up) is raised as it is, with a
        note naming the env and the key: ``SyncVectorEnv`` raises it bare."""
        try:
            return self._add_info(infos, info, row)
        except Exception as exc:
            exc.add_note(self._failure_note(infos, info, row, row if env is None else env))
            raise

    def receive(self, buffers: Buffers, workers: Sequence[WorkerRecord], replies: Sequence[StepReply]) -> None:
        """Store each worker's rows that travelled in its reply (not in shared memory)."""
        for w, reply in zip(workers, replies):
            if reply.rows is not None:
                buffers.receive(w.start, w.stop, reply.rows)

    def batch(
        self, workers: Sequence[WorkerRecord], replies: Sequence[StepReply], rows: Sequence[int] | None = None
    ) -> dict[str, Any]:
        """The workers' infos merged in worker and env order; ``rows[k]`` is the batch row of
        worker ``k``'s first env (``None``: its env index). Then the keys that native groups
        returned with no env carrying them, where no env carried them (:meth:`add_masked`)."""
        infos: dict[str, Any] = {}
        masked: list[MaskedKeys] | None = None
        for k, (w, reply) in enumerate(zip(workers, replies)):
            if reply.infos:
                row = w.start if rows is None else rows[k]
                for j, info in reply.infos:
                    infos = self.add(infos, info, row + j, w.start + j)
            if reply.masked is not None:
                masked = masked or []
                masked.append(reply.masked)
        if masked is not None:
            for keys in masked:
                self.add_masked(infos, keys)
        return infos

    def add_masked(self, infos: dict[str, Any], masked: MaskedKeys) -> dict[str, Any]:
        """``infos`` with the keys of ``masked`` (a native group's info keys that none of its
        envs carried: an all-False mask) that no env carried either: each with its column of
        empty rows (zeros, or ``None`` for objects) and an all-False mask, as the native env
        itself returns them. A key that an env carried keeps the column that env's value
        started (its dtype and shape), as when the native group's rows are merely masked out.
        Called after every env's info is added."""
        for key, held in masked.items():
            if isinstance(held, dict):
                inner = infos.get(key)
                if inner is None:
                    inner = infos[key] = {}
                    infos[f"_{key}"] = np.zeros(self.num_envs, np.bool_)
                if isinstance(inner, dict):
                    self.add_masked(inner, held)
            elif key not in infos:
                infos[key] = held.column(self.num_envs)
                infos[f"_{key}"] = np.zeros(self.num_envs, np.bool_)
        return infos

    def merge(
        self,
        buffers: Buffers,
        workers: Sequence[WorkerRecord],
        replies: Sequence[StepReply],
        rows: Sequence[int] | None = None,
    ) -> dict[str, Any]:
        """:meth:`receive` then :meth:`batch`: every row is stored before any info is batched,
        so an info that cannot be batched leaves no worker's rows behind."""
        self.receive(buffers, workers, replies)
        return self.batch(workers, replies, rows)

    def _failure_note(self, infos: dict[str, Any], info: dict[str, Any], row: int, env: int) -> str:
        """A note naming the env and the key of ``info`` whose batching into ``infos`` fails
        (the env alone if looking for the key fails too: the original error must come out)."""
        try:
            found = self._failing_key(infos, info, row, "")
        except Exception:
            found = None
        if found is None:
            return f"raised batching env {env}'s info into the batch's infos"
        path, value, held = found
        return (
            f"raised batching env {env}'s info{path} = {describe(value, 60)} ({type(value).__name__}) into "
            f"infos{path}, {held}: each key's array is made from the first env's value of it, as in SyncVectorEnv"
        )

    def _failing_key(
        self, infos: dict[str, Any], info: dict[str, Any], row: int, path: str
    ) -> tuple[str, Any, str] | None:
        """The path, value and the batch's holding of the first key of ``info`` that cannot be
        merged: each key is tried alone on copies of the batch's arrays for it."""
        for key, value in info.items():
            trial = {k: _copied(infos[k]) for k in (key, f"_{key}") if k in infos}
            try:
                self._add_info(trial, {key: value}, row)
            except Exception:
                held = infos.get(key)
                if isinstance(value, dict) and isinstance(held, dict):
                    inner = self._failing_key(held, value, row, f"{path}[{key!r}]")
                    if inner is not None:
                        return inner
                return f"{path}[{key!r}]", value, _holding(held)
        return None


def _copied(value: Any) -> Any:
    """``value`` with its arrays and dicts copied (not the objects in them: locks stay put)."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value.copy() if isinstance(value, np.ndarray) else value


def _holding(held: Any) -> str:
    """What the batch holds for a key, in words."""
    if isinstance(held, np.ndarray):
        rows = f" rows of shape {held.shape[1:]}" if held.ndim > 1 else "s"
        return f"an array of {held.dtype}{rows}"
    if isinstance(held, dict):
        return "a dict of batched keys"
    return "nothing yet" if held is None else f"{type(held).__name__}"


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
