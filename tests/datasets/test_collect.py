"""Tests of vecenv.datasets: exact counts, real transitions only, determinism, the dataset
format, interruption, and the vecenv-collect command line."""

from __future__ import annotations

import errno
import functools
import gc
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vecenv
from tests.helpers.envs import (
    ContinuousCounterEnv,
    CounterEnv,
    DictCounterEnv,
    LongEpisodeEnv,
    constant_policy,
    constant_policy_with_extras,
)
from tests.helpers.limits import file_size_limit
from tests.helpers.output_paths import deny_writes_in, refuse_to_build_envs
from vecenv import datasets as rollout
from vecenv.bench import procfs
from vecenv.datasets import PolicyError, UnsupportedSpaceError, collect, load, main

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "collect_rollouts.py"
MODES = list(AutoresetMode)
FIELDS = [
    "observations",
    "next_observations",
    "actions",
    "rewards",
    "terminations",
    "truncations",
    "env_ids",
    "episode_ids",
]


def counter_envs(num_envs: int, mode: AutoresetMode, env_class: type = CounterEnv, **kwargs: Any) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: env_class(**kwargs) for _ in range(num_envs)], autoreset_mode=mode)


def collect_sync(
    out: Path, num_envs: int, mode: AutoresetMode, policy: Any = "random", max_length: int = 7, **kwargs: Any
) -> rollout.Dataset:
    envs = counter_envs(num_envs, mode, max_length=max_length)
    try:
        return collect(envs, policy, out=out, progress=False, **kwargs)
    finally:
        envs.close()


def npy_bytes(path: Path) -> dict[str, bytes]:
    """Every .npy file of a dataset, by name, as raw bytes."""
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.npy"))}


def column(dataset: rollout.Dataset, name: str) -> np.ndarray:
    return np.asarray(dataset[name])


def check_real_transitions(dataset: rollout.Dataset) -> None:
    """Every record of a CounterEnv dataset is a real step: next_obs == obs + 1, the reward is
    the action, per env the records run 0, 1, ... within an episode, observation 0 (a reset)
    appears exactly at episode starts, and episode ids change exactly there."""
    obs, next_obs = column(dataset, "observations")[:, 0], column(dataset, "next_observations")[:, 0]
    terminations, truncations = column(dataset, "terminations"), column(dataset, "truncations")
    np.testing.assert_array_equal(next_obs, obs + 1)
    np.testing.assert_array_equal(column(dataset, "rewards"), column(dataset, "actions").astype(np.float64))
    assert not (terminations & truncations).any()
    done = terminations | truncations
    env_ids, episode_ids = column(dataset, "env_ids"), column(dataset, "episode_ids")
    for env in np.unique(env_ids):
        rows = env_ids == env
        starts = np.r_[True, done[rows][:-1]]
        np.testing.assert_array_equal(obs[rows] == 0, starts)
        episodes = episode_ids[rows]
        np.testing.assert_array_equal(np.r_[True, episodes[1:] != episodes[:-1]], starts)
        assert np.all(np.diff(episodes) >= 0)


# ------------------------------------------------------------------------ counts and order


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize(("num_envs", "steps"), [(3, 1), (3, 37), (5, 101)])
def test_steps_writes_exactly_n_in_vector_step_order(
    tmp_path: Path, mode: AutoresetMode, num_envs: int, steps: int
) -> None:
    short = collect_sync(tmp_path / "short", num_envs, mode, steps=steps, seed=3)
    long = collect_sync(tmp_path / "long", num_envs, mode, steps=steps + 2 * num_envs + 1, seed=3)
    assert short.transitions == steps == short.metadata["counts"]["transitions"]
    assert short.complete
    for name in ["rewards", "terminations", "truncations", "env_ids", "episode_ids"]:
        assert len(short[name]) == steps
    # The last vector step contributes the lowest env indices it needs: the short dataset is
    # exactly the start of a longer one.
    for name, data in npy_bytes(short.path).items():
        longer = np.load(long.path / name)
        np.testing.assert_array_equal(np.load(short.path / name), longer[:steps], err_msg=name)
        assert len(data) > 0
    done = column(short, "terminations") | column(short, "truncations")
    assert short.metadata["counts"]["episodes"] == int(done.sum())
    check_real_transitions(short)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_episodes_writes_the_first_n_to_finish_and_nothing_else(tmp_path: Path, mode: AutoresetMode) -> None:
    episodes = 13
    dataset = collect_sync(tmp_path / "episodes", 5, mode, episodes=episodes, seed=7)
    reference = collect_sync(tmp_path / "steps", 5, mode, steps=401, seed=7)
    done = column(dataset, "terminations") | column(dataset, "truncations")
    assert int(done.sum()) == episodes == dataset.metadata["counts"]["episodes"]
    assert done[-1]
    check_real_transitions(dataset)
    # Expected: the same run's episodes in completion order (vector step, then env index),
    # each written whole and contiguously.
    ref_done = column(reference, "terminations") | column(reference, "truncations")
    ref_episode_ids = column(reference, "episode_ids")
    finished = ref_episode_ids[ref_done][:episodes]
    rows = np.concatenate([np.flatnonzero(ref_episode_ids == e) for e in finished])
    assert dataset.transitions == len(rows)
    for name in FIELDS[3:]:
        np.testing.assert_array_equal(column(dataset, name), column(reference, name)[rows], err_msg=name)
    np.testing.assert_array_equal(column(dataset, "observations"), column(reference, "observations")[rows])


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_episodes_finishing_together_are_taken_by_env_index(tmp_path: Path, mode: AutoresetMode) -> None:
    """One-step episodes: all 5 envs finish at every step, so the 13th episode comes from
    the middle of a step and only envs 0, 1, 2 of that step may be written."""
    dataset = collect_sync(tmp_path / "d", 5, mode, episodes=13, max_length=1, seed=0)
    assert dataset.transitions == 13 == dataset.metadata["counts"]["episodes"]
    np.testing.assert_array_equal(dataset["env_ids"], [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2])
    assert np.all(column(dataset, "terminations") | column(dataset, "truncations"))
    assert len(np.unique(dataset["episode_ids"])) == 13
    check_real_transitions(dataset)


def test_all_autoreset_modes_record_the_same_per_env_trajectories(tmp_path: Path) -> None:
    """With a fixed policy the env steps are the same in every mode, so each env's records
    must be too (the interleaving across envs differs: NEXT_STEP spends a step on resets)."""
    datasets = [collect_sync(tmp_path / m.name, 3, m, constant_policy, steps=301, seed=1) for m in MODES]
    for env in range(3):
        trajectories = []
        for dataset in datasets:
            rows = column(dataset, "env_ids") == env
            trajectories.append(
                np.stack(
                    [
                        column(dataset, "observations")[rows, 0],
                        column(dataset, "next_observations")[rows, 0],
                        column(dataset, "rewards")[rows],
                        column(dataset, "terminations")[rows],
                    ]
                )
            )
        shortest = min(t.shape[1] for t in trajectories)
        assert shortest > 50
        for trajectory in trajectories[1:]:
            np.testing.assert_array_equal(trajectory[:, :shortest], trajectories[0][:, :shortest])
        assert np.all(trajectories[0][2] == 2.0)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_vecenv_records_only_real_transitions(tmp_path: Path, mode: AutoresetMode) -> None:
    envs = vecenv.make("RolloutCounter-v0", 3, 2, autoreset_mode=mode)
    try:
        dataset = collect(envs, steps=501, seed=5, out=tmp_path / "d", progress=False)
    finally:
        envs.close()
    assert dataset.transitions == 501
    check_real_transitions(dataset)
    assert (column(dataset, "terminations") | column(dataset, "truncations")).sum() > 50
    # The engine gives SyncVectorEnv's results, so the datasets are identical.
    reference = collect_sync(tmp_path / "sync", 3, mode, steps=501, seed=5)
    assert npy_bytes(dataset.path) == npy_bytes(reference.path)


def test_chunked_writing_gives_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny chunks (episodes longer than a chunk go straight to disk) change nothing."""
    expected_steps = collect_sync(tmp_path / "a", 3, AutoresetMode.SAME_STEP, steps=333, seed=2)
    expected_episodes = collect_sync(tmp_path / "b", 3, AutoresetMode.SAME_STEP, episodes=41, seed=2)
    monkeypatch.setattr(rollout.writer, "CHUNK_BYTES", 100)  # 2 rows of CounterEnv per chunk
    steps = collect_sync(tmp_path / "c", 3, AutoresetMode.SAME_STEP, steps=333, seed=2)
    episodes = collect_sync(tmp_path / "d", 3, AutoresetMode.SAME_STEP, episodes=41, seed=2)
    assert npy_bytes(steps.path) == npy_bytes(expected_steps.path)
    assert npy_bytes(episodes.path) == npy_bytes(expected_episodes.path)
    assert episodes.metadata["counts"] == expected_episodes.metadata["counts"]


# ------------------------------------------------------------------------ dataset format


def test_dict_and_tuple_spaces_have_one_file_per_leaf_and_load_nested(tmp_path: Path) -> None:
    envs = counter_envs(3, AutoresetMode.NEXT_STEP, DictCounterEnv)
    try:
        dataset = collect(envs, steps=61, seed=0, out=tmp_path / "d", progress=False)
    finally:
        envs.close()
    leaves = ["t", "parity", "pair.0", "pair.1"]
    expected = {f"{p}.{leaf}.npy" for p in ("observations", "next_observations") for leaf in leaves}
    expected |= {"actions.0.npy", "actions.1.npy"} | {f"{name}.npy" for name in FIELDS[3:]}
    assert {p.name for p in dataset.path.glob("*.npy")} == expected
    observations = dataset["observations"]
    assert set(observations) == {"t", "parity", "pair"} and isinstance(observations["pair"], tuple)
    t = np.asarray(observations["t"])[:, 0].astype(np.int64)
    assert t.shape == (61,) and isinstance(observations["t"], np.memmap)
    np.testing.assert_array_equal(observations["parity"], t % 2)
    np.testing.assert_array_equal(observations["pair"][0], np.stack([t % 2, t // 2 % 2], axis=1))
    np.testing.assert_array_equal(observations["pair"][1], np.stack([t % 3, t % 4], axis=1))
    np.testing.assert_array_equal(dataset["next_observations"]["t"][:, 0], t + 1)
    discrete, box = dataset["actions"]
    assert box.shape == (61, 2) and box.dtype == np.float32
    np.testing.assert_array_equal(dataset["rewards"], discrete.astype(np.float64))
    description = dataset.metadata["observation_space"]["description"]
    assert description["spaces"]["pair"]["spaces"][1] == {
        "type": "MultiDiscrete",
        "shape": [2],
        "dtype": "int64",
        "nvec": [3, 4],
        "start": [0, 0],
    }


def test_metadata_records_the_run(tmp_path: Path) -> None:
    dataset = collect_sync(
        tmp_path / "d",
        3,
        AutoresetMode.NEXT_STEP,
        steps=20,
        seed=4,
        metadata={"env_id": "RolloutCounter-v0", "command_line": "x --y"},
    )
    metadata = json.loads((dataset.path / "metadata.json").read_text())
    assert metadata == dataset.metadata
    assert metadata["complete"] is True and metadata["seed"] == 4 and metadata["num_envs"] == 3
    assert metadata["env_id"] == "RolloutCounter-v0" and metadata["command_line"] == "x --y"
    assert metadata["policy"] == "random" and metadata["counts"]["transitions"] == 20
    assert metadata["observation_space"]["str"] == str(CounterEnv().observation_space)
    assert metadata["action_space"]["description"] == {
        "type": "Discrete",
        "shape": [],
        "dtype": "int64",
        "n": 3,
        "start": 0,
    }
    assert metadata["versions"]["gymnasium"] == gymnasium.__version__
    assert metadata["start_time"] <= metadata["end_time"]
    length = metadata["stats"]["episode_length"]
    assert 1 <= length["min"] <= length["mean"] <= length["max"] <= 7


# ------------------------------------------------------------------------ library errors


class TextEnv(gymnasium.Env):
    observation_space = gymnasium.spaces.Text(5)
    action_space = gymnasium.spaces.Discrete(2)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"steps": 5, "episodes": 5}, ValueError, r"steps, episodes: expected exactly one.*steps=5, episodes=5"),
        ({}, ValueError, r"expected exactly one of them, got steps=None, episodes=None"),
        ({"steps": 0}, ValueError, r"steps: expected a positive int, got 0"),
        ({"episodes": 2.5}, TypeError, r"episodes: expected a positive int, got 2.5 of type float"),
        ({"steps": 5, "seed": -1}, ValueError, r"seed: expected a non-negative int, got -1"),
        ({"steps": 5, "seed": "1"}, TypeError, r"seed: expected a non-negative int, got '1' of type str"),
        ({"steps": 5, "policy": "greedy"}, ValueError, r"policy: expected 'random' or a callable.*got 'greedy'"),
        ({"steps": 5, "policy": 3}, TypeError, r"policy: expected 'random' or a callable.*got 3"),
        ({"steps": 5, "overwrite": "yes"}, TypeError, r"overwrite: expected True or False, got 'yes'"),
        ({"steps": 5, "progress": None}, TypeError, r"progress: expected True, False or 'auto', got None"),
        ({"steps": 5, "rollout_steps": -1}, ValueError, r"rollout_steps: expected None or a non-negative int, got -1"),
        ({"steps": 5, "rollout_steps": 2.0}, TypeError, r"rollout_steps: expected None or a non-negative int, got 2.0"),
    ],
)
def test_collect_rejects_bad_arguments(tmp_path: Path, kwargs: dict, error: type, match: str) -> None:
    envs = counter_envs(2, AutoresetMode.NEXT_STEP)
    with pytest.raises(error, match=match):
        collect(envs, out=tmp_path / "d", **{"progress": False, **kwargs})
    assert not (tmp_path / "d").exists()


def test_collect_rejects_non_vector_envs_unsupported_spaces_and_existing_out(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"envs: expected a gymnasium.vector.VectorEnv, got CounterEnv"):
        collect(CounterEnv(), steps=3, out=tmp_path / "a")
    with pytest.raises(UnsupportedSpaceError, match=r"observations: expected a fixed-shape space .*got Text"):
        collect(SyncVectorEnv([TextEnv]), steps=3, out=tmp_path / "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match=r"already exists"):
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=tmp_path / "c")
    with pytest.raises(FileExistsError, match=r"not empty and not a rollout dataset"):
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=tmp_path / "c", overwrite=True)
    assert (tmp_path / "c" / "notes.txt").read_text() == "keep me"


def test_an_out_that_is_or_lies_under_a_file_is_refused_before_the_envs_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A file where the dataset directory, or a folder above it, would go: one line naming
    --out (``out``), exit status 2, before any env starts; not "cannot write" after the start."""

    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")

    refuse_to_build_envs(monkeypatch, "an output that cannot be written")
    for out, where in [
        (notes, "which is an existing file"),
        (notes / "d" / "e", f"where {str(notes)!r} is an existing file"),
    ]:
        assert main(["--steps", "10", "--quiet", "--out", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"vecenv-collect: error: --out: expected a directory path, got {str(out)!r}, {where}\n"
        )
        with pytest.raises(
            rollout.OutputExistsError, match=re.escape(f"out: expected a directory path, got {str(out)!r}, {where}")
        ):
            collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=out, progress=False)
    assert notes.read_text() == "keep me" and sorted(tmp_path.iterdir()) == [notes]


def test_an_out_inside_an_existing_dataset_is_refused_before_the_envs_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """An --out inside a rollout dataset's folder, or a Minari dataset's, was written there:
    the rollout dataset then held a folder and --overwrite refused it as "not a rollout
    dataset"; deleting the Minari dataset deleted the output. Now one line naming --out and the
    dataset, exit status 2, before any env starts, and nothing is written."""

    ours = tmp_path / "ours"
    collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=ours, progress=False)
    theirs = tmp_path / "root" / "ns" / "data-v0"
    (theirs / "data").mkdir(parents=True)
    (theirs / "data" / "metadata.json").write_text('{"dataset_id": "ns/data-v0", "total_steps": 3}')
    before = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*"))

    refuse_to_build_envs(monkeypatch, "an output inside a dataset")
    for out, folder, kind in [
        (ours / "sub", ours, "a rollout dataset"),
        (ours / "a" / "b", ours, "a rollout dataset"),
        (theirs / "sub", theirs, "the Minari dataset 'ns/data-v0'"),
    ]:
        message = (
            f"out: expected a path outside any dataset, got {str(out)!r}, which lies in {str(folder)!r}, "
            f"{kind}; choose a folder beside it"
        )
        assert main(["--steps", "10", "--quiet", "--out", str(out), "--overwrite"]) == 2
        assert capsys.readouterr().err == f"vecenv-collect: error: --{message}\n"
        with pytest.raises(rollout.OutputExistsError, match=re.escape(message)):
            collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=out, progress=False)
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*")) == before
    # Beside a dataset is fine, and the dataset itself may be overwritten.
    collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=tmp_path / "beside", progress=False)
    collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=4, out=ours, overwrite=True, progress=False)
    with load(ours) as dataset:
        assert len(dataset["actions"]) == 4


def _refuse_out_in_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``--out`` inside the read-only ``tmp_path / "ro"``: exit status 2, one line naming --out
    and the folder, before any env is built; the Python API raises DatasetWriteError."""

    refuse_to_build_envs(monkeypatch, "an output that cannot be written")
    read_only = tmp_path / "ro"
    for out, where in [(read_only, "which"), (read_only / "d" / "e", f"where {str(read_only)!r}")]:
        message = (
            f"expected a directory this process may write in, got {str(out)!r}, {where} is not writable "
            "(permission denied)"
        )
        assert main(["--steps", "10", "--quiet", "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"vecenv-collect: error: --out: {message}\n"
        with pytest.raises(rollout.DatasetWriteError, match=re.escape(f"out: {message}")) as raised:
            collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=out, progress=False)
        assert raised.value.errno == errno.EACCES
    assert list(read_only.iterdir()) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("output", ["ours", "minari"])
def test_an_out_beside_the_dataset_whose_folder_is_current_is_taken_and_one_inside_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, output: str
) -> None:
    """Run in a dataset's folder, ``--out ../beside`` was refused as lying in '.', the dataset:
    the check read the path's text, whose folders ('..', '.') include the current one. It now
    follows the folders the file system finds, so the dataset's sibling is written and a path
    that leads back into the dataset (``../ours/sub``) is still refused."""
    if output == "minari":
        pytest.importorskip("minari")
    ours = tmp_path / "ours"
    collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=ours, progress=False)
    before = {path.name: path.read_bytes() for path in ours.iterdir()}
    monkeypatch.chdir(ours)
    formats = ["--format", "minari", "--dataset-id", "test/beside-v0"] if output == "minari" else []
    base = ["--num-envs", "2", "--num-workers", "1", "--steps", "10", "--quiet", *formats]
    assert main([*base, "--out", "../beside"]) == 0, capsys.readouterr().err
    if output == "ours":
        with load(tmp_path / "beside") as dataset:
            assert dataset.complete and dataset.transitions == 10
    else:
        assert (tmp_path / "beside" / "test" / "beside-v0" / "data" / "metadata.json").is_file()
    assert main([*base, "--out", "../ours/sub"]) == 2
    # A Minari datasets root is named by its absolute path.
    got, folder = ("../ours/sub", ".") if output == "ours" else (str(ours / "../ours/sub"), str(ours))
    assert capsys.readouterr().err == (
        f"vecenv-collect: error: --out: expected a path outside any dataset, got {got!r}, which lies in {folder!r}, "
        "a rollout dataset; choose a folder beside it\n"
    )
    assert {path.name: path.read_bytes() for path in ours.iterdir()} == before


def test_an_out_in_a_directory_access_denies_is_refused_before_the_envs_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A folder this process may not write in (a 0o555 one) was found only at the first write,
    after the envs started. ``os.access`` is monkeypatched: as root (CI containers) ``access()``
    ignores the mode bits, so a 0o555 folder would be writable and the test would have to skip;
    this one runs as any user. A read-only file system, which root cannot write either, is
    tested for real in tests/engine/test_reliability.py."""
    read_only = tmp_path / "ro"
    read_only.mkdir()
    deny_writes_in(monkeypatch, read_only)
    _refuse_out_in_read_only(tmp_path, monkeypatch, capsys)


def test_overwrite_of_an_out_whose_folder_access_denies_is_refused_before_the_envs_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``--overwrite`` of an existing ``p/out`` renames it within ``p``: where ``p`` is not
    writable that failed only after the envs ran (exit status 1). Now refused first, as a
    read-only ``--out`` is (``os.access`` monkeypatched: as root a 0o555 folder is writable)."""

    read_only = tmp_path / "ro"
    out = read_only / "out"
    collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=out, progress=False)
    before = sorted(path.name for path in out.iterdir())
    deny_writes_in(monkeypatch, read_only)
    refuse_to_build_envs(monkeypatch, "an output that cannot be replaced")
    message = (
        f"expected an output that {{}} may replace, got {str(out)!r}, whose folder {str(read_only)!r} is not "
        "writable (permission denied)"
    )
    assert main(["--steps", "10", "--quiet", "--out", str(out), "--overwrite"]) == 2
    assert capsys.readouterr().err == f"vecenv-collect: error: --out: {message.format('--overwrite')}\n"
    with pytest.raises(
        rollout.DatasetWriteError, match=re.escape(f"out: {message.format('overwrite=True / --overwrite')}")
    ) as raised:
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=out, overwrite=True, progress=False)
    assert raised.value.errno == errno.EACCES
    assert sorted(path.name for path in read_only.iterdir()) == ["out"]
    assert sorted(path.name for path in out.iterdir()) == before


@pytest.mark.parametrize("leads_to", ["a-dataset", "nothing"])
def test_an_out_that_is_a_link_writes_the_dataset_where_it_leads(
    tmp_path: Path, capsys: pytest.CaptureFixture, leads_to: str
) -> None:
    """An --out that is a symbolic link names the folder it leads to. Overwriting a link to a
    dataset moved the link aside instead: a real folder took its place, the old dataset stayed,
    and a hidden '.link.vecenv-replaced-*' link was left behind (rmtree refuses a link). A link
    to nothing failed once the envs ran ("cannot write link: File exists", exit status 1). Both
    now write the dataset where the link leads, and the link stays."""
    target, link = tmp_path / "target", tmp_path / "link"
    overwrite = []
    if leads_to == "a-dataset":
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=target, progress=False)
        overwrite = ["--overwrite"]
    link.symlink_to(target)
    args = ["--num-envs", "2", "--num-workers", "1", "--steps", "10", "--quiet", "--out", str(link), *overwrite]
    assert main(args) == 0, capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(target)
    with load(target) as dataset:
        assert dataset.complete and dataset.transitions == 10
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link", "target"]


@pytest.mark.parametrize("held", ["a-dataset", "nothing"])
def test_overwrite_of_an_out_that_names_no_folder_of_its_own_is_refused_before_the_envs_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, held: str
) -> None:
    """``--out . --overwrite`` run in a dataset's folder (or an empty one) cannot move ``.``
    aside: that failed only after the envs ran ("PosixPath('.') has an empty name", exit status
    1). Refused first, naming the folder's own path, which can be; the folder is left as it was."""
    here = tmp_path / "here"
    if held == "a-dataset":
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=here, progress=False)
    else:
        here.mkdir()
    before = {path.name: path.read_bytes() for path in here.iterdir()}
    monkeypatch.chdir(here)
    refuse_to_build_envs(monkeypatch, "an output that cannot be moved aside")
    message = "expected an output that {} may replace, got '.', which names no folder of its own to move aside; "
    message += f"name the folder itself: {str(here)!r}"
    assert main(["--steps", "10", "--quiet", "--out", ".", "--overwrite"]) == 2
    assert capsys.readouterr().err == f"vecenv-collect: error: --out: {message.format('--overwrite')}\n"
    with pytest.raises(
        rollout.OutputExistsError, match=re.escape(f"out: {message.format('overwrite=True / --overwrite')}")
    ):
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=".", overwrite=True, progress=False)
    assert {path.name: path.read_bytes() for path in here.iterdir()} == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["here"]


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ({"made_by": object()}, r"metadata: expected values JSON can hold .*got \{'made_by': <object"),
        ([1, 2], r"metadata: expected None or a mapping with str keys, got \[1, 2\]"),
        ({1: "a"}, r"metadata: expected None or a mapping with str keys"),
    ],
)
def test_metadata_json_cannot_hold_is_refused_before_anything_is_written(
    tmp_path: Path, metadata: Any, match: str
) -> None:
    out = tmp_path / "d"
    with pytest.raises(TypeError, match=match):
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=out, metadata=metadata, progress=False)
    assert not out.exists()
    # NumPy numbers and arrays are JSON's numbers and lists.
    numpy_values = {"gravity": np.float64(9.8), "sizes": np.arange(3), "seen": {3, 1}}
    collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=out, metadata=numpy_values, progress=False)
    written = json.loads((out / "metadata.json").read_text())
    assert written["gravity"] == 9.8 and written["sizes"] == [0, 1, 2] and written["seen"] == [1, 3]


@pytest.mark.parametrize("metadata", ['{"name": "my web app"}', "not json", '{"format": "vecenv-rollouts"}'])
def test_overwrite_never_deletes_a_folder_that_is_not_a_dataset(tmp_path: Path, metadata: str) -> None:
    """Another program's metadata.json, or a dataset's beside a folder of something else, is
    no rollout dataset: ``overwrite=True`` refuses and keeps every file."""
    out = tmp_path / "project"
    out.mkdir()
    (out / "metadata.json").write_text(metadata)
    (out / "thesis.tex").write_text("keep me")
    if "vecenv" in metadata:
        (out / "sub").mkdir()
        (out / "sub" / "data.csv").write_text("keep me too")
    with pytest.raises(FileExistsError, match=r"not empty and not a rollout dataset"):
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=out, overwrite=True, progress=False)
    assert (out / "thesis.tex").read_text() == "keep me" and (out / "metadata.json").read_text() == metadata
    # A dataset is replaced, with the spill folder a run killed outright leaves in it.
    dataset = tmp_path / "dataset"
    collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=dataset, progress=False)
    (dataset / ".spill").mkdir()
    (dataset / ".spill" / "observations.raw").write_bytes(b"\0" * 8)
    collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=5, out=dataset, overwrite=True, progress=False)
    assert json.loads((dataset / "metadata.json").read_text())["counts"]["transitions"] == 5
    assert not (dataset / ".spill").exists()


def test_bad_policy_actions_raise_and_leave_an_incomplete_dataset(tmp_path: Path) -> None:
    calls = []

    def policy(observation: np.ndarray) -> np.ndarray:
        calls.append(1)
        return np.array([1, 9 if len(calls) == 4 else 0])

    # repr(np.int64(9)): "np.int64(9)" under numpy 2, "9" under numpy 1.x.
    with pytest.raises(PolicyError, match=rf"outside the action space: env 1 got {re.escape(repr(np.int64(9)))},"):
        collect_sync(tmp_path / "d", 2, AutoresetMode.SAME_STEP, policy, steps=100)
    dataset = load(tmp_path / "d")
    assert not dataset.complete and dataset.transitions == 6
    assert "test_bad_policy_actions" in dataset.metadata["policy"]


# ------------------------------------------------------------------------ actions the vector env accepts


def float64_policy(observation: np.ndarray) -> np.ndarray:
    """Actions for ContinuousCounterEnv as numpy makes them: float64, inside [-1, 1]."""
    return np.tile(np.array([0.25, -0.5]), (len(observation), 1))


@pytest.mark.timeout(60)
def test_float64_actions_for_a_float32_box_are_accepted_and_recorded_as_float32(tmp_path: Path) -> None:
    envs = vecenv.make("RolloutContinuous-v0", 3, 2)
    try:
        dataset = collect(envs, float64_policy, steps=40, seed=0, out=tmp_path / "d", progress=False)
    finally:
        envs.close()
    assert dataset["actions"].dtype == np.float32
    np.testing.assert_array_equal(dataset["actions"], np.tile(np.float32([0.25, -0.5]), (40, 1)))
    np.testing.assert_allclose(dataset["rewards"], -0.25)
    # Nested: a Tuple action whose Box part comes as float64 and Discrete part as Python ints.
    envs = counter_envs(2, AutoresetMode.NEXT_STEP, DictCounterEnv)
    policy = lambda obs: ([1, 2], np.zeros((2, 2)))  # noqa: E731
    dataset = collect(envs, policy, steps=10, seed=0, out=tmp_path / "n", progress=False)
    assert dataset["actions"][1].dtype == np.float32 and np.all(np.asarray(dataset["actions"][0])[:2] == [1, 2])


@pytest.mark.parametrize(
    ("action", "match"),
    [
        (
            np.array([[0.5, 2.0], [0.0, 0.0]]),
            r"outside the action space: env 0 got array\(\[0.5, 2. \], dtype=float32\)",
        ),
        (np.array([[0.5, np.nan], [0.0, 0.0]]), r"outside the action space: env 0 got"),
        (np.zeros((2, 3)), r"does not accept: `actions` must have shape \(2, 2\).*got shape \(2, 3\)"),
        # as many values as the batch, which a step would hand on row by row: not the rows recorded
        (np.zeros((2, 2, 1)), r"returned actions of shape \(2, 2, 1\), expected shape \(2, 2\): one action of Box"),
        (np.zeros(2, dtype=np.complex128), r"does not accept: `actions` must have shape|must have a dtype"),
        ("left", r"does not accept: `actions` must be an array"),
    ],
)
def test_actions_outside_what_the_vector_env_accepts_are_named(tmp_path: Path, action: Any, match: str) -> None:
    envs = counter_envs(2, AutoresetMode.NEXT_STEP, ContinuousCounterEnv)
    with pytest.raises(PolicyError, match=match):
        collect(envs, lambda obs: action, steps=5, out=tmp_path / "d", progress=False)


def test_floats_for_a_discrete_space_are_refused_as_the_dataset_records_them_as_ints(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"must have a dtype that casts to int64.*got float64"):
        collect_sync(tmp_path / "d", 2, AutoresetMode.NEXT_STEP, lambda obs: np.array([1.0, 0.0]), steps=5)


# ------------------------------------------------------------------------ bounded memory


def long_envs(num_envs: int, length: int) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: LongEpisodeEnv(length) for _ in range(num_envs)])


def peak_traced_bytes(fn: Any) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_episodes_memory_stays_bounded_when_episodes_do_not_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With episodes=1, every row of every open episode must wait until its episode ends. The
    rows held in memory must not grow with the episode length (open rows spill to disk in
    blocks), nor must the traced memory (numpy reports its buffers to tracemalloc); the
    result is byte-identical to a run whose chunks hold everything."""
    monkeypatch.setattr(rollout.writer, "CHUNK_BYTES", 4 * 1024)
    row_bytes = 4 + 4 + 8 + 8 + 1 + 1 + 8 + 8
    # Only the maxima are kept: a list of every count would itself grow with the episode length
    # (tens of KiB over 1,600 more steps), inside the traced peak this test bounds.
    most = {"held": 0, "spilled": 0}
    original_extend = rollout.staging.EpisodeStager.extend

    def counting_extend(self: Any, env: int, columns: Any) -> None:
        original_extend(self, env, columns)
        most["held"] = max(most["held"], int(self.filled.sum()))
        most["spilled"] = max(most["spilled"], self._spill_rows)

    monkeypatch.setattr(rollout.staging.EpisodeStager, "extend", counting_extend)
    # Each flush writes metadata.json; the indenting JSON encoder leaves reference cycles that
    # only the garbage collector frees, at times of its choosing. Collecting the young
    # generations after each flush keeps that garbage out of the peak this test bounds.
    original_flush = rollout.writer.DatasetWriter.flush

    def collected_flush(self: Any) -> None:
        original_flush(self)
        gc.collect(1)

    monkeypatch.setattr(rollout.writer.DatasetWriter, "flush", collected_flush)
    # A first run imports and caches what any run needs, so that neither measured peak holds it.
    collect(long_envs(2, 50), constant_policy, episodes=1, out=tmp_path / "warm-up", progress=False)
    peaks = {}
    for length in (400, 2_000):
        most.update(held=0, spilled=0)
        out = tmp_path / f"d{length}"
        peaks[length] = peak_traced_bytes(
            functools.partial(collect, long_envs(2, length), constant_policy, episodes=1, out=out, progress=False)
        )
        dataset = load(out)
        assert dataset.transitions == length and dataset.metadata["counts"]["episodes"] == 1
        np.testing.assert_array_equal(np.asarray(dataset["observations"])[:, 0], np.arange(length))
        assert not (out / ".spill").exists()
        block_rows = 4 * 1024 // (2 * row_bytes)
        assert most["held"] <= 2 * block_rows  # rows in memory: one block per env at most
        assert most["spilled"] >= 2 * (length - block_rows)  # the rest went to disk
    assert peaks[2_000] < peaks[400] + 2 * 1_600 * row_bytes / 4, peaks  # not the 1,600 extra rows per env
    monkeypatch.setattr(rollout.writer, "CHUNK_BYTES", 8 * 1024 * 1024)
    reference = collect(long_envs(2, 2_000), constant_policy, episodes=1, out=tmp_path / "ref", progress=False)
    assert npy_bytes(reference.path) == npy_bytes(tmp_path / "d2000")


# ------------------------------------------------------------------------ command line


def cli(*args: str, cwd: Path = REPO, timeout: float = 60) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout
    )


def start_cli(args: list[str]) -> subprocess.Popen:
    """This Python on ``args`` from the repository's root, its output captured (as text)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, *args], cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_no_arguments_collects_10000_cartpole_steps(tmp_path: Path) -> None:
    result = cli(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    dataset = load(tmp_path / "rollouts" / "CartPole-v1")
    assert dataset.complete and dataset.transitions == 10000 and len(dataset["observations"]) == 10000
    assert dataset.metadata["env_id"] == "CartPole-v1" and dataset.metadata["num_envs"] == 8
    assert "transitions: 10000" in result.stdout and "steps/s" in result.stdout
    assert "rollouts/CartPole-v1" in result.stdout


@pytest.mark.parametrize(
    ("steps", "num_envs"),
    [(None, 8), (1, 8), (10_000, 8), (249_999, 8), (250_000, 16), (499_999, 16), (500_000, 32), (10**6, 64)]
    + [(10**9, 64)],
)
def test_the_default_env_count_grows_with_long_runs_and_each_env_runs_long(steps: int | None, num_envs: int) -> None:
    from vecenv.datasets.cli_arguments import STEPS_PER_DEFAULT_ENV, default_num_envs

    assert default_num_envs(steps) == num_envs
    assert steps is None or num_envs == 8 or steps // num_envs >= STEPS_PER_DEFAULT_ENV


@pytest.mark.timeout(120)
def test_a_long_run_without_num_envs_uses_the_grown_default_and_an_explicit_one_wins(tmp_path: Path) -> None:
    result = cli("--steps", "250000", "--quiet", "--out", "grown", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with load(tmp_path / "grown") as dataset:
        assert dataset.transitions == 250_000 and dataset.metadata["num_envs"] == 16
    result = cli("--episodes", "3", "--num-envs", "5", "--quiet", "--out", "explicit", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with load(tmp_path / "explicit") as dataset:
        assert dataset.metadata["num_envs"] == 5


def test_cli_is_deterministic_across_worker_counts(tmp_path: Path) -> None:
    common = [
        "--env",
        "CartPole-v1",
        "--num-envs",
        "3",
        "--steps",
        "777",
        "--seed",
        "11",
        "--quiet",
        "--autoreset-mode",
        "same_step",
    ]
    assert main([*common, "--num-workers", "1", "--out", str(tmp_path / "one")]) == 0
    assert main([*common, "--num-workers", "2", "--out", str(tmp_path / "two")]) == 0
    one, two = npy_bytes(tmp_path / "one"), npy_bytes(tmp_path / "two")
    assert len(one) == len(FIELDS) and one == two
    assert load(tmp_path / "two").metadata["num_workers"] == 2


# ------------------------------------------------------------------------ rollouts in the workers


def _collect_with(envs: Any, out: Path, **kwargs: Any) -> rollout.Dataset:
    try:
        return collect(envs, out=out, progress=False, **kwargs)
    finally:
        envs.close()


def _vecenv_counters(num_envs: int, workers: int | str, mode: AutoresetMode, env_class: type = CounterEnv) -> Any:
    inline = workers == "inline"
    return vecenv.SubprocVectorEnv(
        [env_class] * num_envs, 2 if inline else workers, autoreset_mode=mode, context="fork", inline_group=inline
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.name)
@pytest.mark.parametrize("count", [{"steps": 1001}, {"episodes": 90}], ids=["steps", "episodes"])
@pytest.mark.parametrize("policy", ["random", constant_policy], ids=["random", "module:attr"])
def test_rollouts_in_the_workers_write_what_stepping_writes(
    tmp_path: Path, mode: AutoresetMode, count: dict, policy: Any
) -> None:
    """SyncVectorEnv (stepped, the policy here) is the reference; vecenv's rollouts, whatever
    the workers and the rollout length, write the same bytes."""
    reference = collect_sync(tmp_path / "sync", 5, mode, policy, seed=4, **count)
    assert reference.metadata["collection"]["method"] == "envs.step"
    want = npy_bytes(tmp_path / "sync")
    layouts = [(1, None), (2, 1), (3, np.int64(7)), ("inline", None), (0, 64), (2, 0)]  # NumPy ints taken
    for workers, steps_per_rollout in layouts:
        out = tmp_path / f"w{workers}-t{steps_per_rollout}"
        dataset = _collect_with(
            _vecenv_counters(5, workers, mode), out, policy=policy, seed=4, rollout_steps=steps_per_rollout, **count
        )
        method = "envs.step" if steps_per_rollout == 0 else "rollouts in the workers"
        assert dataset.metadata["collection"]["method"] == method
        assert npy_bytes(out) == want, f"num_workers={workers}, rollout_steps={steps_per_rollout}"
        check_real_transitions(dataset)


@pytest.mark.timeout(60)
def test_a_policy_returning_extras_records_its_actions_on_every_path(tmp_path: Path) -> None:
    """``(actions, extras)``: the extras are dropped whether the policy runs here or in the workers."""
    collect_sync(tmp_path / "plain", 4, AutoresetMode.NEXT_STEP, constant_policy, steps=300, seed=1)
    want = npy_bytes(tmp_path / "plain")
    collect_sync(tmp_path / "sync", 4, AutoresetMode.NEXT_STEP, constant_policy_with_extras, steps=300, seed=1)
    assert npy_bytes(tmp_path / "sync") == want
    for steps_per_rollout in (None, 0):
        out = tmp_path / f"vecenv-{steps_per_rollout}"
        envs = _vecenv_counters(4, 2, AutoresetMode.NEXT_STEP)
        _collect_with(envs, out, policy=constant_policy_with_extras, steps=300, seed=1, rollout_steps=steps_per_rollout)
        assert npy_bytes(out) == want, f"rollout_steps={steps_per_rollout}"


@pytest.mark.timeout(60)
def test_rollouts_follow_the_spawn_seed_policy_as_stepping_does(tmp_path: Path) -> None:
    def envs() -> Any:
        return vecenv.SubprocVectorEnv([CounterEnv] * 4, 2, context="fork", seed_policy="spawn")

    stepped = _collect_with(envs(), tmp_path / "stepped", steps=700, seed=3, rollout_steps=0)
    rolled = _collect_with(envs(), tmp_path / "rolled", steps=700, seed=3)
    assert stepped.metadata["collection"]["method"] == "envs.step"
    assert rolled.metadata["seed_policy"] == "spawn" and rolled.metadata["collection"]["method"] != "envs.step"
    assert npy_bytes(tmp_path / "rolled") == npy_bytes(tmp_path / "stepped")


@pytest.mark.timeout(120)
def test_rollouts_write_the_minari_dataset_stepping_writes(tmp_path: Path) -> None:
    pytest.importorskip("minari")
    kwargs = {"steps": 500, "seed": 2, "format": "minari"}
    _collect_with(counter_envs(4, AutoresetMode.NEXT_STEP), tmp_path / "m", dataset_id="counter/sync-v0", **kwargs)
    envs = _vecenv_counters(4, 2, AutoresetMode.NEXT_STEP)
    _collect_with(envs, tmp_path / "m", dataset_id="counter/rollouts-v0", **kwargs)
    import minari

    os.environ["MINARI_DATASETS_PATH"] = str(tmp_path / "m")
    try:
        sync, rolled = minari.load_dataset("counter/sync-v0"), minari.load_dataset("counter/rollouts-v0")
        assert sync.total_steps == rolled.total_steps == 500
        for a, b in zip(sync.iterate_episodes(), rolled.iterate_episodes(), strict=True):
            for field in ("observations", "actions", "rewards", "terminations", "truncations"):
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    finally:
        del os.environ["MINARI_DATASETS_PATH"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("refusal", ["memory-limit", "os-error"])
@pytest.mark.parametrize("fails_at", [1, 2], ids=["first block", "when it grows"])
def test_a_rollout_block_that_cannot_be_made_falls_back_to_stepping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails_at: int, refusal: str
) -> None:
    """A block refused by the memory budget (``MemoryLimitError``: memory, ``/dev/shm``, the
    file size limit), or an ``OSError`` making it: the collection steps instead, from where it
    was, and writes the same bytes."""
    from vecenv.errors import MemoryLimitError
    from vecenv.wire.rollout_buffers import RolloutBuffers

    made = []
    original = RolloutBuffers.create

    def create(spec: Any) -> RolloutBuffers:
        made.append(spec.num_steps)
        if len(made) == fails_at:
            if refusal == "os-error":
                raise OSError(27, "File too large")
            raise MemoryLimitError("File too large for RLIMIT_FSIZE", needed=2, available=1, limit="RLIMIT_FSIZE")
        return original(spec)

    monkeypatch.setattr(RolloutBuffers, "create", staticmethod(create))
    reference = collect_sync(tmp_path / "sync", 4, AutoresetMode.NEXT_STEP, steps=3000, seed=1)
    dataset = _collect_with(_vecenv_counters(4, 2, AutoresetMode.NEXT_STEP), tmp_path / "v", steps=3000, seed=1)
    assert npy_bytes(tmp_path / "v") == npy_bytes(reference.path)
    how = dataset.metadata["collection"]
    assert how["method"] == "envs.step" and "File too large" in how["fell_back"], how
    assert len(made) == fails_at


@pytest.mark.timeout(60)
def test_policy_errors_in_the_workers_are_policy_errors(tmp_path: Path) -> None:
    envs = _vecenv_counters(4, 2, AutoresetMode.NEXT_STEP)
    with pytest.raises(PolicyError, match=r"returned an action outside the action space: env [0-3] got") as info:
        _collect_with(envs, tmp_path / "d", policy=_outside_at_3, steps=200)
    assert "in the worker's policy, at step" in " ".join(info.value.__notes__)
    # Refused within the first rollout, whose rows are lost with it: no row was written, so
    # nothing is left (the corrected run needs no overwrite).
    assert not (tmp_path / "d").exists()


def _outside_at_3(observation: np.ndarray) -> np.ndarray:
    """Action 2, and 7 (outside Discrete(3)) in an env whose episode reached step 3."""
    return np.where(observation[:, 0] >= 3, 7, 2).astype(np.int64)


def test_checked_policy_names_the_env_by_its_global_index() -> None:
    from vecenv.datasets.action_checks import CheckedPolicy
    from vecenv.policies import FunctionPolicy, PolicyContext

    space = gymnasium.spaces.Discrete(3)
    obs_space = gymnasium.spaces.Box(0, 1, (1,))
    runner = CheckedPolicy(FunctionPolicy(lambda obs: np.array([2, 7]), "p")).build(
        PolicyContext(range(2, 4), obs_space, space, [None, None])
    )
    with pytest.raises(PolicyError, match=r"policy 'p' returned an action outside the action space: env 3 got"):
        runner.act(np.zeros((2, 1), np.float32), None)
    np.testing.assert_array_equal(
        CheckedPolicy(FunctionPolicy(lambda obs: [1, 2], "q"))
        .build(PolicyContext(range(2), obs_space, space, [None, None]))
        .act(np.zeros((2, 1)), None),
        [1, 2],
    )


def test_checked_policy_runs_the_wrapped_policys_checks() -> None:
    """CheckedPolicy forwarded only build and weights: an SB3 model's space check (outputs) and
    the weights' check did not run under vecenv-collect."""
    sb3 = pytest.importorskip("stable_baselines3")
    from vecenv.datasets.action_checks import CheckedPolicy
    from vecenv.errors import VecEnvError, WeightsMismatchError
    from vecenv.policies import PolicyContext, SB3Policy

    model = sb3.PPO("MlpPolicy", gymnasium.make("FrozenLake-v1"), seed=0, device="cpu")
    checked = CheckedPolicy(SB3Policy(model, deterministic=True))

    def outputs(observation_space: gymnasium.spaces.Space) -> Any:
        context = PolicyContext(range(2), observation_space, model.action_space, [None, None])
        return checked.outputs(context, np.zeros(2, np.int64))

    with pytest.raises(
        VecEnvError, match=r"observation space Discrete\(16\), the envs' observation space is Discrete\(64\)"
    ):
        outputs(gymnasium.spaces.Discrete(64))
    assert outputs(model.observation_space).extras == (), "the checked copies drop the model's extras"
    with pytest.raises(WeightsMismatchError, match="missing"):
        checked.check_weights({"x": np.zeros(1)})
    assert checked.check_weights(model.policy.state_dict()).keys() == model.policy.state_dict().keys()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rollout_steps", ["0", "4"])
def test_a_recurrent_policy_is_refused_in_one_line_before_anything_is_written(
    tmp_path: Path, rollout_steps: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy with ``initial_state`` failed with its own TypeError (called on observations
    alone), on both ways a collection steps; it is refused up front, naming what it is."""
    out = tmp_path / "d"
    args = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "2", "--num-workers", "1"]
    args += ["--steps", "8", "--rollout-steps", rollout_steps, "--quiet", "--out", str(out)]
    assert main([*args, "--policy", "tests.helpers.envs:recurrent_constant_policy"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "got a recurrent one (it has initial_state)" in err, err
    assert "--policy 'tests.helpers.envs:recurrent_constant_policy'" in err
    assert not out.exists()


def test_collect_and_the_checked_policy_refuse_a_recurrent_policy(tmp_path: Path) -> None:
    from tests.helpers.envs import recurrent_constant_policy
    from vecenv.datasets.action_checks import CheckedPolicy
    from vecenv.errors import InvalidArgumentError
    from vecenv.policies import FunctionPolicy, PolicyContext

    envs = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 2)
    try:
        with pytest.raises(InvalidArgumentError, match=r"^policy: expected a policy of observations alone"):
            collect(envs, recurrent_constant_policy, steps=4, out=tmp_path / "d")
    finally:
        envs.close()
    assert not (tmp_path / "d").exists()
    checked = CheckedPolicy(FunctionPolicy(recurrent_constant_policy, name="counting"))
    context = PolicyContext(range(2), gymnasium.spaces.Box(-1, 1, (3,)), gymnasium.spaces.Discrete(3), [None, None])
    with pytest.raises(InvalidArgumentError, match=r"^policy counting: expected a policy of observations alone"):
        checked.outputs(context, np.zeros((2, 3), np.float32))


def test_cli_policy_module_attr_and_overwrite(tmp_path: Path) -> None:
    args = [
        "--env",
        "tests.helpers.envs:RolloutCounter-v0",
        "--num-envs",
        "3",
        "--num-workers",
        "2",
        "--episodes",
        "9",
        "--policy",
        "tests.helpers.envs:constant_policy",
        "--quiet",
        "--out",
        str(tmp_path / "d"),
    ]
    assert main(args) == 0
    assert main([*args, "--overwrite"]) == 0
    dataset = load(tmp_path / "d")
    assert (
        dataset.metadata["counts"]["episodes"] == 9
        and dataset.metadata["policy"] == "tests.helpers.envs:constant_policy"
    )
    assert np.all(np.asarray(dataset["rewards"]) == 2.0)
    check_real_transitions(dataset)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "CartPol-v1"], "--env: unknown environment id 'CartPol-v1'; did you mean 'CartPole-v1'"),
        (["--env", "CartPole-v9"], "--env: Environment version `v9` for environment `CartPole` doesn't exist"),
        (["--env", "no_such_module_xyz:Foo-v0"], "cannot import module 'no_such_module_xyz'"),
        (  # ALE's envs, say, are registered by importing ale_py: the way to name that is shown
            ["--env", "NoSuchSpace/Foo-v0"],
            "--env: Namespace NoSuchSpace not found. Have you installed the proper package for NoSuchSpace? "
            "(an env that a package registers when imported is named with it: --env PACKAGE:NoSuchSpace/Foo-v0, "
            "e.g. --env ale_py:ALE/Pong-v5)",
        ),
        (["--env-kwargs", "{bad"], "--env-kwargs: expected a JSON object, got '{bad'"),
        (["--env-kwargs", "[1, 2]"], "--env-kwargs: expected a JSON object, got '[1, 2]'"),
        (["--policy", "no_such_module_xyz:act"], "--policy 'no_such_module_xyz:act': cannot import module"),
        (["--policy", "tests.helpers.envs:missing"], "'tests.helpers.envs' has no attribute 'missing'"),
        (["--policy", "greedy"], "--policy: expected 'random', 'sb3:PATH.zip' or 'module:attr', got 'greedy'"),
        (["--steps", "0"], "argument --steps: expected a positive integer, got 0"),
        (["--episodes", "-3"], "argument --episodes: expected a positive integer, got -3"),
        (["--num-envs", "two"], "argument --num-envs: expected a positive integer, got 'two'"),
        (["--steps", "5", "--episodes", "5"], "argument --episodes: not allowed with argument --steps"),
        (["--num-envs", "2", "--num-workers", "5"], "--num-workers: expected at most --num-envs (2), got 5"),
        (
            ["--env", "CartPole-v1", "--env-kwargs", '{"bogus": 1}'],
            "could not create 8 x 'CartPole-v1' with --env-kwargs {\"bogus\": 1}",
        ),
        (
            [
                "--env",
                "tests.helpers.envs:RolloutCounter-v0",
                "--num-envs",
                "2",
                "--policy",
                "tests.helpers.envs:out_of_space_policy",
            ],
            "policy 'tests.helpers.envs:out_of_space_policy' returned an action outside the action space: "
            f"env 0 got {np.int64(7)!r},",
        ),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], message: str
) -> None:
    assert main([*args, "--quiet", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vecenv-collect: error: ") and err.count("\n") == 1, err
    assert message in err
    # Nothing is left behind (a policy refused at the first step leaves no empty dataset): the
    # corrected command runs without --overwrite.
    assert not (tmp_path / "d").exists()


@pytest.mark.timeout(120)
def test_cli_takes_an_id_without_a_version_as_its_latest(tmp_path: Path) -> None:
    """Under ``-W error``, Gymnasium's warning about the id stays a warning on stderr (it was
    reported as a failed import), and the dataset records the id it was collected from."""
    out = tmp_path / "d"
    command = [sys.executable, "-W", "error", "-m", "vecenv.datasets", "--env", "CartPole", "--steps", "20"]
    command += ["--num-envs", "2", "--quiet", "--out", str(out)]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, capture_output=True, text=True, timeout=90, cwd=tmp_path, env=environment)
    assert result.returncode == 0, result.stderr
    assert "Using the latest versioned environment `CartPole-v1`" in result.stderr
    with load(out) as dataset:
        assert dataset.metadata["env_id"] == "CartPole-v1" and dataset.transitions == 20


def test_cli_a_policy_that_leaves_the_space_mid_run_says_what_was_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Refused after some rows were written: the one line says the partial dataset is kept."""
    args = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "2", "--num-workers", "1", "--steps"]
    args += ["400", "--policy", "tests.helpers.envs:out_of_space_at_step_5_policy", "--rollout-steps", "0"]
    out = tmp_path / "d"
    assert main([*args, "--quiet", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "returned an action outside the action space" in err and err.count("\n") == 1, err
    assert f'kept a partial dataset ("complete": false) in {out}' in err
    with load(out) as partial:
        assert partial.transitions > 0 and not partial.complete


@pytest.mark.parametrize("rollout_steps", ["0", "16"], ids=["stepping", "rollouts"])
def test_cli_a_policy_that_raises_mid_run_is_one_line_with_what_was_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture, rollout_steps: str
) -> None:
    args = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "4", "--num-workers", "2", "--steps"]
    args += ["4000", "--policy", "tests.helpers.envs:raising_policy", "--rollout-steps", rollout_steps, "--quiet"]
    out = tmp_path / "d"
    assert main([*args, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vecenv-collect: error: RuntimeError: the policy refuses step 5") and err.count("\n") == 1
    assert "--debug" in err
    if rollout_steps == "0":
        assert f'kept a partial dataset ("complete": false) in {out}' in err
        assert not load(out).complete
    else:  # raised within the first rollout, whose rows are lost with it: no row was written
        assert err.rstrip().endswith("; nothing was written (--debug shows the traceback)") and not out.exists()
    with pytest.raises(RuntimeError, match="the policy refuses step 5"):
        main([*args, "--debug", "--overwrite", "--out", str(out)])


MINARI_EARLY = ["--format", "minari", "--dataset-id", "test/early-v0"]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
@pytest.mark.parametrize("phase", ["_load_policy", "_make_envs"], ids=["checking-options", "starting-envs"])
@pytest.mark.parametrize(
    "output",
    [[], ["--overwrite"], MINARI_EARLY, [*MINARI_EARLY, "--overwrite"]],
    ids=["ours", "ours-overwrite", "minari", "minari-overwrite"],
)
def test_interrupt_before_the_collection_writes_nothing_and_says_so(
    tmp_path: Path, output: list[str], phase: str
) -> None:
    """Ctrl+C before the collection began (the options are checked, which imports the env's
    and the policy's modules, or the workers are starting): exit 130, one line, and no output
    directory, in either format; a dataset that --overwrite would replace is kept, and the line
    says so."""
    out = tmp_path / "d"
    ready = tmp_path / "ready"
    minari_output = "minari" in output
    if minari_output:
        pytest.importorskip("minari")
    replaced = "--overwrite" in output
    kept = ""
    if replaced:  # the dataset the run would replace
        formats = MINARI_EARLY if minari_output else []
        assert main(["--steps", "20", "--num-envs", "2", "--quiet", "--out", str(out), *formats]) == 0
        kept = f"; the dataset already in {out} is as it was"
        if minari_output:
            kept = "; Minari dataset 'test/early-v0' is as it was"
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    script = (
        "import os, sys, time\n"
        "from vecenv.datasets import cli\n"
        f"real = cli.{phase}\n"
        "def slow(*a, **k):\n"
        f"    open({str(ready)!r}, 'w').close()\n"
        "    time.sleep(30)\n"
        "    return real(*a, **k)\n"
        f"cli.{phase} = slow\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    process = start_cli(["-c", script, "--steps", "100", "--quiet", "--out", str(out), *output])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), f"the run did not reach {phase}"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert err == f"vecenv-collect: interrupted while starting the environments: nothing was written{kept}\n", err
    ready.unlink()
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert out.exists() == replaced


#: Starts the command as each way of running it does, with an import hook that sends this
#: process the signal named by its first argument (SIGINT: a real Ctrl+C) when the command's
#: modules first import Gymnasium.
INTERRUPTED_IMPORT = """\
import importlib, importlib.abc, os, runpy, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "gymnasium":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), getattr(signal, signal_name))
        return None

signal_name, entry, sys.argv[0] = sys.argv[1], sys.argv[2], "vecenv-collect"
del sys.argv[1:3]
sys.meta_path.insert(0, CtrlC())
if entry == "module":
    runpy.run_module("vecenv.datasets", run_name="__main__", alter_sys=True)
elif entry.endswith(".py"):
    runpy.run_path(entry, run_name="__main__")
else:
    module, _, function = entry.partition(":")
    sys.exit(getattr(importlib.import_module(module), function)())
"""


def console_entry_point() -> str:
    """``vecenv-collect``'s ``module:function``, as setup.cfg installs it."""
    lines = (REPO / "setup.cfg").read_text().splitlines()
    return next(line.split("=")[1].strip() for line in lines if line.strip().startswith("vecenv-collect ="))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signal_name, status", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("entry", ["console", "module", "script"])
def test_ctrl_c_while_the_command_imports_its_modules_ends_it_as_at_start_up(
    tmp_path: Path, entry: str, signal_name: str, status: int
) -> None:
    """Ctrl+C or SIGTERM before the command has set its handlers, while NumPy, Gymnasium and the
    collection import (a second or more): no traceback, the start-up line, exit status 130 or
    143 (not a silent death by SIGTERM), nothing written; for ``vecenv-collect``, ``python -m
    vecenv.datasets`` and the script alike."""
    where = {"console": console_entry_point(), "module": "module", "script": str(SCRIPT)}[entry]
    command = [sys.executable, "-c", INTERRUPTED_IMPORT, signal_name, where, "--steps", "100", "--out"]
    command.append(str(tmp_path / "d"))
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=90)
    assert result.returncode == status, result.stderr
    assert result.stderr == "vecenv-collect: interrupted while starting the environments: nothing was written\n"
    assert list(tmp_path.iterdir()) == []


#: Runs ``python -m vecenv.datasets`` with an import hook that sends this process the signal named
#: by $SIGNAL_NAME when the command's modules first import Gymnasium (imported by ``--env`` or
#: ``--policy``, it does so as it imports), and turns the signal's exception into an ImportError,
#: as a C extension does whose initialisation the signal interrupts (NumPy's "PyCapsule_Import
#: could not import module"), or with $LOST set drops it, as Python drops one raised in some
#: callbacks (an import lock's).
TURNED_INTO_IMPORT_ERROR = """\
import importlib.abc, os, runpy, signal, sys

class Interrupted(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "gymnasium":
            sys.meta_path.remove(self)
            interrupt()
        return None

def interrupt():
    try:
        os.kill(os.getpid(), getattr(signal, signal_name))
        for _ in range(1000):  # the handler runs here
            pass
    except BaseException as exc:
        if not os.environ.get("LOST"):
            raise ImportError("the extension module failed to initialise") from exc

def act(observations):  # --policy interrupted:act
    return [0] * len(observations)

signal_name = os.environ["SIGNAL_NAME"]
if __name__ == "__main__":
    sys.meta_path.insert(0, Interrupted())
    sys.argv[0] = "vecenv-collect"
    runpy.run_module("vecenv.datasets", run_name="__main__", alter_sys=True)
else:  # imported by --env or --policy
    interrupt()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signal_name, status", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("importing", ["the-commands-modules", "--env", "--policy"])
@pytest.mark.parametrize("exception", ["turned-into-an-import-error", "lost"])
def test_a_signal_whose_exception_an_import_turns_or_loses_ends_the_command_as_at_start_up(
    tmp_path: Path, exception: str, importing: str, signal_name: str, status: int
) -> None:
    """Ctrl+C or SIGTERM while an import runs that turns its exception into an ImportError, or
    loses it (the command's own modules, or the module ``--env`` or ``--policy`` names): the
    start-up line and exit status 130 or 143, not a traceback, a bad ``--env`` or a collection
    that goes on; nothing written."""
    modules, run = tmp_path / "modules", tmp_path / "run"
    modules.mkdir()
    run.mkdir()
    (modules / "interrupted.py").write_text(TURNED_INTO_IMPORT_ERROR)
    command = [sys.executable, str(modules / "interrupted.py"), "--steps", "100", "--out", "d"]
    if importing != "the-commands-modules":
        command = [sys.executable, "-m", "vecenv.datasets", "--steps", "100", "--out", "d"]
        command += [importing, "interrupted:CartPole-v1" if importing == "--env" else "interrupted:act"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(modules)])}
    environment.update(SIGNAL_NAME=signal_name, LOST="1" if exception == "lost" else "", PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run(command, cwd=run, env=environment, capture_output=True, text=True, timeout=90)
    assert result.returncode == status, result.stderr
    assert result.stderr == "vecenv-collect: interrupted while starting the environments: nothing was written\n"
    assert list(run.iterdir()) == []


@pytest.mark.timeout(120)
def test_cli_overwrite_keeps_the_minari_dataset_when_the_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad input found once the options are checked (envs that cannot be built) is exit 2 and
    leaves the Minari dataset that --overwrite would have replaced, as our format's is left."""
    minari = pytest.importorskip("minari")
    root = tmp_path / "root"
    args = ["--env", "CartPole-v1", "--num-envs", "2", "--num-workers", "1", "--episodes", "2", "--quiet"]
    args += ["--format", "minari", "--dataset-id", "test/keep-v0", "--out", str(root)]
    assert main(args) == 0
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    capsys.readouterr()
    assert main([*args, "--env-kwargs", '{"bogus": 1}', "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vecenv-collect: error: could not create 2 x 'CartPole-v1'") and err.count("\n") == 1
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    assert minari.load_dataset("test/keep-v0").total_episodes == 2


def test_a_failed_write_never_reports_an_earlier_dataset_written_a_moment_before_as_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A run that cannot write (a full disk at its first write) after an earlier run wrote the
    dataset it was to replace a moment before: the line says the old dataset is as it was,
    never that this run kept it as a partial dataset (its metadata is not this run's file,
    however recent)."""
    from vecenv.datasets import collection

    out = tmp_path / "d"
    args = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "2", "--num-workers", "1", "--steps"]
    args += ["20", "--quiet", "--out", str(out)]
    assert main(args) == 0  # the earlier run, a moment ago
    capsys.readouterr()

    def full_disk(run: Any) -> None:
        raise OSError(28, "No space left on device", str(out / "observations.npy"))

    monkeypatch.setattr(collection, "record_transitions", full_disk)
    assert main([*args, "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"vecenv-collect: error: cannot write {out / 'observations.npy'}: No space left on device; "
        f"nothing was written; the dataset already in {out} is as it was\n"
    ), err
    with load(out) as kept:
        assert kept.complete and kept.transitions == 20


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_a_first_write_that_fails_puts_the_replaced_dataset_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``overwrite=True`` and a file size limit that the first rows' write exceeds: the rows
    were only buffered, so nothing was written, and the dataset the run was to replace is put
    back whole. It was deleted (its rows counted as written once buffered), leaving an empty,
    incomplete dataset in its place."""
    monkeypatch.setattr(rollout.writer, "FLUSH_INTERVAL_S", 3600.0)  # the rows' one write is at the end
    out = tmp_path / "d"
    collect(SyncVectorEnv([CounterEnv for _ in range(2)]), steps=20, out=out, progress=False).close()
    envs = SyncVectorEnv([CounterEnv for _ in range(2)])
    try:
        # The headers and metadata fit in 10,000 bytes; the rows' one write does not.
        with file_size_limit(10_000), pytest.raises(rollout.DatasetWriteError) as raised:
            collect(envs, steps=5_000, out=out, overwrite=True, progress=False)
    finally:
        envs.close()
    assert raised.value.errno == errno.EFBIG
    with load(out) as kept:
        assert kept.complete and kept.transitions == 20
    assert [p.name for p in tmp_path.iterdir()] == ["d"], "the replaced dataset's copy was left aside"


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_a_write_that_fails_part_way_leaves_a_dataset_whose_files_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows flushed at every step until one file (``actions``, the widest rows) reaches a file
    size limit: the dataset keeps the rows every file holds, and loads. The failed rows were
    written into a buffer and counted as committed; the error came later, in the header's
    seek, so ``metadata.json`` counted rows that the file's header did not."""
    monkeypatch.setattr(rollout.writer, "FLUSH_INTERVAL_S", 0.0)
    out = tmp_path / "d"
    envs = SyncVectorEnv([CounterEnv for _ in range(2)])
    try:
        with file_size_limit(10_000), pytest.raises(rollout.DatasetWriteError) as raised:
            collect(envs, steps=3_000, out=out, progress=False)
    finally:
        envs.close()
    assert raised.value.filename == str(out / "actions.npy"), raised.value.filename
    with load(out) as kept:
        assert not kept.complete and 0 < kept.transitions < 3_000
        assert len(kept["actions"]) == len(kept["observations"]) == kept.transitions


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_a_spill_that_cannot_be_written_is_a_write_error_and_leaves_no_spill_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Open episodes spilled to a full disk (here a file size limit): the spill's OSError went
    out bare ("OSError: No space left on device", no path, reported as if an env had raised),
    and closing the spill files failed again on their buffered bytes, so the spill folder,
    often the largest thing on that disk, stayed. Now a DatasetWriteError naming the spill
    file, and the folder is gone."""
    monkeypatch.setattr(rollout.writer, "CHUNK_BYTES", 4096)  # spill after a few hundred rows
    out = tmp_path / "d"
    envs = SyncVectorEnv([LongEpisodeEnv for _ in range(2)])
    try:
        with file_size_limit(10_000), pytest.raises(rollout.DatasetWriteError) as raised:
            collect(envs, episodes=1, out=out, progress=False)
    finally:
        envs.close()
    assert raised.value.errno == errno.EFBIG
    assert re.fullmatch(re.escape(str(out / ".spill")) + r"/\w+\.raw", raised.value.filename), raised.value.filename
    assert f"cannot write {raised.value.filename}: File too large" in str(raised.value)
    assert not (out / ".spill").exists()


PROGRESS_ARGS = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "2", "--num-workers", "1"]


@pytest.mark.timeout(120)
def test_in_a_log_the_progress_bar_is_one_line_at_the_end(tmp_path: Path) -> None:
    """stderr to a pipe (a log, CI): no bar frames, the bar's last state as one line."""
    result = cli(*PROGRESS_ARGS, "--steps", "300", "--out", str(tmp_path / "d"))
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr, repr(result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and re.fullmatch(r"100% 300/300 \[\d\d:\d\d, [\d.]+step/s, episodes=\d+\]", lines[0]), lines
    assert "transitions: 300" in result.stdout  # the report, on stdout as before


def test_progress_other_than_a_bool_or_auto_is_refused(tmp_path: Path) -> None:
    expected = r"progress: expected True, False or 'auto', got 'yes'"
    with pytest.raises(vecenv.errors.InvalidArgumentError, match=expected):
        collect(counter_envs(2, AutoresetMode.NEXT_STEP), steps=3, out=tmp_path / "d", progress="yes")
    assert not (tmp_path / "d").exists()


@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_on_a_terminal_the_progress_bar_is_live(tmp_path: Path) -> None:
    """stderr a terminal: tqdm's bar, redrawn in place (carriage returns). Under ``-W error``: a
    warning from the bar (tqdm before 4.66.2 warns on Python 3.12+ for its first frame) fails it."""
    import fcntl
    import struct
    import termios

    master, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    command = [
        sys.executable,
        "-W",
        "error",
        str(SCRIPT),
        *PROGRESS_ARGS,
        "--steps",
        "300",
        "--out",
        str(tmp_path / "d"),
    ]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(command, cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    shown = b""
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                break
            if not data:
                break
            shown += data
        assert process.wait(timeout=60) == 0, shown
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
        process.communicate()
    text = shown.decode()
    assert "\r" in text and "300/300" in text and "step/s" in text, repr(text)


def test_cli_refuses_existing_out_without_overwrite_in_a_real_process(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    result = cli("--steps", "10", "--out", str(tmp_path / "d"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("vecenv-collect: error: output directory") and "--overwrite" in result.stderr
    assert result.stdout == ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_keeps_a_loadable_partial_dataset_and_no_workers(tmp_path: Path, signum: int, status: int) -> None:
    out = tmp_path / "d"
    process = start_cli(
        [
            str(SCRIPT),
            "--env",
            "tests.helpers.envs:RolloutCounter-v0",
            "--env-kwargs",
            '{"delay": 0.002}',
            "--num-envs",
            "2",
            "--num-workers",
            "2",
            "--steps",
            "100000000",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:  # poll until rows are on disk
            try:
                if json.loads((out / "metadata.json").read_text())["counts"]["transitions"] > 0:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.01)  # polling interval, not synchronisation
        assert process.poll() is None, process.communicate()
        workers = procfs.descendants(process.pid)
        assert workers
        process.send_signal(signum)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == status, err
    assert "Traceback" not in err and "interrupted" in err
    dataset = load(out)
    assert not dataset.complete and 0 < dataset.transitions < 100000000
    assert all(len(np.asarray(dataset[name])) == dataset.transitions for name in FIELDS)
    check_real_transitions(dataset)
    deadline = time.monotonic() + 10
    while any(procfs.alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.01)  # polling interval: the resource tracker exits once it sees EOF
    assert not [pid for pid in workers if procfs.alive(pid)]


def test_a_signal_whose_exception_was_lost_while_the_workers_started_still_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Python drops an exception raised in os.fork's after-fork hooks: the handler's record
    stops the run before it collects."""
    from vecenv.datasets import cli as collect_cli

    make_envs = collect_cli._make_envs

    def interrupted_while_forking(*args: Any) -> Any:
        envs = make_envs(*args)
        collect_cli._received.append(signal.SIGINT)  # as the handler records it; its raise was lost
        return envs

    monkeypatch.setattr(collect_cli, "_make_envs", interrupted_while_forking)
    out = tmp_path / "d"
    args = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "2", "--num-workers", "2"]
    assert main([*args, "--steps", "1000", "--quiet", "--out", str(out)]) == 130
    assert not (out / "metadata.json").exists()
    monkeypatch.setattr(collect_cli, "_make_envs", make_envs)
    assert main([*args, "--steps", "10", "--quiet", "--out", str(tmp_path / "e")]) == 0  # the next run starts clean


def _terminate_as_a_forked_worker() -> None:
    from vecenv.datasets import cli as collect_cli

    collect_cli._raise_terminated(signal.SIGTERM, None)
    os._exit(3)  # not reached: the handler ends the process as SIGTERM does


@pytest.mark.timeout(30)
def test_the_sigterm_handler_in_a_forked_child_ends_it_as_sigterm_does() -> None:
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=_terminate_as_a_forked_worker)
    child.start()
    child.join(20)
    assert child.exitcode == -signal.SIGTERM


# ------------------------------------------------------------------------ Stable-Baselines3 policies


@pytest.mark.timeout(120)
def test_sb3_policy_collects_with_the_models_predict(tmp_path: Path) -> None:
    sb3 = pytest.importorskip("stable_baselines3")
    model = sb3.PPO("MlpPolicy", CounterEnv(), n_steps=16, batch_size=16, seed=0, device="cpu")  # untrained is enough
    model.save(tmp_path / "ppo.zip")
    out = tmp_path / "d"
    args = [
        "--env",
        "tests.helpers.envs:RolloutCounter-v0",
        "--num-envs",
        "3",
        "--num-workers",
        "2",
        "--steps",
        "60",
        "--policy",
        f"sb3:{tmp_path / 'ppo.zip'}",
        "--deterministic",
        "--quiet",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    dataset = load(out)
    assert dataset.metadata["policy"] == f"sb3:{tmp_path / 'ppo.zip'} (PPO, deterministic)"
    expected, _ = model.predict(np.asarray(dataset["observations"]), deterministic=True)
    np.testing.assert_array_equal(dataset["actions"], expected)
    check_real_transitions(dataset)
    # Naming the algorithm works too; a file that is not a model, or a model for other spaces, is one line.
    assert main([*args[:-1], str(tmp_path / "e"), "--policy", f"sb3:PPO:{tmp_path / 'ppo.zip'}"]) == 0
    (tmp_path / "bad.zip").write_text("not a zip")
    assert main([*args[:-3], "--policy", f"sb3:{tmp_path / 'bad.zip'}", "--out", str(tmp_path / "f")]) == 2
    assert (
        main(
            ["--env", "CartPole-v1", "--policy", f"sb3:{tmp_path / 'ppo.zip'}", "--quiet", "--out", str(tmp_path / "g")]
        )
        == 2
    )


@pytest.mark.timeout(240)
def test_a_sampling_sb3_policy_collects_the_same_data_whatever_the_workers(tmp_path: Path) -> None:
    """A stochastic ``sb3:`` policy sampled each batch from one generator, so the dataset of the
    same command changed with ``--num-workers`` (whose default is the machine's core count) and
    with ``--rollout-steps 0``: each env now samples from its own stream."""
    sb3 = pytest.importorskip("stable_baselines3")
    for name, model in (
        ("ppo", sb3.PPO("MlpPolicy", gymnasium.make("CartPole-v1"), seed=0, device="cpu")),
        ("sac", sb3.SAC("MlpPolicy", gymnasium.make("Pendulum-v1"), seed=0, device="cpu", buffer_size=100)),
    ):
        model.save(tmp_path / f"{name}.zip")
        env = "CartPole-v1" if name == "ppo" else "Pendulum-v1"
        args = ["--env", env, "--num-envs", "4", "--steps", "300", "--seed", "3", "--quiet"]
        args += ["--policy", f"sb3:{tmp_path / name}.zip"]
        runs = []
        for extra in (["--num-workers", "1"], ["--num-workers", "2"], ["--num-workers", "3"], ["--rollout-steps", "0"]):
            out = tmp_path / f"{name}{len(runs)}"
            assert main([*args, *extra, "--out", str(out)]) == 0
            runs.append(load(out))
        assert len(np.unique(runs[0]["actions"])) > 1, "the policy samples"
        # A batched forward's last bits can depend on the batch size (docs/rollouts.md); a
        # discrete policy's actions do not show them, SAC's continuous ones do, and Pendulum's
        # dynamics carry them on.
        rtol = 0 if name == "ppo" else 1e-4
        for run in runs[1:]:
            for field in ("actions", "observations", "rewards", "terminations", "truncations"):
                np.testing.assert_allclose(run[field], runs[0][field], rtol=rtol, atol=rtol, err_msg=f"{name} {field}")


@pytest.mark.timeout(60)
def test_a_callable_that_cannot_be_pickled_collects_where_it_acts_here(tmp_path: Path) -> None:
    """Stepping a vector env whose workers never run the policy (``SyncVectorEnv``, or
    ``rollout_steps=0``), the collector still made the callable a worker policy, which pickles
    it: one holding a lock failed. It acts here as it is; the rollouts in the workers still
    need it picklable, and say so."""
    lock = threading.Lock()

    def policy(observations: np.ndarray) -> np.ndarray:
        with lock:
            return np.zeros(len(observations), np.int64)

    sync = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 2)
    try:
        dataset = collect(sync, policy, steps=30, out=tmp_path / "sync", progress=False)
    finally:
        sync.close()
    assert len(dataset["rewards"]) == 30 and not np.asarray(dataset["actions"]).any()
    with vecenv.make("CartPole-v1", 2, 2) as envs:
        stepped = collect(envs, policy, steps=30, out=tmp_path / "steps", progress=False, rollout_steps=0)
        assert len(stepped["rewards"]) == 30
        with pytest.raises(TypeError, match="cannot pickle"):
            collect(envs, policy, steps=30, out=tmp_path / "rollouts", progress=False)


@pytest.mark.timeout(120)
def test_sb3_policy_on_other_spaces_or_recurrent_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A FrozenLake 4x4 model passed the collector's check on 8x8 (same type, no shape) and acted
    on states it never saw; a RecurrentPPO acted from a zero LSTM state at every step under
    --rollout-steps 0. Both are refused in one line, as a rollout refuses them."""
    sb3 = pytest.importorskip("stable_baselines3")
    sb3.PPO("MlpPolicy", gymnasium.make("FrozenLake-v1"), seed=0, device="cpu").save(tmp_path / "lake.zip")
    for rollout_steps in ("0", "8"):
        args = ["--env", "FrozenLake-v1", "--env-kwargs", '{"map_name": "8x8"}', "--steps", "20"]
        args += ["--policy", f"sb3:{tmp_path / 'lake.zip'}", "--rollout-steps", rollout_steps, "--quiet"]
        assert main([*args, "--out", str(tmp_path / "d")]) == 2
        err = capsys.readouterr().err
        assert "the model's observation space is Discrete(16), the environment's is Discrete(64)" in err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "d").exists()
    contrib = pytest.importorskip("sb3_contrib")
    model = contrib.RecurrentPPO("MlpLstmPolicy", gymnasium.make("CartPole-v1"), seed=0, device="cpu", n_steps=8)
    model.save(tmp_path / "lstm.zip")
    spec = f"sb3:RecurrentPPO:{tmp_path / 'lstm.zip'}"
    for rollout_steps in ("0", "8"):
        args = ["--env", "CartPole-v1", "--steps", "20", "--policy", spec, "--rollout-steps", rollout_steps]
        assert main([*args, "--quiet", "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert "--policy sb3:" in err and "got a recurrent RecurrentActorCriticPolicy" in err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_sb3_policy_errors_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--policy", f"sb3:{tmp_path / 'missing.zip'}", "--quiet", "--out", str(tmp_path / "d")]) == 2
    assert "expected sb3:PATH.zip naming a saved model file" in capsys.readouterr().err
    assert (
        main(
            [
                "--policy",
                "tests.helpers.envs:constant_policy",
                "--deterministic",
                "--quiet",
                "--out",
                str(tmp_path / "d"),
            ]
        )
        == 2
    )
    assert "--deterministic: only for sb3: policies" in capsys.readouterr().err


def test_interrupted_episodes_collection_keeps_finished_episodes_and_no_spill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rollout.writer, "CHUNK_BYTES", 1024)  # open episodes spill early
    calls = []

    def policy(observation: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 400:
            raise KeyboardInterrupt
        return np.zeros(len(observation), dtype=np.int64)

    envs = SyncVectorEnv([lambda: LongEpisodeEnv(150), lambda: LongEpisodeEnv(1_000)])
    with pytest.raises(KeyboardInterrupt):
        collect(envs, policy, episodes=5, out=tmp_path / "d", progress=False)
    dataset = load(tmp_path / "d")
    assert not dataset.complete and dataset.metadata["counts"]["episodes"] == 2 and dataset.transitions == 300
    assert np.all(np.asarray(dataset["env_ids"]) == 0)
    assert not (tmp_path / "d" / ".spill").exists()


def test_an_overwrite_that_writes_nothing_leaves_the_old_dataset(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--overwrite`` replaces the old dataset only once the run has written a transition: one
    whose policy is refused at the first step leaves the old dataset as it was, says so, and
    leaves nothing hidden beside it."""
    args = ["--env", "tests.helpers.envs:RolloutCounter-v0", "--num-envs", "2", "--num-workers", "1", "--quiet"]
    out = tmp_path / "d"
    assert main([*args, "--steps", "40", "--out", str(out)]) == 0
    with load(out) as old:
        rewards, complete = np.array(old["rewards"]), old.complete
    assert (
        main(
            [
                *args,
                "--steps",
                "40",
                "--out",
                str(out),
                "--overwrite",
                "--policy",
                "tests.helpers.envs:out_of_space_policy",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "outside the action space" in err and f"nothing was written; the dataset already in {out} is as it was" in err
    )
    with load(out) as kept:
        np.testing.assert_array_equal(kept["rewards"], rewards)
        assert kept.complete == complete
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_ctrl_c_while_the_writer_starts_leaves_no_files_without_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overwrite: bool
) -> None:
    """Ctrl+C after the dataset's files are made but before its metadata.json is: nothing is
    left that neither loads nor lets the next run write (and an old dataset is put back)."""
    from vecenv.datasets.writer import DatasetWriter

    out = tmp_path / "d"
    if overwrite:
        collect(SyncVectorEnv([CounterEnv] * 2), steps=10, out=out, progress=False).close()
    write_metadata = DatasetWriter._write_metadata

    def interrupted(self: Any, complete: bool) -> None:
        monkeypatch.setattr(DatasetWriter, "_write_metadata", write_metadata)
        raise KeyboardInterrupt

    monkeypatch.setattr(DatasetWriter, "_write_metadata", interrupted)
    with pytest.raises(KeyboardInterrupt):
        collect(SyncVectorEnv([CounterEnv] * 2), steps=20, out=out, progress=False, overwrite=overwrite)
    if overwrite:
        with load(out) as kept:
            assert kept.transitions == 10 and kept.complete
    else:
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["d"] if overwrite else [])


_COLLECT_THEN_BUILD = """
import sys, threading
import vecenv
from vecenv.datasets import collect
from vecenv.machine import own_start_method

if __name__ == "__main__":
    for progress in (True, "auto"):
        with vecenv.make("CartPole-v1", 2, 0) as envs:
            collect(envs, steps=50, out=sys.argv[1] + str(progress), progress=progress)
    print(sorted(t.name for t in threading.enumerate()), own_start_method())
"""


@pytest.mark.timeout(60)
@pytest.mark.skipif(sys.platform != "linux", reason="fork is the platform's start method on Linux only")
def test_a_progress_bar_leaves_no_thread_so_later_vector_envs_still_fork(tmp_path: Path) -> None:
    """tqdm starts a monitor thread with a process's first bar, shown or not, and never ends it:
    every vector env made after a collection then forked its workers from a threaded parent, or
    (where no start method was recorded) started them with forkserver, as in any threaded
    parent."""
    script = tmp_path / "collect_then_build.py"
    script.write_text(_COLLECT_THEN_BUILD)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "d")], capture_output=True, text=True, timeout=50
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["['MainThread']", "fork"], proc.stdout + proc.stderr
