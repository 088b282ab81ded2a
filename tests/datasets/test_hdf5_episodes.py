"""vecenv's own writer of Minari's HDF5 episode file, judged by libhdf5 itself (through h5py):
every object reads back with the type, shape, values and attributes h5py's own ``create_dataset``
and ``attrs`` give the same arrays; a root group of thousands of episodes (a B-tree of three
levels) is found by name and listed; libhdf5 can append to the file afterwards; and a run that
stops without ``close`` leaves a readable file. (Minari reading and appending to what
``collect`` writes: test_minari.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

h5py = pytest.importorskip("h5py")

from vecenv.datasets.hdf5_episodes import Hdf5EpisodeFile  # noqa: E402
from vecenv.spaces import named_leaves  # noqa: E402

NESTED_OBSERVATIONS = spaces.Dict(
    {
        "image": spaces.Box(0, 255, (3, 2), np.uint8),
        "state": spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary(5), spaces.Box(-1, 1, (2,), np.float64))),
    }
)
NESTED_ACTIONS = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.MultiDiscrete([3, 4])))


def _episode(rng: np.random.Generator, observation: spaces.Space, action: spaces.Space, length: int) -> tuple:
    """Random rows for each leaf: (observation leaves with T + 1 rows, action leaves, scalars)."""

    def rows(space: spaces.Space, n: int) -> list[np.ndarray]:
        out = []
        for _, leaf in named_leaves(space):
            shape = (n, *(leaf.shape or ()))
            values = rng.random(shape) * 4 if np.dtype(leaf.dtype).kind == "f" else rng.integers(0, 2, shape)
            out.append(values.astype(leaf.dtype))
        return out

    scalars = [rng.random(length), rng.random(length) < 0.3, rng.random(length) < 0.3]
    return rows(observation, length + 1), rows(action, length), scalars


def _pieces(episode: tuple, cuts: list[int]) -> list[tuple]:
    """The episode as pieces cut at ``cuts`` (step indices), the final observation in the last."""
    observations, actions, scalars = episode
    length = len(scalars[0])
    bounds = [0, *cuts, length]
    out = []
    for k, (start, stop) in enumerate(zip(bounds, bounds[1:])):
        last = k == len(bounds) - 2
        out.append(
            (
                [leaf[start : stop + 1 if last else stop] for leaf in observations],
                [leaf[start:stop] for leaf in actions],
                [column[start:stop] for column in scalars],
            )
        )
    return out


def _datasets(group: Any) -> list[Any]:
    """A group's datasets in the spaces' leaf order (names sort as the spaces' keys do here)."""
    found: list[Any] = []
    group.visititems(lambda _, item: found.append(item) if isinstance(item, h5py.Dataset) else None)
    return found


def _reference(
    path: Path, episodes: list[tuple], seeds: list[Any], observation: spaces.Space, action: spaces.Space
) -> None:
    """The same episodes through h5py's high-level API, as Minari's ``_add_episode_to_group`` does."""
    with h5py.File(path, "w") as file:
        for index, (episode, seed) in enumerate(zip(episodes, seeds)):
            group = file.create_group(f"episode_{index}")
            group.attrs["id"] = index
            if seed is not None:
                group.attrs["seed"] = seed
            group.attrs["total_steps"] = len(episode[2][0])
            for name, space, leaves in (("observations", observation, episode[0]), ("actions", action, episode[1])):
                for (key, _), leaf in zip(named_leaves(space), leaves):
                    # ".state.1" -> state/_index_1 (Tuple items are _index_<i> in Minari's layout)
                    parts = [f"_index_{p}" if p.isdigit() else p for p in key.split(".") if p]
                    group.create_dataset("/".join([name, *parts]), data=leaf)
            for name, column in zip(("rewards", "terminations", "truncations"), episode[2]):
                group.create_dataset(name, data=column)
            group.create_group("infos")  # the DataCollector's default: no infos, an empty group


@pytest.mark.parametrize("nested", [False, True], ids=["box-discrete", "dict-tuple"])
def test_episodes_read_back_as_h5py_writes_them(tmp_path: Path, nested: bool) -> None:
    observation: spaces.Space = NESTED_OBSERVATIONS if nested else spaces.Box(-1, 1, (4,), np.float32)
    action: spaces.Space = NESTED_ACTIONS if nested else spaces.Discrete(2)
    rng = np.random.default_rng(7)
    lengths = [1, 2, 9, 30, 5, 17]
    episodes = [_episode(rng, observation, action, n) for n in lengths]
    seeds = [0, None, 2**63 + 5, None, 12, -3]  # int64, none, uint64 past int64's range, negative
    writer = Hdf5EpisodeFile(tmp_path / "ours.hdf5", observation, action)
    for index, (episode, seed) in enumerate(zip(episodes, seeds)):
        cuts = [] if len(episode[2][0]) < 9 else [1, len(episode[2][0]) // 2]  # some come in pieces
        writer.write(index, seed, len(episode[2][0]), iter(_pieces(episode, cuts)))
    writer.close()
    _reference(tmp_path / "h5py.hdf5", episodes, seeds, observation, action)
    with h5py.File(tmp_path / "ours.hdf5", "r") as ours, h5py.File(tmp_path / "h5py.hdf5", "r") as theirs:
        assert sorted(ours) == sorted(theirs) and len(ours) == len(lengths)
        for name in theirs:
            mine, reference = ours[name], theirs[name]
            assert dict(mine.attrs) == dict(reference.attrs)
            for key in reference.attrs:
                assert mine.attrs[key].dtype == reference.attrs[key].dtype, (name, key)
            assert sorted(mine) == sorted(reference)
            assert isinstance(mine["infos"], h5py.Group) and len(mine["infos"]) == 0
            pairs = list(zip(_datasets(mine), _datasets(reference), strict=True))
            assert len(pairs) == len(named_leaves(observation)) + len(named_leaves(action)) + 3
            for got, want in pairs:
                assert got.name == want.name and got.shape == want.shape and got.dtype == want.dtype
                assert got.id.get_type().encode() == want.id.get_type().encode(), got.name
                np.testing.assert_array_equal(got[()], want[()])


def test_thousands_of_episodes_are_found_listed_and_appended_to_by_libhdf5(tmp_path: Path) -> None:
    path = tmp_path / "many.hdf5"
    count = 9_000  # more than 8 * 32 * 32 names: a root B-tree of three levels
    writer = Hdf5EpisodeFile(path, spaces.Box(-1, 1, (1,), np.float32), spaces.Discrete(2))
    for index in range(count):
        observations = np.full((2, 1), index, np.float32)
        writer.write(index, None, 1, iter([([observations], [np.array([index % 2])], [np.ones(1), [True], [False]])]))
    writer.close()
    with h5py.File(path, "a", track_order=True) as file:  # as Minari's update_episodes opens it
        assert len(file) == count and sorted(file, key=lambda n: int(n.split("_")[1])) == [
            f"episode_{i}" for i in range(count)
        ]
        for index in (0, 7, 8, 255, 256, 4_321, 8_191, 8_192, count - 1):
            assert file[f"episode_{index}/observations"][1, 0] == index
            assert file[f"episode_{index}"].attrs["id"] == index
        added = file.create_group(f"episode_{count}")
        added.create_dataset("rewards", data=np.arange(3.0))
        file["episode_5"].attrs["note"] = 1
    with h5py.File(path, "r") as file:
        assert len(file) == count + 1 and file[f"episode_{count}/rewards"][2] == 2.0
        assert file["episode_5"].attrs["note"] == 1 and file["episode_5/actions"][0] == 1


def test_a_writer_that_never_closes_leaves_a_file_with_the_indexed_episodes(tmp_path: Path) -> None:
    path = tmp_path / "open.hdf5"
    writer = Hdf5EpisodeFile(path, spaces.Box(-1, 1, (1,), np.float32), spaces.Discrete(2))
    with h5py.File(path, "r") as file:
        assert len(file) == 0  # valid from the start
    for index in range(11):
        writer.write(
            index,
            None,
            1,
            iter([([np.zeros((2, 1), np.float32)], [np.zeros(1, np.int64)], [np.ones(1), [False], [True]])]),
        )
        writer.flush()
    # Indexed when the count doubled: after 2, 4 and 8 episodes; the 3 since are not yet.
    with h5py.File(path, "r") as file:
        assert sorted(file, key=lambda n: int(n.split("_")[1])) == [f"episode_{i}" for i in range(8)]
        assert file["episode_7/truncations"][0]
    assert writer.readable_counts() == (8, 8)  # what Minari's counts say meanwhile
    writer.close()
    assert writer.readable_counts() == (11, 11)
    with h5py.File(path, "r") as file:
        assert len(file) == 11
    assert writer.bytes_written() == path.stat().st_size


def test_pieces_that_do_not_add_up_to_the_length_raise_and_leave_no_trace(tmp_path: Path) -> None:
    from vecenv.errors import InvalidStateError

    path = tmp_path / "short.hdf5"
    writer = Hdf5EpisodeFile(path, spaces.Box(-1, 1, (1,), np.float32), spaces.Discrete(2))
    one = ([np.zeros((2, 1), np.float32)], [np.zeros(1, np.int64)], [np.ones(1), [False], [True]])
    writer.write(0, None, 1, iter([one]))
    size = writer.bytes_written()
    with pytest.raises(InvalidStateError, match=r"held \[2, 1, 1, 1, 1\] rows per dataset, expected \[4, 3, 3, 3, 3\]"):
        writer.write(1, None, 3, iter([one]))
    assert path.stat().st_size == size == writer.bytes_written()
    writer.close()
    with h5py.File(path, "r") as file:
        assert list(file) == ["episode_0"]


def _entry_by_entry_root_index(entries: np.ndarray, base: int) -> Any:
    """The oracle: the root index as the writer used to build it, one Python object per entry
    through ``_Layout`` (which still lays out each episode's own groups)."""
    import struct

    from vecenv.datasets import hdf5_episodes

    layout = hdf5_episodes._Layout()
    packed = [
        (f"episode_{i}".encode(), struct.pack("<Q", header), (struct.pack("<Q", btree), struct.pack("<Q", heap)))
        for i, header, btree, heap in entries.tolist()
    ]
    btree, heap = layout.group_index(packed)
    header = layout.object_header(
        [(hdf5_episodes._SYMBOL_TABLE, 0, [hdf5_episodes._Address(btree), hdf5_episodes._Address(heap)])]
    )
    return hdf5_episodes._RootIndex(layout.placed(base), base + header, base + btree, base + heap)


# Around the root's node boundaries: 8 names a symbol-table node, 32 children a B-tree node.
NODE_BOUNDARIES = [0, 1, 7, 8, 9, 255, 256, 257, 300, 8 * 32 * 32, 8 * 32 * 32 + 1]


@pytest.mark.parametrize("count", NODE_BOUNDARIES)
def test_the_root_index_is_byte_for_byte_the_entry_by_entry_one(count: int) -> None:
    from vecenv.datasets.hdf5_episodes import _root_index, _RootEntries

    rng = np.random.default_rng(count)
    entries = np.zeros(count, _RootEntries.DTYPE)
    # Ids of every width (names of 16 and 24 bytes once padded), negative ones, in any order.
    scale = rng.choice([1, 10**9, -(10**15)], count)
    entries["id"] = rng.permutation(count) * scale
    entries["header"] = 96 + 700 * np.arange(count)
    entries["btree"], entries["heap"] = entries["header"] + 300, entries["header"] + 600
    got, want = _root_index(entries, 12_345), _entry_by_entry_root_index(entries, 12_345)
    assert (got.header, got.btree, got.heap) == (want.header, want.btree, want.heap)
    assert bytes(got.data) == bytes(want.data)


@pytest.mark.parametrize("count", [0, 1, 9, 257, 300])
def test_the_file_is_byte_for_byte_what_the_entry_by_entry_index_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    from vecenv.datasets import hdf5_episodes

    def write(path: Path) -> bytes:
        writer = Hdf5EpisodeFile(path, spaces.Box(-1, 1, (1,), np.float32), spaces.Discrete(2))
        for index in range(count):
            rows = ([np.full((2, 1), index, np.float32)], [np.array([index % 2])], [np.ones(1), [True], [False]])
            writer.write(index, None if index % 3 else index, 1, iter([rows]))
            writer.flush()  # an index at each doubling, as collect writes them
        writer.close()
        return path.read_bytes()

    ours = write(tmp_path / "ours.hdf5")
    monkeypatch.setattr(hdf5_episodes, "_root_index", _entry_by_entry_root_index)
    assert ours == write(tmp_path / "entry_by_entry.hdf5")
    with h5py.File(tmp_path / "ours.hdf5", "r") as file:
        assert len(file) == count


@pytest.mark.timeout(120)
def test_the_writer_holds_a_few_bytes_per_episode_and_indexes_them_in_a_few_hundred(tmp_path: Path) -> None:
    import tracemalloc

    count = 20_000
    writer = Hdf5EpisodeFile(tmp_path / "many.hdf5", spaces.Box(-1, 1, (1,), np.float32), spaces.Discrete(2))
    rows = ([np.zeros((2, 1), np.float32)], [np.zeros(1, np.int64)], [np.ones(1), [False], [True]])
    writer.write(0, None, 1, iter([rows]))  # the template is laid out once, before counting
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        for index in range(1, count):
            writer.write(index, None, 1, iter([rows]))
        held, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        writer.close()  # the index of every episode, built at once
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (held - start) / count < 100  # 32 bytes an episode, twice that at most as the columns grow
    # The index's own ~60 bytes an episode and its makings (it was 222 and 405 bytes an episode).
    assert (peak - held) / count < 300
    with h5py.File(tmp_path / "many.hdf5", "r") as file:
        assert len(file) == count and file["episode_19999/actions"][0] == 0
