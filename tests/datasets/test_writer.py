"""The ``.npy`` writer: what its files and ``metadata.json`` count while rows still come."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from vecenv.datasets import load
from vecenv.datasets.format import METADATA_FILE, Leaf, dataset_fields
from vecenv.datasets.writer import DatasetWriter
from vecenv.spaces import describe_space


def _on_disk(out: Path) -> tuple[list[float], dict[str, int]]:
    """The rows a reader sees now (what the header counts) and metadata.json's counts."""
    rows = np.load(out / "rewards.npy").tolist()
    return rows, json.loads((out / METADATA_FILE).read_text())["counts"]


def _rows(*values: float) -> list[np.ndarray]:
    return [np.array(values, np.float32)]


def test_the_files_count_an_episode_only_once_its_last_piece_came(tmp_path: Path) -> None:
    """An episode handed over in pieces is never seen cut: not by a reader while collection
    runs (flushes between its pieces), nor after a run that ended before its last piece."""
    out = tmp_path / "d"
    writer = DatasetWriter(out, [Leaf("rewards", (), np.dtype(np.float32))], {})
    one, none = np.ones(1), np.zeros(0)
    writer.append(_rows(1, 2, 3), one * 6, one * 3)
    writer.flush()
    assert _on_disk(out) == ([1, 2, 3], {"transitions": 3, "episodes": 1})
    writer.append(_rows(4, 5), none, none, whole=False)  # the first piece of the next episode
    writer.flush()
    assert _on_disk(out) == ([1, 2, 3], {"transitions": 3, "episodes": 1})
    writer.append(_rows(6), one * 15, one * 3)  # its last piece
    writer.flush()
    assert _on_disk(out) == ([1, 2, 3, 4, 5, 6], {"transitions": 6, "episodes": 2})
    writer.append(_rows(7, 8), none, none, whole=False)  # an episode whose end never comes
    writer.finalize(complete=False)
    assert _on_disk(out) == ([1, 2, 3, 4, 5, 6], {"transitions": 6, "episodes": 2})
    header = len(np.lib.format.magic(1, 0)) + 2
    assert (out / "rewards.npy").stat().st_size >= 6 * 4 + header
    assert np.load(out / "rewards.npy", mmap_mode="r").shape == (6,)
    with open(out / "rewards.npy", "rb") as file:  # the open episode's rows were cut off
        np.lib.format.read_magic(file)
        np.lib.format.read_array_header_1_0(file)
        assert len(file.read()) == 6 * 4


def test_rows_of_a_transitions_dataset_count_as_they_come(tmp_path: Path) -> None:
    """With ``whole=True`` (the default: a fixed count of transitions) every flushed row counts."""
    out = tmp_path / "d"
    writer = DatasetWriter(out, [Leaf("rewards", (), np.dtype(np.float32))], {})
    writer.append(_rows(1, 2), np.zeros(0), np.zeros(0))
    writer.flush()
    assert _on_disk(out) == ([1, 2], {"transitions": 2, "episodes": 0})
    writer.finalize(complete=True)
    assert _on_disk(out) == ([1, 2], {"transitions": 2, "episodes": 0})


def test_a_reader_between_a_flushs_headers_and_its_metadata_reads_the_rows_metadata_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush rewrites the headers, then metadata.json: ``load`` while collection runs can read
    metadata.json just before a flush and the headers just after, which count more rows. It
    reads the rows metadata.json counts (committed rows never change) rather than refusing."""
    observation, action = spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3)
    fields = dataset_fields(observation, action)
    metadata = {
        "fields": {f.name: {"dtype": str(f.dtype), "shape": list(f.shape)} for f in fields},
        "observation_space": {"description": describe_space(observation)},
        "action_space": {"description": describe_space(action)},
    }
    out = tmp_path / "d"
    writer = DatasetWriter(out, fields, metadata)

    def rows(start: int, stop: int) -> list[np.ndarray]:
        values = np.arange(start, stop)
        return [np.broadcast_to(values.reshape(-1, *[1] * len(f.shape)), (len(values), *f.shape)) for f in fields]

    writer.append([column.astype(f.dtype) for column, f in zip(rows(0, 3), fields)], np.zeros(0), np.zeros(0))
    writer.flush()
    monkeypatch.setattr(writer, "_write_metadata", lambda complete: None)  # the reader comes before it
    writer.append([column.astype(f.dtype) for column, f in zip(rows(3, 5), fields)], np.zeros(0), np.zeros(0))
    writer.flush()
    assert np.load(out / "rewards.npy", mmap_mode="r").shape == (5,)  # the headers count 5 rows
    with load(out) as dataset:
        assert dataset.transitions == 3 and not dataset.complete
        assert {name: len(array) for name, array in dataset.leaves.items()} == dict.fromkeys(dataset.leaves, 3)
        assert dataset["rewards"].tolist() == [0.0, 1.0, 2.0]
        assert dataset["observations"].tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    monkeypatch.undo()
    writer.finalize(complete=True)
    with load(out) as dataset:
        assert dataset.transitions == 5 and dataset.complete and dataset["actions"].tolist() == [0, 1, 2, 3, 4]


def test_a_write_error_names_the_path_and_keeps_the_os_error_apart() -> None:
    import errno

    from vecenv.datasets.errors import DatasetWriteError, write_error

    full = write_error(OSError(errno.ENOSPC, "No space left on device"), Path("/data/obs.npy"))
    assert isinstance(full, DatasetWriteError) and isinstance(full, OSError)
    assert full.errno == errno.ENOSPC and full.filename == "/data/obs.npy"
    assert "cannot write /data/obs.npy: No space left on device" in str(full)
    # the file the system named (h5py's, a directory's) is kept as the filename
    named = write_error(PermissionError(errno.EACCES, "Permission denied", "/data"), "/data/main_data.hdf5")
    assert named.filename == "/data" and "cannot write /data/main_data.hdf5: Permission denied" in str(named)
    # an OSError without strerror still says what happened
    assert "cannot write x: disk quota" in str(write_error(OSError("disk quota"), "x"))
