"""The messages that cross between the parent and a worker, and their wire format.

Both sides import this module, so the command set and message shapes are defined once.

Parent -> worker: a command ``(Command, call_id, payload)``, the payload one of the message
classes here. Worker -> parent: a reply ``(call_id, ok, result)`` where ``result`` is a
:class:`~vecenv.errors.PackedException` when ``ok`` is false, a :class:`StepReply` for every
``RESET`` and ``STEP``, and a :class:`RolloutReply` for every ``ROLLOUT``. The ``call_id``
lets the parent drop a reply that arrives after its call timed out. Bulk data (observations,
actions, rewards, flags) is not in these messages when shared memory is on: the payloads carry
only what does not fit the arrays.

On a pipe, every message starts with a fixed header (``struct``) that holds the call id; the
payload, if any, follows pickled. The receiver reads the header first and unpickles the payload
separately, so a payload that cannot be rebuilt (a class the other side cannot import, a
``__setstate__`` that raises) becomes an error reply *to that call*, never a dead worker or a
lost reply.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import struct
from collections.abc import Callable, Mapping
from enum import Enum, IntEnum
from typing import Any, NamedTuple, TypeAlias

import cloudpickle
import numpy as np
from gymnasium import Space
from gymnasium.spaces.utils import is_space_dtype_shape_equiv

from vecenv.errors import PackedException
from vecenv.interrupts import HeldInterrupt
from vecenv.spaces import exactly_equal, fits_layout
from vecenv.wire.memory import INHERITED_FDS, check_block, make_memfd, seal_memfd

__all__ = [
    "Command",
    "Outcome",
    "DecodedCommand",
    "DecodedReply",
    "Hello",
    "Attach",
    "ResetArgs",
    "CallArgs",
    "SetAttrArgs",
    "RenderArgs",
    "SpaceMismatch",
    "InfoEntries",
    "MaskedColumn",
    "MaskedKeys",
    "Flags",
    "Rows",
    "StepReply",
    "RolloutBlockArgs",
    "RolloutArgs",
    "Pickled",
    "SlotWeights",
    "PickledOnce",
    "MEMFD_WEIGHTS_BYTES",
    "OBJECT_STORE_WEIGHTS_BYTES",
    "CHECKED_COPY_BYTES",
    "RolloutInfoEntries",
    "RolloutReply",
    "WithFd",
    "encode_command",
    "encode_for_pipe",
    "fd_follows",
    "allow_word_reply",
    "word_reply_allowed",
    "empty_reply",
    "decode_command",
    "no_payload",
    "encode_reply",
    "decode_reply",
    "unpickling_failure",
    "SpaceRule",
    "SpaceKind",
    "ObservationMode",
    "WAKE_COMMAND",
    "WAKE_REPLY",
    "is_bare_step",
    "call_id_of",
]


class Command(IntEnum):
    """What the parent asks a worker to do; one worker loop dispatches on it."""

    RESET = 1
    STEP = 2
    CALL = 3
    SET_ATTR = 4
    RENDER = 5
    CLOSE = 6
    ROLLOUT = 7  # step the group T times with the worker's own policy (RolloutArgs)
    ROLLOUT_BLOCK = 8  # map the block rollouts write into (RolloutBlockArgs; a memfd follows on a pipe)
    WAKE = 9  # nothing to do, no reply: a STEP waits in the shared words (vecenv.wire.fastpath)
    POLICY_STATE = 10  # a ROLLOUT of no steps: the policy's state, set first if given (RolloutArgs)


class SpaceRule(Enum):
    """How the envs' spaces must agree: an ``observation_mode`` other than a custom space.

    ``SAME`` and ``DIFFERENT`` are Gymnasium's ``"same"`` (every env's observation space equals
    the first's) and ``"different"`` (the same shape and dtype; the spaces are batched with
    ``batch_differing_spaces``). ``AS_ENV_0`` is the SB3 drop-in's: env 0's spaces are the
    vector env's, and every other env's observation and action spaces need only have their
    shape and dtype (bounds may differ), which is what SB3's vector envs take. The parent's
    handshake and each worker check it."""

    SAME = "same"
    DIFFERENT = "different"
    AS_ENV_0 = "as env 0"


class SpaceKind(Enum):
    """Which of an env's spaces a check is about, by its attribute's name."""

    OBSERVATION = "observation_space"
    ACTION = "action_space"

    @property
    def label(self) -> str:
        """For messages: ``"observation space"``."""
        return self.value.replace("_", " ")


#: What a vector env's ``observation_mode`` is once checked: a :class:`SpaceRule`, or
#: ``(batched space, single space)``.
ObservationMode = SpaceRule | tuple[Space, Space]


def space_fits(mode: ObservationMode | Space, which: SpaceKind, expected: Space, received: Space) -> bool:
    """Whether an env's ``which`` space may share the arrays of ``expected`` under ``mode`` (a
    worker sees a custom space as that space alone): the one rule the parent's handshake and
    each worker's own check apply.

    A space fits itself without being compared: the check meets each group's first env against
    itself, and comparing a ``Box`` compares its bounds element by element (``np.allclose``), which
    for a large observation (an image, a long vector) took longer than building the env. For the
    same reason spaces that are bit-for-bit equal (:func:`~vecenv.spaces.exactly_equal`: each
    env's own copy of one constructor's space) fit without ``==``; only a space that this
    cheap test cannot vouch for is compared as before, so every answer is unchanged
    (:func:`~vecenv.spaces.fits_layout` asks it itself: it is asked once on every path)."""
    if received is expected:
        return True
    if mode is SpaceRule.AS_ENV_0:
        return fits_layout(expected, received)
    if exactly_equal(expected, received):
        return True
    if which is SpaceKind.ACTION or mode is SpaceRule.SAME:
        return bool(received == expected)
    return bool(is_space_dtype_shape_equiv(expected, received))


@dataclasses.dataclass(frozen=True)
class SpaceMismatch:
    """An env whose space does not fit the group's (indices are local to the worker)."""

    local_index: int
    which: SpaceKind
    expected: Space
    received: Space


@dataclasses.dataclass(frozen=True)
class Hello:
    """The worker's first message: what it built.

    ``observation_spaces`` holds every env's observation space, but only under
    ``observation_mode="different"`` (the parent batches them); it is empty otherwise.
    """

    num_envs: int
    observation_space: Space
    action_space: Space
    metadata: dict[str, Any]
    render_mode: str | None
    spec: Any
    mismatch: SpaceMismatch | None
    native_autoreset: Any  # the AutoresetMode of a native VectorEnv group, else None
    observation_spaces: list[Space] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Attach:
    """The parent's answer to :class:`Hello`: where the worker's envs sit and how to talk."""

    start: int
    num_envs: int
    autoreset_mode: Any
    buffers: Any  # a vecenv.wire.buffers.BufferSpec


@dataclasses.dataclass(frozen=True)
class ResetArgs:
    """Per-worker reset arguments: seeds and mask cover only the worker's own envs."""

    seeds: list[int | None]
    options: Mapping[str, Any] | None
    mask: Any  # np.ndarray of bool, or None for all envs


@dataclasses.dataclass(frozen=True)
class CallArgs:
    """A method call or attribute read on every env of the worker."""

    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class SetAttrArgs:
    """An attribute set on every env of the worker, one value per env."""

    name: str
    values: list[Any]


@dataclasses.dataclass(frozen=True)
class RenderArgs:
    """Which of the worker's envs to render: local indices in the order wanted (``None``: all)."""

    env_ids: list[int] | None


#: ``(local env index, info dict)`` pairs, to be merged in order by ``VectorEnv._add_info``.
InfoEntries = list[tuple[int, dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class MaskedColumn:
    """The column of an info key that a native group returned with an all-False ``_key`` mask
    (no env of it carries the key), which its per-env entries have no place for: the column
    ``VectorEnv._add_info`` makes from a value (here the group's first env's, had it carried
    it), every row empty. ``dtype`` ``None``: an object column of ``None``; else zeros of
    ``dtype``, each row of ``shape``."""

    dtype: np.dtype[Any] | None
    shape: tuple[int, ...] = ()

    def column(self, num_envs: int) -> np.ndarray:
        """The column over ``num_envs`` rows, as ``_add_info`` starts it."""
        if self.dtype is None:
            return np.full(num_envs, None, dtype=object)
        return np.zeros((num_envs, *self.shape), dtype=self.dtype)


#: A native group's info keys that none of its envs carries (all-False masks), by key: a
#: :class:`MaskedColumn`, or for a dict the keys within it that none carries (every key of a
#: dict that none carries; ``{}``: an empty one). The parent adds each key its envs' entries
#: did not, with an all-False mask; a key another env carried keeps that env's column.
MaskedKeys: TypeAlias = dict[Any, "MaskedColumn | MaskedKeys"]


@dataclasses.dataclass(frozen=True)
class Flags:
    """A group's rewards and end flags, one row per env."""

    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray


@dataclasses.dataclass(frozen=True)
class Rows:
    """A group's rows that are not in shared memory, sent with its step or reset reply.

    ``observations`` is ``None`` when they are shared; ``flags`` likewise.
    """

    observations: Any
    flags: Flags | None


@dataclasses.dataclass(frozen=True)
class StepReply:
    """A worker's answer to ``RESET`` or ``STEP``: its non-empty infos, the rows that did not
    fit the shared block (``None`` when everything is shared: the common case), and a native
    group's info keys that none of its envs carries (``None`` when there are none: always for
    a group of envs)."""

    infos: InfoEntries
    rows: Rows | None = None
    masked: MaskedKeys | None = None

    @property
    def empty(self) -> bool:
        """Nothing to send beyond "done": the reply is the wire header alone."""
        return not self.infos and self.rows is None and self.masked is None


@dataclasses.dataclass(frozen=True)
class RolloutBlockArgs:
    """The rollout block a worker writes its rows of every rollout into (sent when it is made,
    when it grows, and to a replacement worker).

    ``fd`` is never pickled meaningfully: the receiving end fills it in with the block's
    descriptor when one was passed beside the message (a memfd over a pipe).
    """

    spec: Any  # a vecenv.wire.rollout_buffers.RolloutSpec
    fd: int | None = None

    def split_fd(self) -> tuple[RolloutBlockArgs, int | None]:
        """Sender: the message to pickle and the descriptor to pass beside it (the block's)."""
        return dataclasses.replace(self, fd=None), self.fd

    def with_fd(self, fd: int) -> RolloutBlockArgs:
        """Receiver: the message with the descriptor that came beside it (now its owner's)."""
        return dataclasses.replace(self, fd=fd)


@dataclasses.dataclass(frozen=True)
class RolloutArgs:
    """Run steps ``first_step .. num_steps - 1`` of a rollout with the worker's own policy.

    Attributes:
        num_steps: the rollout's length T (rows ``[0, T)`` of the block).
        first_step: rows before it are written by the parent (a restarted group's row 0).
        policy: a :class:`vecenv.policies.WorkerPolicy`, pickled (:class:`Pickled`), to install
            first (it replaces the one held), or ``None``: keep the installed one.
        weights: new weights for the installed policy (:class:`Pickled`), loaded before
            the first step, or ``None``.
        state: a recurrent policy's state for this worker's envs (rows in env order), set
            before the first step, or ``None``: keep the state the worker carries.
        fresh_state: set every env's state to the policy's initial state first.

    ``num_steps=0`` steps nothing: the policy, weights and state are installed and the reply
    carries the state (how the parent reads it).
    """

    num_steps: int
    first_step: int = 0
    policy: Pickled | None = None
    weights: Pickled | SlotWeights | None = None
    state: Any = None
    fresh_state: bool = False

    def weights_beside(self, at_least: int) -> Pickled | None:
        """New pickled weights of ``at_least`` bytes or more, which a transport then sends
        beside the message (:meth:`without_weights`), or ``None``: the transport's threshold
        (:data:`MEMFD_WEIGHTS_BYTES`, :data:`OBJECT_STORE_WEIGHTS_BYTES`). Weights in the
        shared slot are not: their message is small."""
        weights = self.weights
        return weights if isinstance(weights, Pickled) and len(weights.data) >= at_least else None

    def without_weights(self) -> RolloutArgs:
        """Sender: the message with its weights' bytes left out (they travel beside it)."""
        return dataclasses.replace(self, weights=Pickled(b""))

    def with_weights(self, data: bytes) -> RolloutArgs:
        """Receiver: the message with the weights' bytes that travelled beside it."""
        return dataclasses.replace(self, weights=Pickled(data))

    def split_fd(self) -> tuple[RolloutArgs, int | None]:
        """Sender: the message to pickle and the descriptor to pass beside it: the weights
        slot's, for a worker that does not map it yet, or large pickled weights' shared copy
        (:meth:`Pickled.shared_fd`), whose bytes then stay out of the message."""
        weights = self.weights
        if isinstance(weights, SlotWeights):
            if weights.fd is None:
                return self, None
            return dataclasses.replace(self, weights=dataclasses.replace(weights, fd=None)), weights.fd
        pickled = self.weights_beside(MEMFD_WEIGHTS_BYTES)
        fd = None if pickled is None else pickled.shared_fd()
        return (self, None) if fd is None else (self.without_weights(), fd)

    def with_fd(self, fd: int) -> RolloutArgs:
        """Receiver: the message with the descriptor that came beside it: the weights slot's
        (now the receiver's), or pickled weights read from their shared copy (closed)."""
        if isinstance(self.weights, SlotWeights):
            return dataclasses.replace(self, weights=dataclasses.replace(self.weights, fd=fd))
        return self.with_weights(Pickled.read(fd))


@dataclasses.dataclass(frozen=True)
class SlotWeights:
    """New weights whose arrays' bytes wait in the parent's shared slot
    (:mod:`vecenv.wire.weights`): the rest of them pickled (``header``), and where each array's
    bytes lie in slot number ``slot`` (``spans``: offset and size, in the pickle's order).
    ``fd``: the slot's descriptor, for a worker that does not map that slot yet (passed beside
    the command, never pickled; the receiver owns it)."""

    header: bytes
    spans: tuple[tuple[int, int], ...]
    slot: int
    fd: int | None = None

    def load(self, slot: Any) -> Any:
        """The weights, with arrays of their own (copied out of ``slot``, a buffer of the
        slot's bytes): the slot is written again for the next version."""
        view = memoryview(slot)
        return pickle.loads(self.header, buffers=[bytearray(view[start : start + size]) for start, size in self.spans])


#: Pickled weights (those the weights slot does not take: see :mod:`vecenv.wire.weights`) of at
#: least this many bytes go to worker processes beside each command, not inside it, as one
#: shared copy (a sealed memfd each worker reads): a command's bytes go
#: down its pipe a buffer at a time, each a wake-up of both sides. Below it, making, writing,
#: sealing and closing the copy cost more than the bytes in the pipes: CartPole's MLP of
#: 0.07 MB took ``rollout_async`` ~0.35 ms inside the commands of 2 workers against ~0.49 ms as
#: a copy (a tie with 4 and 8 workers on 2 cores, where waking them costs milliseconds).
MEMFD_WEIGHTS_BYTES = 128 * 1024

#: Weights that pickle to at least this many bytes go to Ray actors beside each command, as one
#: object put into Ray's object store per version (each node fetches it once), not inside
#: every actor's call.
OBJECT_STORE_WEIGHTS_BYTES = 64 * 1024

#: A shared copy of weights from this size up is checked against the machine's memory limits
#: before it is made (:class:`~vecenv.errors.MemoryLimitError` where it cannot fit). A smaller
#: one is made unchecked: reading the limits (``/proc/meminfo``, the memory cgroup's files) took
#: ~0.5 ms, several times the copy itself, on every rollout that sends new weights, for bytes
#: that the parent already holds.
CHECKED_COPY_BYTES = 8 * 1024 * 1024


class PickledOnce:
    """A value pickled once in the parent and sent, as those bytes, inside several messages:
    whoever unpickles a message gets the value itself, not this wrapper.

    The workers' buffer spec (:class:`Attach`) holds the observation space, whose ``low`` and
    ``high`` arrays of a large Box (2048x2048x3) take a tenth of a second or more to pickle;
    pickled once per vector env, each worker's attach message copies the bytes instead.

    Why not :class:`Pickled`: the two unpickle at different times, for different readers. This
    one vanishes as the message is unpickled, so :class:`Attach` keeps its ``buffers`` typed as
    the spec and no reader of it knows it travelled as bytes (the spec is plain pickle's, and a
    worker without it cannot start anyway). A :class:`Pickled` policy or weights stay bytes until
    the worker loads them, so that one that cannot be unpickled there (a module only the parent
    has) fails as the policy's error at the rollout's first step, not as a message the worker
    cannot read; and only they need cloudpickle and the shared copy. One type would either load
    the policy with the message or make every reader of the spec call ``load()``.
    """

    __slots__ = ("data",)

    def __init__(self, value: Any) -> None:
        self.data = bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def __reduce__(self) -> tuple[Callable[[bytes], Any], tuple[bytes]]:
        return pickle.loads, (self.data,)


class Pickled:
    """A rollout's policy, or its new weights, pickled once in the parent for every worker they
    go to (a replacement worker too).

    A rollout's command is pickled once per worker; a policy or weights inside it as they are (a
    torch ``state_dict`` of a few MiB takes milliseconds to pickle) would be pickled again for
    each, and a worker sent them later (a replacement) would get them as they are by then. As
    bytes, each worker's command copies them instead, and the worker unpickles them when it
    installs or loads them (:meth:`load`). Large weights going to worker processes travel once
    more cheaply: the parent writes them once into a sealed memfd (:meth:`shared_fd`), whose
    descriptor is passed beside each command, and each worker reads them from there
    (:meth:`read`).

    It is not :class:`PickledOnce` (which the message's unpickling replaces by its value): the
    worker unpickles these bytes itself, when it installs the policy or loads the weights,
    where a failure is reported as the policy's (see :class:`PickledOnce`).
    """

    __slots__ = ("data", "_fd")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._fd: int | None = None  # the parent's shared copy of data, made at its first use

    def __reduce__(self) -> tuple[type[Pickled], tuple[bytes]]:
        return Pickled, (self.data,)  # the bytes, never the parent's descriptor

    @classmethod
    def of(cls, value: Any) -> Pickled:
        """``value`` pickled, or cloudpickled when plain pickle cannot; raises what cloudpickle
        raises (before anything is sent)."""
        return cls(_dumps_any(value))

    def load(self) -> Any:
        return pickle.loads(self.data)

    def shared_fd(self) -> int | None:
        """Parent: a sealed memfd holding the bytes, made at the first call and kept until
        :meth:`close`, where memfds exist (Linux); ``None`` otherwise (the bytes then go inside
        each command). Asked of weights of at least :data:`MEMFD_WEIGHTS_BYTES` only."""
        if self._fd is None and hasattr(os, "memfd_create"):
            if len(self.data) >= CHECKED_COPY_BYTES:
                check_block(len(self.data), "the new weights' shared copy", shared=True)
            with HeldInterrupt():  # a Ctrl+C as it is made would lose the descriptor
                self._fd = _sealed_memfd(self.data)
                INHERITED_FDS.add(self._fd)  # a worker forked later closes its copy
        return self._fd

    def close(self) -> None:
        """Parent: close the shared copy's descriptor (each worker sent it got its own)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            INHERITED_FDS.discard(fd)
            os.close(fd)

    @staticmethod
    def read(fd: int) -> bytes:
        """Receiver: the bytes in the memfd ``fd`` passed beside a command (closed here)."""
        try:
            size = os.fstat(fd).st_size
            parts: list[bytes] = []
            done = 0
            while done < size:  # at offsets: every process sent it shares the file's position
                part = os.pread(fd, size - done, done)
                if not part:  # cannot happen to a sealed copy; unpickling the rest then fails
                    break
                parts.append(part)
                done += len(part)
            return parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            os.close(fd)


def _sealed_memfd(data: bytes) -> int:
    """A new memfd holding ``data``, sealed: no process it is passed to can change or resize it."""
    fd = make_memfd("vecenv-weights", "the new weights' shared copy")
    try:
        view, written = memoryview(data), 0
        while written < len(data):  # at offsets, leaving the file's shared position at 0
            written += os.pwrite(fd, view[written:], written)
        seal_memfd(fd, contents=True)
        return fd
    except BaseException:
        os.close(fd)
        raise


#: ``(step within the rollout, local env index, info dict)``, in the order each step's
#: ``VectorEnv._add_info`` would merge them.
RolloutInfoEntries = list[tuple[int, int, dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class RolloutReply:
    """A worker's answer to ``ROLLOUT``: its non-empty infos of every step, and the rows that are
    not in shared memory (``None`` when shared): the rollout block's (``block``, a
    :class:`~vecenv.wire.rollout_buffers.RolloutRows`) and the step buffers' last rows
    (``rows``, as in a :class:`StepReply`); a recurrent policy's state before the first
    step (``state``, a tree of ``(group size, ...)`` arrays, else ``None``); and a native
    group's info keys that none of its envs carries, ``(step, keys)`` for each step that has
    some (``None`` when no step has)."""

    infos: RolloutInfoEntries
    rows: Rows | None = None
    block: Any = None
    state: Any = None
    masked: list[tuple[int, MaskedKeys]] | None = None

    @property
    def empty(self) -> bool:
        """Nothing to send beyond "done" (every row shared, no infos, no state): the reply may
        be posted in the worker's done word (see :func:`allow_word_reply`)."""
        return not self.infos and self.rows is None and self.block is None and self.state is None and not self.masked


# -- the wire format -------------------------------------------------------------------------
#
# header = (kind, command or reply flag, call id); a pickled payload follows when kind says so.
# The step path is one small message each way: a command without payload and a reply with an
# empty result (a step with no infos, all rows in shared memory) are the header alone.

_HEADER = struct.Struct("<BBQ")
# Kinds: no payload; a pickled payload; a pickled payload and a descriptor passed after it.
_BARE, _PICKLED, _PICKLED_FD = 0, 1, 2
# A command's kind may carry this flag: its empty reply may be posted in the worker's done word.
_WORD_REPLY = 0x10
_KIND = 0x0F
# Reply flags.
_NONE, _EMPTY, _OK, _ERROR, _WAKE = 1, 2, 3, 4, 5

Dumps = Callable[[Any], bytes]


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def _dumps_any(value: Any) -> bytes:
    """``value`` pickled, or cloudpickled when plain pickle cannot (a lambda); raises what
    cloudpickle raises."""
    try:
        return _dumps(value)
    except Exception:
        return cloudpickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def encode_command(command: Command, call_id: int, payload: Any, fd_follows: bool = False) -> bytes:
    """Bytes for one command; a payload-free command is the 10-byte header alone.

    Payloads are pickled, or cloudpickled when plain pickle cannot (a lambda passed to
    ``call``), as the env constructors are. Raises what cloudpickle raises, before anything
    is sent. ``fd_follows``: the sender passes a file descriptor right after these bytes
    (:func:`fd_follows` tells the receiver).
    """
    if payload is None:
        return _HEADER.pack(_BARE, command, call_id)
    data = _dumps_any(payload)
    return _HEADER.pack(_PICKLED_FD if fd_follows else _PICKLED, command, call_id) + data


@dataclasses.dataclass(frozen=True)
class WithFd:
    """An encoded command and the descriptor to pass right after it (a memfd)."""

    data: bytes
    fd: int


def encode_for_pipe(command: Command, call_id: int, payload: Any) -> bytes | WithFd:
    """:func:`encode_command` for a transport that can pass descriptors: a payload that holds
    one for the worker (a :class:`RolloutBlockArgs`'s block, a :class:`RolloutArgs`'s large
    weights) is sent without it, and the descriptor is passed beside the message."""
    if isinstance(payload, RolloutBlockArgs | RolloutArgs):
        message, fd = payload.split_fd()
        if fd is not None:
            return WithFd(encode_command(command, call_id, message, True), fd)
    return encode_command(command, call_id, payload)


def fd_follows(data: bytes) -> bool:
    """Whether a descriptor was passed right after this command's bytes (the header's first
    byte, its kind: read on every command, so without unpacking the header again)."""
    return data[0] & _KIND == _PICKLED_FD


def allow_word_reply(message: bytes | WithFd) -> bytes | WithFd | None:
    """``message`` flagged so that the worker may post an empty reply in its done word instead
    of writing it to the pipe (:mod:`vecenv.wire.fastpath`), or ``None`` for a command whose
    empty reply is not known on both sides. Only ``ROLLOUT``'s is: a rollout of envs with no
    infos, every row in shared memory, answers with nothing but "done", and a parent busy
    elsewhere (a learner's update) then finds it without a system call, or an unpickled reply.
    The sender sets the flag where nothing else is owed (see :func:`empty_reply`)."""
    data = message.data if isinstance(message, WithFd) else message
    if data[1] != Command.ROLLOUT:
        return None
    flagged = bytes((data[0] | _WORD_REPLY,)) + data[1:]
    return WithFd(flagged, message.fd) if isinstance(message, WithFd) else flagged


def word_reply_allowed(data: bytes) -> bool:
    """Whether this command's empty reply may be posted in the done word (:func:`allow_word_reply`)."""
    return bool(data[0] & _WORD_REPLY)


def empty_reply(command: Command) -> StepReply | RolloutReply:
    """What an empty reply posted in the done word stands for: a ``STEP``'s or a ``ROLLOUT``'s."""
    return RolloutReply([]) if command is Command.ROLLOUT else StepReply([])


class Outcome(NamedTuple):
    """What running a command gave: ``ok`` and the result, or a
    :class:`~vecenv.errors.PackedException` when it raised."""

    ok: bool
    result: Any


class DecodedCommand(NamedTuple):
    """A command as the worker reads it: ``load()`` unpickles its payload, and may raise."""

    command: Command
    call_id: int
    load: Callable[[], Any]


class DecodedReply(NamedTuple):
    """A reply as the parent reads it: the call it answers and that call's outcome."""

    call_id: int
    ok: bool
    result: Any


def decode_command(data: bytes) -> DecodedCommand:
    """The command in ``data``: ``load()`` unpickles the payload, and may raise.

    The header never fails to decode, so the worker always knows which call to answer.
    """
    kind, command, call_id = _HEADER.unpack_from(data)
    if kind & _KIND == _BARE:
        return DecodedCommand(Command(command), call_id, no_payload)
    return DecodedCommand(Command(command), call_id, lambda: pickle.loads(memoryview(data)[_HEADER.size :]))


def no_payload() -> None:
    """The payload of a command that has none (a bare STEP, a CLOSE)."""
    return None


def encode_reply(call_id: int, ok: bool, result: Any, dumps: Dumps = _dumps_any) -> bytes:
    """Bytes for one reply; an empty step or reset result is the header alone.

    ``dumps`` pickles the result: by default pickled, or cloudpickled where plain pickle cannot
    (``get_attr("spec")`` of an env whose entry point was a script's function, which the worker
    holds by value; an info holding a lambda), as commands are; cloudpickle for the handshake,
    whose env spec may hold lambdas. Raises whatever pickling raises, so the worker can answer
    with that error instead.
    """
    if ok:
        if result is None:
            return _HEADER.pack(_BARE, _NONE, call_id)
        if type(result) is StepReply and result.empty:
            return _HEADER.pack(_BARE, _EMPTY, call_id)
    return _HEADER.pack(_PICKLED, _OK if ok else _ERROR, call_id) + dumps(result)


def decode_reply(data: bytes | bytearray) -> DecodedReply:
    """Inverse of :func:`encode_reply`.

    A result that cannot be unpickled here becomes an error reply to its call, carrying the
    unpickling error, so the caller sees why instead of a broken connection.
    """
    kind, flag, call_id = _HEADER.unpack_from(data)
    if kind == _BARE:
        return DecodedReply(call_id, True, None if flag == _NONE else StepReply([]))
    try:
        result = pickle.loads(memoryview(data)[_HEADER.size :])
    except Exception as exc:
        return DecodedReply(call_id, False, unpickling_failure(exc))
    return DecodedReply(call_id, flag == _OK, result)


def unpickling_failure(exc: BaseException) -> PackedException:
    """What unpickling a worker's reply in the parent raised, as that call's error: the same on
    every transport (a pipe's bytes, a Ray actor's result), so ``__setstate__`` raising in the
    parent gives the same error and note whichever carried the reply."""
    exc.add_note("the worker's reply could not be unpickled in the parent")
    return PackedException(exc, None)


# -- the fast path's wake-ups (vecenv.wire.fastpath) -----------------------------------------

#: A command that asks nothing: the worker was asleep when a STEP was posted in the shared words.
WAKE_COMMAND = _HEADER.pack(_BARE, Command.WAKE, 0)
#: A reply that answers nothing: the parent was asleep when a worker posted its reply in the
#: shared words. It is read and dropped, never decoded.
WAKE_REPLY = _HEADER.pack(_BARE, _WAKE, 0)
_BARE_STEP = bytes((_BARE, Command.STEP))


def is_bare_step(message: object) -> bool:
    """Whether ``message`` is a payload-free STEP (its actions are in the shared rows), the one
    command the shared words can carry."""
    return type(message) is bytes and len(message) == _HEADER.size and message[:2] == _BARE_STEP


def call_id_of(data: bytes) -> int:
    """The call id in a message's header."""
    return int(_HEADER.unpack_from(data)[2])
