"""``vecenv.worker.core.WorkerCore`` without a process: built from a cloudpickled group builder,
attached to buffers made with ``Buffers.create``/``Buffers.attach`` as the parent and a worker
make them, and fed commands encoded as the parent encodes them. Results are compared with
``SyncVectorEnv`` over the same envs.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from tests.engine.test_differential import assert_same, sample_actions
from tests.helpers.envs import ActionRecorderEnv, BoundsEnv, DiffEnv
from tests.helpers.faults import UnloadableError
from vecenv.errors import InvalidArgumentError, PackedException, VecEnvError
from vecenv.wire.buffers import Buffers, BufferSpec
from vecenv.wire.protocol import (
    Attach,
    CallArgs,
    Command,
    Hello,
    ResetArgs,
    Rows,
    SetAttrArgs,
    SpaceKind,
    SpaceMismatch,
    SpaceRule,
    StepReply,
    decode_command,
    decode_reply,
    encode_command,
    encode_reply,
)
from vecenv.worker.core import WorkerCore, WorkerOptions
from vecenv.worker.group import EnvGroup, VectorGroup

pytestmark = pytest.mark.timeout(30)

NEXT = AutoresetMode.NEXT_STEP


def _envs(n: int, cls: type = DiffEnv, **kwargs: Any) -> Callable[[], list[gym.Env]]:
    """A group builder, as ``from_groups`` takes it: ``n`` envs with indices ``0..n-1``."""
    return lambda: [cls(index=i, **kwargs) for i in range(n)]


def _built(
    builder: Callable[[], Any], options: WorkerOptions | None = None, index: int = 0
) -> tuple[WorkerCore, Hello]:
    core = WorkerCore(index, options or WorkerOptions())
    return core, core.build(cloudpickle.dumps(builder))


class Attached:
    """A core attached to a worker's rows of a parent's buffers, both made in this process."""

    def __init__(self, builder: Callable[[], Any], shared_memory: bool = True, mode: AutoresetMode = NEXT) -> None:
        self.core, self.hello = _built(builder)
        n = self.hello.num_envs
        self.spec = BufferSpec.plan(n, self.hello.observation_space, self.hello.action_space, shared_memory)
        self.parent = Buffers.create(self.spec)
        block = self.parent.block
        fd = os.dup(block.fd) if block is not None and block.fd is not None else None
        self.worker = Buffers.attach(self.spec, 0, n, fd)
        self.core.attach(Attach(0, n, mode, self.spec), self.worker)
        self.call_ids = 0

    def feed(self, command: Command, payload: Any = None) -> tuple[bool, Any]:
        """Encode a command as the parent does, decode it as the worker does, handle it, and
        send the reply back the same way."""
        self.call_ids += 1
        decoded, call_id, load = decode_command(encode_command(command, self.call_ids, payload))
        assert (decoded, call_id) == (command, self.call_ids)
        ok, result = self.core.handle(decoded, load)
        back_id, back_ok, back = decode_reply(encode_reply(call_id, ok, result))
        assert (back_id, back_ok) == (call_id, ok)
        return ok, back

    @property
    def envs(self) -> list[Any]:
        return self.core.envs

    def close(self) -> None:
        self.core.detach()
        self.worker.close()
        self.parent.close()


@pytest.fixture
def attached() -> Iterator[Callable[..., Attached]]:
    made: list[Attached] = []

    def make(*args: Any, **kwargs: Any) -> Attached:
        made.append(Attached(*args, **kwargs))
        return made[-1]

    yield make
    for a in made:
        a.close()


class _Merger:
    """Gymnasium's own info batching, over ``num_envs`` rows."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def _infos(entries: list[tuple[int, dict[str, Any]]], n: int) -> dict[str, Any]:
    merger, infos = _Merger(n), {}
    for j, info in entries:
        infos = merger._add_info(infos, info, j)
    return infos


# -- build ---------------------------------------------------------------------------------------


def test_build_describes_the_group() -> None:
    core, hello = _built(_envs(3))
    reference = DiffEnv()
    assert hello == Hello(
        num_envs=3,
        observation_space=reference.observation_space,
        action_space=reference.action_space,
        metadata=DiffEnv.metadata,
        render_mode=None,
        spec=None,
        mismatch=None,
        native_autoreset=None,
        observation_spaces=[],
    )
    assert [env.index for env in core.envs] == [0, 1, 2] and core.group is None


@pytest.mark.parametrize(
    "kwargs, which",
    [({"obs_shape": 4}, "observation_space"), ({"act_kind": "box"}, "action_space")],
    ids=["observation", "action"],
)
def test_build_names_the_first_env_that_does_not_fit(kwargs: dict[str, Any], which: str) -> None:
    def builder() -> list[gym.Env]:
        return [DiffEnv(index=0), DiffEnv(index=1), DiffEnv(index=2, **kwargs), DiffEnv(index=3, **kwargs)]

    _, hello = _built(builder)
    expected, received = getattr(DiffEnv(), which), getattr(DiffEnv(**kwargs), which)
    assert hello.mismatch == SpaceMismatch(2, SpaceKind(which), expected, received)


def test_observation_mode_different_lists_every_space_and_needs_only_shape_and_dtype() -> None:
    builder = _envs(3, BoundsEnv)
    _, same = _built(builder)
    assert same.mismatch is not None and same.mismatch.local_index == 1  # bounds differ
    _, different = _built(builder, WorkerOptions(observation_mode=SpaceRule.DIFFERENT))
    assert different.mismatch is None
    assert different.observation_spaces == [BoundsEnv(index=i).observation_space for i in range(3)]
    custom = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    _, fits = _built(builder, WorkerOptions(observation_mode=custom))
    assert fits.mismatch is None and fits.observation_spaces == []
    _, wrong = _built(builder, WorkerOptions(observation_mode=spaces.Box(-1, 1, (3,), np.float32)))
    assert wrong.mismatch is not None and wrong.mismatch.local_index == 0


def test_an_empty_group_is_refused_naming_the_worker() -> None:
    with pytest.raises(ValueError, match="^the env group of worker 5 is empty; each needs one env or more$"):
        _built(lambda: [], index=5)


class _DeclaredNative(VectorEnv):
    """A native vector env that declares ``num_envs`` and ``metadata`` as given (and is never
    stepped: the handshake is what is tested)."""

    def __init__(self, num_envs: Any, metadata: dict[str, Any] | None = None) -> None:
        self.num_envs = num_envs
        self.metadata = metadata if metadata is not None else {"autoreset_mode": NEXT}
        self.single_observation_space = spaces.Box(-1, 1, (2,), np.float32)
        self.single_action_space = spaces.Discrete(2)


@pytest.mark.parametrize(
    "num_envs, error, message",
    [
        (0, ValueError, "`num_envs` must be 1 or more (each group needs one env or more), got 0"),
        (-2, ValueError, "`num_envs` must be 1 or more (each group needs one env or more), got -2"),
        (2.0, TypeError, "`num_envs` must be an int, got 2.0"),
        ("2", TypeError, "`num_envs` must be an int, got '2'"),
    ],
    ids=["zero", "negative", "float", "str"],
)
def test_a_native_env_whose_num_envs_is_no_positive_int_is_refused(num_envs: Any, error: type, message: str) -> None:
    """Such a group made buffers of no rows (``cannot mmap an empty file``), failed its first
    reset (``IndexError``) or failed in the parent's arithmetic, naming nothing."""
    prefix = "worker 3's group builder (`group_fns`) returned _DeclaredNative, a native vector env whose "
    with pytest.raises(error, match="^" + re.escape(prefix + message) + "$") as info:
        _built(functools.partial(_DeclaredNative, num_envs), index=3)
    assert isinstance(info.value, VecEnvError)


def test_a_native_env_with_a_numpy_int_num_envs_is_described_with_an_int() -> None:
    _, hello = _built(functools.partial(_DeclaredNative, np.int64(2)))
    assert hello.num_envs == 2 and type(hello.num_envs) is int


def test_a_native_env_with_an_unknown_autoreset_mode_is_refused_naming_it() -> None:
    _, hello = _built(functools.partial(_DeclaredNative, 2, {"autoreset_mode": "SameStep"}))
    assert hello.native_autoreset is AutoresetMode.SAME_STEP  # the mode's value is taken
    _, hello = _built(functools.partial(_DeclaredNative, 2, {}))
    assert hello.native_autoreset is NEXT  # Gymnasium's default
    with pytest.raises(InvalidArgumentError, match=r"metadata\['autoreset_mode'\] must be .*got 'whenever'$"):
        _built(functools.partial(_DeclaredNative, 2, {"autoreset_mode": "whenever"}))


def test_a_native_env_in_a_list_is_refused_saying_to_return_it_alone() -> None:
    """In a list it passed for one env whose observation is the whole batch, and failed at the
    first step with NumPy's ``setting an array element with a sequence``."""
    with pytest.raises(
        TypeError, match=r"^item 1 of the list .* got _DeclaredNative, a gymnasium.vector.VectorEnv: .*alone"
    ):
        _built(lambda: [DiffEnv(), _DeclaredNative(2)])


def test_a_native_vector_env_group(attached: Callable[..., Attached]) -> None:
    builder = functools.partial(gym.make_vec, "CartPole-v1", 2, vectorization_mode="sync")
    a = attached(builder)
    assert a.hello.num_envs == 2 and a.hello.native_autoreset is AutoresetMode.NEXT_STEP
    assert isinstance(a.core.group, VectorGroup)
    twin = builder()
    try:
        assert a.hello.observation_space == twin.single_observation_space
        ok, reply = a.feed(Command.RESET, ResetArgs([4, 5], None, None))
        assert ok and reply == StepReply([], None)
        np.testing.assert_array_equal(a.parent.observations, twin.reset(seed=4)[0])
    finally:
        twin.close()


# -- reset and step ------------------------------------------------------------------------------


@pytest.mark.parametrize("shared_memory", [True, False], ids=["shm", "noshm"])
def test_reset_and_step_match_sync(attached: Callable[..., Attached], shared_memory: bool) -> None:
    n = 3
    a = attached(_envs(n), shared_memory)
    assert isinstance(a.core.group, EnvGroup)
    sync = SyncVectorEnv([functools.partial(DiffEnv, index=i) for i in range(n)])
    rng = np.random.default_rng(0)
    ended = 0
    try:
        ok, reply = a.feed(Command.RESET, ResetArgs([7, 8, 9], None, None))
        assert ok and isinstance(reply, StepReply)
        assert (reply.rows is None) == shared_memory  # shared rows never travel
        a.parent.receive(0, n, reply.rows)
        want_obs, want_infos = sync.reset(seed=7)
        assert_same((a.parent.observations, _infos(reply.infos, n)), (want_obs, want_infos), "reset")
        for t in range(40):
            actions = sample_actions(sync.single_action_space, n, rng)
            if shared_memory:
                a.parent.actions[:] = actions  # the rows the worker reads: no payload
                ok, reply = a.feed(Command.STEP)
            else:
                ok, reply = a.feed(Command.STEP, actions)
            assert ok
            a.parent.receive(0, n, reply.rows)
            p = a.parent
            got = (p.observations, p.rewards, p.terminations, p.truncations, _infos(reply.infos, n))
            want = sync.step(actions)
            assert_same(got, want, f"step {t}")
            ended += int((want[2] | want[3]).sum())
        assert ended > 0  # autoreset was crossed
    finally:
        sync.close()


def test_a_step_from_shared_rows_hands_the_envs_a_copy(attached: Callable[..., Attached]) -> None:
    """The next step rewrites the action rows: an env that keeps its action must keep its own."""
    a = attached(_envs(2, ActionRecorderEnv))
    a.feed(Command.RESET, ResetArgs([0, 1], None, None))
    a.parent.actions[:] = [[0.25], [0.5]]
    assert a.feed(Command.STEP)[0]
    a.parent.actions[:] = [[-1.0], [-1.0]]  # the parent's next actions
    assert [env.last_action()[3] for env in a.envs] == [0.25, 0.5]


def test_a_masked_reset_resets_only_the_masked_envs(attached: Callable[..., Attached]) -> None:
    a = attached(_envs(3))
    a.feed(Command.RESET, ResetArgs([0, 1, 2], None, None))
    episodes = [env.episodes for env in a.envs]
    ok, reply = a.feed(Command.RESET, ResetArgs([None, 11, None], {"o": 1}, np.array([False, True, False])))
    assert ok and [env.episodes - e for env, e in zip(a.envs, episodes)] == [0, 1, 0]
    assert [j for j, _ in reply.infos] == [1] and reply.infos[0][1]["seed"] == 11


# -- call, set_attr, render, close ---------------------------------------------------------------


def test_call_set_attr_and_render(attached: Callable[..., Attached]) -> None:
    a = attached(_envs(3, render_mode="rgb_array"))
    a.feed(Command.RESET, ResetArgs([0, 1, 2], None, None))
    assert a.feed(Command.CALL, CallArgs("double", (1.5,), {"plus": 1.0})) == (True, [4.0, 5.0, 6.0])
    assert a.feed(Command.CALL, CallArgs("index", (), {})) == (True, [0, 1, 2])  # an attribute is read
    assert a.feed(Command.SET_ATTR, SetAttrArgs("scale", [1.0, 2.0, 3.0])) == (True, None)
    assert [env.scale for env in a.envs] == [1.0, 2.0, 3.0]
    ok, frames = a.feed(Command.RENDER)
    assert ok and [f.shape for f in frames] == [(4, 5, 3)] * 3
    np.testing.assert_array_equal(frames[2], a.envs[2].render())


def test_lambdas_reach_the_envs(attached: Callable[..., Attached]) -> None:
    """Payloads that plain pickle refuses travel with cloudpickle: set lambdas, then call them."""
    a = attached(_envs(2))
    assert a.feed(Command.SET_ATTR, SetAttrArgs("hook", [lambda: "first", lambda: "second"])) == (True, None)
    assert a.feed(Command.CALL, CallArgs("hook", (), {})) == (True, ["first", "second"])


def test_close_closes_every_env_and_reports_the_first_failure(attached: Callable[..., Attached]) -> None:
    a = attached(lambda: [DiffEnv(index=0), DiffEnv(index=1, fail_close=True), DiffEnv(index=2, fail_close=True)])
    ok, packed = a.feed(Command.CLOSE)
    assert not ok and isinstance(packed, PackedException)
    assert packed.env_index == 1 and packed.message == "env 1 fails to close"
    assert all(env.closed for env in a.envs)
    b = attached(_envs(2))
    assert b.feed(Command.CLOSE) == (True, None) and all(env.closed for env in b.envs)


# -- errors become replies -----------------------------------------------------------------------


def test_an_env_error_is_an_error_reply_naming_the_env_and_the_core_carries_on(
    attached: Callable[..., Attached],
) -> None:
    a = attached(lambda: [DiffEnv(index=0), DiffEnv(index=1), DiffEnv(index=2, fail_step=2)])
    a.feed(Command.RESET, ResetArgs([0, 1, 2], None, None))
    assert a.feed(Command.STEP)[0]
    ok, packed = a.feed(Command.STEP)
    assert not ok and isinstance(packed, PackedException)
    assert (packed.env_index, packed.type_name, packed.message) == (2, "builtins.RuntimeError", "env 2 fails at step 2")
    rebuilt = packed.rebuild("note")
    assert type(rebuilt) is RuntimeError and "in step" in packed.traceback
    assert a.feed(Command.CALL, CallArgs("index", (), {})) == (True, [0, 1, 2])


def test_an_unloadable_payload_is_that_calls_error_blaming_no_env(attached: Callable[..., Attached]) -> None:
    """A payload that cannot be unpickled in the worker: an error reply to that command, loaded
    inside the guard, with no env blamed (none ran); the next command works."""
    a = attached(lambda: [DiffEnv(index=0), DiffEnv(index=1, fail_step=1)])
    a.feed(Command.RESET, ResetArgs([0, 1], None, None))
    a.parent.actions[:] = 0
    assert a.feed(Command.STEP)[0] is False  # env 1 raised: blamed on it
    ok, packed = a.feed(Command.CALL, CallArgs("double", (UnloadableError("what", "detail"),), {}))
    assert not ok and isinstance(packed, PackedException)
    assert packed.env_index is None  # the blame of the failed step is not carried over
    assert packed.type_name == "builtins.TypeError" and "UnloadableError" in packed.traceback
    assert a.feed(Command.CALL, CallArgs("double", (1.0,), {})) == (True, [2.0, 3.0])


def test_an_env_raising_a_base_exception_is_still_a_reply(attached: Callable[..., Attached]) -> None:
    a = attached(_envs(2))

    def interrupt() -> None:
        raise KeyboardInterrupt("stop")

    a.envs[0].interrupt = lambda: None
    a.envs[1].interrupt = interrupt
    ok, packed = a.feed(Command.CALL, CallArgs("interrupt", (), {}))
    assert not ok and packed.env_index == 1 and packed.type_name == "builtins.KeyboardInterrupt"


def test_commands_need_an_attach_and_detach_drops_the_group() -> None:
    core, _ = _built(_envs(1))
    with pytest.raises(AssertionError, match="attach"):
        core.handle(Command.STEP, lambda: None)
    a = Attached(_envs(1))
    try:
        a.core.detach()
        assert a.core.group is None
        with pytest.raises(AssertionError, match="attach"):
            a.core.handle(Command.CALL, lambda: CallArgs("index", (), {}))
    finally:
        a.close()


def test_rows_not_in_shared_memory_travel_in_the_reply(attached: Callable[..., Attached]) -> None:
    a = attached(_envs(2, obs_kind="text"), shared_memory=True)  # text: no fixed shape
    ok, reply = a.feed(Command.RESET, ResetArgs([0, 1], None, None))
    assert ok and isinstance(reply.rows, Rows) and reply.rows.flags is None  # flags are shared
    assert reply.rows.observations == [env.text for env in a.envs]
