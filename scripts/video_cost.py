"""What recording a video of one env costs per step: a vector wrapper in the parent against frames
taken in the worker.

The two designs for video of chosen envs of a vector env:

- ``wrapper``: :class:`vecenv.video.RecordVideo` wraps the vector env; after each step it asks
  the worker that hosts the recorded env for that one frame (``render(env_ids=[0])``: one more
  round trip and one frame through the pipe), and writes it in the parent.
- ``worker``: the env constructor of env 0 is wrapped in an env wrapper that renders after each of
  its own steps, inside the worker, and writes the frame there (no round trip, no frame on the
  pipe; the file is written where the env runs).

Each is measured without writing (``--writer none``: the frame is dropped; what the design itself
costs) and with mp4 encoding (``--writer mp4``, imageio's ffmpeg, needs ``pip install
'vecenv[video]'``), against the same vector env stepping without any video. Every episode of env 0
is recorded, the worst case; configurations are interleaved, ``--rounds`` times, and the median
per-step time of each is reported with its ratio to the plain run. Last, the median time of
``render(env_ids=[0])`` (one env's frame, what the wrapper asks for) against ``render()`` (every
env's frame).

    python scripts/video_cost.py --num-envs 8 --num-workers 2 --steps 300 --rounds 5
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # also runs from a checkout
import vecenv  # noqa: E402
from vecenv.argtypes import non_negative_int, positive_int
from vecenv.bench.stopping import run_main  # noqa: E402
from vecenv.video import RecordVideo, imageio_writer  # noqa: E402


class _Drop:
    """A writer that drops every frame (what the design costs, without encoding)."""

    def append(self, frame: np.ndarray) -> None:
        pass

    def close(self) -> None:
        pass


def _writer(kind: str) -> Callable[[str, float], Any]:
    return (lambda path, fps: _Drop()) if kind == "none" else imageio_writer


class WorkerSideCapture(gym.Wrapper):
    """The other design: frames taken inside the worker, after each step and reset of this env."""

    def __init__(self, env: gym.Env, folder: str, writer_kind: str) -> None:
        super().__init__(env)
        self.folder, self.writer_kind, self.episode, self.writer = folder, writer_kind, -1, None

    def _new_episode(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.episode += 1
        path = f"{self.folder}/worker-episode-{self.episode}.mp4"
        self.writer = _writer(self.writer_kind)(path, 50.0)

    def reset(self, **kwargs: Any) -> Any:
        result = self.env.reset(**kwargs)
        self._new_episode()
        self.writer.append(self.env.render())
        return result

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        self.writer.append(self.env.render())
        return result

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        super().close()


def _make(render: bool) -> gym.Env:
    return gym.make("CartPole-v1", render_mode="rgb_array" if render else None)


def _build(design: str, args: argparse.Namespace, folder: str) -> gym.vector.VectorEnv:
    n, w = args.num_envs, args.num_workers
    pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
    fns: list[Callable[[], gym.Env]] = [functools.partial(_make, design == "wrapper")] * n
    if design == "worker":

        def first() -> gym.Env:
            return WorkerSideCapture(_make(True), folder, args.writer)

        fns[0] = first
    envs = vecenv.SubprocVectorEnv(fns, w, autoreset_mode="SameStep")
    if design == "wrapper":
        envs = RecordVideo(envs, folder, env_ids=[0], episode_trigger=lambda e: True, writer=_writer(args.writer))
    return envs


def _time_steps(envs: gym.vector.VectorEnv, steps: int, rng: np.random.Generator) -> float:
    actions = rng.integers(0, 2, size=(steps, envs.num_envs))
    start = time.perf_counter()
    for a in actions:
        envs.step(a)
    return (time.perf_counter() - start) / steps


def _time_renders(envs: gym.vector.VectorEnv, rounds: int) -> dict[str, float]:
    """Median seconds of ``render(env_ids=[0])`` (the wrapper's call: one env's frame) and of
    ``render()`` (every env's frame) on the vecenv vector env ``envs``."""
    base: Any = envs.unwrapped
    calls = {"render(env_ids=[0])": lambda: base.render(env_ids=[0]), "render()": base.render}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=positive_int, default=8, help="envs (default: %(default)s)")
    p.add_argument("--num-workers", type=non_negative_int, default=2, help="worker processes (default: %(default)s)")
    p.add_argument("--steps", type=positive_int, default=300, help="steps per measurement (default: %(default)s)")
    p.add_argument(
        "--rounds", type=positive_int, default=5, help="interleaved measurements of each design (default: %(default)s)"
    )
    p.add_argument(
        "--writer", choices=("none", "mp4"), default="none", help="none: frames only; mp4: encode them (default: none)"
    )
    args = p.parse_args(argv)
    designs = ("plain", "wrapper", "worker")
    times: dict[str, list[float]] = {d: [] for d in designs}
    with tempfile.TemporaryDirectory() as folder:
        envs = {d: _build(d, args, f"{folder}/{d}") for d in designs}
        try:
            rng = np.random.default_rng(0)
            for e in envs.values():
                e.reset(seed=0)
                _time_steps(e, 20, rng)  # warm up
            for _ in range(args.rounds):
                for d in designs:
                    times[d].append(_time_steps(envs[d], args.steps, rng))
            renders = _time_renders(envs["wrapper"], 5 * args.rounds)
        finally:
            for e in envs.values():
                e.close()
    base = statistics.median(times["plain"])
    print(f"CartPole-v1, {args.num_envs} envs, {args.num_workers} workers, env 0 recorded, writer={args.writer}")
    print(f"{'design':<10}{'us/step':>10}{'x plain':>10}{'added us/step':>16}")
    for d in designs:
        t = statistics.median(times[d])
        print(f"{d:<10}{t * 1e6:>10.0f}{t / base:>10.2f}{(t - base) * 1e6:>16.0f}")
    added = {d: statistics.median(times[d]) - base for d in ("wrapper", "worker")}
    if added["worker"] > 0:
        print(f"added cost, wrapper / worker: {added['wrapper'] / added['worker']:.2f}")
    print(", ".join(f"{name}: {t * 1e3:.1f} ms" for name, t in renders.items()))


if __name__ == "__main__":
    raise SystemExit(run_main("video_cost.py", main))
