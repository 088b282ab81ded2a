"""``vecenv.parent.handshake``: every worker's Hello checked and the vector env's spaces decided.

``configure`` is tested on Hellos made here (no process); ``observation_mode`` and a native
group's autoreset mode end to end, against SyncVectorEnv's own checks and results.
"""

from __future__ import annotations

import functools
import multiprocessing

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from tests.engine.test_differential import same_steps
from tests.helpers.envs import BoundsEnv, PayEnv, fns, sync_group
from tests.helpers.fakes import ACT_SPACE, OBS_SPACE, hello
from vecenv import SpaceMismatchError, SubprocVectorEnv
from vecenv.parent.handshake import configure
from vecenv.wire.protocol import SpaceKind, SpaceMismatch, SpaceRule

NEXT, SAME = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP

# -- configure, on Hellos made here --------------------------------------------------------------


def test_configure_sums_the_groups_and_batches_the_first_envs_spaces() -> None:
    spaces_ = configure([hello(2, metadata={"render_fps": 7}), hello(3)], SpaceRule.SAME, SAME, "SubprocVectorEnv")
    assert spaces_.num_envs == 5
    assert spaces_.single_observation_space == OBS_SPACE and spaces_.observation_space == batch_space(OBS_SPACE, 5)
    assert spaces_.single_action_space == ACT_SPACE and spaces_.action_space == batch_space(ACT_SPACE, 5)
    assert spaces_.metadata == {"render_fps": 7, "autoreset_mode": SAME}


def test_configure_names_a_mismatch_by_its_global_index() -> None:
    wide = spaces.Box(-1.0, 1.0, (3,), np.float32)
    second = hello(3, mismatch=SpaceMismatch(1, SpaceKind.OBSERVATION, OBS_SPACE, wide))
    with pytest.raises(
        SpaceMismatchError, match=r"env 3 has observation_space Box.*\(3,\).*use `observation_mode='different'`"
    ):
        configure([hello(2), second], SpaceRule.SAME, NEXT, "SubprocVectorEnv")
    with pytest.raises(
        SpaceMismatchError, match=r"^Some environments have an action space different from `Discrete\(3\)`.*env 2 has"
    ):
        configure([hello(2), hello(1, action_space=spaces.Discrete(4))], SpaceRule.SAME, NEXT, "SubprocVectorEnv")


def test_configure_names_an_envs_observation_mismatch_before_its_action_mismatch() -> None:
    """``SyncVectorEnv``'s order: the first env that does not fit, its observation space before
    its action space, whether a group's first env or the group's own check found it."""
    wide = spaces.Box(-1.0, 1.0, (3,), np.float32)
    both = hello(1, observation_space=wide, action_space=spaces.Discrete(4))
    with pytest.raises(SpaceMismatchError, match=r"env 1 has observation_space Box.*\(3,\)"):
        configure([hello(1), both], SpaceRule.SAME, NEXT, "SubprocVectorEnv")
    with pytest.raises(SpaceMismatchError, match=r"action space different .* env 1 has action_space Discrete\(4\)"):
        configure([hello(1), hello(1, action_space=spaces.Discrete(4)), both], SpaceRule.SAME, NEXT, "SubprocVectorEnv")
    # A given space (a tuple mode) is checked by the group; its first env's mismatch comes first.
    given = (batch_space(wide, 2), wide)
    head = hello(1, action_space=spaces.Discrete(4), mismatch=SpaceMismatch(0, SpaceKind.OBSERVATION, wide, OBS_SPACE))
    with pytest.raises(SpaceMismatchError, match=r"env 1 has observation_space Box.*\(2,\)"):
        configure([hello(1, observation_space=wide), head], given, NEXT, "SubprocVectorEnv")


class OddSpacesEnv(PayEnv):
    """A ``PayEnv`` whose observation space (``odd_obs``) or action space (``odd_action``), or
    both, differ from the others'."""

    def __init__(self, index: int = 0, odd_obs: bool = False, odd_action: bool = False) -> None:
        super().__init__(index)
        if odd_obs:
            self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        if odd_action:
            self.action_space = spaces.Discrete(5)


#: What SyncVectorEnv raises for sub-envs of different spaces: a RuntimeError, or under Gymnasium
#: 1.1 (setup.cfg's floor) an AssertionError (vecenv's SpaceMismatchError is a RuntimeError on every one).
SYNC_MISMATCH = (RuntimeError, AssertionError)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_the_mismatch_named_does_not_depend_on_the_worker_count(num_workers: int) -> None:
    """Env 2's observation and action spaces both differ from env 0's: like ``SyncVectorEnv``, the
    error names its observation space, whether a worker's check finds it or the parent's."""
    env_fns = [*fns(OddSpacesEnv, 2), functools.partial(OddSpacesEnv, 2, odd_obs=True, odd_action=True)]
    with pytest.raises(SYNC_MISMATCH, match="sub-environments observation spaces are not equivalent"):
        SyncVectorEnv(env_fns)
    with pytest.raises(SpaceMismatchError, match=r"env 2 has observation_space Box.*\(3,\)"):
        SubprocVectorEnv(env_fns, num_workers=num_workers)
    assert multiprocessing.active_children() == []


def _count_box_eq(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Record each ``Box.__eq__`` call (the ids of both spaces) from now on."""
    compared: list[tuple[int, int]] = []
    box_eq = spaces.Box.__eq__

    def counted(self: spaces.Box, other: object) -> bool:
        compared.append((id(self), id(other)))
        return box_eq(self, other)

    monkeypatch.setattr(spaces.Box, "__eq__", counted)
    return compared


def test_equal_spaces_are_never_compared_with_box_eq(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each env's own space was compared with itself (in its group's check and in the
    parent's), and with env 0's by ``np.allclose`` over the bounds: for a large Box, seconds
    spent building a vector env on nothing. Bit-equal bounds now fit without ``Box.__eq__``."""
    compared = _count_box_eq(monkeypatch)
    with SubprocVectorEnv([functools.partial(BoundsEnv, index=0)] * 2, 0) as envs:
        assert isinstance(envs.single_observation_space, spaces.Box)
    assert compared == []


def test_bounds_equal_only_within_tolerance_are_still_compared_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact test cannot vouch for bounds that differ by less than ``np.allclose``'s
    tolerance: ``Box.__eq__`` decides, as before, and calls them equal (one comparison)."""
    compared = _count_box_eq(monkeypatch)
    first = spaces.Box(0.0, 1.0, (2,), np.float64)
    near = spaces.Box(0.0, 1.0 + 1e-12, (2,), np.float64)
    assert near == first
    compared.clear()
    spaces_ = configure(
        [hello(1, observation_space=first), hello(1, observation_space=near)], SpaceRule.SAME, NEXT, "SubprocVectorEnv"
    )
    assert spaces_.num_envs == 2 and len(compared) == 1, compared


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(spaces.Box(0, 254, (64, 64, 3), np.uint8), id="one-bound"),
        pytest.param(spaces.Box(0, 255, (64, 64, 3), np.int16), id="dtype"),
        pytest.param(spaces.Box(0, 255, (64, 64, 4), np.uint8), id="shape"),
    ],
)
def test_a_large_box_that_differs_is_refused_with_the_same_message(other: spaces.Box) -> None:
    """The fast path only ever says "equal": a large image Box whose bounds, dtype or shape
    differ is refused as before, the message naming the env, the mode and both spaces."""
    image = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    with pytest.raises(SpaceMismatchError) as raised:
        configure(
            [hello(2, observation_space=image), hello(1, observation_space=other)], SpaceRule.SAME, NEXT, "ThisEnv"
        )
    assert str(raised.value) == (
        "ThisEnv(..., observation_mode='same') however some of the sub-environments observation spaces are not "
        f"equivalent: env 2 has observation_space {other}, expected {image}. If this is intentional, use "
        "`observation_mode='different'` instead."
    )


class _ImageEnv(PayEnv):
    """A 64x64x3 uint8 image space; with ``odd``, one element of its upper bound is 254."""

    def __init__(self, index: int = 0, odd: bool = False) -> None:
        super().__init__(index)
        high = np.full((64, 64, 3), 255, np.uint8)
        high[63, 63, 2] -= int(odd)
        self.observation_space = spaces.Box(np.zeros_like(high), high, dtype=np.uint8)


def test_one_differing_bound_in_a_workers_group_is_refused_with_the_same_message() -> None:
    """The group's own check (env 1 against env 0 in one group, no process) uses the same rule."""
    env_fns = [_ImageEnv, functools.partial(_ImageEnv, 1, odd=True)]
    with pytest.raises(SpaceMismatchError) as raised:
        SubprocVectorEnv(env_fns, 0)
    odd, image = _ImageEnv(odd=True).observation_space, _ImageEnv().observation_space
    assert str(raised.value) == (
        "SubprocVectorEnv(..., observation_mode='same') however some of the sub-environments observation spaces "
        f"are not equivalent: env 1 has observation_space {odd}, expected {image}. If this is intentional, use "
        "`observation_mode='different'` instead."
    )


def test_configure_different_batches_every_envs_space() -> None:
    a, b = spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.Box(-2.0, 2.0, (2,), np.float32)
    hellos = [
        hello(2, observation_space=a, observation_spaces=[a, b]),
        hello(1, observation_space=b, observation_spaces=[b]),
    ]
    spaces_ = configure(hellos, SpaceRule.DIFFERENT, NEXT, "SubprocVectorEnv")
    assert spaces_.observation_space == batch_differing_spaces([a, b, b]) and spaces_.single_observation_space == a


def test_configure_refuses_a_native_group_with_another_autoreset_mode() -> None:
    with pytest.raises(
        ValueError, match=r"^worker 1 hosts a native vector env with autoreset mode .*SAME_STEP.*must match$"
    ):
        configure([hello(2), hello(2, native_autoreset=SAME)], SpaceRule.SAME, NEXT, "SubprocVectorEnv")


# -- end to end ----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_native_group_with_another_autoreset_mode_is_refused() -> None:
    group = functools.partial(sync_group, [0, 1], AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError, match="autoreset_mode"):
        SubprocVectorEnv.from_groups([group], autoreset_mode=AutoresetMode.NEXT_STEP, context="fork")


@pytest.mark.timeout(60)
def test_observation_mode_different_and_custom_match_sync() -> None:
    make = fns(BoundsEnv, 4)
    single = gym.spaces.Box(-5e6, 5e6, (2,), np.float32)
    custom = (gym.vector.utils.batch_space(single, 4), single)
    for mode in ("different", custom):
        envs = SubprocVectorEnv(make, num_workers=2, observation_mode=mode)
        sync = SyncVectorEnv(make, observation_mode=mode)
        try:
            assert envs.observation_space == sync.observation_space
            assert envs.single_observation_space == sync.single_observation_space
            same_steps(envs, sync, 0, [np.ones(4, np.int64)] * 3)
        finally:
            envs.close()
            sync.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("explicit", [True, False], ids=["same", "default"])
def test_same_mode_mismatch_points_to_different(explicit: bool) -> None:
    kwargs = {"observation_mode": "same"} if explicit else {}
    with pytest.raises(RuntimeError) as info:
        SubprocVectorEnv(fns(BoundsEnv, 4), num_workers=2, **kwargs)
    assert "observation_mode='different'" in str(info.value)
    with pytest.raises(SYNC_MISMATCH, match="observation_mode='different'"):
        SyncVectorEnv(fns(BoundsEnv, 4), **kwargs)
    assert multiprocessing.active_children() == []


def _starts_a_process() -> list[gym.Env]:
    """A group builder whose envs start a process of their own (as an AsyncVectorEnv does)."""
    multiprocessing.get_context("fork").Process(target=print).start()  # refused in a daemonic worker
    return [gym.make("CartPole-v1")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_group_that_starts_processes_in_a_daemonic_worker_is_told_of_daemon_false(start_method: str) -> None:
    """multiprocessing refuses with a bare ``AssertionError`` ("daemonic processes are not
    allowed to have children"), which does not say that ``daemon=True`` made the worker one:
    the error keeps its class and gains a note saying what to pass."""
    with pytest.raises(AssertionError, match="daemonic processes") as info:
        SubprocVectorEnv.from_groups([_starts_a_process], context=start_method)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "worker 0 is a daemonic process (daemon=True, the default)" in notes
    assert "daemon=False" in notes
