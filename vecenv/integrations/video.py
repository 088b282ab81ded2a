"""Video of chosen envs of a vector env: :class:`RecordVideo`, a vector wrapper.

It works with any ``gymnasium.vector.VectorEnv`` whose ``render_mode`` is ``"rgb_array"``: a vecenv
vector env (:class:`~vecenv.SubprocVectorEnv`, :class:`~vecenv.RayVectorEnv`), Gymnasium's
``SyncVectorEnv``, or any other. After each ``reset`` and ``step`` it renders only the chosen envs
that are being recorded at that moment, and only those:

* a vecenv vector env is asked for ``render(env_ids=...)``: the workers that host those envs
  render them and send one frame each; the other workers are not asked;
* a ``SyncVectorEnv`` renders those envs directly (``envs.envs[i].render()``);
* any other vector env renders every env, and the chosen frames are kept.

Each chosen env has its own episodes, numbered from 0 in the order they start: an episode starts
at a ``reset`` that resets the env (all envs, or those in ``options["reset_mask"]``) or at its
autoreset, and ends on the step where the env terminates or is truncated (or at a ``reset`` that
cuts it short, or at ``close``). ``episode_trigger(episode)`` decides, when an episode starts,
whether it is recorded. Where the episode's last frame comes from depends on the autoreset mode:
with ``NEXT_STEP`` and ``DISABLED`` the env is rendered after its last step, before it resets;
with ``SAME_STEP`` the env has already reset when ``step`` returns, so the video ends with the
frame before the last step.

Frames are written as they come (one ``ffmpeg`` process per video being recorded, memory bounded
whatever the episode's length) to ``{video_folder}/{name_prefix}-env{i}-episode-{episode}.mp4``.
Writing needs imageio with its ffmpeg plugin: ``pip install 'vecenv[video]'``; it is imported
when the wrapper is made, never by ``import vecenv``.

Why a wrapper in the parent rather than frames taken in the workers: it needs no change to the
env constructors and works with every vector env; the videos are written where the training
runs (with Ray, not on whichever node hosts the env); and what it adds per recorded step, one
render of each recorded env and one small round trip, is paid only while an episode is being
recorded. ``scripts/video_cost.py`` measures it against frames taken in the worker.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper

from vecenv.checks import check_count, check_env_ids
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, MissingDependencyError, describe

__all__ = ["RecordVideo", "VideoWriter", "every", "capped_cubic", "imageio_writer"]


class VideoWriter(Protocol):
    """Where one episode's frames go: ``append`` each frame, then ``close`` once."""

    def append(self, frame: np.ndarray) -> None: ...

    def close(self) -> None: ...


#: Makes the writer of one video: ``(path, fps) -> VideoWriter``.
WriterFactory = Callable[[str, float], VideoWriter]


def every(k: int) -> Callable[[int], bool]:
    """An ``episode_trigger`` that records episodes ``0, k, 2k, ...`` (CleanRL's "every K episodes")."""
    count = check_count(k, "k")
    return lambda episode: episode % count == 0


def capped_cubic(episode: int) -> bool:
    """The default ``episode_trigger`` (Gymnasium's schedule): episodes 0, 1, 8, 27, ... (the
    cubes) below 1000, then every 1000th."""
    if episode < 1000:
        return round(episode ** (1.0 / 3)) ** 3 == episode
    return episode % 1000 == 0


class _ImageioWriter:
    """An mp4 file written by imageio's ffmpeg plugin from a thread of its own.

    ``append`` queues the frame (up to :data:`QUEUED_FRAMES`, then it waits) and returns, so the
    encoder's pipe writes overlap the next steps instead of holding them up; ``close`` waits for
    the queue to drain and raises what writing raised.

    The thread holds the queue and imageio's writer, never this object, so a writer dropped
    without ``close()`` (its :class:`RecordVideo` dropped unclosed) is still collected, and its
    finalizer then does what ``close`` does: without it, the thread would wait for frames and
    keep its ffmpeg process, four pipes and the unfinished file for the rest of the process.
    """

    def __init__(self, path: str, fps: float) -> None:
        import imageio.v2 as imageio

        # macro_block_size=2: frames of odd size are padded to even (H.264 needs it), nothing more.
        writer = imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=2, ffmpeg_log_level="error")
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue(QUEUED_FRAMES)
        self._errors: list[BaseException] = []  # what writing raised, in the thread
        thread = threading.Thread(
            target=_drain,
            args=(self._queue, writer, self._errors),
            name=f"vecenv-video {os.path.basename(path)}",
            daemon=True,
        )
        thread.start()
        self._finish = weakref.finalize(self, _finish_writing, self._queue, thread, writer)

    def append(self, frame: np.ndarray) -> None:
        if self._errors:
            raise self._errors[0]
        self._queue.put(frame.copy())  # an env may render into the same array every time

    def close(self) -> None:
        self._finish()  # once: a closed writer's finalizer does nothing
        if self._errors:
            raise self._errors[0]


def _drain(frames: queue.Queue[np.ndarray | None], writer: Any, errors: list[BaseException]) -> None:
    """The writer thread: write the queued frames until ``None``; keep the first error (raised
    in the caller's thread by the next ``append`` or ``close``) and drop the frames after it."""
    while (frame := frames.get()) is not None:
        if not errors:
            try:
                writer.append_data(frame)
            except BaseException as exc:
                errors.append(exc)


def _finish_writing(frames: queue.Queue[np.ndarray | None], thread: threading.Thread, writer: Any) -> None:
    """End a writer: the queued frames are written, the thread ends, ffmpeg finishes the file."""
    if thread is threading.current_thread():
        # The cyclic GC collected the writer in its own thread, which cannot wait for itself:
        # another thread finishes it, once this one is back at its queue.
        threading.Thread(target=_finish_writing, args=(frames, thread, writer), daemon=True).start()
        return
    frames.put(None)
    thread.join()
    writer.close()


#: Frames an mp4 writer holds before ``append`` waits for the encoder.
QUEUED_FRAMES = 32


def imageio_writer(path: str, fps: float) -> VideoWriter:
    """The default writer: an H.264 mp4 at ``path`` (needs ``pip install 'vecenv[video]'``)."""
    return _ImageioWriter(path, fps)


def _check_imageio() -> None:
    try:
        import imageio.v2  # noqa: F401
        import imageio_ffmpeg  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError(
            f"vecenv.video.RecordVideo writes mp4 files with imageio and ffmpeg: pip install 'vecenv[video]' "
            f"(import failed: {exc})"
        ) from exc


def _renderer(env: VectorEnv) -> Callable[[list[int]], Sequence[Any]]:
    """How to render only some envs of ``env`` (see the module docstring)."""
    from vecenv.multiagent.vector_env import MultiAgentVectorEnv
    from vecenv.parent.vector_env import GroupVectorEnv

    base = env.unwrapped
    if isinstance(base, GroupVectorEnv):
        return lambda ids: base.render(env_ids=ids)
    if isinstance(base, MultiAgentVectorEnv):  # its render() has one frame per copy, not per row
        return lambda ids: base.rows.render(env_ids=ids)
    if isinstance(base, SyncVectorEnv):
        return lambda ids: [base.envs[i].render() for i in ids]

    def every_env(ids: list[int]) -> Sequence[Any]:
        frames: Any = base.render()
        return [frames[i] for i in ids]

    return every_env


def _rows_per_episode(env: VectorEnv) -> int:
    """How many consecutive envs of ``env`` share one episode: a MultiAgentVectorEnv's rows are
    the agents of a copy, whose frames (and so whose episodes) are the copy's, and whose
    ``reset_mask`` is one bool per copy; 1 for any other vector env."""
    from vecenv.multiagent.vector_env import MultiAgentVectorEnv

    base = env.unwrapped
    return base.num_agents if isinstance(base, MultiAgentVectorEnv) else 1


@dataclasses.dataclass
class _Video:
    """A video being recorded: its file, its writer, and the shape of its first frame (``None``
    until one is taken), which every later frame must have (a movie's frames are one size)."""

    path: str
    writer: VideoWriter
    shape: tuple[int, ...] | None = None


#: Channels an image frame may have, last axis of a (height, width, channels) array: as imageio's.
_CHANNELS = (1, 2, 3, 4)
#: dtype kinds a frame may have: bool, signed and unsigned integers, floats (all but uint8 are cast).
_PIXEL_KINDS = "biuf"


def _as_uint8(frame: np.ndarray) -> np.ndarray:
    """``frame`` with uint8 pixels, as Gymnasium's ``RecordVideo`` writes it: moviepy casts every
    frame with ``astype("uint8")``. Values are clipped to [0, 255] first (and NaN is 0), so that
    the cast is defined for every value; within that range the pixels are Gymnasium's.

    imageio would convert it too, but by each frame's own minimum and maximum (the brightness of
    a video then changes from frame to frame) and with a warning per frame."""
    if frame.dtype == np.uint8:
        return frame
    if frame.dtype.kind == "b":
        return frame.astype(np.uint8)
    if frame.dtype.kind == "f":
        frame = np.nan_to_num(frame, nan=0.0)
    return np.clip(frame, 0, 255).astype(np.uint8)


def _frame_problem(frame: Any, video: _Video) -> str | None:
    """What makes ``frame`` unfit for ``video`` (a sentence ending in what was received), or ``None``."""
    if not isinstance(frame, np.ndarray):
        return f"must return an image array, got {describe(frame)}"
    if frame.dtype.kind not in _PIXEL_KINDS:
        return f"must return an image array of numbers (uint8), got an array of dtype {frame.dtype}"
    shape = frame.shape
    image = len(shape) in (2, 3) and min(shape[:2]) > 0 and (len(shape) == 2 or shape[2] in _CHANNELS)
    if not image:
        return (
            "must return an image array, (height, width) or (height, width, channels) with 1 to 4 channels, "
            f"got an array of shape {shape}"
        )
    if video.shape is not None and shape != video.shape:
        return (
            f"must return frames of one shape within a video, {video.shape} as the first frame of "
            f"{os.path.basename(video.path)}, got a frame of shape {shape}"
        )
    return None


class RecordVideo(VectorWrapper):
    """Records videos of the episodes of chosen envs of a vector env; see the module docstring.

    Args:
        env: the vector env, with ``render_mode="rgb_array"``.
        video_folder: where the videos go (created if missing).
        env_ids: the envs to record (distinct indices in ``[0, num_envs)``); default env 0.
        episode_trigger: ``episode -> bool``, asked when each of a chosen env's episodes starts
            (episodes of each env are numbered from 0); default :func:`capped_cubic`.
            :func:`every` gives "every K episodes".
        fps: frames per second of the videos; default ``metadata["render_fps"]``, else 30.
        name_prefix: the start of each file's name.
        writer: ``(path, fps) -> VideoWriter`` for each video; default :func:`imageio_writer`
            (mp4). Give your own to send frames elsewhere (a logger, a test).

    Attributes:
        videos: the path of every video finished so far, in the order they were finished (a video
            whose first frame was refused, and so has no frame, is not one).
    """

    def __init__(
        self,
        env: VectorEnv,
        video_folder: str | os.PathLike[str],
        env_ids: Sequence[int] | np.ndarray = (0,),
        episode_trigger: Callable[[int], bool] | None = None,
        fps: float | None = None,
        name_prefix: str = "rl-video",
        writer: WriterFactory | None = None,
    ) -> None:
        # The wrapper holds ``env`` (super().__init__) only once every argument is accepted:
        # Gymnasium 1.1's VectorEnv.__del__ closes a wrapper's env, so a refused RecordVideo that
        # held it would close the caller's env when it is collected.
        if not isinstance(env, VectorEnv):
            raise ArgumentTypeError(f"`env` must be a gymnasium.vector.VectorEnv, got {describe(env)}")
        if env.render_mode != "rgb_array":
            raise InvalidArgumentError(
                f"RecordVideo needs a vector env with render_mode='rgb_array' (each frame an image), "
                f"got render_mode={env.render_mode!r}"
            )
        if episode_trigger is not None and not callable(episode_trigger):
            raise ArgumentTypeError(
                f"`episode_trigger` must be a callable (episode -> bool) or None, got {describe(episode_trigger)}"
            )
        if writer is None:
            _check_imageio()
        elif not callable(writer):
            raise ArgumentTypeError(
                f"`writer` must be a callable (path, fps) -> VideoWriter or None, got {describe(writer)}"
            )
        if not isinstance(name_prefix, str) or not name_prefix or os.sep in name_prefix or "\0" in name_prefix:
            refusal = InvalidArgumentError if isinstance(name_prefix, str) else ArgumentTypeError
            raise refusal(
                f"`name_prefix` must be a non-empty file name without {os.sep!r} (the start of each video's name), "
                f"got {describe(name_prefix)}"
            )
        number = isinstance(fps, (int, float, np.integer, np.floating)) and not isinstance(fps, bool)
        if fps is not None and (not number or not 0 < fps < math.inf):
            refusal = InvalidArgumentError if number else ArgumentTypeError
            raise refusal(f"`fps` must be None or a positive number of frames per second, got {describe(fps)}")
        self.env_ids = check_env_ids(env_ids, env.num_envs).tolist()
        self.episode_trigger = capped_cubic if episode_trigger is None else episode_trigger
        self.video_folder = os.path.abspath(os.fspath(video_folder))
        os.makedirs(self.video_folder, exist_ok=True)
        self.fps = float(fps if fps is not None else env.metadata.get("render_fps", 30))
        self.name_prefix = name_prefix
        self.videos: list[str] = []
        self._make_writer = imageio_writer if writer is None else writer
        self._render = _renderer(env)
        self._rows = _rows_per_episode(env)
        self._mode = AutoresetMode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
        self._episode = {i: -1 for i in self.env_ids}  # the episode each chosen env is in
        self._open: dict[int, _Video] = {}  # env -> the video being recorded
        self._ended = {i: False for i in self.env_ids}  # ended at the last step (NEXT_STEP: the next resets it)
        self._cast: set[int] = set()  # envs whose frames were not uint8: warned once, at the first
        super().__init__(env)

    @property
    def recording(self) -> list[int]:
        """The chosen envs whose current episode is being recorded."""
        return sorted(self._open)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset as the env does; every chosen env that it resets starts a new episode."""
        mask = None if options is None else options.get("reset_mask")  # before SyncVectorEnv pops it
        obs, info = self.env.reset(seed=seed, options=options)
        started = [i for i in self.env_ids if mask is None or bool(mask[i // self._rows])]
        for i in started:
            self._start(i)
        self._capture(started)
        return obs, info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step as the env does; record each chosen env's frame while its episode is recorded."""
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        done = np.logical_or(terminations, truncations)
        if self._rows > 1:  # a copy's episode ends when every one of its rows has ended
            done = np.repeat(done.reshape(-1, self._rows).all(axis=1), self._rows)
        ended = [i for i in self.env_ids if done[i]]
        for i in self.env_ids:
            if self._mode is AutoresetMode.NEXT_STEP and self._ended[i]:
                self._start(i)  # this step was its reset: the frame is a new episode's first
            elif self._mode is AutoresetMode.SAME_STEP and i in ended:
                self._start(i)  # already reset: the old episode's last frame is gone
        self._capture(self.env_ids)
        if self._mode is not AutoresetMode.SAME_STEP:
            for i in ended:  # the frame just taken was the episode's last
                self._finish(i)
                self._ended[i] = True
        return obs, rewards, terminations, truncations, infos

    def close(self, **kwargs: Any) -> None:
        """Finish the videos being recorded, then close the env. A video whose writer fails to
        finish does not stop the others (each has its ffmpeg process): the first error is
        raised once every video is finished and the env is closed."""
        error: Exception | None = None
        try:
            for i in list(self._open):
                try:
                    self._finish(i)
                except Exception as exc:  # the other videos are still finished (their ffmpeg ends)
                    error = error or exc
        finally:
            self.env.close(**kwargs)
        if error is not None:
            raise error

    def __enter__(self) -> RecordVideo:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- episodes and frames -------------------------------------------------------------------

    def _start(self, i: int) -> None:
        self._finish(i)
        self._episode[i] += 1
        self._ended[i] = False
        episode = self._episode[i]
        if self.episode_trigger(episode):
            path = os.path.join(self.video_folder, f"{self.name_prefix}-env{i}-episode-{episode}.mp4")
            self._open[i] = _Video(path, self._make_writer(path, self.fps))

    def _capture(self, candidates: Sequence[int]) -> None:
        """Render the envs among ``candidates`` being recorded, in one call, and write their frames.

        Every frame is checked before any is written: one that is not an image, or not of its
        video's size, raises here, naming the env, rather than failing in the encoder's thread
        with the encoder's words (and the env's frames of the same step are not written either)."""
        ids = [i for i in candidates if i in self._open]
        if not ids:
            return
        frames = list(zip(ids, self._render(ids)))
        for i, frame in frames:
            problem = _frame_problem(frame, self._open[i])
            if problem is not None:
                refusal = ArgumentTypeError if not isinstance(frame, np.ndarray) else InvalidArgumentError
                raise refusal(f"RecordVideo: env {i}'s render() {problem}")
        for i, frame in frames:
            if frame.dtype != np.uint8 and i not in self._cast:
                self._cast.add(i)
                warnings.warn(
                    f"RecordVideo: env {i}'s render() returns {frame.dtype} frames, not the uint8 of "
                    f"Gymnasium's rgb_array frames; they are cast to uint8 as Gymnasium's RecordVideo "
                    f"casts them (values clipped to [0, 255], so frames scaled to [0, 1] are nearly black). "
                    f"Return uint8 frames to choose the conversion",
                    stacklevel=3,
                )
            video = self._open[i]
            video.shape = frame.shape
            video.writer.append(_as_uint8(frame))

    def _finish(self, i: int) -> None:
        video = self._open.pop(i, None)
        if video is not None:
            video.writer.close()
            if video.shape is not None:  # a video whose first frame was refused has no file
                self.videos.append(video.path)
