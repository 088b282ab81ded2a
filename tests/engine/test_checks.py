"""Unit tests of ``vecenv.checks``: the input checks as pure functions, without any process.

Each check returns the normalised value or raises ``TypeError``/``ValueError`` naming the argument
and what it received. (``available_cpus``, which reads the platform: ``tests/engine/test_machine.py``.)
"""

from __future__ import annotations

import functools
import multiprocessing
import re
import types
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import vecenv
from tests.helpers.faults import FaultEnv
from vecenv import checks
from vecenv.errors import InvalidSeedError
from vecenv.wire.protocol import SpaceRule

pytestmark = pytest.mark.timeout(30)


# -- check_num_workers ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 3, 4, np.int64(2)])
def test_num_workers_accepts_ints_in_range(value: Any) -> None:
    out = checks.check_num_workers(value, 4)
    assert out == int(value) and type(out) is int


@pytest.mark.parametrize("value", [5, -1, 1.0, True, "2", np.float64(2.0)])
def test_num_workers_refuses_the_rest(value: Any) -> None:
    # The lower bound is left to the range the message names (0 may mean "in the parent").
    with pytest.raises(ValueError, match=r"`num_workers` must be .*, 4\]") as info:
        checks.check_num_workers(value, 4)
    assert repr(value) in str(info.value) or str(value) in str(info.value)


@pytest.mark.parametrize("value", [0, 5, "auto"])
def test_num_workers_for_a_backend_without_in_process_envs_starts_at_one(value: Any) -> None:
    """Ray's actors always host the envs: 0 (or 'auto') is not on offer, and the message says so."""
    assert checks.check_num_workers(1, 4, in_process=False) == 1
    with pytest.raises(ValueError, match=r"`num_workers` must be None or an int in \[1, 4\] \(1 to len\(env_fns\)\)"):
        checks.check_num_workers(value, 4, in_process=False)


# -- env_fns ------------------------------------------------------------------------------------


def test_env_fns_any_iterable_of_callables() -> None:
    fns = [functools.partial(FaultEnv, index=i) for i in range(3)]
    assert checks.check_env_fns(fns) == fns
    assert checks.check_env_fns(iter(fns)) == fns
    assert checks.check_env_fns(tuple(fns)) == fns


@pytest.mark.parametrize(
    "value, exc, match",
    [
        ("CartPole-v1", TypeError, "iterable"),
        (b"x", TypeError, "iterable"),
        (3, TypeError, "iterable"),
        ([], ValueError, "at least one"),
        ([FaultEnv, 3], TypeError, r"`env_fns\[1\]` must be callable"),
    ],
)
def test_env_fns_refused(value: Any, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        checks.check_env_fns(value)


# -- autoreset_mode, context, observation_mode ---------------------------------------------------


@pytest.mark.parametrize("mode", list(AutoresetMode) + [m.value for m in AutoresetMode])
def test_autoreset_mode_accepted(mode: Any) -> None:
    assert checks.check_autoreset_mode(mode) is AutoresetMode(mode)


@pytest.mark.parametrize("mode", ["next", "NEXT_STEP", 1, None])
def test_autoreset_mode_refused(mode: Any) -> None:
    with pytest.raises(ValueError, match="`autoreset_mode` must be one of"):
        checks.check_autoreset_mode(mode)


def test_context() -> None:
    for method in multiprocessing.get_all_start_methods():
        assert checks.check_context(method).get_start_method() == method
    assert checks.check_context(None) is not None
    with pytest.raises(ValueError, match="`context` must be None or one of"):
        checks.check_context("threads")


def test_observation_mode() -> None:
    single = spaces.Box(0, 1, (2,))
    batched = spaces.Box(0, 1, (3, 2))
    assert checks.check_observation_mode("same") is SpaceRule.SAME
    assert checks.check_observation_mode("different") is SpaceRule.DIFFERENT
    assert checks.check_observation_mode((batched, single)) == (batched, single)
    with pytest.raises(TypeError, match="Expected both elements of observation_mode to be Spaces"):
        checks.check_observation_mode((batched, "single"))
    for bad in ("Same", None, (batched,), [batched, single]):
        with pytest.raises(ValueError, match="Invalid `observation_mode`"):
            checks.check_observation_mode(bad)


# -- timeout -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, None),
        (0, 0.0),
        (0.25, 0.25),
        (3, 3.0),
        (np.float32(0.5), 0.5),
        (np.int64(2), 2.0),
    ],
)
def test_timeout_accepted(value: Any, expected: float | None) -> None:
    out = checks.check_timeout(value)
    assert out == expected
    assert out is None or type(out) is float


@pytest.mark.parametrize("value", [-1, -0.001, "x", True, float("nan"), float("inf"), [1.0]])
def test_timeout_refused_naming_the_argument(value: Any) -> None:
    with pytest.raises(ValueError, match="`timeout` must be None or a non-negative number"):
        checks.check_timeout(value)
    with pytest.raises(ValueError, match="`start_timeout`"):
        checks.check_timeout(value, "start_timeout")


# -- options, seeds, reset_mask -------------------------------------------------------------------


def test_options() -> None:
    assert checks.check_options(None) is None
    d = {"a": 1}
    assert checks.check_options(d) is d
    proxy = types.MappingProxyType(d)  # any mapping, as SyncVectorEnv hands it to the envs
    assert checks.check_options(proxy) is proxy
    with pytest.raises(TypeError, match=r"`options` must be a dict \(a mapping\) or None"):
        checks.check_options([("a", 1)])


def test_seed_list_accepted() -> None:
    assert checks.seed_list(None, 3) == [None, None, None]
    assert checks.seed_list(5, 3) == [5, 6, 7]
    assert checks.seed_list(np.int32(0), 2) == [0, 1]
    assert checks.seed_list([1, None, 3], 3) == [1, None, 3]
    assert checks.seed_list(np.array([4, 5]), 2) == [4, 5]
    assert all(type(s) is int for s in checks.seed_list(np.array([4, 5]), 2))
    for zero_d in (np.array(7), np.array(7, np.uint8)):  # as SuperSuit's vector envs read it
        assert checks.seed_list(zero_d, 2) == [7, 8] and all(type(s) is int for s in checks.seed_list(zero_d, 2))


@pytest.mark.parametrize(
    "seed, exc, match",
    [
        (-1, ValueError, "non-negative"),
        ([0, 1], ValueError, "length must match num_envs=3"),
        ([0, -1, 2], ValueError, r"`seed\[1\]`"),
        ([0, 1.5, 2], TypeError, r"`seed\[1\]` must be an int"),
        ([0, True, 2], TypeError, r"`seed\[1\]` must be an int"),
        ("123", TypeError, "`seed` must be"),
        (1.0, TypeError, "`seed` must be"),
        (True, TypeError, "`seed` must be"),
        (np.array(1.0), TypeError, r"`seed` must be an int, .* got array\(1\.\)"),
        (np.array(True), TypeError, r"`seed` must be an int"),
        (np.array(-1), ValueError, "non-negative"),
    ],
)
def test_seed_list_refused(seed: Any, exc: type, match: str) -> None:
    """Each a seed error, and Gymnasium's ``Error`` too (docs/errors.md), as well as ``exc``."""
    with pytest.raises(exc, match=match) as raised:
        checks.seed_list(seed, 3)
    assert isinstance(raised.value, InvalidSeedError) and isinstance(raised.value, gym.error.Error)


def test_reset_mask() -> None:
    mask = np.array([True, False, True])
    out = checks.check_reset_mask(mask, 3)
    np.testing.assert_array_equal(out, mask)
    assert out is not mask  # a copy: the caller's array may change afterwards
    with pytest.raises(TypeError, match="numpy array"):
        checks.check_reset_mask([True, False, True], 3)
    with pytest.raises(ValueError, match=r"shape `\(3,\)`"):
        checks.check_reset_mask(np.array([True, False]), 3)
    with pytest.raises(TypeError, match="dtype=np.bool_"):
        checks.check_reset_mask(np.array([1, 0, 1]), 3)
    with pytest.raises(ValueError, match="at least one True"):
        checks.check_reset_mask(np.zeros(3, np.bool_), 3)


# -- batch_size ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch_size, sizes, expected",
    [
        (None, [4, 3, 3], 10),
        (10, [4, 3, 3], 10),
        (None, [2, 2], 4),
        (2, [2, 2, 2], 2),
        (4, [2, 2, 2], 4),
        (np.int64(6), [2, 2, 2], 6),
    ],
)
def test_batch_size_accepted(batch_size: Any, sizes: list[int], expected: int) -> None:
    out = checks.check_batch_size(batch_size, sizes)
    assert out == expected and type(out) is int


@pytest.mark.parametrize(
    "batch_size, sizes, match",
    [
        (7, [4, 3, 3], r"group sizes \[4, 3, 3\]"),
        (4, [4, 3, 3], r"group sizes \[4, 3, 3\]"),
        (3, [2, 2, 2], r"multiple of the group size 2"),
        (0, [2, 2], r"\[1, num_envs=4\]"),
        (5, [2, 2], r"\[1, num_envs=4\]"),
        (2.0, [2, 2], r"\[1, num_envs=4\]"),
        (True, [2, 2], r"\[1, num_envs=4\]"),
    ],
)
def test_batch_size_refused(batch_size: Any, sizes: list[int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        checks.check_batch_size(batch_size, sizes)


# -- env_ids ------------------------------------------------------------------------------------


def test_env_ids() -> None:
    np.testing.assert_array_equal(checks.check_env_ids([2, 0], 4), [2, 0])
    np.testing.assert_array_equal(checks.check_env_ids(np.arange(4), 4), np.arange(4))
    for bad in ([], [[0, 1]], [0.0, 1.0], "01", 3):
        with pytest.raises(TypeError, match="`env_ids` must be a non-empty 1-d array"):
            checks.check_env_ids(bad, 4)
    with pytest.raises(ValueError, match=r"unknown ids \[4, -1\]"):
        checks.check_env_ids([0, 4, -1], 4)
    with pytest.raises(ValueError, match=r"duplicated ids \[1\]"):
        checks.check_env_ids([1, 2, 1], 4)


def test_checks_touch_no_process() -> None:
    """Pure functions: none of them starts a process."""
    before = multiprocessing.active_children()
    checks.check_num_workers(None, 3)
    checks.check_batch_size(None, [1, 2])
    checks.seed_list(1, 3)
    assert multiprocessing.active_children() == before


@pytest.mark.parametrize(
    ("group_fns", "error", "message"),
    [
        ([], ValueError, r"`group_fns` must be a non-empty sequence of callables, got"),
        ("abc", ValueError, r"`group_fns` must be a non-empty sequence of callables, got"),
        ([list, 3], TypeError, r"`group_fns\[1\]` must be callable \(returning a list of envs\), got 3$"),
    ],
)
def test_check_group_fns_names_what_is_wrong(group_fns: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        checks.check_group_fns(group_fns)


def test_check_group_fns_gives_a_list() -> None:
    assert checks.check_group_fns((list, dict)) == [list, dict]


@pytest.mark.parametrize("value", [0, 1, "yes", None])
def test_check_flag_takes_only_bools(value: object) -> None:
    with pytest.raises(TypeError, match=r"`inline_group` must be a bool, got"):
        checks.check_flag(value, "inline_group")
    assert checks.check_flag(True, "inline_group") is True


@pytest.mark.parametrize("name", ["copy", "daemon", "shared_memory", "pin_cpus", "inline_group"])
@pytest.mark.parametrize("value", [None, "no", 0], ids=["None", "str", "int"])
def test_every_switch_of_the_vector_env_takes_only_bools(name: str, value: object) -> None:
    """``copy=None`` used to give views silently: each switch is refused by name before any
    process starts."""
    before = multiprocessing.active_children()
    with pytest.raises(TypeError, match=rf"`{name}` must be a bool, got {value!r}"):
        vecenv.SubprocVectorEnv([lambda: gym.make("CartPole-v1")] * 2, 1, **{name: value})
    assert multiprocessing.active_children() == before


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (20, ValueError), (1.5, TypeError), (True, TypeError), ("5", TypeError), (None, TypeError)],
)
def test_worker_nice_takes_an_int_from_0_to_19_before_any_process_starts(value: object, error: type) -> None:
    before = multiprocessing.active_children()
    with pytest.raises(error, match=rf"`worker_nice` must be an int in \[0, 19\] .*got {re.escape(repr(value))}"):
        vecenv.SubprocVectorEnv([lambda: gym.make("CartPole-v1")] * 2, 1, worker_nice=value)
    assert multiprocessing.active_children() == before
    assert checks.check_worker_nice(np.int64(19)) == 19


class _Built(gym.Env):
    """Counts the envs built in this process."""

    built = 0
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self) -> None:
        type(self).built += 1


@pytest.mark.parametrize("bad", [{"worker_nice": 20}, {"daemon": 1}, {"pin_cpus": "no"}, {"shared_memory": None}])
def test_the_process_options_are_checked_before_auto_builds_an_env_here(bad: dict[str, Any]) -> None:
    _Built.built = 0
    with pytest.raises((TypeError, ValueError), match=f"`{next(iter(bad))}` must be"):
        vecenv.SubprocVectorEnv([_Built] * 2, "auto", **bad)
    assert _Built.built == 0


def test_the_multi_agent_vector_env_offers_no_auto_worker_count() -> None:
    from vecenv.multiagent import MultiAgentVectorEnv

    with pytest.raises(ValueError, match=r"`num_workers` must be None or an int in \[0, 2\] .*got 'auto'"):
        MultiAgentVectorEnv([object] * 2, "auto")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: vecenv.SubprocVectorEnv([lambda: 5] * 2, 1), r"`env_fns\[0\]` must return a gymnasium.Env .*got 5"),
        (
            lambda: vecenv.SubprocVectorEnv.from_groups([lambda: gym.make("CartPole-v1")]),
            r"worker 0's group builder \(`group_fns`\) must return a list of envs or a gymnasium.vector.VectorEnv, "
            r"got <TimeLimit",
        ),
        (
            lambda: vecenv.SubprocVectorEnv.from_groups([lambda: [gym.make("CartPole-v1"), 3]]),
            r"item 1 of the list worker 0's group builder \(`group_fns`\) returned must be a gymnasium.Env .*got 3",
        ),
        (
            lambda: vecenv.SubprocVectorEnv.from_groups(
                [lambda: [gym.make_vec("CartPole-v1", 2, vectorization_mode="vector_entry_point")]]
            ),
            r"item 0 of the list .* got CartPoleVectorEnv, a gymnasium.vector.VectorEnv: a native vector env is a "
            r"worker's whole group, returned alone",
        ),
        (
            lambda: vecenv.SubprocVectorEnv(
                [lambda: gym.make_vec("CartPole-v1", 2, vectorization_mode="vector_entry_point")] * 2, 1
            ),
            r"`env_fns\[0\]` must return a gymnasium.Env, got CartPoleVectorEnv, a gymnasium.vector.VectorEnv: .*"
            r"SubprocVectorEnv.from_groups",
        ),
    ],
    ids=["env-fn", "group-of-one-env", "group-item", "native-env-in-a-list", "env-fn-returns-a-vector-env"],
)
def test_a_constructor_that_returns_no_env_is_named(build: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        build()
    assert multiprocessing.active_children() == []


# -- wrong type or wrong value ------------------------------------------------------------------

_CHECKS: dict[str, Any] = {
    "num_workers": lambda v: checks.check_num_workers(v, 4),
    "timeout": checks.check_timeout,
    "batch_size": lambda v: checks.check_batch_size(v, [2, 2]),
    "max_restarts": lambda v: checks.check_restarts("restart", v, 1.0),
    "restart_window": lambda v: checks.check_restarts("restart", 1, v),
    "threads_per_worker": checks.check_threads,
    "num_steps": checks.check_num_steps,
    "group_fns": checks.check_group_fns,
    "num_envs": lambda v: checks.check_count(v, "num_envs"),
    "num_cpus": lambda v: checks.check_count(v, "num_cpus", low=0),
    "autoreset_mode": checks.check_autoreset_mode,
    "context": checks.check_context,
    "observation_mode": checks.check_observation_mode,
    "seed_policy": checks.check_seed_policy,
    "display_name": checks.check_display_name,
    "on_worker_death": lambda v: checks.check_restarts(v, 1, 1.0),
}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("num_workers", "x"),
        ("num_workers", 2.0),
        ("num_workers", True),
        ("timeout", "x"),
        ("timeout", True),
        ("batch_size", 2.0),
        ("max_restarts", 1.5),
        ("restart_window", "1"),
        ("threads_per_worker", 2.0),
        ("num_steps", 2.0),
        ("num_steps", "2"),
        ("group_fns", "abc"),
        ("num_envs", 2.0),
        ("num_envs", True),
        ("num_cpus", 1.0),
        ("autoreset_mode", 1),
        ("context", 5),
        ("observation_mode", 0),
        ("seed_policy", 1),
        ("display_name", 1),
        ("on_worker_death", True),
    ],
)
def test_a_wrong_type_is_a_type_error_and_still_an_invalid_argument(name: str, value: Any) -> None:
    """``except TypeError`` catches an argument of the wrong type, and ``except
    InvalidArgumentError`` (what callers wrote before) still does; the message names the argument
    and the value."""
    with pytest.raises(vecenv.errors.ArgumentTypeError, match=rf"`{name}`") as info:
        _CHECKS[name](value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, vecenv.errors.InvalidArgumentError)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("num_workers", 5),
        ("timeout", -1.0),
        ("timeout", float("nan")),
        ("batch_size", 0),
        ("max_restarts", 0),
        ("restart_window", 0.0),
        ("threads_per_worker", 0),
        ("num_steps", 0),
        ("group_fns", []),
        ("num_envs", 0),
        ("num_cpus", -1),
        ("autoreset_mode", "every-step"),
        ("context", "thread"),
        ("observation_mode", "mixed"),
        ("seed_policy", "random"),
        ("display_name", ""),
        ("on_worker_death", "ignore"),
    ],
)
def test_a_wrong_value_of_the_right_type_is_no_type_error(name: str, value: Any) -> None:
    with pytest.raises(vecenv.errors.InvalidArgumentError, match=rf"`{name}`") as info:
        _CHECKS[name](value)
    assert not isinstance(info.value, TypeError)


def test_the_public_calls_raise_a_type_error_for_a_wrong_type() -> None:
    """The calls users make, end to end (no process: the checks run before any starts)."""
    with pytest.raises(TypeError, match="`num_workers` must be") as info:
        vecenv.make("CartPole-v1", 4, num_workers="x")
    assert isinstance(info.value, vecenv.errors.InvalidArgumentError)
    with pytest.raises(TypeError, match="`num_envs` must be a positive int, got 2.0"):
        vecenv.make("CartPole-v1", 2.0)
    with pytest.raises(vecenv.errors.InvalidArgumentError, match="`num_envs` must be a positive int, got 0") as refused:
        vecenv.make("CartPole-v1", 0)
    assert not isinstance(refused.value, TypeError)
    # A NumPy int, as make_vec takes it (a count computed with NumPy): it was refused.
    envs = vecenv.make("CartPole-v1", np.int64(2), num_workers=0)
    try:
        assert envs.num_envs == 2 and type(envs.num_envs) is int and envs.spec.kwargs["num_envs"] == 2
        assert envs.reset(seed=0)[0].shape == (2, 4)
    finally:
        envs.close()
    envs = vecenv.make("CartPole-v1", 2, num_workers=0)
    try:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match="`num_steps` must be a positive int .*got 2.0"):
            envs.rollout(2.0)
        with pytest.raises(TypeError, match="`timeout` must be None or a non-negative number of seconds, got 'x'"):
            envs.step(np.zeros(2, dtype=np.int64), timeout="x")
    finally:
        envs.close()
