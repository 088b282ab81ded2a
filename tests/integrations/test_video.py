"""``render(env_ids=...)`` and :class:`vecenv.video.RecordVideo`, against SyncVectorEnv.

``render(env_ids)`` must give the frames SyncVectorEnv's envs give, in the order asked, and make
only those envs render. The video wrapper must record the same frames over vecenv as over
SyncVectorEnv, with each video holding exactly one episode of one env (the frames of
:class:`~tests.helpers.envs.FrameEnv` say which env, episode and step drew them), in every
autoreset mode.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import re
import sys
import threading
import warnings
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

import vecenv
from tests.helpers.envs import (
    BadFrameEnv,
    complex_frame,
    five_channel_frame,
    flat_frame,
    float_frame,
    frame_fns,
    listed_frame,
    taller_frame,
)
from tests.helpers.faults import open_fds
from vecenv.bench import procfs
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, VecEnvError
from vecenv.video import RecordVideo, capped_cubic, every

NEXT, SAME, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED

#: (num_workers, inline_group): worker processes, uneven groups, a single worker, the parent's own group.
BACKENDS = [(2, False), (3, False), (1, False), (0, False), (2, True)]


def _make(num_envs: int, workers: int, inline: bool, mode: AutoresetMode = NEXT) -> vecenv.SubprocVectorEnv:
    return vecenv.SubprocVectorEnv(frame_fns(num_envs), workers, inline_group=inline, autoreset_mode=mode)


def _same_frames(ours: tuple, ref: tuple) -> None:
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert a.dtype == b.dtype and np.array_equal(a, b)


# -- render(env_ids) -------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("workers", "inline"), BACKENDS, ids=lambda v: str(v))
def test_render_env_ids_matches_sync_and_renders_only_those(workers: int, inline: bool) -> None:
    sync = SyncVectorEnv(frame_fns(7))
    try:
        with _make(7, workers, inline) as envs:
            envs.reset(seed=3)
            sync.reset(seed=3)
            for _ in range(4):
                actions = np.arange(7) % 2
                envs.step(actions)
                sync.step(actions)
            _same_frames(envs.render(), sync.render())
            ids = [6, 0, 3]
            frames = envs.render(env_ids=ids)
            _same_frames(frames, tuple(sync.envs[i].render() for i in ids))
            assert [int(f[0, 0, 0]) for f in frames] == ids, "in the order asked"
            # Every env rendered once by render(); then only 6, 0 and 3 once more.
            assert envs.get_attr("renders") == (2, 1, 1, 2, 1, 1, 2)
            _same_frames(envs.render(env_ids=np.array([5])), (sync.envs[5].render(),))
            assert envs.get_attr("renders")[5] == 2
    finally:
        sync.close()


@pytest.mark.timeout(60)
def test_render_bad_env_ids_raise_before_anything_is_sent() -> None:
    with _make(5, 2, False) as envs:
        envs.reset(seed=0)
        cases = [
            ([5], ValueError, r"`env_ids` must lie in \[0, 5\), got unknown ids \[5\]"),
            ([-1], ValueError, r"unknown ids \[-1\]"),
            ([1, 1], ValueError, r"must not repeat an env, got duplicated ids \[1\]"),
            ([], TypeError, "non-empty 1-d array of int env indices"),
            (2, TypeError, "non-empty 1-d array of int env indices, got 2"),
            ([0.5], TypeError, "non-empty 1-d array of int env indices"),
            ([[0, 1]], TypeError, "non-empty 1-d array"),
        ]
        for bad, error, message in cases:
            with pytest.raises(error, match=message):
                envs.render(env_ids=bad)
        assert envs.state is vecenv.State.DEFAULT
        assert envs.get_attr("renders") == (0,) * 5, "nothing was rendered"
        assert len(envs.render(env_ids=[4, 1])) == 2


@pytest.mark.timeout(60)
def test_render_env_ids_of_a_native_vector_group() -> None:
    def group() -> Any:
        return SyncVectorEnv(frame_fns(3))

    with vecenv.SubprocVectorEnv.from_groups([group, group]) as envs:
        envs.reset(seed=0)
        frames = envs.render(env_ids=[4, 1])
        assert [tuple(f[0, 0]) for f in frames] == [(1, 0, 0), (1, 0, 0)]  # env 1 of each group


# -- RecordVideo -------------------------------------------------------------------------------------


class MemoryVideos:
    """A writer factory that keeps each video's frames in memory, by file name."""

    def __init__(self, fps: float = 25.0) -> None:
        self.fps = fps  # what the env's metadata asks for
        self.videos: dict[str, list[np.ndarray]] = {}
        self.closed: list[str] = []

    def __call__(self, path: str, fps: float) -> Any:
        name = os.path.basename(path)
        assert fps == self.fps, "the env's render_fps"
        frames = self.videos.setdefault(name, [])
        store = self

        class Writer:
            def append(self, frame: np.ndarray) -> None:
                frames.append(frame.copy())

            def close(self) -> None:
                store.closed.append(name)

        return Writer()


def _record(
    envs: Any, mode: AutoresetMode, steps: int, env_ids: list[int], folder: Any
) -> tuple[RecordVideo, MemoryVideos, dict]:
    """Step a recorded vector env with fixed actions; returns the wrapper, its videos and, per
    recorded env, the last step ``t`` of each episode that ended."""
    videos = MemoryVideos()
    wrapped = RecordVideo(envs, folder, env_ids=env_ids, episode_trigger=every(2), writer=videos)
    ends: dict[int, list[int]] = {i: [] for i in env_ids}
    rng = np.random.default_rng(0)
    wrapped.reset(seed=5)
    for _ in range(steps):
        obs, _, terms, truncs, infos = wrapped.step(rng.integers(0, 2, envs.num_envs))
        done = terms | truncs
        for i in env_ids:
            if done[i]:
                last = infos["final_obs"][i] if mode is SAME else obs[i]
                ends[i].append(int(last[0]))
        if mode is DISABLED and done.any():
            wrapped.reset(options={"reset_mask": done})
    wrapped.close()
    return wrapped, videos, ends


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", [NEXT, SAME, DISABLED], ids=lambda m: m.value)
@pytest.mark.parametrize(("workers", "inline"), [(2, False), (0, False), (3, True)], ids=str)
def test_record_video_matches_sync_one_episode_per_video(
    tmp_path, mode: AutoresetMode, workers: int, inline: bool
) -> None:
    env_ids = [4, 0]
    folder = tmp_path / "videos"
    ours, our_videos, ends = _record(_make(6, workers, inline, mode), mode, 60, env_ids, folder)
    ref, ref_videos, ref_ends = _record(SyncVectorEnv(frame_fns(6), autoreset_mode=mode), mode, 60, env_ids, folder)
    assert ends == ref_ends
    assert list(our_videos.videos) == list(ref_videos.videos)
    for name, frames in our_videos.videos.items():
        _same_frames(tuple(frames), tuple(ref_videos.videos[name]))
    assert our_videos.closed == list(our_videos.videos), "every video closed once, in order"
    assert [os.path.basename(p) for p in ours.videos] == our_videos.closed
    assert ours.recording == [] and ours.video_folder == str(folder)
    for i in env_ids:
        recorded = sorted(int(n.split("episode-")[1][:-4]) for n in our_videos.videos if f"-env{i}-" in n)
        assert recorded == list(range(0, len(ends[i]) + 1, 2)), "episodes 0, 2, 4... of each env"
        for episode in recorded:
            pixels = np.array([f[0, 0] for f in our_videos.videos[f"rl-video-env{i}-episode-{episode}.mp4"]])
            assert (pixels[:, 0] == i).all() and (pixels[:, 2] == episode).all(), "one env, one episode"
            assert pixels[:, 1].tolist() == list(range(len(pixels))), "every step from the reset on"
            if episode < len(ends[i]):  # finished before close: it ends where the env's episode ended
                last = ends[i][episode] - (1 if mode is SAME else 0)
                assert pixels[-1, 1] == last
    assert os.listdir(folder) == [], "the writer given wrote nothing there"


@pytest.mark.timeout(60)
def test_record_video_renders_only_the_recorded_envs_while_recording(tmp_path) -> None:
    videos = MemoryVideos()
    with _make(4, 2, False) as envs:
        wrapped = RecordVideo(envs, tmp_path, env_ids=[2], episode_trigger=lambda e: e == 1, writer=videos)
        wrapped.reset(seed=0)
        for _ in range(40):
            wrapped.step(np.zeros(4, np.int64))
        renders = envs.get_attr("renders")
        wrapped.close()
    assert list(videos.videos) == ["rl-video-env2-episode-1.mp4"]
    assert renders == (0, 0, len(videos.videos["rl-video-env2-episode-1.mp4"]), 0)


@pytest.mark.timeout(60)
def test_record_video_over_another_vector_env_renders_all_and_keeps_the_chosen(tmp_path) -> None:
    videos, ref = MemoryVideos(), MemoryVideos()
    for envs, store in ((AsyncVectorEnv(frame_fns(2), context="spawn"), videos), (SyncVectorEnv(frame_fns(2)), ref)):
        wrapped = RecordVideo(envs, tmp_path, env_ids=[1], episode_trigger=every(1), writer=store)
        wrapped.reset(seed=1)
        for _ in range(10):
            wrapped.step(np.ones(2, np.int64))
        wrapped.close()
    assert list(videos.videos) == list(ref.videos) and len(videos.videos) >= 2
    for name in ref.videos:
        _same_frames(tuple(videos.videos[name]), tuple(ref.videos[name]))


@pytest.mark.timeout(60)
def test_record_video_writes_mp4_files(tmp_path) -> None:
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="needs the video extra: pip install -e '.[video]'")
    with RecordVideo(_make(3, 1, False), tmp_path / "videos", env_ids=[0, 2], episode_trigger=every(1)) as envs:
        envs.reset(seed=0)
        for _ in range(12):
            envs.step(np.zeros(3, np.int64))
        renders = envs.env.get_attr("renders")
    assert len(envs.videos) >= 4
    counts = {}
    for path in envs.videos:
        assert os.path.dirname(path) == str(tmp_path / "videos")
        counts[os.path.basename(path)], _ = imageio_ffmpeg.count_frames_and_secs(path)
    assert sorted(os.listdir(tmp_path / "videos")) == sorted(counts)
    for i in (0, 2):
        assert sum(n for name, n in counts.items() if f"-env{i}-" in name) == renders[i], "every frame is in a file"


def _video_resources() -> tuple[list[str], list[int], dict[int, str]]:
    """This process's video writer threads, child processes (ffmpeg) and descriptors."""
    threads = [t.name for t in threading.enumerate() if t.name.startswith("vecenv-video")]
    return threads, procfs.children(os.getpid()), open_fds()


@pytest.mark.timeout(90)
def test_record_video_dropped_unclosed_finishes_its_videos_and_leaves_nothing_running(tmp_path) -> None:
    """A RecordVideo dropped mid-episode without close() (a notebook cell, an evaluation env made
    per evaluation): each mp4 being recorded is finished with every frame taken, and its writer
    thread, ffmpeg process and pipes end, cycle after cycle (they used to stay for the process's
    life, the file unfinished)."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="needs the video extra: pip install -e '.[video]'")
    before = _video_resources()
    for cycle in range(3):
        folder = tmp_path / f"cycle{cycle}"
        envs = SyncVectorEnv(frame_fns(2))
        wrapped = RecordVideo(envs, folder, env_ids=[0, 1], episode_trigger=every(1))
        wrapped.reset(seed=cycle)
        wrapped.step(np.zeros(2, np.int64))  # every FrameEnv episode is longer: both videos are open
        assert wrapped.recording == [0, 1]
        renders = envs.get_attr("renders")
        del wrapped
        gc.collect()
        envs.close()
        for i in (0, 1):
            frames, _ = imageio_ffmpeg.count_frames_and_secs(str(folder / f"rl-video-env{i}-episode-0.mp4"))
            assert frames == renders[i] == 2, "the dropped video holds the reset's frame and the step's"
    threads, children, fds = _video_resources()
    assert threads == before[0], "no writer thread is left"
    assert set(children) - set(before[1]) == set(), "no ffmpeg process is left"
    assert {fd: target for fd, target in fds.items() if before[2].get(fd) != target} == {}


def test_record_video_close_finishes_every_video_when_one_writer_fails(tmp_path) -> None:
    """One writer that fails to finish its video does not leave the others open: close() finishes
    each, closes the env, then raises the failure."""
    closed: list[str] = []

    class Writer:
        def __init__(self, path: str) -> None:
            self.name = os.path.basename(path)

        def append(self, frame: np.ndarray) -> None:
            pass

        def close(self) -> None:
            closed.append(self.name)
            if "-env0-" in self.name:
                raise OSError(f"cannot finish {self.name}")

    envs = SyncVectorEnv(frame_fns(3))
    wrapped = RecordVideo(envs, tmp_path, env_ids=[0, 1, 2], episode_trigger=every(1), writer=lambda p, fps: Writer(p))
    wrapped.reset(seed=0)
    with pytest.raises(OSError, match="cannot finish rl-video-env0-episode-0.mp4"):
        wrapped.close()
    assert sorted(closed) == [f"rl-video-env{i}-episode-0.mp4" for i in range(3)]
    assert wrapped.recording == []
    assert envs.closed


def test_record_video_refuses_what_it_cannot_record(tmp_path) -> None:
    no_frames = SyncVectorEnv(frame_fns(2, render_mode=None))
    with pytest.raises(ValueError, match="render_mode='rgb_array'.*got render_mode=None"):
        RecordVideo(no_frames, tmp_path, writer=MemoryVideos())
    envs = SyncVectorEnv(frame_fns(2))
    with pytest.raises(ValueError, match=r"`env_ids` must lie in \[0, 2\), got unknown ids \[2\]"):
        RecordVideo(envs, tmp_path, env_ids=[2], writer=MemoryVideos())
    with pytest.raises(TypeError, match="`episode_trigger` must be a callable"):
        RecordVideo(envs, tmp_path, episode_trigger=3, writer=MemoryVideos())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`k` must be a positive int, got 0"):
        every(0)
    no_frames.close()
    envs.close()


def test_a_refused_record_video_leaves_the_env_open_when_collected(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gymnasium 1.1's ``VectorEnv.__del__`` closes a wrapper's env (later Gymnasiums dropped it):
    a RecordVideo refused for its arguments must not hold the caller's env, or collecting the
    half-made wrapper closes it."""

    def del_as_gymnasium_1_1(self: VectorEnv) -> None:
        if not getattr(self, "closed", True):
            self.close()

    monkeypatch.setattr(VectorEnv, "__del__", del_as_gymnasium_1_1, raising=False)
    envs = SyncVectorEnv(frame_fns(2))
    for kwargs in ({"fps": -1.0}, {"name_prefix": ""}, {"env_ids": [2]}, {"episode_trigger": 3}):
        with pytest.raises(ValueError):
            RecordVideo(envs, tmp_path, writer=MemoryVideos(), **kwargs)
        gc.collect()
        assert not envs.closed, kwargs
    with pytest.raises(TypeError, match=r"`env` must be a gymnasium.vector.VectorEnv, got 3$"):
        RecordVideo(3, tmp_path, writer=MemoryVideos())  # type: ignore[arg-type]
    envs.close()


def test_missing_imageio_names_the_extra(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "imageio", None)
    monkeypatch.setitem(sys.modules, "imageio.v2", None)
    envs = SyncVectorEnv(frame_fns(1))
    with pytest.raises(ImportError, match=r"pip install 'vecenv\[video\]'"):
        RecordVideo(envs, tmp_path)
    envs.close()


def test_default_trigger_is_the_capped_cubic_schedule() -> None:
    assert [e for e in range(2001) if capped_cubic(e)] == [0, 1, 8, 27, 64, 125, 216, 343, 512, 729, 1000, 2000]
    assert [e for e in range(10) if every(3)(e)] == [0, 3, 6, 9]


def test_import_vecenv_does_not_import_imageio() -> None:
    import subprocess

    code = "import sys, vecenv, vecenv.video; print('imageio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_mp4_writer_raises_what_encoding_raised(tmp_path) -> None:
    pytest.importorskip("imageio_ffmpeg", reason="needs the video extra: pip install -e '.[video]'")
    from vecenv.video import imageio_writer

    writer = imageio_writer(str(tmp_path / "bad.mp4"), 25.0)
    writer.append(np.zeros((6, 8, 3), np.uint8))
    writer.append(np.zeros((10, 10, 3), np.uint8))  # a frame of another size: imageio refuses it
    with pytest.raises(ValueError, match="same size"):
        try:
            for _ in range(3):  # raised by the next append or by close, in the caller's thread
                writer.append(np.zeros((6, 8, 3), np.uint8))
        finally:
            writer.close()
    with pytest.raises(ValueError, match="same size"):
        writer.close()  # closed: the error is still reported, nothing is left running


@pytest.mark.timeout(60)
def test_record_video_of_a_multi_agent_row_records_its_copy(tmp_path) -> None:
    """Rows are agents: a recorded row's frames are its copy's, whatever the agents per copy."""
    import functools

    from tests.helpers.multiagent import ToyParallelEnv

    fns = [functools.partial(ToyParallelEnv, length=3), functools.partial(ToyParallelEnv, length=7)]
    videos = MemoryVideos(fps=30.0)  # the toy env names no render_fps: RecordVideo's default
    with vecenv.MultiAgentVectorEnv(fns, 0) as envs:
        row = envs.num_agents + 1  # the second agent of copy 1
        wrapped = RecordVideo(envs, tmp_path, env_ids=[row], episode_trigger=every(1), writer=videos)
        wrapped.reset(seed=0)
        expected = [envs.render(copies=[1])[0]]
        for _ in range(5):
            wrapped.step(np.zeros(envs.num_envs, np.int64))
            expected.append(envs.render(copies=[1])[0])
        copy0 = envs.render(copies=[0])[0]
        wrapped.close()
    frames = videos.videos[f"rl-video-env{row}-episode-0.mp4"]
    _same_frames(tuple(frames), tuple(expected))
    assert not np.array_equal(frames[-1], copy0), "copy 0 restarted after 3 steps: its frame differs by now"


def _frame_steps(frames: list[np.ndarray]) -> list[int]:
    """The toy env's frames are filled with its step count: the step of each frame."""
    return [int(f[0, 0, 0]) for f in frames]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=lambda m: m.value)
def test_record_video_of_an_agent_that_dies_records_its_copys_episodes(tmp_path: Any, mode: AutoresetMode) -> None:
    """A row's frames are its copy's, so its episodes are its copy's too: agent ``a2`` (row 2)
    dies at step 3 and ``late`` (row 3) is absent until step 2, but each video is one whole
    episode of copy 0 (steps 0 to 6). They were cut where the row's agent was absent (its row is
    terminated at every such step): one video a step."""
    from tests.helpers.multiagent import ToyParallelEnv

    videos = MemoryVideos(fps=30.0)
    with vecenv.MultiAgentVectorEnv([ToyParallelEnv] * 2, 0, autoreset_mode=mode) as envs:
        wrapped = RecordVideo(envs, tmp_path, env_ids=[2, 3], episode_trigger=every(1), writer=videos)
        wrapped.reset(seed=0)
        for _ in range(13 if mode is NEXT else 11):
            wrapped.step(np.zeros(envs.num_envs, np.int64))
        wrapped.close()
    for row in (2, 3):
        names = [f"rl-video-env{row}-episode-{k}.mp4" for k in (0, 1)]
        assert sorted(n for n in videos.videos if f"env{row}-" in n) == names
        if mode is NEXT:  # the episode's last frame, then its copy's reset frame at the next step
            assert [_frame_steps(videos.videos[n]) for n in names] == [list(range(7))] * 2
        else:  # the last frame is the reset's: the final one never reaches the renderer
            assert [_frame_steps(videos.videos[n]) for n in names] == [list(range(6))] * 2


@pytest.mark.timeout(60)
def test_record_video_of_a_multi_agent_row_follows_a_per_copy_reset_mask(tmp_path: Any) -> None:
    """``reset_mask`` of a MultiAgentVectorEnv is one bool per copy: a recorded row's episode
    restarts when its copy is reset. It was read per row (row 5 of 2 copies: IndexError)."""
    from tests.helpers.multiagent import ToyParallelEnv

    videos = MemoryVideos(fps=30.0)
    with vecenv.MultiAgentVectorEnv([ToyParallelEnv] * 2, 0, autoreset_mode=AutoresetMode.DISABLED) as envs:
        wrapped = RecordVideo(envs, tmp_path, env_ids=[1, 5], episode_trigger=every(1), writer=videos)
        wrapped.reset(seed=0)
        wrapped.step(np.zeros(envs.num_envs, np.int64))
        wrapped.reset(options={"reset_mask": np.array([False, True])})  # copy 1 (rows 4 to 7) only
        wrapped.step(np.zeros(envs.num_envs, np.int64))
        wrapped.close()
    assert sorted(videos.videos) == [
        "rl-video-env1-episode-0.mp4",
        "rl-video-env5-episode-0.mp4",
        "rl-video-env5-episode-1.mp4",
    ]
    assert _frame_steps(videos.videos["rl-video-env1-episode-0.mp4"]) == [0, 1, 2]
    assert _frame_steps(videos.videos["rl-video-env5-episode-0.mp4"]) == [0, 1]
    assert _frame_steps(videos.videos["rl-video-env5-episode-1.mp4"]) == [0, 1]


# -- frames that cannot be a video -----------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("spoil", "refusal", "words"),
    [
        (listed_frame, ArgumentTypeError, "must return an image array, got [[["),
        (flat_frame, InvalidArgumentError, "with 1 to 4 channels, got an array of shape (144,)"),
        (five_channel_frame, InvalidArgumentError, "with 1 to 4 channels, got an array of shape (6, 8, 5)"),
        (taller_frame, InvalidArgumentError, "(6, 8, 3) as the first frame of rl-video-env1-episode-0.mp4, got a "),
        (complex_frame, InvalidArgumentError, "image array of numbers (uint8), got an array of dtype complex128"),
    ],
    ids=lambda v: getattr(v, "__name__", "")[:12],
)
@pytest.mark.parametrize("workers", [None, 1], ids=["sync", "vecenv"])
def test_a_frame_that_is_no_image_of_its_video_is_refused_naming_the_env(
    tmp_path: Any, spoil: Any, refusal: type, words: str, workers: int | None
) -> None:
    """A frame that is not an array, not an image, or not of its video's size raises a VecEnvError
    naming the env, at the step that rendered it, before any frame of that step is written; it
    used to reach the encoder's thread, whose bare ValueError ("All images in a movie should have
    same size", "not enough values to unpack") named no env, or to be written. The frames before
    it stay in their video, which close() finishes."""
    fns = [functools.partial(BadFrameEnv, spoil, index=i, bad=1, at=1) for i in range(2)]
    envs = SyncVectorEnv(fns) if workers is None else vecenv.SubprocVectorEnv(fns, workers)
    store = MemoryVideos()
    wrapped = RecordVideo(envs, tmp_path, env_ids=[0, 1], episode_trigger=every(1), writer=store)
    try:
        wrapped.reset(seed=0)  # step 0 of the episode: every frame is an image
        with pytest.raises(refusal, match=re.escape("RecordVideo: env 1's render() must return ")) as caught:
            wrapped.step(np.zeros(2, np.int64))
        assert isinstance(caught.value, VecEnvError) and words in str(caught.value)
        assert {name: len(frames) for name, frames in store.videos.items()} == {
            "rl-video-env0-episode-0.mp4": 1,  # env 0's frame of the refused step is not written either
            "rl-video-env1-episode-0.mp4": 1,
        }
    finally:
        wrapped.close()
    assert sorted(store.closed) == sorted(store.videos)
    assert sorted(os.path.basename(p) for p in wrapped.videos) == sorted(store.videos)


@pytest.mark.timeout(60)
def test_a_refused_first_frame_leaves_no_video_listed_and_the_mp4_of_a_refused_step_playable(tmp_path: Any) -> None:
    """The real writer: a video whose first frame is refused has no file and is not in `videos`;
    a video refused later holds every frame before, and is a playable mp4."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="needs the video extra: pip install -e '.[video]'")
    first = SyncVectorEnv([functools.partial(BadFrameEnv, flat_frame, index=i, bad=0, at=0) for i in range(2)])
    with pytest.raises(InvalidArgumentError, match=r"env 0's render\(\) must return an image array"):
        RecordVideo(first, tmp_path / "first", episode_trigger=every(1)).reset(seed=0)
    first.close()
    later = SyncVectorEnv([functools.partial(BadFrameEnv, taller_frame, index=i, bad=0, at=1) for i in range(2)])
    wrapped = RecordVideo(later, tmp_path / "later", episode_trigger=every(1))
    wrapped.reset(seed=0)
    with pytest.raises(InvalidArgumentError, match="must return frames of one shape within a video"):
        wrapped.step(np.zeros(2, np.int64))
    wrapped.close()
    assert os.listdir(tmp_path / "first") == []
    (video,) = wrapped.videos
    assert imageio_ffmpeg.count_frames_and_secs(video)[0] == 1


def _float_frames_recorded(
    tmp_path: Any, workers: int | None, writer: Any
) -> tuple[RecordVideo, list[warnings.WarningMessage]]:
    """Env 1 of two renders float frames (:func:`float_frame`) from its reset on; both envs are
    recorded for a step (no episode ends: they last 2 steps or more). Returns the closed wrapper
    and every warning raised meanwhile."""
    fns = [functools.partial(BadFrameEnv, float_frame, index=i, bad=1, at=0) for i in range(2)]
    envs = SyncVectorEnv(fns) if workers is None else vecenv.SubprocVectorEnv(fns, workers)
    wrapped = RecordVideo(envs, tmp_path, env_ids=[0, 1], episode_trigger=every(1), writer=writer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning, the encoder thread's too, is recorded
        try:
            wrapped.reset(seed=0)
            wrapped.step(np.zeros(2, np.int64))
        finally:
            wrapped.close()  # inside: the encoder's warnings come while it drains
    return wrapped, caught


FLOAT_FRAME_WARNING = (
    "RecordVideo: env 1's render() returns float64 frames, not the uint8 of Gymnasium's rgb_array frames; "
    "they are cast to uint8 as Gymnasium's RecordVideo casts them (values clipped to [0, 255], so frames "
    "scaled to [0, 1] are nearly black). Return uint8 frames to choose the conversion"
)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [None, 1], ids=["sync", "vecenv"])
def test_float_frames_are_cast_to_uint8_as_gymnasium_casts_them_with_one_warning(tmp_path: Any, workers: Any) -> None:
    """Frames that are not uint8 reach the writer cast as Gymnasium's RecordVideo (moviepy's
    ``astype("uint8")``) casts them, clipped to [0, 255], with one warning for the env; they
    reached it as they were, for imageio to rescale each by its own range, warning per frame."""
    store = MemoryVideos()
    _, caught = _float_frames_recorded(tmp_path, workers, store)
    assert [str(w.message) for w in caught] == [FLOAT_FRAME_WARNING]
    assert caught[0].filename == __file__, "the warning points at the call that recorded"
    frames = store.videos["rl-video-env1-episode-0.mp4"]
    assert len(frames) == 2 and all(f.dtype == np.uint8 for f in frames)
    for t, frame in enumerate(frames):
        expected = np.zeros((6, 8, 3), np.uint8)
        expected[0, 0] = (1, t, 0)  # FrameEnv's pixel: env, step, episode
        expected[-1, -1] = (255, 0, 255)
        assert np.array_equal(frame, expected), t


@pytest.mark.timeout(60)
def test_float_frames_make_an_mp4_with_one_warning_not_one_per_frame(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The real writer: imageio logged "Lossy conversion from float64 to uint8" for every frame."""
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="needs the video extra: pip install -e '.[video]'")
    caplog.set_level(logging.WARNING)
    wrapped, caught = _float_frames_recorded(tmp_path, None, None)
    assert [r.getMessage() for r in caplog.records] == [], "imageio had nothing to convert"
    assert [str(w.message) for w in caught] == [FLOAT_FRAME_WARNING]
    counts = {os.path.basename(p): imageio_ffmpeg.count_frames_and_secs(p)[0] for p in wrapped.videos}
    assert counts == {"rl-video-env0-episode-0.mp4": 2, "rl-video-env1-episode-0.mp4": 2}
