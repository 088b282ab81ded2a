"""``vecenv.load`` holds no file descriptor, and ``Dataset.close()`` / ``with load(path) as
dataset:`` drop the dataset's arrays: a loop over many datasets neither runs out of
descriptors nor keeps their files mapped, and a closed dataset says so."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from tests.helpers.envs import CounterEnv, DictCounterEnv
from tests.helpers.faults import open_fds
from vecenv.datasets import DatasetClosedError, collect, load
from vecenv.errors import VecEnvError

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self"),
]


def _mapped(directory: Path) -> int:
    """How many of this process's memory mappings are files of ``directory``."""
    text = Path("/proc/self/maps").read_text()
    return sum(1 for line in text.splitlines() if line.endswith(".npy") and str(directory) in line)


@pytest.fixture
def dataset_dir(tmp_path: Path) -> Path:
    """A small dataset with a Dict observation space (one file per leaf)."""
    envs = SyncVectorEnv([lambda: DictCounterEnv() for _ in range(2)])
    collect(envs, steps=60, seed=3, out=tmp_path / "data", progress=False)
    return tmp_path / "data"


def test_loading_and_closing_many_datasets_keeps_descriptors_and_mappings_flat(dataset_dir: Path) -> None:
    expected = np.load(dataset_dir / "rewards.npy")
    before = len(open_fds())
    for _ in range(300):
        with load(dataset_dir) as dataset:
            assert np.array_equal(dataset["rewards"], expected)
            assert _mapped(dataset_dir) == len(dataset.leaves) > 0
        dataset = load(dataset_dir)
        dataset["observations"]["t"].sum()  # touch the mapped memory
        dataset.close()
    del dataset
    assert len(open_fds()) == before
    assert _mapped(dataset_dir) == 0


def test_load_holds_no_descriptor_even_while_open(dataset_dir: Path) -> None:
    before = len(open_fds())
    opened = [load(dataset_dir) for _ in range(50)]
    assert len(open_fds()) == before  # numpy's own memmap would hold one per file, 50 x 8 here
    assert _mapped(dataset_dir) == 50 * len(opened[0].leaves)
    for dataset in opened:
        dataset.close()
    del opened, dataset
    assert _mapped(dataset_dir) == 0


def test_a_closed_dataset_raises_and_arrays_taken_before_stay_valid(dataset_dir: Path) -> None:
    dataset = load(dataset_dir)
    rewards = dataset["rewards"]
    positions = dataset["observations"]["t"]
    copy = np.array(positions)
    dataset.close()
    dataset.close()  # idempotent
    assert dataset.closed and "closed" in repr(dataset)
    for use in (lambda: dataset["rewards"], lambda: dataset.arrays, lambda: dataset.leaves, lambda: list(dataset)):
        with pytest.raises(DatasetClosedError, match=r"expected an open dataset, got the closed dataset") as info:
            use()
        assert isinstance(info.value, VecEnvError)
    assert dataset.transitions == 60 and dataset.path == dataset_dir  # metadata stays readable
    np.testing.assert_array_equal(positions, copy)
    np.testing.assert_array_equal(rewards, np.load(dataset_dir / "rewards.npy"))
    assert _mapped(dataset_dir) == 2  # only the files of the arrays still held
    del rewards, positions
    assert _mapped(dataset_dir) == 0


def test_arrays_are_read_only_memmaps_that_never_write_the_file(dataset_dir: Path) -> None:
    with load(dataset_dir) as dataset:
        rewards = dataset["rewards"]
        assert isinstance(rewards, np.memmap) and not rewards.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            rewards[0] = 5.0
        rewards.flags.writeable = True  # forced: a private copy of the page changes, not the file
        rewards[0] = 5.0
    assert rewards[0] == 5.0
    assert load(dataset_dir)["rewards"][0] == np.load(dataset_dir / "rewards.npy")[0] != 5.0  # rewards are 0..2


def test_an_empty_dataset_loads_and_closes(tmp_path: Path) -> None:
    """A dataset of 0 rows (a writer finished before its first row) loads and closes."""
    from vecenv.datasets.format import Leaf
    from vecenv.datasets.writer import DatasetWriter

    with collect(SyncVectorEnv([CounterEnv]), steps=5, out=tmp_path / "full", progress=False) as full:
        metadata = {k: v for k, v in full.metadata.items() if k != "counts"}
    fields = [Leaf(name, tuple(f["shape"]), np.dtype(f["dtype"])) for name, f in metadata["fields"].items()]
    DatasetWriter(tmp_path / "empty", fields, metadata).finalize(complete=False)
    with load(tmp_path / "empty") as dataset:
        assert dataset.transitions == 0 and dataset["rewards"].shape == (0,)
        assert dataset["observations"].shape == (0, 1)
