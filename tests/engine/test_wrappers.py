"""Gymnasium's vector wrappers over a SubprocVectorEnv give exactly what they give over SyncVectorEnv.

Each case wraps both vector envs the same way, resets them with the same seed, steps them with
the same actions past several episode ends (so autoreset is crossed) and compares every
observation, reward, flag and info, dtypes included, then the rendered frames where the env
has a render mode; a case may freeze the Normalize wrappers' statistics halfway
(``update_running_mean = False``). The observation wrappers run over ``ImageEnv``'s images and
Dict observations. Also: the EnvPool-style ``async_reset``/
``recv``/``send`` stay reachable through any stack of wrappers as ``wrapped.unwrapped``.
(``vecenv.make``'s ``wrappers`` and the rest of ``make_vec``'s arguments: ``tests/engine/test_factory.py``.)
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.wrappers import vector as vw

import vecenv
from tests.engine.test_differential import assert_same

NEXT, SAME = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP
NUM_ENVS = 5
SEED = 11
#: Older Gymnasiums (the project supports 1.1 on) refuse or break in a few wrapper cases, over
#: SyncVectorEnv as over vecenv: the test then checks that vecenv fails the same way.
GYMNASIUM = tuple(int(part) for part in gym.__version__.split(".")[:2])


#: ``tests.helpers.envs.ImageEnv``: 8x6 RGB images (or a Dict of one) and a 2-d Box action; its
#: frames are rendered too.
IMAGE = {"env_id": "WrapperImage-v0", "steps": 60, "env_kwargs": {"render_mode": "rgb_array"}}
IMAGE_DICT = {**IMAGE, "env_kwargs": {"render_mode": "rgb_array", "dict_obs": True}}


def _double(obs: np.ndarray) -> np.ndarray:
    return obs * 2.0


def _unbounded(env: VectorEnv) -> gym.spaces.Box:
    """The single observation space's shape and dtype, without bounds (for transformed obs)."""
    space = env.single_observation_space
    return gym.spaces.Box(-np.inf, np.inf, space.shape, space.dtype)


@dataclasses.dataclass(frozen=True)
class Case:
    """A stack of vector wrappers applied to both vector envs, and where to run it."""

    id: str
    wrap: Callable[[VectorEnv], VectorEnv]
    env_id: str = "CartPole-v1"
    steps: int = 120
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Halfway through, set the outermost wrapper's ``update_running_mean`` to False (the
    #: Normalize wrappers then stop updating their statistics).
    freeze: bool = False
    #: Modules the wrapper imports (ResizeObservation needs OpenCV, in ``.[test]`` but not in the
    #: core subset's venvs).
    needs: tuple[str, ...] = ()


CASES = [
    Case("RecordEpisodeStatistics", vw.RecordEpisodeStatistics, env_kwargs={"max_episode_steps": 30}),
    Case("NormalizeObservation", vw.NormalizeObservation),
    Case("NormalizeReward", functools.partial(vw.NormalizeReward, gamma=0.9)),
    Case("ClipReward", functools.partial(vw.ClipReward, min_reward=0.0, max_reward=0.5)),
    Case("TransformObservation", lambda e: vw.TransformObservation(e, _double, single_observation_space=_unbounded(e))),
    Case(
        "VectorizeTransformObservation",
        lambda e: vw.VectorizeTransformObservation(
            e, gym.wrappers.TransformObservation, func=_double, observation_space=_unbounded(e)
        ),
    ),
    Case("TransformReward", lambda e: vw.TransformReward(e, lambda r: r * 0.1 - 0.5)),
    Case("DtypeObservation", lambda e: vw.DtypeObservation(e, np.float64)),
    Case(
        "DictInfoToList",
        lambda e: vw.DictInfoToList(vw.RecordEpisodeStatistics(e)),
        env_kwargs={"max_episode_steps": 30},
    ),
    Case(
        "stack",
        lambda e: vw.ClipReward(vw.NormalizeReward(vw.NormalizeObservation(vw.RecordEpisodeStatistics(e))), -1.0, 1.0),
        env_kwargs={"max_episode_steps": 40},
    ),
    Case("ClipAction", vw.ClipAction, env_id="Pendulum-v1", steps=230),
    Case(
        "RescaleAction", lambda e: vw.RescaleAction(e, np.float32(-1), np.float32(1)), env_id="Pendulum-v1", steps=230
    ),
    Case(
        "TransformAction",
        lambda e: vw.TransformAction(e, lambda a: np.clip(a * 0.5, -2, 2)),
        env_id="Pendulum-v1",
        steps=230,
    ),
    Case("NormalizeObservation-frozen", vw.NormalizeObservation, freeze=True),
    Case("NormalizeReward-frozen", vw.NormalizeReward, freeze=True),
    Case("FlattenObservation", vw.FlattenObservation, **IMAGE),
    Case("FlattenObservation-dict", vw.FlattenObservation, **IMAGE_DICT),
    Case("GrayscaleObservation", vw.GrayscaleObservation, **IMAGE),
    Case("GrayscaleObservation-keep-dim", lambda e: vw.GrayscaleObservation(e, keep_dim=True), **IMAGE),
    Case("ResizeObservation", lambda e: vw.ResizeObservation(e, (4, 3)), needs=("cv2",), **IMAGE),
    Case("ReshapeObservation", lambda e: vw.ReshapeObservation(e, (48, 3)), **IMAGE),
    Case("FilterObservation", lambda e: vw.FilterObservation(e, ["image", "d"]), **IMAGE_DICT),
    Case(
        "RescaleObservation",
        lambda e: vw.RescaleObservation(
            vw.FlattenObservation(vw.FilterObservation(e, ["vec"])), np.float32(-1), np.float32(1)
        ),
        **IMAGE_DICT,
    ),
    Case("DtypeObservation-image", lambda e: vw.DtypeObservation(e, np.float32), **IMAGE),
    Case("ClipAction-image", vw.ClipAction, **IMAGE),
    Case("RescaleAction-image", lambda e: vw.RescaleAction(e, np.float32(0), np.float32(1)), **IMAGE),
    Case(
        "VectorizeTransformObservation-grayscale",
        lambda e: vw.VectorizeTransformObservation(e, gym.wrappers.GrayscaleObservation),
        **IMAGE,
    ),
    Case("VectorizeTransformAction", lambda e: vw.VectorizeTransformAction(e, gym.wrappers.ClipAction), **IMAGE),
    Case(
        "VectorizeTransformReward",
        lambda e: vw.VectorizeTransformReward(e, gym.wrappers.ClipReward, min_reward=-1.0, max_reward=1.0),
        **IMAGE,
    ),
    Case("DictInfoToList-dict", lambda e: vw.DictInfoToList(vw.RecordEpisodeStatistics(e)), **IMAGE_DICT),
    Case(
        "image-stack",
        lambda e: vw.NormalizeObservation(
            vw.FlattenObservation(vw.ResizeObservation(vw.GrayscaleObservation(vw.RecordEpisodeStatistics(e)), (4, 4)))
        ),
        freeze=True,
        needs=("cv2",),
        **IMAGE,
    ),
]


def _without_wall_time(infos: Any) -> Any:
    """Infos with RecordEpisodeStatistics' elapsed wall time (``episode["t"]``) taken out."""
    if isinstance(infos, list):
        return [_without_wall_time(i) for i in infos]
    if isinstance(infos, dict):
        return {k: _without_wall_time(v) for k, v in infos.items() if k != "t"}
    return infos


def _actions(space: gym.Space, steps: int) -> list[np.ndarray]:
    """Seeded batches for ``NUM_ENVS`` envs of single action space ``space``; Box actions reach
    twice past the bounds, for the clipping wrappers."""
    rng = np.random.default_rng(SEED)
    if isinstance(space, gym.spaces.Box):
        shape = (NUM_ENVS, *space.shape)
        return [rng.uniform(space.low * 2, space.high * 2, shape).astype(space.dtype) for _ in range(steps)]
    assert isinstance(space, gym.spaces.Discrete)
    return [rng.integers(space.start, space.start + space.n, NUM_ENVS).astype(space.dtype) for _ in range(steps)]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=lambda m: m.value)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_vector_wrapper_matches_sync(case: Case, mode: AutoresetMode) -> None:
    for module in case.needs:
        pytest.importorskip(module)
    fn = functools.partial(gym.make, case.env_id, **case.env_kwargs)
    base_sync = SyncVectorEnv([fn] * NUM_ENVS, autoreset_mode=mode)
    base_sub = vecenv.make(case.env_id, NUM_ENVS, 2, env_kwargs=case.env_kwargs, autoreset_mode=mode)
    try:
        sync = case.wrap(base_sync)
    except (ValueError, AssertionError) as refused:  # e.g. NormalizeObservation takes only
        # NEXT_STEP or DISABLED: a ValueError, an assert before Gymnasium 1.3
        assert isinstance(refused, ValueError) or GYMNASIUM < (1, 3), repr(refused)
        with pytest.raises(type(refused), match=f"^{re.escape(str(refused))}$"):
            case.wrap(base_sub)
        base_sub.close()
        base_sync.close()
        return
    except BaseException:
        base_sub.close()
        base_sync.close()
        raise
    try:
        sub = case.wrap(base_sub)
    except BaseException:
        base_sub.close()
        sync.close()
        raise
    try:
        assert sub.single_observation_space == sync.single_observation_space
        assert sub.observation_space == sync.observation_space
        assert sub.action_space == sync.action_space
        assert sub.metadata["autoreset_mode"] == sync.metadata["autoreset_mode"] == mode
        assert_same(sub.reset(seed=SEED), sync.reset(seed=SEED), "reset")
        ends = 0
        space = sync.single_action_space  # ClipAction unbounds it: then draw around the env's bounds
        space = space if np.isfinite(getattr(space, "low", 0)).all() else sync.unwrapped.single_action_space
        for t, actions in enumerate(_actions(space, case.steps)):
            try:
                want = sync.step(actions.copy())
            except KeyError as broken:  # Gymnasium 1.1's DictInfoToList cannot read its own
                # RecordEpisodeStatistics' infos (KeyError '_r' at the first episode end): so
                # over vecenv too, at the same step
                assert GYMNASIUM < (1, 2), f"step {t}: SyncVectorEnv's wrappers raised {broken!r}"
                with pytest.raises(KeyError, match=f"^{re.escape(str(broken))}$"):
                    sub.step(actions.copy())
                return
            got = sub.step(actions.copy())
            if case.freeze and t == case.steps // 2:  # from the next step on, statistics frozen
                sync.update_running_mean = sub.update_running_mean = False
            assert_same(got[:4], want[:4], f"step {t}")
            assert_same(_without_wall_time(got[4]), _without_wall_time(want[4]), f"step {t} infos")
            ends += int(np.sum(np.logical_or(want[2], want[3])))
        assert ends >= NUM_ENVS, "the run never crossed an autoreset"
        if sync.render_mode is not None:
            assert_same(sub.render(), sync.render(), "render")
        # Resetting again (the wrappers keep running statistics) stays in step too.
        assert_same(sub.reset(seed=SEED + 1), sync.reset(seed=SEED + 1), "second reset")
    finally:
        sub.close()
        sync.close()


@pytest.mark.timeout(60)
def test_record_episode_statistics_keeps_running_envs_statistics_over_partial_resets() -> None:
    """DISABLED with ``reset_mask`` resets: vecenv leaves the mask in the caller's options, so
    the wrapper clears only the reset envs' statistics and each episode reports its own return
    and length (over SyncVectorEnv, which removes the mask first, every env's are cleared)."""
    kwargs = {"max_episode_steps": 30}
    base = vecenv.make("CartPole-v1", NUM_ENVS, 2, env_kwargs=kwargs, autoreset_mode=AutoresetMode.DISABLED)
    envs = vw.RecordEpisodeStatistics(base)
    try:
        envs.reset(seed=SEED)
        returns, lengths = np.zeros(NUM_ENVS), np.zeros(NUM_ENVS, np.int64)
        reported, partial = 0, 0
        for actions in _actions(envs.single_action_space, 150):
            _, rewards, terminations, truncations, infos = envs.step(actions)
            returns += rewards
            lengths += 1
            done = terminations | truncations
            if "episode" in infos:
                np.testing.assert_array_equal(infos["_episode"], done)
                np.testing.assert_array_equal(infos["episode"]["r"][done], returns[done])
                np.testing.assert_array_equal(infos["episode"]["l"][done], lengths[done])
                reported += int(done.sum())
            if done.any():
                envs.reset(options={"reset_mask": done})
                partial += int(not done.all())
                returns[done], lengths[done] = 0.0, 0
        assert reported >= 2 * NUM_ENVS and partial > 0
    finally:
        envs.close()


# -- the EnvPool-style API through wrappers ------------------------------------------------------


@pytest.mark.timeout(60)
def test_async_batches_through_wrappers_via_unwrapped() -> None:
    base = vecenv.make("CartPole-v1", 8, 2, batch_size=4)
    wrapped = vw.ClipReward(vw.RecordEpisodeStatistics(base), 0.0, 0.5)
    try:
        # VectorWrapper forwards only the VectorEnv API: recv/send are not wrapper attributes...
        assert not hasattr(wrapped, "recv")
        # ...but `unwrapped` is the SubprocVectorEnv itself, with all of its API.
        assert wrapped.unwrapped is base
        pool = wrapped.unwrapped
        pool.async_reset(seed=3)
        seen = np.zeros(8, dtype=int)
        # recv hands out whichever group finished first: on a loaded machine one group can win
        # many rounds in a row, so run until both have come back (bounded), not a fixed count.
        rounds = 0
        while rounds < 20 or not (seen > 0).all():
            assert rounds < 5000, f"a group never came back from recv: {seen}"
            obs, rewards, terminations, truncations, infos, env_ids = pool.recv()
            assert obs.shape == (4, 4) and len(env_ids) == 4
            seen[env_ids] += 1
            pool.send(np.zeros(len(env_ids), dtype=np.int64), env_ids)
            rounds += 1
        assert seen.sum() == 4 * rounds and (seen > 0).all()
        assert all(len(set(seen[g : g + 4])) == 1 for g in (0, 4)), "a group is returned whole"
        # Back to synchronous stepping through the wrappers after a full reset.
        pool.recv()  # collect every env still in flight before a synchronous call
        pool.recv()
        obs, _ = wrapped.reset(seed=3)
        _, rewards, *_ = wrapped.step(np.ones(8, dtype=np.int64))
        assert obs.shape == (8, 4) and (rewards == 0.5).all()
    finally:
        wrapped.close()
    assert base.closed


@pytest.mark.timeout(90)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_human_rendering_shows_the_frames_sync_shows(num_workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gymnasium's vector ``HumanRendering`` (headless here: SDL's dummy video driver) draws
    every env's frame after each reset and step: over vecenv it gets the frames, metadata and
    render mode it gets over SyncVectorEnv, and the steps through it stay the same."""
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    kwargs = {"render_mode": "rgb_array"}
    sync = vw.HumanRendering(SyncVectorEnv([functools.partial(gym.make, "WrapperImage-v0", **kwargs)] * 3))
    sub = vw.HumanRendering(vecenv.make("WrapperImage-v0", 3, num_workers, env_kwargs=kwargs))
    try:
        assert sub.render_mode == sync.render_mode == "human"
        assert sub.metadata == sync.metadata
        assert_same(sub.reset(seed=SEED), sync.reset(seed=SEED), "reset")
        for t in range(12):
            actions = np.full((3, 2), 0.25 * (t % 3), np.float32)
            want = sync.step(actions)
            assert_same(sub.step(actions), want, f"step {t}")
        assert_same(sub.render(), sync.render(), "render")
    finally:
        sub.close()
        sync.close()
    assert sub.unwrapped.closed
