"""Tests of vecenv.datasets.recording, the collection loop, on in-process envs and a fake sink:
which episodes it hands over, in which order, and what it says about each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from tests.helpers.envs import LongEpisodeEnv, constant_policy
from vecenv.datasets.action_checks import ActionChecker
from vecenv.datasets.format import dataset_fields, space_leaves
from vecenv.datasets.recording import CollectionRun, CollectionSpec, Marks, episode_sums, mark, record_transitions
from vecenv.datasets.sinks import EpisodeSummary
from vecenv.datasets.sources import StepSource
from vecenv.datasets.staging import EpisodeStager
from vecenv.progress import progress_bar

pytestmark = pytest.mark.timeout(60)


class HandOverSink:
    """Keeps what the loop hands over: (finished or open, summary, the rows' observations)."""

    def __init__(self) -> None:
        self.handed: list[tuple[str, EpisodeSummary, list[int]]] = []
        self.transitions = 0
        self.episodes = 0

    def episode(self, pieces: Iterator[list[np.ndarray]], summary: EpisodeSummary, truncate_last: bool) -> None:
        assert not truncate_last
        self.handed.append(("finished", summary, observations(pieces)))
        self.episodes += 1
        self.transitions += summary.length

    def open_episode(self, pieces: Iterator[list[np.ndarray]], summary: EpisodeSummary) -> None:
        self.handed.append(("open", summary, observations(pieces)))


def observations(pieces: Iterator[list[np.ndarray]]) -> list[int]:
    """The ``observations`` column (LongEpisodeEnv's step counter) of every piece, in order."""
    return [int(t) for piece in pieces for t in piece[0][:, 0]]


def run_staged(tmp_path: Path, lengths: list[int], seed: int = 5, **count: int) -> HandOverSink:
    """The loop over LongEpisodeEnvs of these episode lengths, staging whole episodes."""
    envs = SyncVectorEnv([lambda n=n: LongEpisodeEnv(n) for n in lengths], autoreset_mode=AutoresetMode.SAME_STEP)
    fields = dataset_fields(envs.single_observation_space, envs.single_action_space)
    checker = ActionChecker(envs.single_action_space, envs.num_envs, "constant")
    mode = AutoresetMode.SAME_STEP
    source = StepSource(
        envs, constant_policy, checker, mode, space_leaves(envs.single_observation_space, "observations")
    )
    first_seeds = [seed + i for i in range(envs.num_envs)]
    spec = CollectionSpec(source, envs.num_envs, mode, seed, count.get("steps"), count.get("episodes"), first_seeds)
    sink = HandOverSink()
    stager = EpisodeStager(fields, envs.num_envs, tmp_path / "spill")
    try:
        record_transitions(CollectionRun(spec, sink, stager, progress_bar(disable=True)))
    finally:
        stager.close()
        envs.close()
    return sink


def test_steps_hand_over_finished_episodes_then_the_open_ones_by_env(tmp_path: Path) -> None:
    """20 steps of 3 envs: 6 full vector steps, then rows for envs 0 and 1 only. Env 2 stepped
    a 7th time past the budget: its open episode is the 6 rows recorded, return included."""
    sink = run_staged(tmp_path, [4, 100, 100], steps=20)
    assert sink.handed == [
        ("finished", EpisodeSummary(8.0, 4, 0, 5), [0, 1, 2, 3]),
        ("open", EpisodeSummary(6.0, 3, 3, None), [0, 1, 2]),
        ("open", EpisodeSummary(14.0, 7, 1, 6), list(range(7))),
        ("open", EpisodeSummary(12.0, 6, 2, 7), list(range(6))),
    ]
    assert sum(summary.length for _, summary, _ in sink.handed) == 20


def test_episodes_hand_over_in_completion_order_then_the_open_ones(tmp_path: Path) -> None:
    sink = run_staged(tmp_path, [3, 5], episodes=2)
    assert sink.handed == [
        ("finished", EpisodeSummary(6.0, 3, 0, 5), [0, 1, 2]),
        ("finished", EpisodeSummary(10.0, 5, 1, 6), list(range(5))),
        ("open", EpisodeSummary(4.0, 2, 2, None), [0, 1]),
    ]


class InterruptedSink(HandOverSink):
    """Ctrl+C while it takes its ``at``-th finished episode (kept: the ones before)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def episode(self, pieces: Iterator[list[np.ndarray]], summary: EpisodeSummary, truncate_last: bool) -> None:
        if self.episodes + 1 == self.at:
            raise KeyboardInterrupt
        super().episode(pieces, summary, truncate_last)


class PostfixBar:
    """A progress bar that keeps its count and postfix."""

    def __init__(self) -> None:
        self.n, self.postfix = 0, ""

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text


def test_an_interrupt_while_a_chunks_episodes_are_handed_over_leaves_the_bar_saying_what_was_kept(
    tmp_path: Path,
) -> None:
    """Three episodes end at the same step; Ctrl+C comes as the sink takes the third. The bar's
    postfix is what the sink kept (two episodes, 6 transitions), not what it showed before."""
    envs = SyncVectorEnv([lambda: LongEpisodeEnv(3)] * 3, autoreset_mode=AutoresetMode.SAME_STEP)
    mode = AutoresetMode.SAME_STEP
    checker = ActionChecker(envs.single_action_space, 3, "constant")
    leaves = space_leaves(envs.single_observation_space, "observations")
    source = StepSource(envs, constant_policy, checker, mode, leaves)
    spec = CollectionSpec(source, 3, mode, 0, None, 10, [0, 1, 2])
    sink, bar = InterruptedSink(at=3), PostfixBar()
    stager = EpisodeStager(dataset_fields(envs.single_observation_space, envs.single_action_space), 3, tmp_path / "s")
    try:
        with pytest.raises(KeyboardInterrupt):
            record_transitions(CollectionRun(spec, sink, stager, bar))
    finally:
        stager.close()
        envs.close()
    assert (sink.episodes, sink.transitions) == (2, 6)
    assert bar.n == 2 and bar.postfix == "transitions=6", (bar.n, bar.postfix)


# -- a chunk's marks: the same whether the steps come one at a time or T at a time -----------


def _ended(steps: int, envs: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(size=(steps, envs)) < 0.2


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_marks_and_sums_of_a_chunk_equal_those_of_its_steps_one_by_one(mode: AutoresetMode) -> None:
    ended = _ended(40, 5, 1)
    if mode is AutoresetMode.NEXT_STEP:  # a reset step never ends: it follows an end
        for t in range(1, 40):
            ended[t] &= ~ended[t - 1]
    rewards = np.random.default_rng(2).normal(size=(40, 5))

    def run(cuts: list[int]) -> tuple[list[Marks], list[np.ndarray]]:
        resetting, ids, next_id, open_sum = np.zeros(5, bool), np.arange(5), 5, np.zeros(5)
        marks, sums, start = [], [], 0
        for stop in cuts:
            m, resetting, ids, next_id = mark(ended[start:stop], mode, resetting, ids, next_id)
            s, open_sum = episode_sums(rewards[start:stop], m, open_sum)
            marks.append(m)
            sums.append(np.where(m.done, s, np.nan))
            start = stop
        return marks, sums

    whole, whole_sums = run([40])
    for cuts in (list(range(1, 41)), [7, 8, 30, 40]):
        parts, part_sums = run(cuts)
        for field in ("valid", "done", "episode_ids"):
            joined = np.concatenate([getattr(m, field) for m in parts])
            np.testing.assert_array_equal(joined, getattr(whole[0], field), err_msg=f"{cuts}: {field}")
        np.testing.assert_allclose(np.concatenate(part_sums), whole_sums[0], rtol=1e-12)
    m = whole[0]
    # Each env's episode ids increase by one new id at each start; each sum is its episode's.
    for env in range(5):
        rows = np.flatnonzero(m.valid[:, env])
        episode = m.episode_ids[rows, env]
        for ep in np.unique(episode):
            members = rows[episode == ep]
            if m.done[members[-1], env]:
                assert whole_sums[0][members[-1], env] == pytest.approx(rewards[members, env].sum())
    assert m.done.sum() >= 10
