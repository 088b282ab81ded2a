"""Minari output: ``collect(..., format="minari")`` and ``export_minari`` of an existing dataset.

Minari (Farama's format for offline RL; D4RL moved there) stores whole episodes: each one
has ``T`` actions, rewards, terminations and truncations and ``T + 1`` observations, the last
being the final observation. The dataset is created through Minari's own API
(``minari.create_dataset_from_buffers``: its metadata, namespace and directory; HDF5 backend,
no JPEG re-encoding so arrays come back exactly), then the episodes are written straight into
its HDF5 file in Minari's layout by vecenv's own writer (``hdf5_episodes``), which is what makes
the output fast: through libhdf5 the objects of one short episode cost more CPU than its env
steps, and Minari's per-episode path also reopens the file and recounts the episodes per call. The
episodes equal what Minari's ``DataCollector`` records for the same seeds and actions, and the
env spec is recorded so ``dataset.recover_environment()`` works for registered envs. Minari is
optional: ``pip install "vecenv[minari]"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import json
import os
import shutil
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from vecenv.checks import check_seed_policy, seed_list
from vecenv.datasets.dataset import Dataset, load
from vecenv.datasets.errors import (
    KEYWORDS,
    DatasetWriteError,
    MinariNotInstalledError,
    OptionNames,
    OutputExistsError,
    UnsupportedSpaceError,
    no_episodes_error,
    write_error,
)
from vecenv.datasets.format import json_default, space_from_description, space_leaves
from vecenv.datasets.hdf5_episodes import EpisodePieces, Hdf5EpisodeFile
from vecenv.datasets.sinks import OPEN_EPISODES, EpisodeSummary, with_last
from vecenv.datasets.writer import (
    FLUSH_INTERVAL_S,
    check_directory_path,
    check_outside_datasets,
    check_replaceable,
    chunk_rows,
    now,
)
from vecenv.errors import ArgumentTypeError, InvalidArgumentError
from vecenv.files import write_text_atomically
from vecenv.interrupts import HeldInterrupt
from vecenv.seeding import SeedPolicy
from vecenv.spaces import named_leaves

INSTALL_HINT = 'Minari output needs the minari extra: pip install "vecenv[minari]"'
#: Minari's storage backends that vecenv writes (``data_format`` in Minari's terms).
STORAGES = ("hdf5", "arrow")
_STORAGE_MODULES = {"hdf5": ("h5py", "PIL"), "arrow": ("pyarrow", "PIL")}
# Minari warns about every optional field left empty; we fill what we know and stay quiet.
_QUIET = r"`(code_permalink|author|author_email|algorithm_name|description|eval_env)` is set to None"
_HDF5_FILE = "main_data.hdf5"  # where Minari's HDF5 storage keeps the episodes
_NAMESPACE_FILE = "namespace_metadata.json"  # what makes a folder a Minari namespace (minari.namespace)
_METADATA_KEYS = ("author", "author_email", "code_permalink", "description", "algorithm_name")


#: How a message names Minari's datasets root where no ``out`` was given: the environment
#: variable that set it, or Minari's default (``~/.minari/datasets``).
_ROOT_VARIABLE = "MINARI_DATASETS_PATH"
_DEFAULT_ROOT = "Minari's datasets root (~/.minari/datasets)"


def import_minari(storage: str = "hdf5") -> Any:
    """The ``minari`` module with what its ``storage`` backend needs (h5py for HDF5, pyarrow for
    Arrow), or MinariNotInstalledError (one line saying how to install it). Checked before any
    collection starts."""
    try:
        module = importlib.import_module("minari")
        for name in _STORAGE_MODULES[storage]:
            importlib.import_module(name)
    except ImportError as exc:
        hint = INSTALL_HINT if storage == "hdf5" else f'{INSTALL_HINT} and pyarrow: pip install "minari[arrow]"'
        raise MinariNotInstalledError(f"{hint} ({exc})") from None
    return module


def datasets_root(out: str | os.PathLike[str] | None) -> Path:
    """``out``, or Minari's datasets root: ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``;
    absolute (Minari's size count joins a relative root twice)."""
    if out is not None:
        return Path(out).absolute()
    return Path(os.environ.get(_ROOT_VARIABLE) or Path.home() / ".minari" / "datasets").absolute()


def minari_target(
    dataset_id: str,
    out: str | os.PathLike[str] | None,
    overwrite: bool,
    names: OptionNames = KEYWORDS,
    storage: str = "hdf5",
    prepare: bool = True,
) -> Path:
    """Check that Minari is installed, that ``dataset_id`` is valid and that it may be written
    under ``out`` (see ``datasets_root``); return the dataset's directory, having removed an
    existing dataset there when ``overwrite`` is true. ``names`` is how the messages name the
    options (``FLAGS`` for the command line). ``prepare=False`` only checks: nothing is removed
    or made (a command line checks its options before the envs exist, and bad input found
    after that must leave the dataset it would replace).

    Raises MinariNotInstalledError, ValueError (a malformed id or storage), FileExistsError, or
    DatasetWriteError (``EACCES``) where the dataset cannot be written or replaced.
    """
    if storage not in STORAGES:
        raise InvalidArgumentError(f"{names.storage}: expected one of {list(STORAGES)}, got {storage!r}")
    import_minari(storage)
    from minari.dataset.minari_dataset import parse_dataset_id

    if not isinstance(dataset_id, str):
        raise ArgumentTypeError(f"{names.dataset_id}: expected a str like 'NAMESPACE/NAME-vN', got {dataset_id!r}")
    try:
        parse_dataset_id(dataset_id)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(
            f"{names.dataset_id}: expected 'NAMESPACE/NAME-vN' or 'NAME-vN' (letters, digits, '-', '_'; "
            f"a namespace of two characters or more; a version is required; Minari says: {exc}), got {dataset_id!r}"
        ) from None
    root = datasets_root(out)
    if out is None:  # the root is Minari's: say where it came from, not "out"
        names = dataclasses.replace(names, out=_ROOT_VARIABLE if os.environ.get(_ROOT_VARIABLE) else _DEFAULT_ROOT)
    check_directory_path(root, names.out)
    check_outside_datasets(root, names.out, include_self=True)
    target = root / dataset_id
    check_directory_path(target, names.dataset_id)  # a file where the id's folders would go
    if target.exists():
        if not overwrite:
            raise OutputExistsError(
                f"Minari dataset {dataset_id!r} already exists in {str(root)!r} (pass {names.overwrite} to replace it)"
            )
        if any(target.iterdir()) and not _is_minari_dataset(target, dataset_id):
            raise OutputExistsError(
                f"refusing to overwrite {str(target)!r}: it is not empty and is not the Minari dataset "
                f"{dataset_id!r} (whose data/metadata.json names it)"
            )
        check_replaceable(target, names)
        if prepare:
            shutil.rmtree(target)
    if prepare:
        root.mkdir(parents=True, exist_ok=True)
    return target


def _is_minari_dataset(target: Path, dataset_id: str) -> bool:
    """Whether ``target`` holds the Minari dataset ``dataset_id``, which ``overwrite`` may delete:
    its ``data/metadata.json`` names it (another program's folder, or another dataset, is kept)."""
    try:
        metadata = json.loads((target / "data" / "metadata.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(metadata, dict) and metadata.get("dataset_id") == dataset_id


@contextlib.contextmanager
def _minari_root(root: Path) -> Iterator[None]:
    """Point Minari's dataset root (``MINARI_DATASETS_PATH``) at ``root`` for a while."""
    previous = os.environ.get(_ROOT_VARIABLE)
    os.environ[_ROOT_VARIABLE] = str(root)
    try:
        yield
    finally:
        if previous is None:
            del os.environ[_ROOT_VARIABLE]
        else:
            os.environ[_ROOT_VARIABLE] = previous


class _RecordedEnv(gymnasium.Env):
    """Carries the env spec and spaces to ``create_dataset_from_buffers`` so that Minari
    records the spec without building (and leaking) an env of its own."""

    def __init__(self, spec: EnvSpec, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        self.spec = spec
        self.observation_space = observation_space
        self.action_space = action_space


class _ArrowEpisodes:
    """Minari's Arrow layout: episode ``i`` is the directory ``data/<i>/`` holding
    ``part-0.arrow`` (one Arrow IPC record batch of ``T + 1`` rows: ``observations``, then
    ``actions``, ``rewards``, ``terminations`` and ``truncations`` padded with one zero row)
    and ``metadata.json`` (``id``, ``total_steps``, ``seed`` when known). Box, MultiDiscrete
    and MultiBinary leaves are fixed-size lists, Discrete ones plain columns, Dict and Tuple
    spaces structs (Tuple fields named ``"0"``, ``"1"``, ...): what Minari's
    ``ArrowStorage.update_episodes`` writes, built here from whole columns at once instead of
    through ``pyarrow.dataset.write_dataset`` and Minari's metadata rewrites per episode.

    Minari reads an episode as one record batch, so an episode is held whole in memory while
    it is written (the HDF5 storage writes long episodes piece by piece).
    """

    def __init__(self, path: Path, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        import pyarrow

        self.pa = pyarrow
        self.path = path
        self._bytes = 0  # of every episode's files
        self._episodes = self._steps = 0
        self.observation_space, self.action_space = observation_space, action_space

    def write(
        self,
        index: int,
        seed: int | None,
        length: int,
        pieces: EpisodePieces,
    ) -> None:
        """Write episode ``index`` (as ``Hdf5EpisodeFile.write``)."""
        parts = list(pieces)
        columns = [
            np.concatenate(leaf) if len(parts) > 1 else leaf[0] for leaf in zip(*(p[0] + p[1] + p[2] for p in parts))
        ]
        k = len(parts[0][0])
        a = len(parts[0][1])
        pa = self.pa
        observations = self._encode(self.observation_space, iter(columns[:k]), 0)
        actions = self._encode(self.action_space, iter(columns[k : k + a]), 1)
        scalars = [pa.array(np.concatenate([column, np.zeros(1, column.dtype)])) for column in columns[k + a :]]
        batch = pa.RecordBatch.from_arrays(
            [observations, actions, *scalars],
            names=["observations", "actions", "rewards", "terminations", "truncations"],
        )
        directory = self.path / str(index)
        try:
            directory.mkdir()
            part = directory / "part-0.arrow"
            with pa.OSFile(str(part), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as out:
                out.write_batch(batch)
            metadata: dict[str, Any] = {"id": index, "total_steps": length}
            if seed is not None:
                metadata["seed"] = seed
            text = json.dumps(metadata)
            (directory / "metadata.json").write_text(text)
            # As Minari's size walk counts them: the episode's files, and its folder's own size.
            self._bytes += part.stat().st_size + len(text) + directory.stat().st_size
            self._episodes += 1
            self._steps += length
        except BaseException:  # Ctrl+C or a failed write: no half-written episode stays behind
            shutil.rmtree(directory, ignore_errors=True)
            raise

    def _encode(self, space: spaces.Space, columns: Iterator[np.ndarray], pad: int) -> Any:
        pa = self.pa
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
            names, arrays = [], []
            for key, sub in items:
                names.append(str(key))
                arrays.append(self._encode(sub, columns, pad))
            return pa.StructArray.from_arrays(arrays, names=names)
        column = next(columns)
        rows = len(column) + pad
        if isinstance(space, spaces.Discrete):
            return pa.array(np.concatenate([column.reshape(-1), np.zeros(pad, column.dtype)]))
        flat = np.zeros((rows, int(np.prod(column.shape[1:], dtype=np.int64))), column.dtype)
        flat[: len(column)] = column.reshape(len(column), -1)
        kind = pa.list_(pa.from_numpy_dtype(column.dtype), list_size=flat.shape[1])
        return pa.FixedSizeListArray.from_arrays(flat.reshape(-1), type=kind)

    def flush(self) -> None:
        """Nothing is buffered: each episode's files are complete when ``write`` returns."""

    def close(self) -> None:
        """Nothing stays open."""

    def bytes_written(self) -> int:
        """The size of the episodes' files and folders, counted as they were written (Minari's
        ``get_size`` walks every file of the dataset: thousands of episode directories, each time)."""
        return self._bytes

    def readable_counts(self) -> tuple[int, int]:
        """The episodes and steps written: each is complete when ``write`` returns."""
        return self._episodes, self._steps


def check_minari_spaces(observation_space: spaces.Space, action_space: spaces.Space) -> None:
    """Raise UnsupportedSpaceError, before anything is written, for a leaf Minari cannot store:
    one of no values (a zero-size Box: neither of its storages writes it)."""
    for prefix, space in (("observations", observation_space), ("actions", action_space)):
        for leaf in space_leaves(space, prefix):
            if 0 in leaf.shape:
                raise UnsupportedSpaceError(
                    f"{leaf.name}: expected a space leaf that holds values for format='minari' (Minari cannot "
                    f"store an empty array per step; format='vecenv' can), got shape {leaf.shape} in {space}"
                )


#: The largest seed an episode of Minari's HDF5 storage records: h5py stores a Python int as a
#: 64-bit integer (uint64 past int64's range) and has no type for a larger one.
MAX_HDF5_SEED = 2**64 - 1


def check_minari_seeds(first_seeds: Sequence[int | None], storage: str, name: str, got: str) -> None:
    """Raise InvalidArgumentError, before anything is written, when the seed of an env's first
    episode (``first_seeds``, by env) is one Minari's HDF5 storage cannot record: each episode
    records its seed as a 64-bit integer, and a larger one failed only as that env's first
    episode was written, mid-run. The Arrow storage records any. ``name`` and ``got`` are how
    the message names the argument and what it received."""
    if storage != "hdf5":
        return
    for env, seed in enumerate(first_seeds):
        if seed is not None and seed > MAX_HDF5_SEED:
            raise InvalidArgumentError(
                f"{name}: expected first-episode seeds of at most 2**64 - 1 with Minari's HDF5 storage (an "
                f"episode records its seed as a 64-bit integer; the Arrow storage records any), got {got}, "
                f"which gives env {env} the seed {seed}"
            )


class MinariSink:
    """Writes whole episodes into a new Minari dataset (the ``collect`` sink for Minari).

    The dataset is created through Minari (``create_dataset_from_buffers`` with no episodes:
    its metadata, namespace and directory), then every episode goes straight into its HDF5
    file (``Hdf5EpisodeFile``), piece by piece for a long one, so memory stays bounded whatever
    the episode lengths. Minari's counts in ``metadata.json`` follow at most every
    ``FLUSH_INTERVAL_S`` seconds, and at ``finalize``.
    """

    def __init__(
        self,
        dataset_id: str,
        target: Path,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        spec: EnvSpec | None,
        vecenv_metadata: Mapping[str, Any],
        minari_metadata: Mapping[str, Any],
        open_episodes: str | None,
        storage: str = "hdf5",
    ) -> None:
        minari = import_minari(storage)
        unknown = sorted(set(minari_metadata) - set(_METADATA_KEYS))
        if unknown:
            raise InvalidArgumentError(f"minari_metadata: expected keys among {list(_METADATA_KEYS)}, got {unknown}")
        self.observation_space, self.action_space = observation_space, action_space
        self.vecenv_metadata = dict(vecenv_metadata)
        self.open_episodes = open_episodes
        self._obs = len(named_leaves(observation_space))
        self._act = len(named_leaves(action_space))
        env_id = self.vecenv_metadata.get("env_id")
        options = {
            "algorithm_name": str(self.vecenv_metadata.get("policy")),
            "description": f"Rollouts of {env_id} collected with vecenv "
            f"(policy {self.vecenv_metadata.get('policy')}, seed {self.vecenv_metadata.get('seed')}).",
            **minari_metadata,
        }
        spec = _recordable(spec)
        env = _RecordedEnv(spec, observation_space, action_space) if spec is not None else None
        self.target = target
        root = target.parents[len(Path(dataset_id).parts) - 1]
        self._made = _not_yet_made(root, target)  # what Minari makes for the id's namespace
        try:  # the target is this run's (minari_target checked it): nothing half-made stays there
            with _minari_root(root), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_QUIET, category=UserWarning)
                warnings.filterwarnings("ignore", message="env_spec is None", category=UserWarning)
                dataset = minari.create_dataset_from_buffers(
                    dataset_id,
                    [],
                    env=env,
                    observation_space=observation_space,
                    action_space=action_space,
                    data_format=storage,
                    **_raw_arrays(minari.create_dataset_from_buffers),
                    **options,
                )
            self.storage = dataset.storage
            data = self.storage.data_path
            self._file: Hdf5EpisodeFile | _ArrowEpisodes = (
                Hdf5EpisodeFile(data / _HDF5_FILE, observation_space, action_space)
                if storage == "hdf5"
                else _ArrowEpisodes(data, observation_space, action_space)
            )
        except BaseException:
            self._remove()
            raise
        self._minari = minari
        self.transitions = 0
        self.episodes = 0
        self.truncated_episodes = 0  # open episodes kept with their last step marked truncated
        self.dropped_episodes = 0
        self.dropped_transitions = 0
        self._recorded = 0  # the episodes Minari's counts give now
        self._last_flush = time.monotonic()

    def episode(self, pieces: Iterator[list[np.ndarray]], summary: EpisodeSummary, truncate_last: bool) -> None:
        """Write one episode given as pieces of columns (dataset field order), the last
        piece's final ``next_observations`` row becoming Minari's final observation."""
        k, a = self._obs, self._act

        def minari_pieces() -> EpisodePieces:
            for piece, last in with_last(pieces):
                observations = piece[:k]
                if last:
                    observations = [
                        np.concatenate([leaf, final[-1:]]) for leaf, final in zip(observations, piece[k : 2 * k])
                    ]
                truncations = piece[2 * k + a + 2]
                if last and truncate_last:
                    truncations = np.array(truncations)
                    truncations[-1] = True
                yield observations, piece[2 * k : 2 * k + a], [piece[2 * k + a], piece[2 * k + a + 1], truncations]

        with self._writing():
            self._file.write(self.episodes, summary.seed, summary.length, minari_pieces())
        self.transitions += summary.length
        self.episodes += 1
        self.truncated_episodes += bool(truncate_last)
        # Each time the count doubles (from the first episode on), and at least every second:
        # a run killed outright leaves at least half of its episodes readable.
        if self.episodes >= 2 * self._recorded or time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self._flush()

    def open_episode(self, pieces: Iterator[list[np.ndarray]], summary: EpisodeSummary) -> None:
        """An episode still open after the last of ``steps=N`` transitions: written with its
        last step marked truncated, or left out and counted, as ``open_episodes`` says (with
        ``episodes=N``, ``open_episodes`` is None: only finished episodes count)."""
        if self.open_episodes == "truncate":
            self.episode(pieces, summary, truncate_last=True)
        elif self.open_episodes == "drop":
            self.dropped_episodes += 1
            self.dropped_transitions += summary.length

    def _flush(self) -> None:
        """Make Minari's counts say what a reader finds in the files now (the HDF5 file indexes
        its episodes now and then: see ``Hdf5EpisodeFile.flush``), so a run killed outright
        leaves a dataset that Minari loads whole; the size in MB as Minari's ``get_size`` gives
        it, from the bytes written (finalize walks the files)."""
        with self._writing():
            self._file.flush()
            episodes, steps = self._file.readable_counts()
            size = self._file.bytes_written() + (self.storage.data_path / "metadata.json").stat().st_size
            _update_metadata(
                self.storage.data_path,
                {"total_steps": steps, "total_episodes": episodes, "dataset_size": round(size / 1e6, 1)},
            )
        self._recorded = episodes
        self._last_flush = time.monotonic()

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Turn an ``OSError`` of writing the dataset (a full disk, a file size limit) into a
        :class:`DatasetWriteError` that names its files."""
        try:
            yield
        except DatasetWriteError:
            raise
        except OSError as exc:
            raise write_error(exc, self.storage.data_path) from exc

    def finalize(self, complete: bool) -> Any:
        """Close the file, write the counts and the ``vecenv`` metadata entry; return the dataset.

        A run that ends early (Ctrl+C, an error) before its first episode leaves no dataset, as
        Minari cannot load one without episodes: the directory is removed and None returned.
        A complete run without episodes (``open_episodes="drop"`` left out every one) is
        removed the same way and raises ``NoEpisodesError``.
        When the file cannot be closed (a full disk), what a reader finds in it is recorded as
        incomplete, where that can still be written, and the :class:`DatasetWriteError` raised.
        """
        try:
            with self._writing():
                self._file.close()
        except DatasetWriteError:
            self._keep_readable()
            raise
        if self.episodes == 0:
            self._remove()
            if not complete:
                return None
            # Complete without an episode: "drop" left out every one, all still open at the end
            # of steps=N, so the N transitions are the dropped ones.
            raise no_episodes_error(self.dropped_transitions, self.dropped_episodes)
        counts = {"total_steps": self.transitions, "total_episodes": self.episodes}
        with self._writing():
            _update_metadata(self.storage.data_path, {**counts, "dataset_size": _dataset_size(self.storage.data_path)})
        self._record(complete, self.transitions, self.episodes)
        return self._minari.MinariDataset(self.storage.data_path)

    def _keep_readable(self) -> None:
        """After a failed close: the episodes a reader finds in the files, recorded as an
        incomplete dataset (nothing, if not even that can be written); none: no dataset."""
        episodes, steps = self._file.readable_counts()
        if episodes == 0:
            self._remove()
            return
        with contextlib.suppress(OSError):
            _update_metadata(self.storage.data_path, {"total_steps": steps, "total_episodes": episodes})
            self._record(False, steps, episodes)

    def _remove(self) -> None:
        """Leave no dataset, and nothing Minari made for it: the namespace folders and their
        ``namespace_metadata.json`` that were not there before (a folder only once empty)."""
        shutil.rmtree(self.target, ignore_errors=True)
        for path in reversed(self._made):  # the innermost first, each folder's file before it
            with contextlib.suppress(OSError):
                if path.name == _NAMESPACE_FILE:
                    path.unlink()
                else:
                    path.rmdir()

    def _record(self, complete: bool, transitions: int, episodes: int) -> None:
        """The ``vecenv`` entry of Minari's metadata: how the dataset was collected, its counts."""
        keep = (
            "env_id",
            "env_kwargs",
            "num_envs",
            "autoreset_mode",
            "seed",
            "seed_policy",
            "policy",
            "requested",
            "start_time",
            "versions",
            "command_line",
            "source",
        )
        record = {key: self.vecenv_metadata[key] for key in keep if key in self.vecenv_metadata}
        record.update(
            complete=complete,
            end_time=now(),
            counts={"transitions": transitions, "episodes": episodes},
            open_episodes=self.open_episodes,
            truncated_open_episodes=self.truncated_episodes,
            dropped_open_episodes={"episodes": self.dropped_episodes, "transitions": self.dropped_transitions},
        )
        with self._writing():
            _update_metadata(self.storage.data_path, {"vecenv": record})


def _not_yet_made(root: Path, target: Path) -> list[Path]:
    """The namespace folders between ``root`` and the dataset folder ``target`` and their
    ``namespace_metadata.json`` (which Minari writes when it creates a dataset with a namespace)
    that do not exist yet, the outermost first, each folder before its file."""
    missing = []
    for folder in reversed(target.parents[: len(target.relative_to(root).parts) - 1]):
        if not folder.exists():
            missing.append(folder)
        if not (folder / _NAMESPACE_FILE).exists():
            missing.append(folder / _NAMESPACE_FILE)
    return missing


def _dataset_size(data_path: Path) -> float:
    """The size in MB that Minari's ``get_size`` gives (every file and folder under
    ``data_path``, folders counted by their own size), summed while the folders are read, so
    memory stays bounded: Minari's ``glob("**/*")`` holds every path at once, tens of MB for an
    Arrow dataset of some ten thousand episode folders."""
    return round(_tree_bytes(data_path) / 1e6, 1)


def _tree_bytes(folder: str | os.PathLike[str]) -> int:
    """The bytes of every file and folder under ``folder`` (symbolic links followed, not
    descended into, as Minari's walk), each folder read as it comes: one open listing per level."""
    total = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            total += entry.stat().st_size
            if entry.is_dir(follow_symlinks=False):
                total += _tree_bytes(entry.path)
    return total


def _update_metadata(data_path: Path, changes: Mapping[str, Any]) -> None:
    """Minari's ``metadata.json`` with ``changes``, replaced whole: a run interrupted or killed
    while it is written leaves the old file, never a truncated one (Minari's own
    ``update_metadata`` rewrites the file in place)."""
    path = data_path / "metadata.json"
    metadata = json.loads(path.read_text())
    metadata.update(changes)
    write_text_atomically(path, json.dumps(metadata, default=json_default))


def _raw_arrays(create: Any) -> dict[str, bool]:
    """The keyword that keeps image observations as raw arrays, for Minari's dataset maker:
    ``jpeg_encoding=False`` where it takes one (0.5.4 on, where JPEG is the lossy default);
    Minari 0.5.2 and 0.5.3 store raw arrays and take no such keyword."""
    return {"jpeg_encoding": False} if "jpeg_encoding" in inspect.signature(create).parameters else {}


def _recordable(spec: EnvSpec | None) -> EnvSpec | None:
    """``spec`` if Minari can record it (as JSON), else None with a warning: an env registered
    with a callable entry point, or with kwargs JSON cannot hold."""
    if spec is None:
        return None
    try:
        spec.to_json()
    except (ValueError, TypeError) as exc:
        warnings.warn(
            f"the Minari dataset records no env spec, so recover_environment() will not work: {exc}",
            UserWarning,
            stacklevel=4,
        )
        return None
    return spec


def _env_spec(metadata: Mapping[str, Any]) -> EnvSpec | None:
    """The env spec a vecenv dataset recorded, or the registered one for its env id and kwargs."""
    if metadata.get("env_spec"):
        return EnvSpec.from_json(metadata["env_spec"])
    env_id = metadata.get("env_id")
    if not env_id:
        return None
    module, _, name = str(env_id).rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        spec = gymnasium.spec(name)
    except Exception:
        return None
    return dataclasses.replace(spec, kwargs={**spec.kwargs, **(metadata.get("env_kwargs") or {})})


def export_minari(
    dataset: Dataset | str | os.PathLike[str],
    dataset_id: str,
    *,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    open_episodes: str = "truncate",
    env_spec: EnvSpec | None = None,
    minari_metadata: Mapping[str, Any] | None = None,
    minari_storage: str = "hdf5",
) -> Any:
    """Write a vecenv dataset (a ``Dataset`` or its directory) as the Minari dataset ``dataset_id``.

    Episodes are written in the order they end in the dataset (for ``episodes=N`` datasets,
    their order on disk); episodes still open at the end (``steps=N`` datasets) follow, by
    env index, truncated or dropped as ``open_episodes`` says (see ``collect``). So exporting
    a ``steps=N`` dataset gives the same Minari dataset as collecting it with
    ``format="minari"``. ``out`` is the datasets root (default Minari's). The env spec is
    the one recorded at collection, else the registered spec of ``env_id`` with
    ``env_kwargs``, else none (then ``recover_environment`` is unavailable).
    ``minari_storage``: Minari's storage backend, ``"hdf5"`` (default) or ``"arrow"`` (needs pyarrow).

    Memory: one chunk of rows plus an index of 16 bytes per transition.

    Returns the ``minari.MinariDataset``. Raises MinariNotInstalledError, ValueError for a
    malformed ``dataset_id`` or ``open_episodes`` or a dataset with no episode to write (nothing
    is written), FileExistsError if it exists and ``overwrite`` is false.
    """
    if open_episodes not in OPEN_EPISODES:
        raise InvalidArgumentError(f"open_episodes: expected one of {list(OPEN_EPISODES)}, got {open_episodes!r}")
    minari_target(dataset_id, out, overwrite, storage=minari_storage, prepare=False)  # checked first
    if not isinstance(dataset, Dataset):
        dataset = load(dataset)
    metadata = dataset.metadata
    observation_space = space_from_description(metadata["observation_space"]["description"])
    action_space = space_from_description(metadata["action_space"]["description"])
    check_minari_spaces(observation_space, action_space)
    episodes = _StoredEpisodes(dataset)
    check_minari_seeds(
        episodes.first_seeds, minari_storage, "dataset", f"seed {episodes.seed} in {str(dataset.path)!r}"
    )
    if not episodes.closed and not (episodes.still_open and open_episodes == "truncate"):
        # Minari cannot load a dataset without episodes: refused before an existing one is replaced.
        raise InvalidArgumentError(
            f"dataset: expected a dataset with an episode to export (Minari cannot load one without), got "
            f"{str(dataset.path)!r} with {len(episodes.order)} transitions and no episode that "
            f"open_episodes={open_episodes!r} keeps; nothing was written"
        )
    target = minari_target(dataset_id, out, overwrite, storage=minari_storage)
    spec = env_spec if env_spec is not None else _env_spec(metadata)
    source = {**metadata, "source": str(dataset.path)}
    sink = MinariSink(
        dataset_id,
        target,
        observation_space,
        action_space,
        spec,
        source,
        dict(minari_metadata or {}),
        open_episodes,
        minari_storage,
    )
    try:
        episodes.write_to(sink)
    except BaseException:
        with HeldInterrupt(every=True):  # a second Ctrl+C leaves the episodes written a dataset
            sink.finalize(complete=False)
        raise
    return sink.finalize(complete=bool(metadata.get("complete")))


class _StoredEpisodes:
    """The episodes of a dataset, in the order ``export_minari`` writes them: finished ones in
    the order they end, then the open ones (a ``steps=N`` dataset's end) by env index."""

    def __init__(self, dataset: Dataset) -> None:
        metadata = dataset.metadata
        episode_ids = np.asarray(dataset["episode_ids"])
        terminations, truncations = np.asarray(dataset["terminations"]), np.asarray(dataset["truncations"])
        env_ids = np.asarray(dataset["env_ids"])
        order = np.argsort(episode_ids, kind="stable")  # rows of each episode, in row order
        starts: Any = (
            np.flatnonzero(np.r_[True, episode_ids[order][1:] != episode_ids[order][:-1]]) if len(order) else []
        )
        bounds = list(zip(starts, [*starts[1:], len(order)]))
        ends = [int(order[stop - 1]) for _, stop in bounds]
        closed = [i for i, end in enumerate(ends) if terminations[end] or truncations[end]]
        still_open = sorted(
            (i for i, end in enumerate(ends) if not (terminations[end] or truncations[end])),
            key=lambda i: int(env_ids[ends[i]]),
        )
        closed.sort(key=lambda i: ends[i])
        self.arrays = [dataset.leaves[name] for name in metadata["fields"]]
        self.episode_ids, self.rewards = episode_ids, np.asarray(dataset["rewards"])
        self.order, self.bounds, self.closed, self.still_open = order, bounds, closed, still_open
        self.step = chunk_rows(
            sum(np.dtype(f["dtype"]).itemsize * int(np.prod(f["shape"])) for f in metadata["fields"].values())
        )
        self.seed, self.num_envs = metadata.get("seed"), metadata.get("num_envs") or 0
        # Env i's first episode started from its seed under the policy the collector recorded.
        self.first_seeds = seed_list(
            self.seed, self.num_envs, check_seed_policy(metadata.get("seed_policy", SeedPolicy.SEQUENTIAL))
        )

    def write_to(self, sink: MinariSink) -> None:
        """Hand every episode to ``sink``, in chunks of rows: finished ones to ``episode``, open
        ones to ``open_episode``."""
        for indices, still_open in ((self.closed, False), (self.still_open, True)):
            for i in indices:
                rows = self.order[self.bounds[i][0] : self.bounds[i][1]]
                episode_id = int(self.episode_ids[rows[0]])
                seed = self.first_seeds[episode_id] if episode_id < self.num_envs else None
                summary = EpisodeSummary(float(self.rewards[rows].sum()), len(rows), episode_id, seed)
                if still_open:
                    sink.open_episode(self.pieces(rows), summary)
                else:
                    sink.episode(self.pieces(rows), summary, truncate_last=False)

    def pieces(self, rows: np.ndarray) -> Iterator[list[np.ndarray]]:
        """The columns of ``rows``, a chunk at a time."""
        for begin in range(0, len(rows), self.step):
            part = rows[begin : begin + self.step]
            yield [np.asarray(array[part]) for array in self.arrays]
