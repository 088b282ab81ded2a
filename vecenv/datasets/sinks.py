"""Where ``collect`` puts transitions: the ``.npy`` dataset (``DatasetSink``) or a Minari
dataset (``minari.MinariSink``), and what both share.

A sink takes rows in vector-step order (``rows``, our format with ``steps=N``) or whole
episodes (``episode``) given as an iterator of pieces, each a list of columns in dataset field
order. When the requested count is reached, every episode still open goes to ``open_episode``:
the sink keeps it or leaves it out as its ``open_episodes`` policy (one of ``OPEN_EPISODES``)
says. ``finalize(complete=...)`` ends the output, ``complete`` saying whether the requested
count was reached.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vecenv.datasets.writer import DatasetWriter

#: What happens to the episodes still open after the last of ``steps=N`` transitions
#: (Minari stores whole episodes): kept with their last step marked truncated, or left out.
OPEN_EPISODES = ("truncate", "drop")


def with_last(items: Iterator[Any]) -> Iterator[tuple[Any, bool]]:
    """Pairs ``(item, is_last)`` of a non-empty iterator."""
    previous = next(items)
    for item in items:
        yield previous, False
        previous = item
    yield previous, True


@dataclass(frozen=True)
class EpisodeSummary:
    """What a sink is told about an episode besides its rows."""

    episode_return: float
    length: int  # its rows
    episode_id: int  # in the order episodes start (see ``vecenv.datasets``)
    seed: int | None  # the reset(seed=...) that started it; None when it continued an env's RNG


class DatasetSink:
    """The ``.npy`` dataset: rows as they come, or whole episodes through ``DatasetWriter``."""

    def __init__(self, writer: DatasetWriter) -> None:
        self.writer = writer

    @property
    def transitions(self) -> int:
        return self.writer.transitions

    @property
    def episodes(self) -> int:
        return self.writer.episodes

    @property
    def kept(self) -> int:
        """The transitions the files hold (rows still buffered, or lost to a failed write, are not)."""
        return self.writer.kept

    def rows(self, columns: Sequence[np.ndarray], returns: np.ndarray, lengths: np.ndarray) -> None:
        """Append rows holding ``len(returns)`` finished episodes (see ``DatasetWriter.append``)."""
        self.writer.append(columns, returns, lengths)

    def episode(self, pieces: Iterator[list[np.ndarray]], summary: EpisodeSummary, truncate_last: bool) -> None:
        """Append one finished episode, piece by piece (its seed and ``truncate_last`` are for
        Minari: our format records neither)."""
        none = np.zeros(0)
        for piece, last in with_last(pieces):
            if last:
                self.writer.append(piece, np.array([summary.episode_return]), np.array([summary.length]))
            else:
                self.writer.append(piece, none, none, whole=False)

    def open_episode(self, pieces: Iterator[list[np.ndarray]], summary: EpisodeSummary) -> None:
        """Leave out an episode still open at the end: with ``episodes=N`` (the only time our
        format holds episodes back) only the first N episodes to finish are written."""

    def finalize(self, complete: bool) -> None:
        """Write what is buffered and the final ``metadata.json`` (see ``DatasetWriter.finalize``)."""
        self.writer.finalize(complete)
