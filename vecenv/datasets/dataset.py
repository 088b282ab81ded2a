"""Reading a dataset back (``load``) as memory-mapped arrays in a ``Dataset`` mapping."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vecenv.datasets.format import METADATA_FILE, SCALAR_FIELDS, space_nesting
from vecenv.spaces import build_tree, named_leaves


@dataclass(frozen=True, eq=False)
class Dataset(Mapping[str, Any]):
    """A rollout dataset read by ``load``.

    A read-only mapping from field name (``observations``, ``next_observations``,
    ``actions``, ``rewards``, ``terminations``, ``truncations``, ``env_ids``,
    ``episode_ids``) to read-only memory-mapped arrays, all of length
    ``dataset.transitions``; the observation and action fields are nested dicts / tuples
    of arrays for Dict / Tuple spaces (``dataset["observations"]["pos"]``).
    ``metadata`` is the parsed ``metadata.json`` and ``path`` the dataset directory;
    ``leaves`` maps each stored file's field name (``observations.pos``, one per leaf of a
    Dict / Tuple space) to its array, flat.
    """

    path: Path
    metadata: dict[str, Any]
    arrays: dict[str, Any]
    leaves: dict[str, np.ndarray] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    @property
    def complete(self) -> bool:
        """Whether the requested count was reached (false after an interruption)."""
        return bool(self.metadata["complete"])

    @property
    def transitions(self) -> int:
        """The number of transitions (rows of every array)."""
        return int(self.metadata["counts"]["transitions"])


def _nest(description: dict[str, Any], name: str, arrays: dict[str, np.ndarray]) -> Any:
    """The arrays of the leaves of the described space, in its Dict/Tuple nesting."""
    nesting = space_nesting(description)
    return build_tree(nesting, iter([arrays[leaf] for leaf, _ in named_leaves(nesting, name)]))


def load(path: str | os.PathLike[str]) -> Dataset:
    """Open the dataset directory ``path`` written by ``collect`` (complete or not).

    Arrays are memory-mapped read-only, so loading is cheap whatever the size.
    Raises FileNotFoundError if ``path`` has no ``metadata.json`` and ValueError if the
    files disagree on the number of transitions.
    """
    path = Path(path)
    metadata_file = path / METADATA_FILE
    if not metadata_file.is_file():
        raise FileNotFoundError(
            f"path: expected a rollout dataset directory containing {METADATA_FILE}, got {str(path)!r}"
        )
    metadata = json.loads(metadata_file.read_text())
    expected = metadata["counts"]["transitions"]
    arrays = {}
    for name in metadata["fields"]:
        array = np.load(path / f"{name}.npy", mmap_mode="r")
        if len(array) != expected:
            raise ValueError(
                f"{path / (name + '.npy')}: expected {expected} rows as metadata.json says, got {len(array)}"
            )
        arrays[name] = array
    fields = {
        "observations": _nest(metadata["observation_space"]["description"], "observations", arrays),
        "next_observations": _nest(metadata["observation_space"]["description"], "next_observations", arrays),
        "actions": _nest(metadata["action_space"]["description"], "actions", arrays),
    }
    for name in SCALAR_FIELDS:
        fields[name] = arrays[name]
    return Dataset(path, metadata, fields, arrays)
