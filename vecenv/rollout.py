"""Collect rollouts from a vector environment into an on-disk dataset, and load them back.

A *dataset* is a directory holding ``metadata.json`` and one ``.npy`` file per field,
all of the same length N (the number of transitions) and in collection order:

``observations``, ``next_observations``, ``actions``
    One file per leaf of the space. A Box/Discrete/MultiDiscrete/MultiBinary space is
    one file (``observations.npy``); Dict and Tuple spaces give one file per leaf, named
    with dots (``observations.pos.npy``, ``actions.0.npy``, ``observations.a.1.npy``).
``rewards`` (float64), ``terminations`` (bool), ``truncations`` (bool)
    As returned by the environment step.
``env_ids`` (int64)
    Index of the sub-environment that produced the transition.
``episode_ids`` (int64)
    A global episode counter numbered in the order episodes *start*: the initial reset
    numbers env ``0..num_envs-1`` as episodes ``0..num_envs-1``; later episodes are
    numbered when their reset observation is produced, in vector-step order, ascending
    env index within a step. With ``episodes=N`` only the first N episodes to finish are
    written, so the ids written can have gaps (episodes that started but lost the race).

Every record is a real environment step: ``next_observations`` of the last step of an
episode is that episode's final observation, never the reset observation, and the
NEXT_STEP autoreset "reset step" (where the env resets and ignores the action) is never
recorded. Records are written with bounded memory: each field is streamed to its file in
chunks and the ``.npy`` headers and ``metadata.json`` are rewritten after every chunk, so
the directory is a valid (``"complete": false``) dataset while collection is running and
after an interruption.

``collect`` is the library entry point, ``load`` reads a dataset back as memory-mapped
arrays, and ``main`` is the ``vecenv-collect`` command line tool. For example::

    envs = vecenv.make("CartPole-v1", 8)
    try:
        dataset = collect(envs, "random", steps=10_000, seed=0, out="rollouts/cartpole")
    finally:
        envs.close()
    dataset["observations"].shape         # (10000, 4), a read-only numpy.memmap
    load("rollouts/cartpole").metadata["counts"]  # {"transitions": 10000, "episodes": ...}
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import json
import math
import os
import platform
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, iterate
from tqdm import tqdm

from vecenv.factory import check_env_id, make

__all__ = ["Dataset", "PolicyError", "UnsupportedSpaceError", "collect", "load", "main"]

PROG = "vecenv-collect"
FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"
# Rows are buffered in memory up to this many bytes (all fields together) per chunk.
CHUNK_BYTES = 8 * 1024 * 1024
# A partially filled chunk is also flushed after this many seconds, so a slow collection
# shows progress on disk and loses little if the process is killed outright.
FLUSH_INTERVAL_S = 1.0

Policy = Callable[[Any], Any]


class PolicyError(ValueError):
    """The policy returned actions that are not in the environments' action space."""


class UnsupportedSpaceError(TypeError):
    """A space cannot be stored as fixed-shape arrays (only Box, Discrete, MultiDiscrete,
    MultiBinary and Dict/Tuple of them can)."""


class _Terminated(KeyboardInterrupt):
    """Raised by ``main``'s SIGTERM handler so that termination finalizes the dataset
    exactly like Ctrl+C does."""


# --------------------------------------------------------------------------- spaces


@dataclass(frozen=True)
class _Leaf:
    """A fixed-shape leaf of a (possibly nested) space: its file name and array layout."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


_LEAF_TYPES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def _leaves(space: spaces.Space, prefix: str) -> list[_Leaf]:
    """List the leaves of ``space`` in a fixed order (Dict key order, Tuple index order).

    Leaf names join ``prefix`` and the Dict keys / Tuple indices with dots. Raises
    UnsupportedSpaceError for spaces without a fixed shape and dtype.
    """
    if isinstance(space, spaces.Dict):
        result = []
        for key, subspace in space.spaces.items():
            if not isinstance(key, str) or not key or any(c in key for c in "./\\"):
                raise UnsupportedSpaceError(
                    f"{prefix}: Dict keys must be non-empty strings without '.', '/' or "
                    f"'\\' (they become file names), got {key!r}"
                )
            result += _leaves(subspace, f"{prefix}.{key}")
        return result
    if isinstance(space, spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in _leaves(sub, f"{prefix}.{i}")]
    if isinstance(space, _LEAF_TYPES):
        return [_Leaf(prefix, tuple(space.shape), np.dtype(space.dtype))]
    raise UnsupportedSpaceError(
        f"{prefix}: expected a fixed-shape space (Box, Discrete, MultiDiscrete, "
        f"MultiBinary, or Dict/Tuple of them), got {space}"
    )


def _leaf_values(space: spaces.Space, value: Any) -> list[Any]:
    """Flatten ``value`` (single or batched) of ``space`` into leaves, in ``_leaves`` order."""
    if isinstance(space, spaces.Dict):
        return [v for key, sub in space.spaces.items() for v in _leaf_values(sub, value[key])]
    if isinstance(space, spaces.Tuple):
        return [v for i, sub in enumerate(space.spaces) for v in _leaf_values(sub, value[i])]
    return [value]


def _json_number_array(values: np.ndarray) -> Any:
    """A JSON-safe form of a bounds array: one number if all equal, else a nested list.

    Non-finite values become the strings "inf", "-inf" and "nan" (strict JSON has none).
    """

    def safe(x: Any) -> Any:
        if isinstance(x, list):
            return [safe(item) for item in x]
        return x if not isinstance(x, float) or math.isfinite(x) else str(x)

    flat = values.reshape(-1)
    return safe(flat[0].item() if flat.size and np.all(flat == flat[0]) else values.tolist())


def _describe_space(space: spaces.Space) -> dict[str, Any]:
    """A structured, JSON-serialisable description of a supported space.

    ``load`` uses it to rebuild Dict/Tuple nesting; people use it to know what the
    arrays mean without unpickling anything.
    """
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {k: _describe_space(s) for k, s in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "spaces": [_describe_space(s) for s in space.spaces]}
    description: dict[str, Any] = {
        "type": type(space).__name__,
        "shape": list(space.shape),
        "dtype": str(np.dtype(space.dtype)),
    }
    if isinstance(space, spaces.Box):
        description["low"] = _json_number_array(space.low)
        description["high"] = _json_number_array(space.high)
    elif isinstance(space, spaces.Discrete):
        description["n"] = int(space.n)
        description["start"] = int(space.start)
    elif isinstance(space, spaces.MultiDiscrete):
        description["nvec"] = space.nvec.tolist()
        description["start"] = space.start.tolist()
    return description


# --------------------------------------------------------------------------- writing


@dataclass
class _RunningStats:
    """Count, sum, min and max of a stream of numbers, in constant memory."""

    count: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def add(self, values: np.ndarray) -> None:
        if values.size:
            self.count += int(values.size)
            self.total += float(values.sum())
            self.low = min(self.low, float(values.min()))
            self.high = max(self.high, float(values.max()))

    def as_json(self) -> dict[str, float] | None:
        if not self.count:
            return None
        return {"mean": self.total / self.count, "min": self.low, "max": self.high}


class _DatasetWriter:
    """Streams rows of every field into ``<out>/<field>.npy`` with bounded memory.

    Each file starts with a ``.npy`` v1.0 header whose padding leaves room for any row
    count (``numpy.lib.format`` pads headers for in-place growth), followed by raw rows.
    Rows are buffered per field in one fixed-size chunk. ``flush`` writes the buffered rows
    at the offset after the last *committed* row, then rewrites every header and the
    metadata: it is idempotent, so if it is interrupted the next flush (or ``finalize``)
    simply rewrites the same rows, and ``finalize`` truncates any bytes written past the
    committed rows. Thus all files always agree on the row count recorded in the headers
    and in ``metadata.json``.
    """

    def __init__(self, out: Path, fields: list[_Leaf], metadata: dict[str, Any]) -> None:
        self.out = out
        self.fields = fields
        self.metadata = metadata
        self.transitions = 0  # rows appended: committed to files or buffered
        self.episodes = 0  # complete episodes among those rows
        self.returns = _RunningStats()
        self.lengths = _RunningStats()
        self._flushed = 0  # rows committed to the files
        self._buffered = 0  # rows in the chunk buffers
        self._started = time.monotonic()
        self._last_flush = self._started
        row_bytes = sum(f.dtype.itemsize * math.prod(f.shape) for f in fields)
        self._chunk_rows = max(1, CHUNK_BYTES // max(1, row_bytes))
        self._buffers = [np.empty((self._chunk_rows, *f.shape), f.dtype) for f in fields]
        self._row_bytes = [f.dtype.itemsize * math.prod(f.shape) for f in fields]
        out.mkdir(parents=True)
        self._files: list[IO[bytes]] = []
        for field in fields:
            self._files.append(open(out / f"{field.name}.npy", "w+b"))  # noqa: SIM115
        self._data_offset = [self._write_header(f, field, 0) for f, field in zip(self._files, fields)]
        self._write_metadata(complete=False)

    def append(self, columns: Sequence[np.ndarray], returns: np.ndarray, lengths: np.ndarray) -> None:
        """Append rows (one array per field, equal lengths) holding ``len(returns)``
        complete episodes whose returns and lengths are given."""
        count = len(columns[0])
        if self._buffered + count > self._chunk_rows:
            self.flush()
        if count > self._chunk_rows:  # an episode longer than a chunk goes straight to disk
            self._commit(columns, count)
        else:
            start = self._buffered
            for buffer, column in zip(self._buffers, columns):
                buffer[start : start + count] = column
            self._buffered = start + count
        self.transitions += count
        self.episodes += len(returns)
        self.returns.add(returns)
        self.lengths.add(lengths)
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        """Commit the buffered rows to the files and make headers and metadata agree."""
        self._commit([b[: self._buffered] for b in self._buffers], self._buffered)
        self._buffered = 0
        for file, field in zip(self._files, self.fields):
            self._write_header(file, field, self._flushed)
        self._write_metadata(complete=False)
        self._last_flush = time.monotonic()

    def finalize(self, complete: bool) -> None:
        """Flush, trim the files to the committed rows, close them and write the final
        metadata (``complete`` says whether the requested count was reached)."""
        self.flush()
        for file, offset, row_bytes in zip(self._files, self._data_offset, self._row_bytes):
            file.truncate(offset + self._flushed * row_bytes)
            file.close()
        self.metadata["end_time"] = _now()
        self._write_metadata(complete=complete)

    def _commit(self, columns: Sequence[np.ndarray], count: int) -> None:
        for file, offset, row_bytes, column in zip(self._files, self._data_offset, self._row_bytes, columns):
            file.seek(offset + self._flushed * row_bytes)
            file.write(np.ascontiguousarray(column).data)
        self._flushed += count

    @staticmethod
    def _write_header(file: IO[bytes], field: _Leaf, rows: int) -> int:
        file.seek(0)
        header = {
            "descr": np.lib.format.dtype_to_descr(field.dtype),
            "fortran_order": False,
            "shape": (rows, *field.shape),
        }
        np.lib.format.write_array_header_1_0(file, header)
        return file.tell()

    def _write_metadata(self, complete: bool) -> None:
        elapsed = time.monotonic() - self._started
        self.metadata["complete"] = complete
        self.metadata["counts"] = {"transitions": self._flushed, "episodes": self.episodes}
        self.metadata["stats"] = {
            "episode_return": self.returns.as_json(),
            "episode_length": self.lengths.as_json(),
            "duration_s": elapsed,
            "steps_per_second": self._flushed / elapsed if elapsed > 0 else None,
        }
        temporary = self.out / f".{METADATA_FILE}.tmp"
        temporary.write_text(json.dumps(self.metadata, indent=2) + "\n")
        os.replace(temporary, self.out / METADATA_FILE)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _versions() -> dict[str, str | None]:
    try:
        vecenv_version: str | None = importlib.metadata.version("vecenv")
    except importlib.metadata.PackageNotFoundError:
        vecenv_version = getattr(sys.modules.get("vecenv"), "__version__", None)
    return {
        "vecenv": vecenv_version,
        "gymnasium": gymnasium.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _check_out(out: Path, overwrite: bool) -> None:
    """Raise FileExistsError if writing to ``out`` would clobber something we must not."""
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"out: expected a directory path, got {str(out)!r}, which is an existing file")
    if not overwrite:
        raise FileExistsError(
            f"output directory {str(out)!r} already exists (pass overwrite=True / --overwrite to replace it)"
        )
    if any(out.iterdir()) and not (out / METADATA_FILE).is_file():
        raise FileExistsError(
            f"refusing to overwrite {str(out)!r}: it is not empty and has no {METADATA_FILE}, "
            "so it is not a rollout dataset"
        )


# --------------------------------------------------------------------------- collecting


def _autoreset_mode(envs: VectorEnv) -> AutoresetMode:
    """The autoreset mode the vector env declares in ``metadata["autoreset_mode"]``
    (gymnasium's convention; NEXT_STEP, gymnasium's default, when absent)."""
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if isinstance(mode, AutoresetMode):
        return mode
    for candidate in AutoresetMode:
        if str(mode) in (candidate.value, candidate.name, candidate.name.lower()):
            return candidate
    expected = [m.name for m in AutoresetMode]
    raise ValueError(f"envs.metadata['autoreset_mode']: expected one of {expected}, got {mode!r}")


def _policy_name(policy: Any) -> str:
    if isinstance(policy, str):
        return policy
    module = getattr(policy, "__module__", None)
    qualname = getattr(policy, "__qualname__", None) or type(policy).__qualname__
    return f"{module}:{qualname}" if module else qualname


def _one_line(value: Any, limit: int = 300) -> str:
    """``repr`` squeezed to one line and cut to ``limit`` characters, for error messages."""
    text = " ".join(repr(value).split())
    if isinstance(value, np.ndarray):
        text += f" (dtype {value.dtype})"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_actions(actions: Any, batched: spaces.Space, single: spaces.Space, policy: str) -> None:
    """Raise PolicyError naming the policy and the first bad per-env action, if any."""
    try:
        if batched.contains(actions):
            return
        per_env = list(iterate(batched, actions))
    except Exception:  # malformed beyond what iterate understands: report the whole batch
        per_env = []
    for index, action in enumerate(per_env):
        if not single.contains(action):
            raise PolicyError(
                f"policy {policy!r} returned an action outside the action space: env {index} "
                f"got {_one_line(action)}, expected an element of {single} "
                f"(whole batch: {_one_line(actions)})"
            )
    raise PolicyError(
        f"policy {policy!r} returned actions outside the action space: expected an "
        f"element of {batched}, got {_one_line(actions)}"
    )


def _positive_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected a positive int, got {value!r} of type {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


def collect(
    envs: VectorEnv,
    policy: Policy | str = "random",
    *,
    steps: int | None = None,
    episodes: int | None = None,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    progress: bool = True,
    overwrite: bool = False,
    metadata: Mapping[str, Any] | None = None,
) -> Dataset:
    """Run ``policy`` in ``envs`` and write the transitions to the dataset directory ``out``.

    Args:
        envs: any ``gymnasium.vector.VectorEnv`` (vecenv's, ``SyncVectorEnv``, ...) with
            fixed-shape spaces. Its autoreset mode is read from
            ``envs.metadata["autoreset_mode"]``; under DISABLED the collector resets
            finished envs itself with ``envs.reset(options={"reset_mask": mask})``. The
            envs are reset with ``seed=seed`` first; they are not closed.
        policy: ``"random"`` (actions sampled from the batched action space seeded with
            ``seed``) or a callable taking the batched observation and returning a
            batched action, which must be in the action space (else PolicyError).
        steps: write exactly this many transitions, in vector-step order and env index
            order within a step (the last step contributes the lowest env indices needed).
        episodes: instead, write exactly this many complete episodes: the first to finish
            (ties broken by env index), in completion order, and nothing else.
        seed: seeds the environments and the random policy: the same arguments produce
            byte-identical arrays for any vector env that steps like ``SyncVectorEnv``.
        out: dataset directory (default ``rollouts/<env id>``, the id coming from
            ``metadata["env_id"]`` or ``envs.spec``).
        progress: show a tqdm progress bar on stderr.
        overwrite: replace ``out`` if it exists (only if it is empty or a dataset).
        metadata: extra entries for ``metadata.json`` (e.g. ``env_id``, ``env_kwargs``,
            ``num_workers``, ``command_line``, or ``policy``: the name recorded and used in
            error messages), overriding the inferred ones.

    Returns:
        The written dataset, as ``load(out)`` returns it.

    Raises:
        TypeError / ValueError: naming the bad argument, the expected and received value.
        UnsupportedSpaceError: a space without a fixed shape.
        PolicyError: the policy returned actions outside the action space.
        FileExistsError: ``out`` exists and ``overwrite`` is false.
        KeyboardInterrupt (and anything else raised while collecting) propagates after
        what was collected is flushed as a valid dataset with ``"complete": false``.
    """
    if not isinstance(envs, VectorEnv):
        raise TypeError(f"envs: expected a gymnasium.vector.VectorEnv, got {type(envs).__name__}")
    if (steps is None) == (episodes is None):
        raise ValueError(
            f"steps, episodes: expected exactly one of them, got steps={steps!r}, episodes={episodes!r}"
        )
    target = _positive_count("steps", steps) if steps is not None else _positive_count("episodes", episodes)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected a non-negative int, got {seed!r} of type {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    policy_error = f"policy: expected 'random' or a callable taking the batched observation, got {policy!r}"
    if isinstance(policy, str) and policy != "random":
        raise ValueError(policy_error)
    if not isinstance(policy, str) and not callable(policy):
        raise TypeError(policy_error)
    mode = _autoreset_mode(envs)

    single_obs_space, single_act_space = envs.single_observation_space, envs.single_action_space
    fields = [
        *_leaves(single_obs_space, "observations"),
        *_leaves(single_obs_space, "next_observations"),
        *_leaves(single_act_space, "actions"),
        _Leaf("rewards", (), np.dtype(np.float64)),
        _Leaf("terminations", (), np.dtype(np.bool_)),
        _Leaf("truncations", (), np.dtype(np.bool_)),
        _Leaf("env_ids", (), np.dtype(np.int64)),
        _Leaf("episode_ids", (), np.dtype(np.int64)),
    ]

    info = dict(metadata or {})
    spec = getattr(envs, "spec", None)
    info.setdefault("env_id", getattr(spec, "id", None))
    info.setdefault("env_kwargs", dict(getattr(spec, "kwargs", None) or {}))
    if out is None:
        if info["env_id"] is None:
            raise ValueError(
                "out: expected a directory path (required when envs has no spec and metadata has no "
                "'env_id'), got None"
            )
        out = Path("rollouts") / str(info["env_id"]).split(":")[-1]
    out = Path(out)
    _check_out(out, overwrite)
    if out.exists():
        shutil.rmtree(out)

    policy_name = str(info.pop("policy", _policy_name(policy)))
    batched_act_space = batch_space(single_act_space, envs.num_envs)
    if isinstance(policy, str):  # "random"
        batched_act_space.seed(int(seed))

        def act(_observation: Any) -> Any:
            return batched_act_space.sample()

    else:
        act = policy  # type: ignore[assignment]

    dataset_metadata: dict[str, Any] = {
        "format": "vecenv-rollouts",
        "format_version": FORMAT_VERSION,
        "complete": False,
        "env_id": info.pop("env_id"),
        "env_kwargs": info.pop("env_kwargs"),
        "num_envs": envs.num_envs,
        "num_workers": getattr(envs, "num_workers", None),
        "autoreset_mode": mode.name.lower(),
        "seed": int(seed),
        "policy": policy_name,
        "requested": {"steps": target} if steps is not None else {"episodes": target},
        "observation_space": {"str": str(single_obs_space), "description": _describe_space(single_obs_space)},
        "action_space": {"str": str(single_act_space), "description": _describe_space(single_act_space)},
        "fields": {f.name: {"dtype": str(f.dtype), "shape": list(f.shape)} for f in fields},
        "episode_id_order": "order of episode start (vector step, then env index)",
        "start_time": _now(),
        "end_time": None,
        "versions": _versions(),
        "command_line": shlex.join(sys.argv),
    }
    dataset_metadata.update(info)

    writer = _DatasetWriter(out, fields, dataset_metadata)
    bar = tqdm(
        total=target,
        unit="step" if steps is not None else "episode",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    try:
        _collect_into(
            writer, bar, envs, act, mode, batched_act_space, policy_name, int(seed), steps, episodes
        )
    except BaseException:
        writer.finalize(complete=False)
        raise
    finally:
        bar.close()
    writer.finalize(complete=True)
    return load(out)


def _collect_into(
    writer: _DatasetWriter,
    bar: tqdm,
    envs: VectorEnv,
    act: Policy,
    mode: AutoresetMode,
    batched_act_space: spaces.Space,
    policy_name: str,
    seed: int,
    steps: int | None,
    episodes: int | None,
) -> None:
    """The collection loop of ``collect``: step until the requested count is written."""
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    obs_leaves = _leaves(obs_space, "observations")
    act_leaves = _leaves(act_space, "actions")
    num_envs = envs.num_envs
    env_ids = np.arange(num_envs, dtype=np.int64)

    def copy_obs(value: Any) -> list[np.ndarray]:
        # Copies: a vector env may reuse its observation buffers on the next step.
        return [np.array(v, dtype=leaf.dtype) for v, leaf in zip(_leaf_values(obs_space, value), obs_leaves)]

    obs, _ = envs.reset(seed=seed)
    obs_columns = copy_obs(obs)
    episode_ids = np.arange(num_envs, dtype=np.int64)
    next_episode_id = num_envs
    episode_return = np.zeros(num_envs, dtype=np.float64)
    episode_length = np.zeros(num_envs, dtype=np.int64)
    resetting = np.zeros(num_envs, dtype=np.bool_)  # NEXT_STEP: this step only resets the env
    in_progress: list[list[tuple[list[np.ndarray], int]]] = [[] for _ in range(num_envs)]
    shown_episodes = 0

    while True:
        actions = act(obs)
        _check_actions(actions, batched_act_space, act_space, policy_name)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        next_columns = copy_obs(next_obs)
        rewards = np.asarray(rewards, dtype=np.float64)
        terminations = np.asarray(terminations, dtype=np.bool_)
        truncations = np.asarray(truncations, dtype=np.bool_)
        valid = ~resetting
        done = (terminations | truncations) & valid

        recorded_next = next_columns
        if mode is AutoresetMode.SAME_STEP and done.any():
            if "final_obs" not in infos:
                raise RuntimeError("SAME_STEP autoreset: an episode ended but infos has no 'final_obs'")
            recorded_next = [column.copy() for column in next_columns]
            for index in np.flatnonzero(done):
                for column, value in zip(recorded_next, _leaf_values(obs_space, infos["final_obs"][index])):
                    column[index] = value

        columns = [
            *obs_columns,
            *recorded_next,
            *(np.array(v, dtype=leaf.dtype) for v, leaf in zip(_leaf_values(act_space, actions), act_leaves)),
            rewards,
            terminations,
            truncations,
            env_ids,
            episode_ids.copy(),
        ]
        episode_return[valid] += rewards[valid]
        episode_length[valid] += 1

        if steps is not None:
            rows = np.flatnonzero(valid)[: steps - writer.transitions]
            ended = rows[done[rows]]
            writer.append([column[rows] for column in columns], episode_return[ended], episode_length[ended])
            bar.update(len(rows))
            finished = writer.transitions == steps
        else:
            assert episodes is not None
            for index in np.flatnonzero(valid):
                in_progress[index].append((columns, index))
            for index in np.flatnonzero(done):
                rows_of = in_progress[index]
                writer.append(
                    [np.stack([cols[f][row] for cols, row in rows_of]) for f in range(len(columns))],
                    episode_return[index : index + 1],
                    episode_length[index : index + 1],
                )
                in_progress[index] = []
                bar.update(1)
                if writer.episodes == episodes:
                    break
            finished = writer.episodes == episodes
        if writer.episodes != shown_episodes:
            shown_episodes = writer.episodes
            bar.set_postfix_str(
                f"episodes={shown_episodes}" if steps is not None else f"transitions={writer.transitions}",
                refresh=False,
            )
        if finished:
            return

        episode_return[done] = 0.0
        episode_length[done] = 0
        if mode is AutoresetMode.NEXT_STEP:
            starting, resetting = resetting, done
            obs, obs_columns = next_obs, next_columns
        elif mode is AutoresetMode.SAME_STEP:
            starting = done
            obs, obs_columns = next_obs, next_columns
        else:  # DISABLED: reset finished envs ourselves; their RNG continues from the seeded reset
            starting = done
            if done.any():
                obs, _ = envs.reset(options={"reset_mask": done.copy()})
                obs_columns = copy_obs(obs)
            else:
                obs, obs_columns = next_obs, next_columns
        started = int(starting.sum())
        if started:
            episode_ids[starting] = np.arange(next_episode_id, next_episode_id + started)
            next_episode_id += started


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True, eq=False)
class Dataset(Mapping[str, Any]):
    """A rollout dataset read by ``load``.

    A read-only mapping from field name (``observations``, ``next_observations``,
    ``actions``, ``rewards``, ``terminations``, ``truncations``, ``env_ids``,
    ``episode_ids``) to read-only memory-mapped arrays, all of length
    ``dataset.transitions``; the observation and action fields are nested dicts / tuples
    of arrays for Dict / Tuple spaces (``dataset["observations"]["pos"]``).
    ``metadata`` is the parsed ``metadata.json`` and ``path`` the dataset directory.
    """

    path: Path
    metadata: dict[str, Any]
    arrays: dict[str, Any]

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
    if description["type"] == "Dict":
        return {key: _nest(sub, f"{name}.{key}", arrays) for key, sub in description["spaces"].items()}
    if description["type"] == "Tuple":
        return tuple(_nest(sub, f"{name}.{i}", arrays) for i, sub in enumerate(description["spaces"]))
    return arrays[name]


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
    for name in ("rewards", "terminations", "truncations", "env_ids", "episode_ids"):
        fields[name] = arrays[name]
    return Dataset(path, metadata, fields)


# --------------------------------------------------------------------------- command line

_EPILOG = """\
examples:
  vecenv-collect
      10000 transitions of CartPole-v1 with a seeded random policy into rollouts/CartPole-v1
  vecenv-collect --env Pendulum-v1 --episodes 50 --num-envs 16 --out data/pendulum
  vecenv-collect --env CartPole-v1 --env-kwargs '{"sutton_barto_reward": true}' --steps 1000000
  vecenv-collect --policy mypolicies:greedy --seed 3 --overwrite --quiet
  vecenv-collect --env mypackage.envs:MyEnv-v0 --autoreset-mode same_step

The dataset is a directory with metadata.json and one .npy file per field (Dict/Tuple
spaces: one per leaf, e.g. observations.pos.npy); read it with vecenv.load(DIR).
The arrays depend only on the arguments other than --num-workers, --quiet and --out.
Ctrl+C or SIGTERM stops early and keeps what was collected as a valid dataset with
"complete": false in metadata.json (exit status 130 / 143). Bad arguments: exit status 2.
"""


class _UsageError(Exception):
    """Bad command line input: reported as one ``vecenv-collect: error: ...`` line."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage dump) with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Run a policy in vecenv environments and save the transitions\n"
        "(observation, action, reward, terminated, truncated, next observation) as a dataset.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--env",
        default="CartPole-v1",
        metavar="ID",
        help="gymnasium environment id; 'module:ID' imports the module that registers it first "
        "(default: %(default)s; e.g. --env Pendulum-v1)",
    )
    parser.add_argument(
        "--env-kwargs",
        default="{}",
        metavar="JSON",
        help="keyword arguments for the environment, as a JSON object "
        """(default: %(default)s; e.g. --env-kwargs '{"max_episode_steps": 200}')""",
    )
    parser.add_argument(
        "--num-envs",
        type=_positive_int,
        default=8,
        metavar="N",
        help="number of environments stepped together (default: %(default)s; e.g. --num-envs 16)",
    )
    parser.add_argument(
        "--num-workers",
        type=_positive_int,
        metavar="N",
        help="number of worker processes; the data does not depend on it "
        "(default: the number of CPU cores, at most --num-envs; e.g. --num-workers 4)",
    )
    count = parser.add_mutually_exclusive_group()
    count.add_argument(
        "--steps",
        type=_positive_int,
        metavar="N",
        help="write exactly N transitions (default: 10000 unless --episodes is given; e.g. --steps 1000000)",
    )
    count.add_argument(
        "--episodes",
        type=_positive_int,
        metavar="N",
        help="write exactly N complete episodes instead, the first N to finish (e.g. --episodes 100)",
    )
    parser.add_argument(
        "--policy",
        default="random",
        metavar="POLICY",
        help="'random' (uniform actions, seeded by --seed) or 'module:attr', a callable taking "
        "the batched observation and returning a batched action; the current directory is "
        "importable (default: %(default)s; e.g. --policy mypolicies:greedy)",
    )
    parser.add_argument(
        "--seed",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="seed of the environments (env i gets N+i) and of the random policy "
        "(default: %(default)s; e.g. --seed 42)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="dataset directory to create (default: rollouts/<env-id>; e.g. --out data/cartpole)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out if it exists (only if it is a dataset or empty; e.g. --overwrite)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="show no progress bar and no summary (e.g. --quiet)",
    )
    parser.add_argument(
        "--autoreset-mode",
        choices=[mode.name.lower() for mode in AutoresetMode],
        default="next_step",
        help="how the vector environment resets finished episodes; the recorded transitions "
        "are real steps in every mode (default: %(default)s; e.g. --autoreset-mode same_step)",
    )
    return parser


def _parse_env_kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"--env-kwargs: expected a JSON object, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise _UsageError(f"--env-kwargs: expected a JSON object, got {text!r}")
    return value


def _check_env_id(env_id: str) -> None:
    """Raise _UsageError unless ``env_id`` ('[module:]ID') names a registered environment."""
    try:
        check_env_id(env_id)
    except gymnasium.error.NameNotFound as exc:
        raise _UsageError(f"--env: {exc}") from None
    except Exception as exc:
        module = env_id.rpartition(":")[0]
        raise _UsageError(
            f"--env {env_id!r}: cannot import module {module!r}: {type(exc).__name__}: {exc}"
        ) from None


def _load_policy(spec: str) -> Policy:
    """Import the callable named by ``spec`` ('module:attr', attr may be dotted)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise _UsageError(f"--policy: expected 'random' or 'module:attr', got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise _UsageError(
            f"--policy {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise _UsageError(f"--policy {spec!r}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise _UsageError(f"--policy {spec!r}: expected a callable, got {_one_line(target)}")
    return target


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _human_size(size: float) -> str:
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    index = 0
    while size >= 1024 and index < len(units) - 1:
        size /= 1024
        index += 1
    return f"{size:.1f} {units[index]}" if index else f"{int(size)} B"


def _summary(dataset: Dataset) -> str:
    """The end-of-run report: counts, episode statistics, speed, output path and size."""
    metadata, stats = dataset.metadata, dataset.metadata["stats"]
    lines = [
        f"transitions: {metadata['counts']['transitions']}",
        f"episodes:    {metadata['counts']['episodes']} completed",
    ]
    for key, label in (("episode_return", "return:     "), ("episode_length", "length:     ")):
        value = stats[key]
        lines.append(
            label
            + (
                "n/a (no episode completed)"
                if value is None
                else f"mean {value['mean']:.4g}, min {value['min']:.4g}, max {value['max']:.4g}"
            )
        )
    rate = stats["steps_per_second"]
    lines.append(f"steps/s:     {rate:,.0f} over {stats['duration_s']:.1f} s" if rate else "steps/s:     n/a")
    size = sum(p.stat().st_size for p in dataset.path.iterdir() if p.is_file())
    state = "" if dataset.complete else ', incomplete: "complete": false'
    lines.append(f"output:      {dataset.path} ({_human_size(size)}{state})")
    return "\n".join(lines)


def _raise_terminated(signum: int, frame: Any) -> NoReturn:
    raise _Terminated(f"terminated by signal {signum}")


def _run(args: argparse.Namespace, command_line: str) -> int:
    """Validate the arguments, build the environments, collect, and report."""
    env_kwargs = _parse_env_kwargs(args.env_kwargs)
    if os.getcwd() not in sys.path:  # like `python -m`: modules in the current directory import
        sys.path.append(os.getcwd())
    _check_env_id(args.env)
    policy: Policy | str = args.policy if args.policy == "random" else _load_policy(args.policy)
    out = Path(args.out) if args.out else Path("rollouts") / args.env.rpartition(":")[2]
    try:
        _check_out(out, args.overwrite)
    except FileExistsError as exc:
        raise _UsageError(str(exc).replace("overwrite=True / ", "")) from None
    if args.steps is None and args.episodes is None:
        args.steps = 10000
    num_workers = args.num_workers or min(_cpu_count(), args.num_envs)

    try:
        envs = make(
            args.env,
            args.num_envs,
            num_workers,
            env_kwargs=env_kwargs,
            autoreset_mode=AutoresetMode[args.autoreset_mode.upper()],
        )
    except Exception as exc:
        raise _UsageError(
            f"could not create {args.num_envs} x {args.env!r} with --env-kwargs "
            f"{json.dumps(env_kwargs)}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        dataset = collect(
            envs,
            policy,
            steps=args.steps,
            episodes=args.episodes,
            seed=args.seed,
            out=out,
            progress=not args.quiet,
            overwrite=args.overwrite,
            metadata={
                "env_id": args.env,
                "env_kwargs": env_kwargs,
                "num_workers": num_workers,
                "policy": args.policy,
                "command_line": command_line,
            },
        )
    except (PolicyError, UnsupportedSpaceError) as exc:
        raise _UsageError(str(exc)) from None
    except KeyboardInterrupt:
        if (out / METADATA_FILE).is_file():
            print(f'{PROG}: interrupted: kept a partial dataset ("complete": false) in {out}',
                  file=sys.stderr)
            if not args.quiet:
                print(_summary(load(out)))
        raise
    finally:
        envs.close()
    if not args.quiet:
        print(_summary(dataset))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``vecenv-collect`` command (see ``--help``); returns the exit status.

    0 on success, 2 for bad input (one ``vecenv-collect: error: ...`` line on stderr),
    130 after Ctrl+C (SIGINT) and 143 after SIGTERM, both of which keep what was collected
    as a dataset marked ``"complete": false`` and close the environments' workers.
    """
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error the parser already reported
        return int(exc.code or 0)
    command_line = shlex.join(sys.argv if argv is None else [PROG, *argv])
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:  # signal handlers can only be set from the main thread
        previous = {
            signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
            signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated),
        }
    try:
        return _run(args, command_line)
    except _UsageError as exc:
        print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        if isinstance(exc, _Terminated):
            return 128 + signal.SIGTERM
        return 128 + signal.SIGINT
    finally:
        if in_main_thread:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
