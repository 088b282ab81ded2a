"""Tests of vecenv.rollout.recording, the collection loop, on in-process envs and a fake sink:
which episodes it hands over, in which order, and what it says about each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from tqdm import tqdm

from tests.rollout_envs import LongEpisodeEnv, constant_policy
from vecenv.rollout.actions import ActionChecker
from vecenv.rollout.format import dataset_fields
from vecenv.rollout.recording import CollectionRun, Rollout, record_transitions
from vecenv.rollout.sinks import EpisodeSummary
from vecenv.rollout.staging import EpisodeStager

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
    rollout = Rollout(
        envs, constant_policy, checker, AutoresetMode.SAME_STEP, seed, count.get("steps"), count.get("episodes")
    )
    sink = HandOverSink()
    stager = EpisodeStager(fields, envs.num_envs, tmp_path / "spill")
    try:
        record_transitions(CollectionRun(rollout, sink, stager, tqdm(disable=True)))
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
