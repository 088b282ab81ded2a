"""Minari output of vecenv.datasets: ``collect(format="minari")``, ``export_minari``, the
``--format minari`` / ``export`` command line, and the error without Minari installed.

Every Minari dataset is compared array for array, episode by episode, with the transitions
that our own format records for the same arguments (including the final observation that
Minari keeps as each episode's last observation)."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.helpers.envs import CounterEnv, DictCounterEnv, LongEpisodeEnv, constant_policy
from tests.helpers.output_paths import deny_writes_in, refuse_to_build_envs
from vecenv import datasets as rollout
from vecenv.datasets import MinariNotInstalledError, NoEpisodesError, collect, export_minari, load, main

minari = pytest.importorskip("minari")
pytest.importorskip("h5py")

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
MODES = list(AutoresetMode)
#: Minari's two storage backends; Arrow needs pyarrow (``minari[arrow]``), not in the test extra.
STORAGES = [
    "hdf5",
    pytest.param(
        "arrow",
        marks=pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="needs pyarrow (minari[arrow])"),
    ),
]


@pytest.fixture(autouse=True)
def _minari_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Minari's default dataset root, inside the test's tmp_path (never ~/.minari)."""
    root = tmp_path / "minari-root"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


def sync_envs(
    num_envs: int, mode: AutoresetMode = AutoresetMode.NEXT_STEP, env_class: type = CounterEnv
) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: env_class() for _ in range(num_envs)], autoreset_mode=mode)


def native_episodes(dataset: rollout.Dataset) -> list[np.ndarray]:
    """Row indices of each episode of a vecenv dataset, in the order Minari output uses:
    finished episodes in the order they end, then open ones by env index."""
    episode_ids = np.asarray(dataset["episode_ids"])
    done = np.asarray(dataset["terminations"]) | np.asarray(dataset["truncations"])
    groups = [np.flatnonzero(episode_ids == e) for e in np.unique(episode_ids)]
    closed = sorted((g for g in groups if done[g[-1]]), key=lambda g: g[-1])
    still_open = sorted((g for g in groups if not done[g[-1]]), key=lambda g: int(dataset["env_ids"][g[0]]))
    return closed + still_open


def leaves(value: Any) -> list[np.ndarray]:
    """Arrays of a nested value in a fixed order (dict keys sorted: Minari reads HDF5 groups in
    its own order)."""
    if isinstance(value, dict):
        return [a for key in sorted(value) for a in leaves(value[key])]
    if isinstance(value, tuple):
        return [a for item in value for a in leaves(item)]
    return [np.asarray(value)]


def assert_same_episodes(
    minari_dataset: Any, dataset: rollout.Dataset, truncate_open: bool = True, drop_open: bool = False
) -> None:
    """Each Minari episode equals our transitions of the same episode, arrays and dtypes."""
    groups = native_episodes(dataset)
    done = np.asarray(dataset["terminations"]) | np.asarray(dataset["truncations"])
    if drop_open:
        groups = [g for g in groups if done[g[-1]]]
    assert minari_dataset.total_episodes == len(groups)
    assert minari_dataset.total_steps == sum(len(g) for g in groups)
    for episode, rows in zip(minari_dataset.iterate_episodes(), groups):
        observations = leaves(dataset["observations"])
        next_observations = leaves(dataset["next_observations"])
        for ours, final, theirs in zip(observations, next_observations, leaves(episode.observations)):
            expected = np.concatenate([ours[rows], final[rows[-1:]]])  # T + 1 observations
            np.testing.assert_array_equal(theirs, expected)
            assert theirs.dtype == expected.dtype
        for ours, theirs in zip(leaves(dataset["actions"]), leaves(episode.actions)):
            np.testing.assert_array_equal(theirs, ours[rows])
            assert theirs.dtype == ours.dtype
        np.testing.assert_array_equal(episode.rewards, dataset["rewards"][rows])
        np.testing.assert_array_equal(episode.terminations, dataset["terminations"][rows])
        truncations = np.array(dataset["truncations"][rows])
        if truncate_open and not done[rows[-1]]:
            truncations[-1] = True
        np.testing.assert_array_equal(episode.truncations, truncations)


# ------------------------------------------------------------------------ collect(format="minari")


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_minari_episodes_equal_our_transitions(tmp_path: Path, mode: AutoresetMode, storage: str) -> None:
    ours = collect(sync_envs(3, mode), episodes=17, seed=4, out=tmp_path / "ours", progress=False)
    theirs = collect(
        sync_envs(3, mode),
        episodes=17,
        seed=4,
        format="minari",
        dataset_id="test/counter-v0",
        progress=False,
        minari_storage=storage,
    )
    assert theirs.storage.metadata["data_format"] == storage
    assert theirs.total_episodes == 17 and theirs.total_steps == ours.transitions
    assert_same_episodes(minari.load_dataset("test/counter-v0"), ours)
    minari_checks("test/counter-v0")


def test_a_minari_without_jpeg_encoding_is_given_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Minari 0.5.2 and 0.5.3 (within vecenv[minari]) store raw arrays and take no
    ``jpeg_encoding``; 0.5.4 on is given ``jpeg_encoding=False`` (its default JPEG is lossy)."""
    real = minari.create_dataset_from_buffers
    given: list[dict[str, Any]] = []

    def create_of_minari_0_5_2(dataset_id: str, buffer: list, env: Any = None, **kwargs: Any) -> Any:
        given.append(kwargs)
        return real(dataset_id, buffer, env=env, jpeg_encoding=False, **kwargs)

    monkeypatch.setattr(minari, "create_dataset_from_buffers", create_of_minari_0_5_2)
    ours = collect(sync_envs(2), episodes=5, seed=1, out=tmp_path / "ours", progress=False)
    collect(sync_envs(2), episodes=5, seed=1, format="minari", dataset_id="old/counter-v0", progress=False)
    assert len(given) == 1 and "jpeg_encoding" not in given[0]
    assert_same_episodes(minari.load_dataset("old/counter-v0"), ours)


@pytest.mark.parametrize("storage", STORAGES)
def test_nested_dict_and_tuple_spaces_round_trip(tmp_path: Path, storage: str) -> None:
    envs = sync_envs(2, env_class=DictCounterEnv)
    ours = collect(envs, steps=40, seed=1, out=tmp_path / "ours", progress=False)
    collect(
        sync_envs(2, env_class=DictCounterEnv),
        steps=40,
        seed=1,
        format="minari",
        dataset_id="nested-v1",
        progress=False,
        minari_storage=storage,
    )
    loaded = minari.load_dataset("nested-v1")
    assert loaded.observation_space == DictCounterEnv().observation_space
    assert_same_episodes(loaded, ours)
    minari_checks("nested-v1")


@pytest.mark.parametrize("open_episodes", ["truncate", "drop"])
def test_steps_open_episodes_are_truncated_or_dropped_as_asked(tmp_path: Path, open_episodes: str) -> None:
    ours = collect(sync_envs(4), steps=101, seed=2, out=tmp_path / "ours", progress=False)
    done = np.asarray(ours["terminations"]) | np.asarray(ours["truncations"])
    theirs = collect(
        sync_envs(4),
        steps=101,
        seed=2,
        format="minari",
        dataset_id="steps-v0",
        open_episodes=open_episodes,
        progress=False,
    )
    record = theirs.storage.metadata["vecenv"]
    still_open = [g for g in native_episodes(ours) if not done[g[-1]]]
    open_rows = sum(len(g) for g in still_open)
    assert open_rows > 0
    if open_episodes == "truncate":
        assert theirs.total_steps == 101 and record["truncated_open_episodes"] == len(still_open)
    else:
        assert theirs.total_steps == 101 - open_rows
        assert record["dropped_open_episodes"] == {"episodes": len(still_open), "transitions": open_rows}
    assert record["open_episodes"] == open_episodes and record["complete"] is True
    assert record["seed_policy"] == "sequential"  # how the first seeds follow from record["seed"]
    assert_same_episodes(minari.load_dataset("steps-v0"), ours, drop_open=open_episodes == "drop")


def test_dropping_every_open_episode_writes_no_dataset_and_keeps_the_one_it_was_to_replace(tmp_path: Path) -> None:
    """With ``open_episodes="drop"`` and no episode finished within ``steps``, there is no
    episode to write: Minari cannot sample from a dataset without episodes, so nothing is
    written, an existing dataset that ``overwrite=True`` was to replace stays, and the error
    says why and what keeps the open episodes."""
    kept = collect(sync_envs(2), episodes=3, format="minari", dataset_id="ns/kept-v0", progress=False)
    assert kept.total_episodes == 3

    def never_ending() -> SyncVectorEnv:
        return SyncVectorEnv([lambda: LongEpisodeEnv() for _ in range(2)])

    root = tmp_path / "minari-root"
    for dataset_id, overwrite in [("ns/empty-v0", False), ("ns/kept-v0", True)]:
        with pytest.raises(NoEpisodesError) as raised:
            collect(
                never_ending(),
                steps=10,
                format="minari",
                dataset_id=dataset_id,
                open_episodes="drop",
                overwrite=overwrite,
                progress=False,
            )
        assert str(raised.value) == (
            "open_episodes: expected an episode to finish within steps=10 with open_episodes='drop' (Minari "
            "cannot use a dataset without episodes), got none: the 2 open ones (10 transitions) were dropped; "
            "open_episodes='truncate' keeps them; nothing was written"
        )
        assert isinstance(raised.value, ValueError)
    assert not (root / "ns" / "empty-v0").exists()
    assert minari.load_dataset("ns/kept-v0").total_episodes == 3
    assert sorted(p.name for p in (root / "ns").iterdir()) == ["kept-v0", "namespace_metadata.json"]


def test_the_command_that_drops_every_open_episode_is_refused_and_keeps_the_old_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The same on the command line: one line naming --open-episodes and --steps, exit status 2
    (bad input, as a policy's actions found outside the space later), the old dataset as it was."""
    root = tmp_path / "root"
    common = ["--num-envs", "2", "--num-workers", "1", "--quiet", "--format", "minari", "--out", str(root)]
    common += ["--dataset-id", "ns/old-v0"]
    assert main(["--env", "tests.helpers.envs:RolloutCounter-v0", "--episodes", "2", *common]) == 0
    capsys.readouterr()
    args = ["--env", "tests.helpers.envs:RolloutLong-v0", "--steps", "10", "--open-episodes", "drop", *common]
    assert main([*args, "--overwrite"]) == 2
    assert capsys.readouterr().err == (
        "vecenv-collect: error: --open-episodes drop: expected an episode to finish within --steps 10 (Minari "
        "cannot use a dataset without episodes), got none: the 2 open ones (10 transitions) were dropped; "
        "--open-episodes truncate keeps them; no episode had finished, so nothing was written; "
        "Minari dataset 'ns/old-v0' is as it was\n"
    )
    assert minari.MinariDataset(root / "ns" / "old-v0" / "data").total_episodes == 2
    assert main([*args, "--dataset-id", "ns/new-v0"]) == 2  # the last --dataset-id counts
    assert capsys.readouterr().err.endswith("no Minari dataset 'ns/new-v0' was written\n")
    assert sorted(p.name for p in (root / "ns").iterdir()) == ["namespace_metadata.json", "old-v0"]


def prog(args: list[str]) -> str:
    """How the command names itself in its errors for these arguments (as its parsers do)."""
    return "vecenv-collect export" if args[:1] == ["export"] else "vecenv-collect"


def test_a_minari_root_that_is_or_lies_under_a_file_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """As for our format: --out naming a file, or a folder under one, is bad input (exit
    status 2, one line naming --out), for collecting and for export, and nothing is written."""
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    collect(sync_envs(2), steps=10, out=tmp_path / "ours", progress=False)
    minari_args = ["--format", "minari", "--dataset-id", "ns/x-v0", "--steps", "10", "--quiet"]
    for out, where in [
        (notes, "which is an existing file"),
        (notes / "root", f"where {str(notes)!r} is an existing file"),
    ]:
        for args in [minari_args, ["export", str(tmp_path / "ours"), "--dataset-id", "ns/x-v0", "--quiet"]]:
            assert main([*args, "--out", str(out)]) == 2
            assert capsys.readouterr().err == (
                f"{prog(args)}: error: --out: expected a directory path, got {str(out)!r}, {where}\n"
            )
        with pytest.raises(rollout.OutputExistsError, match=r"^out: expected a directory path"):
            collect(sync_envs(2), steps=10, format="minari", dataset_id="ns/x-v0", out=out, progress=False)
    assert notes.read_text() == "keep me"


def test_a_minari_root_that_is_or_lies_in_a_dataset_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """--format minari --out naming a rollout dataset (or a folder in one), or a Minari
    dataset, wrote the new dataset's folders into it: `vecenv-collect --out data/x` then
    `--format minari --out data/x` left data/x a rollout dataset no --overwrite would replace.
    Now bad input (exit status 2, one line naming --out and the dataset), for collecting and
    for export, and nothing is written."""
    ours = tmp_path / "ours"
    collect(sync_envs(2), steps=10, out=ours, progress=False)
    collect(sync_envs(2), steps=10, format="minari", dataset_id="ns/old-v0", out=tmp_path / "m", progress=False)
    theirs = tmp_path / "m" / "ns" / "old-v0"
    before = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))
    refuse_to_build_envs(monkeypatch, "a Minari root inside a dataset")
    minari_args = ["--format", "minari", "--dataset-id", "ns/x-v0", "--steps", "10", "--quiet"]
    for out, where in [
        (ours, "which is a rollout dataset"),
        (ours / "root", f"which lies in {str(ours)!r}, a rollout dataset"),
        (theirs, "which is the Minari dataset 'ns/old-v0'"),
    ]:
        message = f"out: expected a path outside any dataset, got {str(out)!r}, {where}; choose a folder beside it"
        for args in [minari_args, ["export", str(ours), "--dataset-id", "ns/x-v0", "--quiet"]]:
            assert main([*args, "--out", str(out)]) == 2
            assert capsys.readouterr().err == f"{prog(args)}: error: --{message}\n"
        with pytest.raises(rollout.OutputExistsError, match=re.escape(message)):
            collect(sync_envs(2), steps=10, format="minari", dataset_id="ns/x-v0", out=out, progress=False)
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")) == before


def test_a_bad_minari_root_from_the_environment_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Without --out the datasets root is $MINARI_DATASETS_PATH (or ~/.minari/datasets): a bad
    one was reported as "--out: ...", an option the command line did not have."""
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(notes))
    refuse_to_build_envs(monkeypatch, "a datasets root that is a file")
    message = f"MINARI_DATASETS_PATH: expected a directory path, got {str(notes)!r}, which is an existing file"
    assert main(["--format", "minari", "--dataset-id", "ns/x-v0", "--steps", "10", "--quiet"]) == 2
    assert capsys.readouterr().err == f"vecenv-collect: error: {message}\n"
    collect(sync_envs(2), steps=10, out=tmp_path / "ours", progress=False)
    assert main(["export", str(tmp_path / "ours"), "--dataset-id", "ns/x-v0", "--quiet"]) == 2
    assert capsys.readouterr().err == f"vecenv-collect export: error: {message}\n"
    with pytest.raises(rollout.OutputExistsError, match=re.escape(message)):
        collect(sync_envs(2), steps=10, format="minari", dataset_id="ns/x-v0", progress=False)
    # Minari's default root, under a HOME that is a file.
    monkeypatch.delenv("MINARI_DATASETS_PATH")
    monkeypatch.setenv("HOME", str(notes))
    with pytest.raises(rollout.OutputExistsError, match=re.escape("Minari's datasets root (~/.minari/datasets): ")):
        collect(sync_envs(2), steps=10, format="minari", dataset_id="ns/x-v0", progress=False)
    assert notes.read_text() == "keep me"


def test_env_spec_is_recorded_so_recover_environment_works(tmp_path: Path) -> None:
    # max_episode_steps is gymnasium.make's, not the env's: the spec holds it as its field.
    envs = vecenv.make("RolloutCounter-v0", 2, 2, env_kwargs={"max_length": 3, "max_episode_steps": 50})
    try:
        dataset = collect(
            envs, constant_policy, episodes=5, seed=0, format="minari", dataset_id="ns/recover-v2", progress=False
        )
    finally:
        envs.close()
    loaded = minari.load_dataset("ns/recover-v2")
    assert loaded.env_spec.id == "RolloutCounter-v0" and loaded.env_spec.kwargs == {"max_length": 3}
    assert loaded.env_spec.max_episode_steps == 50
    env = loaded.recover_environment()
    try:
        assert isinstance(env.unwrapped, CounterEnv) and env.unwrapped.max_length == 3
        assert env.spec is not None and env.spec.max_episode_steps == 50
    finally:
        env.close()
    assert dataset.storage.metadata["vecenv"]["env_id"] == "RolloutCounter-v0"
    # The first episode of each env starts from reset(seed=seed + env): Minari records it.
    seeds = [m.get("seed") for m in loaded.storage.get_episode_metadata(range(loaded.total_episodes))]
    assert {0, 1} <= {s for s in seeds if s is not None}


@pytest.mark.parametrize("storage", STORAGES)
def test_long_episodes_are_written_in_pieces_with_the_right_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, storage: str
) -> None:
    monkeypatch.setattr(rollout.writer, "CHUNK_BYTES", 400)  # a few rows per block and piece
    envs = SyncVectorEnv([lambda: CounterEnv(max_length=40) for _ in range(2)])
    ours = collect(envs, episodes=6, seed=3, out=tmp_path / "ours", progress=False)
    envs = SyncVectorEnv([lambda: CounterEnv(max_length=40) for _ in range(2)])
    collect(envs, episodes=6, seed=3, format="minari", dataset_id="long-v0", progress=False, minari_storage=storage)
    loaded = minari.load_dataset("long-v0")
    lengths = [m["total_steps"] for m in loaded.storage.get_episode_metadata(range(6))]
    assert lengths == [len(g) for g in native_episodes(ours)] and max(lengths) > 10
    assert_same_episodes(loaded, ours)


def test_out_is_the_datasets_root_and_existing_datasets_are_kept(tmp_path: Path) -> None:
    root = tmp_path / "elsewhere"
    collect(sync_envs(2), steps=10, format="minari", dataset_id="ab/cd-v0", out=root, progress=False)
    assert (root / "ab" / "cd-v0" / "data" / "metadata.json").is_file()
    assert not list(root.glob(".vecenv-spill-*"))
    with pytest.raises(FileExistsError, match=r"Minari dataset 'ab/cd-v0' already exists.*overwrite"):
        collect(sync_envs(2), steps=10, format="minari", dataset_id="ab/cd-v0", out=root, progress=False)
    collect(sync_envs(2), steps=12, format="minari", dataset_id="ab/cd-v0", out=root, overwrite=True, progress=False)
    assert minari.MinariDataset(root / "ab" / "cd-v0" / "data").total_steps == 12
    # A folder at the dataset's place whose data/metadata.json is another program's is kept.
    other = root / "ab" / "ef-v0"
    (other / "data").mkdir(parents=True)
    (other / "data" / "metadata.json").write_text('{"name": "my web app"}')
    (other / "data" / "main.db").write_text("keep me")
    with pytest.raises(FileExistsError, match=r"not the Minari dataset 'ab/ef-v0'"):
        collect(sync_envs(2), steps=4, format="minari", dataset_id="ab/ef-v0", out=root, overwrite=True, progress=False)
    assert (other / "data" / "main.db").read_text() == "keep me"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"dataset_id": "no version"},
            ValueError,
            r"dataset_id: expected 'NAMESPACE/NAME-vN'.*Minari says.*got 'no version'",
        ),
        ({}, ValueError, r"dataset_id: expected 'NAMESPACE/NAME-vN' with format='minari', got None"),
        (  # Minari's rule that the message did not say: 'a/b-v0' looked valid by it
            {"dataset_id": "a/b-v0"},
            ValueError,
            r"dataset_id: .*a namespace of two characters or more;.*got 'a/b-v0'",
        ),
        (
            {"dataset_id": "x-v0", "open_episodes": "keep"},
            ValueError,
            r"open_episodes: expected one of \['truncate', 'drop'\], got 'keep'",
        ),
        (
            {"dataset_id": "x-v0", "format": "hdf5"},
            ValueError,
            r"format: expected one of \['vecenv', 'minari'\], got 'hdf5'",
        ),
    ],
)
def test_minari_arguments_are_checked_before_collecting(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        collect(sync_envs(2), steps=5, progress=False, **{"format": "minari", **kwargs})


# ------------------------------------------------------------------------ export


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("request_", [{"steps": 77}, {"episodes": 9}], ids=["steps", "episodes"])
def test_export_gives_what_collecting_to_minari_gives(tmp_path: Path, request_: dict, storage: str) -> None:
    ours = collect(sync_envs(3), seed=5, out=tmp_path / "ours", progress=False, **request_)
    exported = export_minari(tmp_path / "ours", "exported-v0", minari_storage=storage)
    assert exported.storage.metadata["data_format"] == storage
    collected = collect(sync_envs(3), seed=5, format="minari", dataset_id="collected-v0", progress=False, **request_)
    assert exported.total_episodes == collected.total_episodes
    for a, b in zip(exported.iterate_episodes(), collected.iterate_episodes()):
        for name in ("observations", "actions", "rewards", "terminations", "truncations"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert_same_episodes(minari.load_dataset("exported-v0"), ours)
    assert exported.storage.metadata["vecenv"]["source"] == str(tmp_path / "ours")


class NoValuesEnv(CounterEnv):
    """A CounterEnv whose observations hold no values (a zero-size Box)."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Box(0, 1, (0,), np.float32)

    def _obs(self) -> np.ndarray:
        return np.zeros(0, np.float32)


@pytest.mark.parametrize("storage", STORAGES)
def test_a_leaf_of_no_values_is_refused_before_anything_is_written(
    tmp_path: Path, _minari_root: Path, storage: str
) -> None:
    """Minari cannot store a zero-size Box (its HDF5 writer failed on it; pyarrow crashed the
    process): refused naming the leaf, by collect and by export, with nothing written; our
    format keeps it."""
    ours = collect(sync_envs(2, env_class=NoValuesEnv), seed=1, out=tmp_path / "ours", episodes=2, progress=False)
    assert ours["observations"].shape == (ours.transitions, 0)
    message = r"observations: expected a space leaf that holds values for format='minari'.*shape \(0,\)"
    with pytest.raises(rollout.UnsupportedSpaceError, match=message):
        collect(
            sync_envs(2, env_class=NoValuesEnv),
            seed=1,
            episodes=2,
            format="minari",
            dataset_id="zero/values-v0",
            minari_storage=storage,
            progress=False,
        )
    with pytest.raises(rollout.UnsupportedSpaceError, match=message):
        export_minari(tmp_path / "ours", "zero/exported-v0", minari_storage=storage)
    assert not _minari_root.exists() or not any(_minari_root.iterdir())


def test_a_seed_minaris_hdf5_storage_cannot_record_is_refused_before_anything_is_written(
    tmp_path: Path, _minari_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """An episode in Minari's HDF5 storage records its seed as a 64-bit integer: a seed that gave
    env i a first seed past 2**64 - 1 failed only once that env's first episode was written
    ("Object dtype dtype('O') has no native HDF5 equivalent", exit status 1), after others had
    been. Refused before anything is written, by the command, collect and export; our format
    keeps any seed, and seeds up to 2**64 - 1 are recorded as given."""
    seed = 2**64 - 2  # env 1 starts from 2**64 - 1, which fits; env 2 from 2**64
    message = (
        "expected first-episode seeds of at most 2**64 - 1 with Minari's HDF5 storage (an episode records its "
        "seed as a 64-bit integer; the Arrow storage records any), got {}, which gives env 2 the seed "
        f"{2**64}"
    )
    refuse_to_build_envs(monkeypatch, "a seed Minari cannot record")
    args = ["--num-envs", "3", "--num-workers", "1", "--steps", "30", "--seed", str(seed), "--quiet"]
    assert main([*args, "--format", "minari", "--dataset-id", "big/seed-v0", "--out", str(_minari_root)]) == 2
    assert capsys.readouterr().err == f"vecenv-collect: error: --seed: {message.format(seed)}\n"
    with pytest.raises(ValueError, match=re.escape(f"seed: {message.format(seed)}")):
        collect(sync_envs(3), seed=seed, steps=30, format="minari", dataset_id="big/seed-v0", progress=False)
    ours = collect(sync_envs(3), seed=seed, out=tmp_path / "ours", steps=30, progress=False)
    where = f"seed {seed} in {str(ours.path)!r}"
    with pytest.raises(ValueError, match=re.escape(f"dataset: {message.format(where)}")):
        export_minari(ours, "big/exported-v0")
    assert not _minari_root.exists()
    fits = collect(sync_envs(2), seed=seed, episodes=4, format="minari", dataset_id="big/fits-v0", progress=False)
    recorded = [m["seed"] for m in fits.storage.get_episode_metadata(range(4)) if "seed" in m]
    assert sorted(recorded) == [seed, seed + 1]  # each env's first episode


def test_export_of_dict_and_tuple_spaces_gives_what_collecting_gives(tmp_path: Path) -> None:
    """Nested observation and action spaces: each leaf's file is found by its field name."""
    ours = collect(sync_envs(2, env_class=DictCounterEnv), seed=3, out=tmp_path / "ours", steps=30, progress=False)
    exported = export_minari(tmp_path / "ours", "nested-exported-v0")
    collected = collect(
        sync_envs(2, env_class=DictCounterEnv),
        seed=3,
        format="minari",
        dataset_id="nested-collected-v0",
        steps=30,
        progress=False,
    )
    assert exported.total_episodes == collected.total_episodes > 0
    for a, b in zip(exported.iterate_episodes(), collected.iterate_episodes()):
        for name in ("observations", "actions", "rewards", "terminations", "truncations"):
            for x, y in zip(leaves(getattr(a, name)), leaves(getattr(b, name))):
                np.testing.assert_array_equal(x, y, err_msg=name)
    assert_same_episodes(minari.load_dataset("nested-exported-v0"), ours)


def test_cli_collect_and_export_to_minari(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    common = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "3", "--num-workers", "2", "--seed", "1"]
    assert (
        main(
            [
                *common,
                "--episodes",
                "8",
                "--format",
                "minari",
                "--dataset-id",
                "cli/counter-v0",
                "--author",
                "Ada",
                "--description",
                "a test",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "episodes:    8" in out and 'minari.load_dataset("cli/counter-v0")' in out
    loaded = minari.load_dataset("cli/counter-v0")
    assert loaded.total_episodes == 8 and loaded.storage.metadata["author"] == {"Ada"}
    assert loaded.env_spec.id == "RolloutCounter-v0"
    assert main([*common, "--episodes", "8", "--quiet", "--out", str(tmp_path / "ours")]) == 0
    assert_same_episodes(loaded, load(tmp_path / "ours"))
    assert main(["export", str(tmp_path / "ours"), "--dataset-id", "cli/exported-v0", "--quiet"]) == 0
    exported = minari.load_dataset("cli/exported-v0")
    assert_same_episodes(exported, load(tmp_path / "ours"))
    env = exported.recover_environment()
    env.close()


def test_a_failed_write_never_reports_an_earlier_minari_dataset_written_a_moment_before_as_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """As for our format: a run with --overwrite that cannot write its first episode leaves the
    dataset an earlier run wrote a moment before, and says so, not that it kept its episodes."""
    from vecenv.datasets import collection

    root = tmp_path / "root"
    args = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "2", "--num-workers", "1", "--episodes"]
    args += ["2", "--quiet", "--format", "minari", "--dataset-id", "ns/moment-v0", "--out", str(root)]
    assert main(args) == 0  # the earlier run, a moment ago
    capsys.readouterr()
    data = root / "ns" / "moment-v0" / "data"

    def full_disk(run: Any) -> None:
        raise OSError(28, "No space left on device", str(data / "main_data.hdf5"))

    monkeypatch.setattr(collection, "record_transitions", full_disk)
    assert main([*args, "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"vecenv-collect: error: cannot write {data / 'main_data.hdf5'}: No space left on device; "
        "no episode was written; Minari dataset 'ns/moment-v0' is as it was\n"
    ), err
    assert minari.MinariDataset(data).total_episodes == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "minari"], "--dataset-id: required with --format minari"),
        (["--format", "minari", "--dataset-id", "bad id"], "--dataset-id: expected 'NAMESPACE/NAME-vN'"),
        (["--dataset-id", "x-v0"], "--dataset-id: only with --format minari"),
        (["--open-episodes", "drop"], "--open-episodes: only with --format minari"),
        (["--minari-storage", "arrow"], "--minari-storage: only with --format minari"),
        (
            ["--format", "minari", "--dataset-id", "x-v0", "--episodes", "3", "--open-episodes", "drop"],
            "--open-episodes: only with --steps",
        ),
        (["export", "/no/such/dir", "--dataset-id", "x-v0"], "DIR: path: expected a rollout dataset directory"),
    ],
)
def test_cli_minari_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture, args: list[str], message: str
) -> None:
    assert main([*args, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vecenv-collect") and err.count("\n") == 1 and message in err, err


# ------------------------------------------------------------------------ without Minari


def test_without_minari_collect_raises_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "minari", None)  # import minari raises ImportError
    envs = sync_envs(2)
    with pytest.raises(MinariNotInstalledError, match=r'pip install "vecenv\[minari\]"'):
        collect(envs, steps=5, format="minari", dataset_id="x-v0", progress=False)
    assert envs.envs[0]._t == 0  # never stepped


def test_arrow_storage_without_pyarrow_raises_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    envs = sync_envs(2)
    with pytest.raises(MinariNotInstalledError, match=r'pyarrow: pip install "minari\[arrow\]"'):
        collect(envs, steps=5, format="minari", dataset_id="x-v0", progress=False, minari_storage="arrow")
    with pytest.raises(ValueError, match=r"minari_storage: expected one of \['hdf5', 'arrow'\], got 'zarr'"):
        collect(envs, steps=5, format="minari", dataset_id="x-v0", progress=False, minari_storage="zarr")
    assert envs.envs[0]._t == 0  # never stepped


def test_without_minari_the_command_fails_at_once_with_one_line(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['minari'] = None\n"
        "from vecenv.datasets import main\n"
        "raise SystemExit(main(sys.argv[1:]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "--format", "minari", "--dataset-id", "cartpole/random-v0", "--episodes", "100"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(
        'vecenv-collect: error: Minari output needs the minari extra: pip install "vecenv[minari]"'
    )
    assert result.stdout == "" and not (tmp_path / "rollouts").exists()


@pytest.mark.timeout(120)
def test_docs_minari_example_runs(tmp_path: Path) -> None:
    """docs/datasets.md's Minari example, as written (tests/test_docs.py leaves it to this
    test, which also checks what it wrote)."""
    text = (REPO / "docs" / "datasets.md").read_text()
    example = text.split("tested-by tests/datasets/test_minari.py -->\n```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(example + "    print('EXAMPLE-OK')\n")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": str(REPO), "MINARI_DATASETS_PATH": str(tmp_path / "root")},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "100" and result.stdout.strip().endswith("EXAMPLE-OK")
    assert minari.MinariDataset(tmp_path / "root" / "cartpole" / "random-v1" / "data").total_episodes == 100


def interrupted_at_call(n: int) -> Any:
    """A policy of action 0 that raises ``KeyboardInterrupt`` (Ctrl+C) at its ``n``-th call."""
    calls = []

    def policy(observation: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return np.zeros(len(observation), dtype=np.int64)

    return policy


def test_interrupted_collection_keeps_the_finished_episodes(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        collect(
            sync_envs(3), interrupted_at_call(30), episodes=1000, format="minari", dataset_id="cut-v0", progress=False
        )
    loaded = minari.load_dataset("cut-v0")
    record = loaded.storage.metadata["vecenv"]
    assert record["complete"] is False and 0 < loaded.total_episodes == record["counts"]["episodes"] < 1000
    assert all(e.terminations[-1] or e.truncations[-1] for e in loaded.iterate_episodes())
    assert not list((tmp_path / "minari-root").glob(".vecenv-spill-*"))


@pytest.mark.timeout(60)
def test_a_second_ctrl_c_while_the_dataset_is_finished_still_leaves_it_marked_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl+C ends the run; a second one (a user pressing it twice, a supervisor's SIGTERM after
    it) came while the dataset's counts were written and cut that short: the dataset had no
    ``vecenv`` entry, so nothing said it was incomplete. The second is now held until the
    dataset is finished."""
    from vecenv.datasets import minari as minari_sink

    original, sent = minari_sink._dataset_size, []

    def signalled_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl+C, as the final counts are written
        return original(*args, **kwargs)

    monkeypatch.setattr(minari_sink, "_dataset_size", signalled_meanwhile)
    with pytest.raises(KeyboardInterrupt):
        collect(
            sync_envs(3), interrupted_at_call(30), episodes=1000, format="minari", dataset_id="twice-v0", progress=False
        )
    assert sent, "the second signal was sent"
    loaded = minari.load_dataset("twice-v0")
    record = loaded.storage.metadata["vecenv"]
    assert record["complete"] is False and 0 < loaded.total_episodes == record["counts"]["episodes"] < 1000


def test_a_spec_minari_cannot_record_is_left_out_with_a_warning(tmp_path: Path) -> None:
    import gymnasium

    gymnasium.register("ClassEntryCounter-v0", entry_point=CounterEnv)  # a callable: no JSON for it
    try:
        envs = gymnasium.make_vec("ClassEntryCounter-v0", 2, vectorization_mode="sync")
        with pytest.warns(UserWarning, match="records no env spec.*Callable found"):
            dataset = collect(envs, episodes=3, format="minari", dataset_id="ns/class-v0", progress=False)
        envs.close()
    finally:
        gymnasium.registry.pop("ClassEntryCounter-v0")
    assert dataset.total_episodes == 3 and dataset.env_spec is None


def test_a_relative_out_holds_a_minari_dataset_that_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    dataset = collect(sync_envs(2), episodes=3, format="minari", dataset_id="ns/rel-v0", out="rel", progress=False)
    assert dataset.total_episodes == 3
    assert minari.MinariDataset(tmp_path / "rel" / "ns" / "rel-v0" / "data").total_episodes == 3


def test_a_collection_interrupted_before_its_first_episode_leaves_no_dataset(tmp_path: Path) -> None:
    def policy(observation: np.ndarray) -> np.ndarray:
        raise KeyboardInterrupt  # at the first step: no episode has finished

    with pytest.raises(KeyboardInterrupt):
        collect(sync_envs(2), policy, episodes=10, format="minari", dataset_id="ns/early-v0", progress=False)
    assert not (tmp_path / "minari-root" / "ns" / "early-v0").exists()  # nothing Minari cannot load
    dataset = collect(sync_envs(2), episodes=3, format="minari", dataset_id="ns/early-v0", progress=False)
    assert dataset.total_episodes == 3  # and the id is free


def files_and_folders(root: Path) -> dict[str, str | None]:
    """Every path under ``root`` with a file's text (None for a folder)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_text() for p in root.rglob("*")}


@pytest.mark.parametrize(
    ("dataset_id", "existing"),
    [
        ("ns/early-v0", []),
        ("ns/early-v0", ["ns/namespace_metadata.json"]),
        ("ns/early-v0", ["ns/notes.txt"]),
        ("a/b/early-v0", ["a/namespace_metadata.json"]),
    ],
    ids=["new-namespace", "namespace-there", "folder-there", "nested-in-a-namespace-there"],
)
def test_a_collection_that_writes_no_episode_leaves_nothing_minari_made_for_its_namespace(
    tmp_path: Path, dataset_id: str, existing: list[str]
) -> None:
    """Minari writes ``namespace_metadata.json`` (and the namespace's folders) when it creates a
    dataset whose id has a namespace: a run stopped before its first episode removes what it
    made, and nothing that was there before."""
    root = tmp_path / "minari-root"
    root.mkdir()
    for name in existing:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text('{"description": "there before"}')
    before = files_and_folders(root)

    def policy(observation: np.ndarray) -> np.ndarray:
        assert (root / dataset_id).is_dir()  # the dataset (and its namespace) were made
        raise KeyboardInterrupt  # at the first step: no episode has finished

    with pytest.raises(KeyboardInterrupt):
        collect(sync_envs(2), policy, episodes=10, format="minari", dataset_id=dataset_id, progress=False)
    assert files_and_folders(root) == before


@pytest.mark.timeout(120)
def test_the_command_interrupted_before_its_first_episode_leaves_no_root_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from vecenv.datasets import collection

    def interrupted(run: Any) -> None:
        assert (root / "ns" / "cut-v0").is_dir()
        raise KeyboardInterrupt

    monkeypatch.setattr(collection, "record_transitions", interrupted)
    root = tmp_path / "new-root"
    args = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "2", "--num-workers", "1", "--episodes"]
    assert main([*args, "2", "--quiet", "--format", "minari", "--dataset-id", "ns/cut-v0", "--out", str(root)]) == 130
    assert capsys.readouterr().err == (
        "vecenv-collect: interrupted: no episode had finished, so no Minari dataset 'ns/cut-v0' was written\n"
    )
    assert not root.exists()


def test_the_export_command_interrupted_says_what_it_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Ctrl+C while ``export`` writes its third episode: one line says the first two were kept
    (and how to replace them), and Minari loads them; it said nothing."""
    from vecenv.datasets import minari as minari_output

    collect(sync_envs(2), seed=0, out=tmp_path / "ours", episodes=6, progress=False).close()
    write = minari_output.MinariSink.episode

    def interrupted_at_the_third(sink: Any, *args: Any, **kwargs: Any) -> None:
        if sink.episodes == 2:
            raise KeyboardInterrupt
        write(sink, *args, **kwargs)

    monkeypatch.setattr(minari_output.MinariSink, "episode", interrupted_at_the_third)
    root = tmp_path / "root"
    assert main(["export", str(tmp_path / "ours"), "--dataset-id", "ns/cut-v0", "--out", str(root), "--quiet"]) == 130
    assert capsys.readouterr().err == (
        "vecenv-collect export: interrupted: kept the episodes exported so far in Minari dataset 'ns/cut-v0' "
        f'under {root} ("complete": false in its vecenv metadata; --overwrite replaces it)\n'
    )
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    loaded = minari.load_dataset("ns/cut-v0")
    assert loaded.total_episodes == 2 and loaded.storage.metadata["vecenv"]["complete"] is False


@pytest.mark.parametrize("storage", STORAGES)
def test_minaris_counts_follow_each_doubling_so_a_killed_run_keeps_half(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, storage: str
) -> None:
    """Checked after every episode written, as a run killed then would leave it (no finalize):
    Minari loads the dataset and counts at least half of the episodes written, from the first."""
    from vecenv.datasets import minari as minari_output

    monkeypatch.setattr(minari_output, "FLUSH_INTERVAL_S", 1e9)  # only the doubling rule
    write = minari_output.MinariSink.episode
    seen: list[tuple[int, int]] = []

    def checked(sink: Any, *args: Any, **kwargs: Any) -> None:
        write(sink, *args, **kwargs)
        metadata = json.loads((sink.storage.data_path / "metadata.json").read_text())
        readable = minari.MinariDataset(sink.storage.data_path)
        assert readable.total_episodes == metadata["total_episodes"]
        if readable.total_episodes:
            (last,) = list(readable.storage.get_episodes([readable.total_episodes - 1]))
            assert len(last["actions"]) > 0
        seen.append((sink.episodes, metadata["total_episodes"]))

    monkeypatch.setattr(minari_output.MinariSink, "episode", checked)
    collect(sync_envs(2), episodes=9, format="minari", dataset_id="ns/half-v0", progress=False, minari_storage=storage)
    assert [written for written, _ in seen] == list(range(1, 10))
    assert all(2 * counted >= written and counted >= 1 for written, counted in seen), seen


def test_export_of_a_dataset_without_a_recorded_spec_uses_the_registered_one(tmp_path: Path) -> None:
    import json

    envs = vecenv.make("RolloutCounter-v0", 2, 1)
    try:
        collect(envs, episodes=4, out=tmp_path / "old", progress=False)
    finally:
        envs.close()
    metadata_file = tmp_path / "old" / "metadata.json"
    metadata = json.loads(metadata_file.read_text())
    del metadata["env_spec"]  # as datasets written before the spec was recorded
    metadata_file.write_text(json.dumps(metadata))
    exported = export_minari(tmp_path / "old", "old-v0")
    assert exported.env_spec.id == "RolloutCounter-v0"
    assert_same_episodes(exported, load(tmp_path / "old"))


def test_export_of_a_dataset_without_an_episode_to_write_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Minari cannot load a dataset without episodes: a clear error, and nothing is written."""
    collect(sync_envs(2), steps=2, out=tmp_path / "short", progress=False)  # episodes still open
    with pytest.raises(ValueError, match=r"dataset: expected a dataset with an episode to export .* 2 transitions"):
        export_minari(tmp_path / "short", "short-v0", open_episodes="drop")
    root = Path(os.environ["MINARI_DATASETS_PATH"])
    assert not (root / "short-v0").exists()
    # Refused before an existing dataset of that id is replaced.
    collect(sync_envs(2), steps=30, out=tmp_path / "full", progress=False)
    kept = export_minari(tmp_path / "full", "kept-v0").total_episodes
    with pytest.raises(ValueError, match=r"nothing was written"):
        export_minari(tmp_path / "short", "kept-v0", open_episodes="drop", overwrite=True)
    assert minari.MinariDataset(root / "kept-v0" / "data").total_episodes == kept > 0
    assert main(["export", str(tmp_path / "short"), "--dataset-id", "short-v0", "--open-episodes", "drop"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vecenv-collect export: error: dataset: expected a dataset with an episode")
    assert err.count("\n") == 1


def test_cli_export_to_an_out_in_a_directory_access_denies_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``export --out`` in a folder this process may not write in: exit status 2 and one line
    naming --out, as for ``collect``; it was reported as a write failure (status 1).
    ``os.access`` is monkeypatched: as root a 0o555 directory is writable."""
    collect(sync_envs(2), steps=30, out=tmp_path / "ours", progress=False)
    read_only = tmp_path / "ro"
    read_only.mkdir()
    deny_writes_in(monkeypatch, read_only)
    for out, where in [(read_only, "which"), (read_only / "d", f"where {str(read_only)!r}")]:
        assert main(["export", str(tmp_path / "ours"), "--dataset-id", "ro-v0", "--out", str(out), "--quiet"]) == 2
        assert capsys.readouterr().err == (
            f"vecenv-collect export: error: --out: expected a directory this process may write in, got {str(out)!r}, "
            f"{where} is not writable (permission denied)\n"
        )
    assert list(read_only.iterdir()) == []


def test_cli_overwrite_of_a_minari_dataset_whose_folder_access_denies_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``--overwrite`` moves the dataset aside within its folder: where that folder is not
    writable, exit status 2 before any env starts (it failed after the run, status 1)."""

    root = tmp_path / "root"
    collect(sync_envs(2), steps=30, out=tmp_path / "ours", progress=False)
    export_minari(tmp_path / "ours", "ns/kept-v0", out=root)
    read_only = root / "ns"
    before = sorted(path.relative_to(read_only) for path in read_only.rglob("*"))
    deny_writes_in(monkeypatch, read_only)
    refuse_to_build_envs(monkeypatch, "a dataset that cannot be replaced")
    message = (
        f": error: --out: expected an output that --overwrite may replace, got "
        f"{str(read_only / 'kept-v0')!r}, whose folder {str(read_only)!r} is not writable (permission denied)\n"
    )
    minari_options = ["--dataset-id", "ns/kept-v0", "--out", str(root), "--overwrite", "--quiet"]
    assert main(["--steps", "10", "--format", "minari", *minari_options]) == 2
    assert capsys.readouterr().err == "vecenv-collect" + message
    assert main(["export", str(tmp_path / "ours"), *minari_options]) == 2
    assert capsys.readouterr().err == "vecenv-collect export" + message
    assert sorted(path.relative_to(read_only) for path in read_only.rglob("*")) == before


# ------------------------------------------------------------------------ Minari's own view


def minari_checks(dataset_id: str) -> None:
    """The checks Minari runs on the datasets its own tests create: the dataset is listed and
    loads under its id; the episode count and the steps add up to its metadata; every
    episode has ``total_steps + 1`` observations and ``total_steps`` actions, rewards,
    terminations and truncations, each observation and action inside its space; and Minari
    deletes it."""
    assert dataset_id in minari.list_local_datasets()
    dataset = minari.load_dataset(dataset_id)
    assert dataset.spec.dataset_id == dataset_id
    storage = dataset.storage
    metadata = list(storage.get_episode_metadata(range(dataset.total_episodes)))
    episodes = list(storage.get_episodes(range(dataset.total_episodes)))
    assert len(episodes) == storage.total_episodes == dataset.total_episodes
    assert sum(m["total_steps"] for m in metadata) == storage.total_steps == dataset.total_steps
    for episode, meta in zip(episodes, metadata):
        steps = meta["total_steps"]
        assert meta["id"] == episode["id"]
        for name, rows, space in (
            ("observations", steps + 1, dataset.observation_space),
            ("actions", steps, dataset.action_space),
        ):
            assert all(len(leaf) == rows for leaf in leaves(episode[name])), name
            for i in range(rows):
                assert space.contains(_at(episode[name], i)), (name, i)
        assert len(episode["rewards"]) == len(episode["terminations"]) == len(episode["truncations"]) == steps
    minari.delete_dataset(dataset_id)
    assert dataset_id not in minari.list_local_datasets()


def _at(value: Any, i: int) -> Any:
    if isinstance(value, dict):
        return {k: _at(v, i) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_at(v, i) for v in value)
    return value[i]


def _collector_dataset(env_class: type, seed: int, episodes: list[np.ndarray], actions: Any, dataset_id: str) -> Any:
    """What Minari's ``DataCollector`` records for one env reset with ``seed`` (later resets
    unseeded, continuing its generator, as in a vector env) that takes ``actions`` (ours,
    per leaf) row by row, episode after episode."""
    pytest.importorskip("jax", reason="Minari's DataCollector needs jax (minari[create])")
    from minari import DataCollector

    env = DataCollector(env_class())
    env.reset(seed=seed)
    for number, rows in enumerate(episodes):
        if number:
            env.reset(options={"minari_autoseed": False})
        for row in rows:
            env.step(_at(actions, row))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # for each optional field left out
        # The collector drops or removes its temporary directories, whose finalizers then warn.
        warnings.simplefilter("ignore", ResourceWarning)
        dataset = env.create_dataset(dataset_id=dataset_id, algorithm_name="replay")
        env.close()
        del env
        gc.collect()
    return dataset


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("env_class", [CounterEnv, DictCounterEnv], ids=["box", "dict"])
def test_episodes_equal_what_minari_data_collector_records(tmp_path: Path, env_class: type, storage: str) -> None:
    """Per env, replaying our actions through Minari's own ``DataCollector`` from the same
    seed records the same episodes, arrays, dtypes and episode metadata; the collector's
    metadata callback adds only its reward statistics."""
    ours = collect(sync_envs(3, env_class=env_class), episodes=14, seed=7, out=tmp_path / "ours", progress=False)
    collect(
        sync_envs(3, env_class=env_class),
        episodes=14,
        seed=7,
        format="minari",
        dataset_id="vc/ours-v0",
        progress=False,
        minari_storage=storage,
    )
    written = minari.load_dataset("vc/ours-v0")
    groups = native_episodes(ours)
    env_of = [int(ours["env_ids"][g[0]]) for g in groups]
    per_env = {env: [g for g, e in zip(groups, env_of) if e == env] for env in set(env_of)}
    recorded = {
        env: _collector_dataset(env_class, 7 + env, rows, ours["actions"], f"vc/collector{env}-v0")
        for env, rows in per_env.items()
    }
    position = dict.fromkeys(per_env, 0)
    ours_metadata = list(written.storage.get_episode_metadata(range(written.total_episodes)))
    for episode, meta, env in zip(written.iterate_episodes(), ours_metadata, env_of):
        theirs = recorded[env]
        index = position[env]
        position[env] += 1
        reference = theirs[index]
        for name in ("observations", "actions", "rewards", "terminations", "truncations"):
            for mine, expected in zip(leaves(getattr(episode, name)), leaves(getattr(reference, name))):
                np.testing.assert_array_equal(mine, expected, err_msg=name)
                assert mine.dtype == expected.dtype, name
        # No infos recorded, by either: {} (not None, on which EpisodeData's repr fails).
        assert episode.infos == reference.infos == {}
        assert "infos=dict with the following keys: []" in repr(episode)
        (their_meta,) = theirs.storage.get_episode_metadata([index])
        their_meta.pop("options", None)  # the replay's reset(options={"minari_autoseed": False})
        rewards_stats = {"rewards_sum", "rewards_mean", "rewards_std", "rewards_max", "rewards_min"}
        assert set(their_meta) - set(meta) == rewards_stats
        assert {k: v for k, v in their_meta.items() if k not in rewards_stats | {"id"}} == {
            k: v for k, v in meta.items() if k != "id"
        }
        assert meta["id"] == episode.id
    assert written.total_episodes == 14 and sum(position.values()) == 14
    minari_checks("vc/ours-v0")


def test_an_episode_cut_while_written_leaves_no_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+C inside an episode's write: the file keeps only the finished episodes, numbered as
    Minari numbers them, so Minari itself can append to the dataset afterwards."""
    import h5py

    from vecenv.datasets.hdf5_episodes import Hdf5EpisodeFile

    original = Hdf5EpisodeFile._write_rows
    calls = []

    def cut_fourth(self: Any, header: Any, base: int, extents: Any, pieces: Any) -> None:
        calls.append(base)
        if len(calls) == 4:

            def interrupted(source: Any) -> Any:
                yield next(source)  # the header and the first rows are on disk when it is cut
                raise KeyboardInterrupt

            pieces = interrupted(pieces)
        original(self, header, base, extents, pieces)

    monkeypatch.setattr(Hdf5EpisodeFile, "_write_rows", cut_fourth)
    with pytest.raises(KeyboardInterrupt):
        collect(sync_envs(2), episodes=10, seed=0, format="minari", dataset_id="cut/mid-v0", progress=False)
    loaded = minari.load_dataset("cut/mid-v0")
    assert loaded.total_episodes == 3 and loaded.storage.metadata["vecenv"]["complete"] is False
    with h5py.File(loaded.storage.data_path / "main_data.hdf5", "r") as file:
        assert sorted(file) == ["episode_0", "episode_1", "episode_2"]
    minari_checks("cut/mid-v0")


def test_minari_appends_its_own_episodes_to_a_collected_dataset() -> None:
    """The file vecenv writes is one libhdf5 extends: Minari's ``update_dataset_from_buffer``
    adds an episode, and every episode reads back."""
    from minari.data_collector.episode_buffer import EpisodeBuffer

    dataset = collect(sync_envs(2), episodes=5, seed=1, format="minari", dataset_id="append/counter-v0", progress=False)
    before = [episode.observations.copy() for episode in dataset.iterate_episodes()]
    observations = np.arange(4, dtype=dataset.observation_space.dtype).reshape(4, *dataset.observation_space.shape)
    terminations = [False, False, True]
    buffer = EpisodeBuffer(
        observations=list(observations),
        actions=[dataset.action_space.sample() for _ in range(3)],
        rewards=[1.0] * 3,
        terminations=terminations,
        truncations=[False] * 3,
    )
    dataset.update_dataset_from_buffer([buffer])
    loaded = minari.load_dataset("append/counter-v0")
    episodes = list(loaded.iterate_episodes())
    assert loaded.total_episodes == len(episodes) == 6
    for episode, observations_before in zip(episodes, before):
        np.testing.assert_array_equal(episode.observations, observations_before)
    np.testing.assert_array_equal(episodes[5].observations, observations)
    assert list(episodes[5].terminations) == terminations
    minari_checks("append/counter-v0")


@pytest.mark.timeout(120)
def test_a_collection_killed_outright_leaves_a_dataset_minari_loads_whole(tmp_path: Path) -> None:
    """SIGKILL to the whole command mid-run: no finalize, no close. Minari's counts follow what
    the HDF5 file's last index holds, so the dataset loads and every episode it counts reads."""
    root = tmp_path / "minari-root"
    command = [sys.executable, "-m", "vecenv.datasets", "--env", "CartPole-v1", "--steps", "50000000"]
    command += ["--format", "minari", "--dataset-id", "killed/cart-v0", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "MINARI_DATASETS_PATH": str(root)}
    process = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True, stderr=subprocess.PIPE)
    metadata = root / "killed" / "cart-v0" / "data" / "metadata.json"
    counted, updates = 0, set()
    try:
        deadline = time.monotonic() + 90
        # Killed after its counts were written a third time: by then episodes are written that
        # the file's last index (made when the count doubled) does not hold yet.
        while len(updates) < 3 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the file the run updates about once a second
            try:
                stamp = metadata.stat().st_mtime_ns
                counted = json.loads(metadata.read_text()).get("total_episodes") or 0
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            if counted:
                updates.add(stamp)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, stderr.decode()
    assert len(updates) == 3 and counted > 0, "the run did not report its episodes three times"
    loaded = minari.load_dataset("killed/cart-v0")
    assert "vecenv" not in loaded.storage.metadata  # written by finalize alone, which never ran
    episodes = list(loaded.iterate_episodes())
    assert len(episodes) == loaded.total_episodes >= counted
    assert sum(len(e.actions) for e in episodes) == loaded.total_steps
    assert all(e.terminations[-1] or e.truncations[-1] for e in episodes)
    assert all(len(e.observations) == len(e.actions) + 1 for e in episodes)


@pytest.mark.parametrize("where", ["policy", "setup"])
def test_an_overwrite_that_writes_no_episode_leaves_the_old_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """``overwrite=True`` replaces the old dataset only once the run has written an episode: a
    run refused or interrupted before that (the policy at its first step; Ctrl+C while the
    progress bar or the episode stager is set up) leaves the old one as it was, and nothing
    hidden beside it."""
    old = collect(sync_envs(2), episodes=3, format="minari", dataset_id="ns/keep-v0", progress=False)
    steps = old.total_steps
    namespace = tmp_path / "minari-root" / "ns"
    before = sorted(p.name for p in namespace.iterdir())

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    if where == "setup":
        from vecenv.datasets import collection

        monkeypatch.setattr(collection, "EpisodeStager", interrupted)
        policy: Any = "random"
    else:
        policy = interrupted
    with pytest.raises(KeyboardInterrupt):
        collect(sync_envs(2), policy, episodes=10, format="minari", dataset_id="ns/keep-v0", overwrite=True)
    assert sorted(p.name for p in namespace.iterdir()) == before
    kept = minari.MinariDataset(namespace / "keep-v0" / "data")
    assert kept.total_episodes == 3 and kept.total_steps == steps


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="needs pyarrow (minari[arrow])")
def test_finalizing_an_arrow_dataset_of_many_episodes_takes_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Minari's size walk holds a path for every file and folder: a folder per Arrow episode, so
    the last step of a long run peaked higher with each episode. The size recorded is the one
    Minari's walk gives, reached without it."""
    import tracemalloc

    from vecenv.datasets import minari as minari_output

    finalize = minari_output.MinariSink.finalize
    peaks: list[int] = []

    def measured(sink: Any, complete: bool) -> Any:
        tracemalloc.start()
        try:
            return finalize(sink, complete)
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    monkeypatch.setattr(minari_output.MinariSink, "finalize", measured)
    envs = SyncVectorEnv([lambda: CounterEnv(max_length=1) for _ in range(4)])
    collect(envs, episodes=3000, format="minari", dataset_id="many-v0", progress=False, minari_storage="arrow")
    loaded = minari.load_dataset("many-v0")
    assert loaded.total_episodes == 3000
    assert loaded.storage.metadata["dataset_size"] == loaded.storage.get_size()
    (peak,) = peaks
    assert peak < 400_000, f"finalize peaked at {peak} bytes traced for 3000 episodes"


@pytest.mark.parametrize("storage", ["arrow", "hdf5"])
def test_the_size_recorded_while_collecting_is_minaris(
    storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each time the counts are recorded during the run (for a run killed outright), the size
    is what Minari's walk of the files gives at that moment. An Arrow dataset's running size
    counted only its files, not the folder of each episode that the walk counts too (4 KiB an
    episode on ext4: 4.2 MB short at 1,024 episodes)."""
    if storage == "arrow" and importlib.util.find_spec("pyarrow") is None:
        pytest.skip("needs pyarrow (minari[arrow])")
    from vecenv.datasets import minari as minari_output

    update = minari_output._update_metadata
    recorded: list[tuple[int, float, float]] = []

    def checked(data_path: Path, values: dict[str, Any]) -> None:
        update(data_path, values)
        if "dataset_size" in values:
            recorded.append((values["total_episodes"], values["dataset_size"], minari_output._dataset_size(data_path)))

    monkeypatch.setattr(minari_output, "_update_metadata", checked)
    envs = SyncVectorEnv([lambda: CounterEnv(max_length=1) for _ in range(4)])
    collect(envs, episodes=1100, format="minari", dataset_id="sized-v0", progress=False, minari_storage=storage)
    assert max(episodes for episodes, _, _ in recorded) >= 1024, recorded
    assert [(e, size) for e, size, _ in recorded] == [(e, walked) for e, _, walked in recorded]
