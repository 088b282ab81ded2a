"""The messages that cross the pipe between the coordinator and a worker.

Both sides import this module, so the command set and message shapes are defined once.

Parent -> worker: ``(Command, call_id, payload)``. Worker -> parent: ``(call_id, ok, result)``
where ``result`` is a :class:`~vecenv.errors.PackedException` when ``ok`` is false. The
``call_id`` lets the parent discard a reply that arrives after its call timed out.

Bulk data (observations, actions, rewards, flags) is not in these messages when shared memory is
on: the payloads carry only what does not fit the arrays.
"""

from __future__ import annotations

import dataclasses
from enum import IntEnum
from typing import Any

from gymnasium import Space

__all__ = ["Command", "Hello", "Attach", "ResetArgs", "CallArgs", "SpaceMismatch"]


class Command(IntEnum):
    """What the parent asks a worker to do; one worker loop dispatches on it."""

    RESET = 1
    STEP = 2
    CALL = 3
    SET_ATTR = 4
    RENDER = 5
    CLOSE = 6


@dataclasses.dataclass(frozen=True)
class SpaceMismatch:
    """An env whose space differs from the first env of its worker (indices are local)."""

    local_index: int
    which: str
    expected: Space
    received: Space


@dataclasses.dataclass(frozen=True)
class Hello:
    """The worker's first message: what it built."""

    num_envs: int
    observation_space: Space
    action_space: Space
    metadata: dict[str, Any]
    render_mode: str | None
    spec: Any
    mismatch: SpaceMismatch | None
    native_autoreset: Any  # the AutoresetMode of a native VectorEnv group, else None


@dataclasses.dataclass(frozen=True)
class Attach:
    """The parent's answer to :class:`Hello`: where the worker's envs sit and how to talk."""

    start: int
    num_envs: int
    autoreset_mode: Any
    buffers: Any  # a vecenv.buffers.BufferSpec


@dataclasses.dataclass(frozen=True)
class ResetArgs:
    """Per-worker reset arguments: seeds and mask cover only the worker's own envs."""

    seeds: list[int | None]
    options: dict[str, Any] | None
    mask: Any  # np.ndarray of bool, or None for all envs


@dataclasses.dataclass(frozen=True)
class CallArgs:
    """A method call or attribute read on every env of the worker."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
