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
import pickle
import struct
from enum import IntEnum
from typing import Any

from gymnasium import Space

__all__ = [
    "Command",
    "Hello",
    "Attach",
    "ResetArgs",
    "CallArgs",
    "SpaceMismatch",
    "encode_command",
    "decode_command",
    "encode_reply",
    "decode_reply",
]


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


# -- the wire format -------------------------------------------------------------------------
#
# The step path is one small message each way. A command without payload and a reply whose
# result is empty (a step with no infos, all rows in shared memory) are packed with ``struct``;
# anything else is pickled. The first byte says which.

_BARE = struct.Struct("<BBQ")  # tag, command or ok flag, call id
_TAG_BARE, _TAG_PICKLED = 0, 1
# The ok flag of a bare reply says which result it stands for: None, or an empty step/reset
# result ([] infos, no payload: all rows in shared memory).
_NONE, _EMPTY = 1, 2


def encode_command(command: Command, call_id: int, payload: Any) -> bytes:
    """Bytes for one command; a payload-free command is a 10-byte struct."""
    if payload is None:
        return _BARE.pack(_TAG_BARE, command, call_id)
    return bytes([_TAG_PICKLED]) + pickle.dumps((int(command), call_id, payload), pickle.HIGHEST_PROTOCOL)


def decode_command(data: bytes) -> tuple[Command, int, Any]:
    """Inverse of :func:`encode_command`."""
    if data[0] == _TAG_BARE:
        _, command, call_id = _BARE.unpack(data)
        return Command(command), call_id, None
    command, call_id, payload = pickle.loads(data[1:])
    return Command(command), call_id, payload


def encode_reply(call_id: int, ok: bool, result: Any) -> bytes:
    """Bytes for one reply; an empty step or reset result is a 10-byte struct.

    Raises whatever pickling raises, so the worker can answer with that error instead.
    """
    empty = type(result) is tuple and len(result) == 2 and result[0] == [] and result[1] is None
    if ok and (result is None or empty):
        return _BARE.pack(_TAG_BARE, _NONE if result is None else _EMPTY, call_id)
    return bytes([_TAG_PICKLED]) + pickle.dumps((call_id, ok, result), pickle.HIGHEST_PROTOCOL)


def decode_reply(data: bytes) -> tuple[int, bool, Any]:
    """Inverse of :func:`encode_reply`."""
    if data[0] == _TAG_BARE:
        _, kind, call_id = _BARE.unpack(data)
        return call_id, True, (None if kind == _NONE else ([], None))
    return pickle.loads(data[1:])
