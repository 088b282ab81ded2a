"""``vecenv.wire.protocol``: every command and message class through the wire format and back,
the header-only fast paths of the step path, and payloads that cannot be rebuilt becoming an
error reply to their own call. No process: bytes in, bytes out.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from tests.helpers.faults import UnloadableError
from vecenv.errors import PackedException
from vecenv.wire.buffers import BufferSpec
from vecenv.wire.protocol import (
    Attach,
    CallArgs,
    Command,
    Flags,
    Hello,
    ResetArgs,
    RolloutArgs,
    RolloutReply,
    Rows,
    SetAttrArgs,
    SpaceKind,
    SpaceMismatch,
    StepReply,
    WithFd,
    allow_word_reply,
    decode_command,
    decode_reply,
    empty_reply,
    encode_command,
    encode_reply,
    fd_follows,
    word_reply_allowed,
)

pytestmark = pytest.mark.timeout(30)

HEADER = 10  # kind, command or reply flag, call id: "<BBQ"
BOX = spaces.Box(-1.0, 1.0, (3,), np.float32)
BIG_ID = 2**40 + 3  # call ids are 64-bit


def _same(a: Any, b: Any) -> None:
    """Equal, field by field, arrays included (dataclass ``==`` cannot compare arrays)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), (a, b)
        for field in dataclasses.fields(a):
            _same(getattr(a, field.name), getattr(b, field.name))
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), (a, b)
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (a, b)
        for k in a:
            _same(a[k], b[k])
    else:
        assert a == b, (a, b)


PAYLOADS = {
    "none": None,
    "reset": ResetArgs([3, None, 5], {"difficulty": 2}, np.array([True, False, True])),
    "reset-all": ResetArgs([None, None], None, None),
    "call": CallArgs("double", (1.5,), {"plus": 2.0}),
    "set-attr": SetAttrArgs("scale", [1.0, 2.0]),
    "actions": np.arange(6, dtype=np.int64).reshape(3, 2),
    "action-objects": [np.float32(0.5), {"a": 1}],
}


@pytest.mark.parametrize("command", list(Command), ids=lambda c: c.name)
@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_every_command_round_trips(command: Command, payload: Any) -> None:
    data = encode_command(command, BIG_ID, payload)
    decoded, call_id, load = decode_command(data)
    assert decoded is command and call_id == BIG_ID
    _same(load(), payload)
    assert (len(data) == HEADER) == (payload is None)  # a payload-free command is the header alone


def test_a_lambda_in_a_payload_falls_back_to_cloudpickle() -> None:
    data = encode_command(Command.CALL, 1, CallArgs("apply", (lambda x: x + 1,), {}))
    assert decode_command(data)[2]().args[0](41) == 42
    with pytest.raises(TypeError):  # what neither can serialise raises before anything is sent
        encode_command(Command.CALL, 2, CallArgs("f", (threading.Lock(),), {}))


def _hello(**changes: Any) -> Hello:
    fields: dict[str, Any] = dict(
        num_envs=4,
        observation_space=BOX,
        action_space=spaces.Discrete(3),
        metadata={"render_fps": 30},
        render_mode="rgb_array",
        spec=None,
        mismatch=SpaceMismatch(2, SpaceKind.OBSERVATION, BOX, spaces.Box(-2.0, 2.0, (3,), np.float32)),
        native_autoreset=AutoresetMode.SAME_STEP,
        observation_spaces=[BOX, BOX],
    )
    fields.update(changes)
    return Hello(**fields)


REPLIES = {
    "hello": _hello(),
    "step-infos": StepReply([(0, {"x": 1}), (2, {"arr": np.arange(3)})]),
    "step-rows": StepReply(
        [],
        Rows(
            np.ones((2, 3), np.float32), Flags(np.array([1.0, 0.5]), np.array([True, False]), np.array([False, True]))
        ),
    ),
    "step-obs-only": StepReply([(1, {})], Rows(["ab", "c"], None)),
    "call-results": [1, "two", np.float32(3.0)],
}


@pytest.mark.parametrize("result", REPLIES.values(), ids=REPLIES.keys())
def test_every_reply_round_trips(result: Any) -> None:
    call_id, ok, back = decode_reply(encode_reply(BIG_ID, True, result))
    assert call_id == BIG_ID and ok
    _same(back, result)


def test_a_reply_that_plain_pickle_refuses_travels_with_cloudpickle() -> None:
    """A hello whose spec holds lambdas (as a get_attr("spec") of such an env does)."""
    hello = _hello(spec={"wrappers": [lambda env: env]})
    with pytest.raises((pickle.PicklingError, AttributeError)):
        encode_reply(0, True, hello, pickle.dumps)  # plain pickle: the worker's reply would fail
    _, ok, back = decode_reply(encode_reply(0, True, hello))
    assert ok and back.spec["wrappers"][0]("env") == "env"
    _same(dataclasses.replace(back, spec=None), dataclasses.replace(hello, spec=None))


def test_attach_and_its_buffer_spec_pickle() -> None:
    """The Attach travels by ``Connection.send`` (plain pickle), before any command."""
    attach = Attach(4, 2, AutoresetMode.NEXT_STEP, BufferSpec.plan(6, BOX, spaces.Discrete(3), False))
    assert pickle.loads(pickle.dumps(attach)) == attach


@pytest.mark.parametrize(
    "result, expected",
    [(None, None), (StepReply([]), StepReply([])), (StepReply([], None), StepReply([]))],
    ids=["none", "empty-step", "empty-step-explicit"],
)
def test_an_empty_result_is_the_header_alone(result: Any, expected: Any) -> None:
    data = encode_reply(7, True, result, dumps=_never)
    assert len(data) == HEADER
    assert decode_reply(data) == (7, True, expected)


@pytest.mark.parametrize("fd", [None, 9], ids=["bytes", "with-fd"])
def test_only_a_rollout_may_be_allowed_to_answer_in_the_done_word(fd: int | None) -> None:
    """The flag rides in the kind byte: the command, its call id, its payload and whether a
    descriptor follows read as before, and only a ROLLOUT, whose empty reply both sides know,
    takes it."""
    args = RolloutArgs(32, 0, None, None, None, False)
    data = encode_command(Command.ROLLOUT, BIG_ID, args, fd_follows=fd is not None)
    message = data if fd is None else WithFd(data, fd)
    flagged = allow_word_reply(message)
    assert flagged is not None and type(flagged) is type(message)
    raw = flagged if isinstance(flagged, bytes) else flagged.data
    assert word_reply_allowed(raw) and not word_reply_allowed(data)
    assert fd_follows(raw) is (fd is not None) and (fd is None or flagged.fd == fd)
    command, call_id, load = decode_command(raw)
    assert (command, call_id) == (Command.ROLLOUT, BIG_ID)
    _same(load(), args)
    for other in (Command.STEP, Command.RESET, Command.CALL):
        assert allow_word_reply(encode_command(other, 3, None)) is None
        assert allow_word_reply(encode_command(other, 3, [1])) is None
    assert empty_reply(Command.ROLLOUT) == RolloutReply([]) and empty_reply(Command.STEP) == StepReply([])


def test_a_rollout_reply_is_empty_only_with_nothing_in_it() -> None:
    assert RolloutReply([]).empty and RolloutReply([], masked=[]).empty
    for full in (
        RolloutReply([(0, 1, {"a": 1})]),
        RolloutReply([], rows=Rows(None, None)),
        RolloutReply([], block=object()),
        RolloutReply([], state=np.zeros(2)),
        RolloutReply([], masked=[(0, frozenset({"a"}))]),
    ):
        assert not full.empty, full


def _never(value: Any) -> bytes:
    raise AssertionError(f"pickled {value!r}")


def test_a_reply_with_anything_in_it_is_pickled() -> None:
    for result in (StepReply([(0, {"a": 1})]), StepReply([], Rows(None, None)), 0, [], ""):
        data = encode_reply(1, True, result)
        assert len(data) > HEADER and decode_reply(data) == (1, True, result)


def test_an_error_reply_round_trips() -> None:
    packed = PackedException(ValueError("env broke"), 3)
    call_id, ok, back = decode_reply(encode_reply(12, False, packed))
    assert (call_id, ok) == (12, False) and isinstance(back, PackedException)
    assert (back.env_index, back.type_name, back.message) == (3, "builtins.ValueError", "env broke")
    error = back.rebuild("raised in env 3")
    assert type(error) is ValueError and error.__notes__ == ["raised in env 3"]


def test_a_command_payload_that_cannot_be_loaded_still_names_its_call() -> None:
    """The header decodes on its own; loading the payload raises (in the worker, that is the
    call's error reply: see tests/engine/test_worker_core.py)."""
    data = encode_command(Command.CALL, 9, CallArgs("double", (UnloadableError("what", "detail"),), {}))
    command, call_id, load = decode_command(data)
    assert (command, call_id) == (Command.CALL, 9)
    with pytest.raises(TypeError, match="detail"):
        load()


@pytest.mark.parametrize("kind", ["unloadable", "garbage"])
def test_a_result_that_cannot_be_unpickled_is_an_error_reply_to_its_call(kind: str) -> None:
    if kind == "unloadable":
        data = encode_reply(11, True, [UnloadableError("what", "detail")])
    else:
        data = encode_reply(11, True, [1, 2])[:HEADER] + b"not a pickle"
    call_id, ok, packed = decode_reply(data)
    assert (call_id, ok) == (11, False) and isinstance(packed, PackedException)
    assert packed.env_index is None
    assert "the worker's reply could not be unpickled in the parent" in packed.traceback
    error = packed.rebuild("during `call`")
    assert isinstance(error, (TypeError, pickle.UnpicklingError)) and "during `call`" in error.__notes__


def test_a_result_that_cannot_be_pickled_raises_for_the_worker_to_answer_with() -> None:
    with pytest.raises(TypeError):
        encode_reply(1, True, (x for x in range(3)))
    reply = encode_reply(1, False, PackedException(TypeError("cannot pickle 'generator' object"), None))
    assert decode_reply(reply)[:2] == (1, False)
