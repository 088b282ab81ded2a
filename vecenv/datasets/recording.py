"""The collection loop of ``collect``: chunks of vector steps become recorded transitions.

A source (``sources.py``) gives T vector steps at a time, one candidate transition per env and
step. The loop drops the NEXT_STEP autoreset "reset steps" (where an env resets and ignores the
action), numbers episodes in the order they start, and hands the transitions to the sink as
rows in vector-step order (our format with ``steps=N``: a whole chunk at once, in array
operations) or, through an ``EpisodeStager``, one whole episode at a time in completion order
(see ``sinks``). The marks of a chunk (which rows are real, which end an episode, the episode
of every row, the episodes' sums) are pure functions of its arrays and of what the previous
chunk left, so the records do not depend on how the steps were cut into chunks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.datasets.sinks import DatasetSink, EpisodeSummary

if TYPE_CHECKING:
    from tqdm import tqdm

    from vecenv.datasets.minari import MinariSink
    from vecenv.datasets.sources import Chunk, RolloutSource, StepSource
    from vecenv.datasets.staging import EpisodeStager


@dataclass(frozen=True)
class CollectionSpec:
    """What the collection loop runs: where its steps come from, and how much (exactly one of
    ``steps`` and ``episodes`` is set)."""

    source: StepSource | RolloutSource
    num_envs: int
    mode: AutoresetMode
    seed: int
    steps: int | None
    episodes: int | None
    first_seeds: list[int | None]  # each env's seed of reset(seed=seed), under its seed policy


@dataclass(frozen=True)
class CollectionRun:
    """A collection and where its transitions go, fixed before the loop starts. ``stager`` is
    None when rows go to the sink as they come (our format with ``steps=N``), else whole
    episodes do."""

    spec: CollectionSpec
    sink: DatasetSink | MinariSink
    stager: EpisodeStager | None
    bar: tqdm


@dataclass(frozen=True)
class Marks:
    """What a chunk's rows are, each ``(T, num_envs)``."""

    valid: np.ndarray  # a real transition (not a NEXT_STEP reset step)
    done: np.ndarray  # a real transition that ends its episode
    episode_ids: np.ndarray  # the episode the row belongs to


def mark(
    ended: np.ndarray, mode: AutoresetMode, resetting: np.ndarray, current_ids: np.ndarray, next_id: int
) -> tuple[Marks, np.ndarray, np.ndarray, int]:
    """The marks of a chunk whose rows ended (terminated or truncated) as ``ended``; also the
    envs whose next step only resets them (NEXT_STEP), each env's episode id and the next
    unused id, after the chunk.

    Under NEXT_STEP a row is a reset step when its env's previous row ended, and the reset
    step starts the new episode; otherwise an episode starts right after the row that ended
    the previous one. New episodes are numbered in the order they start (step, then env), and
    a row belongs to the episode current when it is taken.
    """
    if mode is AutoresetMode.NEXT_STEP:
        valid = np.empty_like(ended)
        valid[0] = ~resetting
        valid[1:] = ~ended[:-1]
        done = ended & valid
        starts = ~valid
        resetting = done[-1].copy()
    else:
        valid = np.ones_like(ended)
        done = ended.copy()
        starts = done
    count = int(starts.sum())
    numbered = np.full((ended.shape[0] + 1, ended.shape[1]), -1, dtype=np.int64)
    numbered[0] = current_ids
    numbered[1:][starts] = np.arange(next_id, next_id + count)  # row-major: step, then env
    running = np.maximum.accumulate(numbered, axis=0)  # every new id exceeds every older one
    return Marks(valid, done, running[:-1]), resetting, running[-1], next_id + count


def episode_sums(values: np.ndarray, marks: Marks, carried: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the sum of ``values`` over its episode's valid rows up to and including it,
    where the row ends its episode (elsewhere: meaningless); and each env's open sum after
    the chunk. ``carried``: each env's open sum before it."""
    steps = values.shape[0]
    summed = np.zeros((steps + 1, *values.shape[1:]), dtype=np.float64)
    np.cumsum(np.where(marks.valid, values, 0), axis=0, out=summed[1:])
    # The row (in ``summed``) after each env's last end at or before t: where its episode began.
    after_end = np.maximum.accumulate(np.where(marks.done, np.arange(1, steps + 1)[:, None], 0), axis=0)
    began = np.vstack([np.zeros((1, values.shape[1]), np.int64), after_end[:-1]])
    sums = summed[1:] - np.take_along_axis(summed, began, axis=0) + np.where(began == 0, carried, 0.0)
    last = after_end[-1]
    open_sums = summed[-1] - np.take_along_axis(summed, last[None], axis=0)[0] + np.where(last == 0, carried, 0.0)
    return sums, open_sums


def record_transitions(run: CollectionRun) -> None:
    """Take chunks from the source after a seeded reset until the requested count is in the sink."""
    collector = _Collector(run)
    finished = False
    try:
        collector.collect()
        finished = True
    finally:
        run.spec.source.close(finished)


class _Collector:
    """The loop's state: each env's episode (id, return, length) across chunks."""

    def __init__(self, run: CollectionRun) -> None:
        self.spec, self.sink, self.stager, self.bar = run.spec, run.sink, run.stager, run.bar
        num_envs = self.spec.num_envs
        self.env_ids = np.arange(num_envs, dtype=np.int64)
        self.episode_ids = np.arange(num_envs, dtype=np.int64)
        self.next_episode_id = num_envs
        self.episode_return = np.zeros(num_envs, dtype=np.float64)
        self.episode_length = np.zeros(num_envs, dtype=np.int64)
        self.resetting = np.zeros(num_envs, dtype=np.bool_)  # NEXT_STEP: the next step only resets the env
        self.taken = 0  # steps=N: transitions taken so far (written, or open in the stager)
        self.shown = ""  # the bar's postfix

    def collect(self) -> None:
        spec = self.spec
        spec.source.start(spec.seed)
        try:
            while True:
                wanted = None if spec.steps is None else spec.steps - self.taken
                chunk = spec.source.next(wanted)
                ended = chunk.terminations | chunk.truncations
                marks, self.resetting, ids_after, self.next_episode_id = mark(
                    ended, spec.mode, self.resetting, self.episode_ids, self.next_episode_id
                )
                if self.stager is None:
                    finished = self.write_rows(chunk, marks)
                else:
                    finished = self.write_episodes(chunk, marks, self.stager)
                self.show_progress()
                if finished:
                    return
                self.episode_ids = ids_after
                spec.source.recorded(marks.done[-1])
        finally:  # interrupted part-way through a chunk: the bar's last line says what was kept
            self.show_progress()

    def seed_of(self, episode_id: int) -> int | None:
        # The first episode of env i starts from its seed of reset(seed=seed) (seed + i unless the
        # vector env's seed_policy is "spawn"); later ones continue its RNG.
        return self.spec.first_seeds[episode_id] if episode_id < self.spec.num_envs else None

    def columns(self, chunk: Chunk, marks: Marks, at: Any) -> list[np.ndarray]:
        """Every dataset field at index ``at`` of the chunk's ``(T, num_envs)`` grid."""
        return [
            *(leaf[at] for leaf in chunk.observations),
            *(leaf[at] for leaf in chunk.next_observations),
            *(leaf[at] for leaf in chunk.actions),
            chunk.rewards[at],
            chunk.terminations[at],
            chunk.truncations[at],
            np.broadcast_to(self.env_ids, marks.valid.shape)[at],
            marks.episode_ids[at],
        ]

    def write_rows(self, chunk: Chunk, marks: Marks) -> bool:
        """Our format with ``steps=N``: the chunk's real rows, in step then env order, up to the
        count, go to the sink at once."""
        sink = self.sink
        assert isinstance(sink, DatasetSink) and self.spec.steps is not None  # Minari stages every episode
        taken_before = np.cumsum(marks.valid.ravel()).reshape(marks.valid.shape)
        recorded = marks.valid & (taken_before <= self.spec.steps - self.taken)
        steps_at, envs_at = np.nonzero(recorded)
        returns, self.episode_return = episode_sums(chunk.rewards, marks, self.episode_return)
        lengths, open_lengths = episode_sums(np.ones_like(chunk.rewards), marks, self.episode_length)
        self.episode_length = open_lengths.astype(np.int64)
        ended = marks.done[steps_at, envs_at]
        sink.rows(
            self.columns(chunk, marks, (steps_at, envs_at)),
            returns[steps_at, envs_at][ended],
            lengths[steps_at, envs_at][ended].astype(np.int64),
        )
        self.taken += len(steps_at)
        self.bar.update(len(steps_at))
        return sink.transitions == self.spec.steps

    def write_episodes(self, chunk: Chunk, marks: Marks, stager: EpisodeStager) -> bool:
        """Whole episodes: the episodes the chunk ends go to the sink in the order they end
        (step, then env index), each as its staged rows plus its rows in this chunk; what is
        left of each env's rows is staged. Per env and per episode, never per step.

        Which rows count is decided first, as one step at a time would: with ``steps=N`` the
        real rows up to the N-th (the last step's lowest env indices first); with
        ``episodes=N`` the rows up to the step where the N-th episode ends, the episodes ending
        there after the N-th (higher env indices) left open.
        """
        spec, sink = self.spec, self.sink
        recorded = marks.valid.copy()
        if spec.steps is not None:
            taken_before = np.cumsum(recorded.ravel()).reshape(recorded.shape)
            recorded &= taken_before <= spec.steps - self.taken
        end_steps, end_envs = np.nonzero(recorded & marks.done)  # in the order episodes end
        last_step = chunk.num_steps - 1
        finished = False
        if spec.episodes is not None and len(end_steps) >= spec.episodes - sink.episodes:
            room = spec.episodes - sink.episodes
            last_step = int(end_steps[room - 1])
            end_steps, end_envs = end_steps[:room], end_envs[:room]
            recorded[last_step + 1 :] = False
            finished = True
        if spec.steps is not None:
            count = int(recorded.sum())
            self.taken += count
            self.bar.update(count)
            finished = self.taken == spec.steps
        begin = np.zeros(spec.num_envs, dtype=np.int64)  # each env's first step not yet written
        for step, env in zip(end_steps.tolist(), end_envs.tolist()):
            steps = begin[env] + np.flatnonzero(recorded[begin[env] : step + 1, env])
            begin[env] = step + 1
            self.hand_over_ending(chunk, marks, stager, env, steps, int(marks.episode_ids[step, env]))
            if spec.episodes is not None:
                self.bar.update(1)
        for env in range(spec.num_envs):  # the rest of each env's rows wait for their episode's end
            steps = begin[env] + np.flatnonzero(recorded[begin[env] : last_step + 1, env])
            if len(steps):
                stager.extend(env, self.columns(chunk, marks, (steps, env)))
                self.episode_return[env] = _running_sum(self.episode_return[env], chunk.rewards[steps, env])
                self.episode_length[env] += len(steps)
        self.episode_ids = marks.episode_ids[last_step]
        if finished:
            for open_env in [i for i in range(spec.num_envs) if stager.length(i)]:  # by env index
                self.hand_over(stager, open_env, finished=False)
        return finished

    def hand_over_ending(
        self, chunk: Chunk, marks: Marks, stager: EpisodeStager, env: int, steps: np.ndarray, episode_id: int
    ) -> None:
        """Give the sink ``env``'s episode that ends at the last of ``steps``: its staged rows
        then the chunk's rows at ``steps``."""
        length = int(self.episode_length[env]) + len(steps)
        episode_return = _running_sum(self.episode_return[env], chunk.rewards[steps, env])
        summary = EpisodeSummary(episode_return, length, episode_id, self.seed_of(episode_id))

        def pieces() -> Iterator[list[np.ndarray]]:
            yield from stager.pieces(env)
            yield self.columns(chunk, marks, (steps, env))

        self.sink.episode(pieces(), summary, truncate_last=False)
        stager.discard(env)
        self.episode_return[env] = 0.0
        self.episode_length[env] = 0

    def hand_over(self, stager: EpisodeStager, env: int, finished: bool) -> None:
        """Give ``env``'s staged episode to the sink: a finished one to ``episode``, one still
        open when the requested count is reached to ``open_episode``."""
        episode_id = int(self.episode_ids[env])
        episode_return, length = float(self.episode_return[env]), int(self.episode_length[env])
        summary = EpisodeSummary(episode_return, length, episode_id, self.seed_of(episode_id))
        if finished:
            self.sink.episode(stager.pieces(env), summary, truncate_last=False)
        else:
            self.sink.open_episode(stager.pieces(env), summary)
        stager.discard(env)

    def show_progress(self) -> None:
        """The bar's postfix: what the sink holds, besides what the bar counts."""
        sink = self.sink
        text = f"episodes={sink.episodes}" if self.spec.steps is not None else f"transitions={sink.transitions}"
        if text != self.shown:
            self.shown = text
            self.bar.set_postfix_str(text, refresh=False)


def _running_sum(start: float, values: np.ndarray) -> float:
    """``start`` plus ``values`` one at a time, in order (so a return is the same float however
    the episode's steps were cut into chunks)."""
    if not len(values):
        return float(start)
    return float(np.cumsum(np.concatenate(([start], values)))[-1])
