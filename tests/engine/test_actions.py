"""``vecenv.parent.action_rows``: actions are taken as SyncVectorEnv takes them and reach each env
as SyncVectorEnv hands them over (through worker processes, compared with SyncVectorEnv)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from gymnasium.vector.utils import batch_space

from tests.engine.test_differential import assert_same, same_steps
from tests.helpers.envs import ActionRecorderEnv, ActionReprEnv, AnyActionEnv, PayEnv, fns
from vecenv import SubprocVectorEnv
from vecenv.errors import ArgumentTypeError, InvalidArgumentError
from vecenv.parent import action_rows


@pytest.mark.timeout(60)
def test_scalar_action_for_discrete_batch_is_a_type_error() -> None:
    envs = SubprocVectorEnv(fns(PayEnv, 2), num_workers=2)
    sync = SyncVectorEnv(fns(PayEnv, 2))
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0))
        with pytest.raises(TypeError):
            sync.step(0)
        with pytest.raises(TypeError):
            envs.step(0)
        assert_same(envs.step(np.array([1, 0])), sync.step(np.array([1, 0])))
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flat_action_batch_for_box1_reaches_envs_as_in_sync(dtype: Any) -> None:
    make = fns(ActionRecorderEnv, 3)
    envs = SubprocVectorEnv(make, num_workers=2)
    sync = SyncVectorEnv(make)
    try:
        actions = np.array([0.1, -0.2, 0.3], dtype)  # shape (n,), not (n, 1)
        same_steps(envs, sync, 0, [actions, actions * 2])
        assert_same(envs.call("last_action"), sync.call("last_action"))
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_float_actions_for_discrete_reach_envs_as_in_sync(num_workers: int) -> None:
    """SyncVectorEnv hands each env its float row; an env that takes ``int(action)`` works."""
    make = fns(ActionReprEnv, 3)
    envs = SubprocVectorEnv(make, num_workers=num_workers)
    sync = SyncVectorEnv(make)
    try:
        batches = [np.array([1.0, 2.0, 0.0]), np.array([2, 0, 1], np.float32), np.array([0, 1, 2])]
        same_steps(envs, sync, 0, batches)
        assert envs.step(np.array([1.0, 2.0, 0.0]))[4]["action"][0] == repr(np.float64(1.0))
    finally:
        envs.close()
        sync.close()


TEXT_AND_DISCRETE = spaces.Dict({"t": spaces.Text(3), "b": spaces.Discrete(2)})
PAIR = spaces.Tuple((spaces.Text(3), spaces.Discrete(2)))
GOOD_TEXT_AND_DISCRETE = {"t": ("a", "b", "c"), "b": np.array([0, 1, 1])}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(
    ("space", "bad", "good", "named"),
    [
        (TEXT_AND_DISCRETE, {"t": ("a", "b"), "b": np.array([0, 1, 1])}, GOOD_TEXT_AND_DISCRETE, "`actions['t']`"),
        (TEXT_AND_DISCRETE, {"t": ("a", "b", "c"), "b": np.array([0, 1])}, GOOD_TEXT_AND_DISCRETE, "`actions['b']`"),
        (PAIR, (("a", "b", "c"), [0, 1, 1, 0]), (("a", "b", "c"), [0, 1, 1]), "`actions[1]`"),
    ],
    ids=["dict-text-short", "dict-discrete-short", "tuple-discrete-long"],
)
def test_a_part_of_an_unshared_action_batch_with_another_count_is_refused_naming_it(
    num_workers: int, space: spaces.Space, bad: Any, good: Any, named: str
) -> None:
    """A Dict or Tuple action space with a part of no fixed shape (Text) travels through the
    pipes; a part holding another number of actions than envs is refused before anything is
    sent (``SyncVectorEnv`` raises too, once it has stepped the envs its zip reached)."""
    make = fns(AnyActionEnv, 3, action_space=space)
    envs = SubprocVectorEnv(make, num_workers=num_workers)
    sync = SyncVectorEnv(make)
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0))
        with pytest.raises(ValueError):
            sync.step(bad)
        message = rf"^{re.escape(named)} must hold 3 actions \(one per env\), got "
        with pytest.raises(InvalidArgumentError, match=message):
            envs.step(bad)
        sync.reset(seed=0)  # undo the steps SyncVectorEnv took before it raised
        assert_same(envs.step(good), sync.step(good))  # the refused batch stepped nothing
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(
    ("space", "where"),
    [
        (spaces.Tuple(()), "holds no values"),
        (spaces.Dict({}), "holds no values"),
        (spaces.Tuple((spaces.Discrete(2), spaces.Tuple(()))), "holds an empty Dict or Tuple at actions.1"),
        (spaces.Dict({"x": spaces.Discrete(2), "e": spaces.Dict({})}), "holds an empty Dict or Tuple at actions.e"),
    ],
    ids=["tuple", "dict", "tuple-in-tuple", "dict-in-dict"],
)
def test_an_action_space_holding_an_empty_dict_or_tuple_is_refused_by_step_and_rollout(
    num_workers: int, space: spaces.Space, where: str
) -> None:
    """No env can be given an action of a space holding an empty Tuple or Dict
    (``SyncVectorEnv``'s step raises on every call): the step is refused naming the empty part,
    where an empty Tuple action space stepped no env and returned stale rows and a nested one
    failed in the worker as an error of env 0, and so is a rollout."""
    make = fns(AnyActionEnv, 3, action_space=space)
    envs = SubprocVectorEnv(make, num_workers=num_workers)
    sync = SyncVectorEnv(make)
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0))
        batch = sync.action_space.sample()
        with pytest.raises(ValueError):
            sync.step(batch)
        message = rf"the action space {re.escape(str(space))} {where}, so no env can be given an action$"
        with pytest.raises(InvalidArgumentError, match=rf"^`actions`: {message}"):
            envs.step(batch)
        with pytest.raises(InvalidArgumentError, match=rf"^`rollout` needs .*; {message}"):
            envs.rollout(2)
        assert_same(envs.reset(seed=1), sync.reset(seed=1))  # and the vector env goes on
    finally:
        envs.close()
        sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_str_as_the_batch_of_a_text_action_space_is_refused(num_workers: int) -> None:
    """``SyncVectorEnv`` would hand env ``i`` the string's ``i``-th character; a string is not
    taken as a batch of strings here (documented on the semantics page)."""
    envs = SubprocVectorEnv(fns(AnyActionEnv, 3, action_space=spaces.Text(3)), num_workers=num_workers)
    try:
        envs.reset(seed=0)
        with pytest.raises(ArgumentTypeError, match=r"^`actions` must be a batch of 3 actions, got 'abc'$"):
            envs.step("abc")
        assert envs.step(("a", "bc", "abc"))[4]["action"].tolist() == ["'a'", "'bc'", "'abc'"]
    finally:
        envs.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_actions_sent_as_items_batch_the_action_space_once_not_at_every_step(
    num_workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actions that travel as items (a Text space's, or a list) were split by the action space
    batched anew at every step, as SyncVectorEnv does once: 0.5 s a step for a Text space and
    4,096 envs. The envs are handed what SyncVectorEnv hands them, step after step."""
    batched: list[int] = []

    def counted(space: spaces.Space, n: int) -> spaces.Space:
        batched.append(n)
        return batch_space(space, n)

    monkeypatch.setattr(action_rows, "batch_space", counted)
    make = fns(AnyActionEnv, 3, action_space=spaces.Text(3))
    envs = SubprocVectorEnv(make, num_workers=num_workers)
    sync = SyncVectorEnv(make)
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0))
        for actions in [("a", "bc", "abc"), ("c", "", "b"), ("ab", "ab", "ab"), ("", "", "")]:
            assert_same(envs.step(actions), sync.step(actions))
    finally:
        envs.close()
        sync.close()
    assert batched == [3], "batched once, for the 3 envs"


_BOX2 = spaces.Box(-1.0, 1.0, (2,), np.float32)
_MASKED = {
    "discrete": (spaces.Discrete(3), np.ma.masked_array([1, 2, 0], mask=[False, True, False])),
    "box": (_BOX2, np.ma.masked_array(np.full((3, 2), 0.5, np.float32), mask=[[0, 0], [0, 1], [0, 0]])),
    "box-nothing-masked": (_BOX2, np.ma.masked_array(np.full((3, 2), 0.5, np.float32))),
    "dict-leaf": (
        spaces.Dict({"a": spaces.Discrete(3), "b": _BOX2}),
        {
            "a": np.array([0, 1, 2]),
            "b": np.ma.masked_array(np.zeros((3, 2), np.float32), mask=[[1, 0], [0, 0], [0, 0]]),
        },
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", list(_MASKED))
def test_masked_array_actions_reach_each_env_as_sync_hands_them(case: str, num_workers: int) -> None:
    """``SyncVectorEnv`` hands each env its item of a ``numpy.ma.MaskedArray`` batch:
    ``numpy.ma.masked`` where masked, a masked row of a Box. The shared action rows kept the
    data under the mask and dropped the mask, so an env got a value Sync never gives it; a
    masked batch now travels as items and each env gets exactly Sync's."""
    space, actions = _MASKED[case]
    make = fns(AnyActionEnv, 3, action_space=space)
    envs = SubprocVectorEnv(make, num_workers=num_workers)
    sync = SyncVectorEnv(make)
    try:
        assert_same(envs.reset(seed=0), sync.reset(seed=0))
        result, expected = envs.step(actions), sync.step(actions)
        if case == "box-nothing-masked":  # the same values, as a plain array: the rows hold them
            assert_same(result[:4], expected[:4])
            assert result[-1]["action"][0] == repr(np.full(2, 0.5, np.float32))
            return
        assert_same(result, expected)
        got = [i for i, a in enumerate(result[-1]["action"]) if a == "masked" or "--" in a]
        assert got == {"discrete": [1], "box": [1], "dict-leaf": [0]}[case], result[-1]["action"]
    finally:
        envs.close()
        sync.close()
