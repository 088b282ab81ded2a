"""Reading a dataset back (``load``) as memory-mapped arrays in a ``Dataset`` mapping.

The arrays map the ``.npy`` files without keeping a file descriptor open: each file is
opened, mapped and closed at once, and its mapping goes away with the last array that views
it. So ``load`` costs no descriptor however many datasets are open, and ``Dataset.close``
(or ``with vecenv.load(path) as dataset:``) drops the dataset's own references, after which
the dataset raises ``DatasetClosedError``.
"""

from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast

import numpy as np

from vecenv.datasets.errors import DatasetClosedError, DatasetNotFoundError
from vecenv.datasets.format import METADATA_FILE, SCALAR_FIELDS, space_nesting
from vecenv.errors import ArgumentTypeError, InvalidArgumentError
from vecenv.spaces import build_tree, named_leaves


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

    The arrays hold no file descriptor (see ``load``). ``close()``, or leaving a ``with``
    block, drops the dataset's references to them: from then on reading a field, ``arrays``,
    ``leaves``, or iterating raises ``DatasetClosedError`` (``path``, ``metadata`` and the
    counts stay readable). An array taken from the dataset before ``close`` stays valid, and
    its file's mapping is released when the last such array is dropped.
    """

    def __init__(
        self, path: Path, metadata: dict[str, Any], arrays: dict[str, Any], leaves: dict[str, np.ndarray] | None = None
    ) -> None:
        self.path = path
        self.metadata = metadata
        self._arrays: dict[str, Any] | None = arrays
        self._leaves: dict[str, np.ndarray] | None = dict(leaves or {})

    @property
    def arrays(self) -> dict[str, Any]:
        """Every field by name (what indexing the dataset gives)."""
        if self._arrays is None:
            raise self._closed_error("arrays")
        return self._arrays

    @property
    def leaves(self) -> dict[str, np.ndarray]:
        """Each stored file's array by its field name (``observations.pos``), flat."""
        if self._leaves is None:
            raise self._closed_error("leaves")
        return self._leaves

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""
        return self._arrays is None

    def close(self) -> None:
        """Drop the dataset's references to its arrays (idempotent). Arrays taken before stay
        valid; each file's mapping goes with the last array that views it."""
        self._arrays = None
        self._leaves = None

    def __enter__(self) -> Dataset:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __getitem__(self, name: str) -> Any:
        if self._arrays is None:
            raise self._closed_error(f"dataset[{name!r}]")
        return self._arrays[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.transitions} transitions"
        return f"<Dataset {str(self.path)!r}: {state}>"

    @property
    def complete(self) -> bool:
        """Whether the requested count was reached (false after an interruption)."""
        return bool(self.metadata["complete"])

    @property
    def transitions(self) -> int:
        """The number of transitions (rows of every array)."""
        return int(self.metadata["counts"]["transitions"])

    def _closed_error(self, what: str) -> DatasetClosedError:
        return DatasetClosedError(
            f"{what}: expected an open dataset, got the closed dataset {str(self.path)!r} "
            "(load it again, or use the arrays taken before close())"
        )


def _nest(description: dict[str, Any], name: str, arrays: dict[str, np.ndarray]) -> Any:
    """The arrays of the leaves of the described space, in its Dict/Tuple nesting."""
    nesting = space_nesting(description)
    return build_tree(nesting, iter([arrays[leaf] for leaf, _ in named_leaves(nesting, name)]))


def load(path: str | os.PathLike[str]) -> Dataset:
    """Open the dataset directory ``path`` written by ``collect`` (complete or not).

    Arrays are memory-mapped read-only, so loading is cheap whatever the size, and they hold
    no open file descriptor (use the dataset in a ``with`` block, or ``close()`` it, to drop
    its references early). Raises ArgumentTypeError (a TypeError) if ``path`` is not a path,
    FileNotFoundError if it has no ``metadata.json``, and ValueError if ``metadata.json`` is
    not a dataset's or the files disagree on the number of transitions. A dataset still being
    written loads as the transitions its ``metadata.json`` counts (its files may hold more).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(
            f"path: expected a dataset directory (str or os.PathLike), got {path!r} of type {type(path).__name__}"
        )
    path = Path(path)
    metadata_file = path / METADATA_FILE
    if not metadata_file.is_file():
        raise DatasetNotFoundError(
            f"path: expected a rollout dataset directory containing {METADATA_FILE}, got {str(path)!r}"
        )
    try:
        metadata = json.loads(metadata_file.read_text())
        expected = metadata["counts"]["transitions"]
        listed = list(metadata["fields"])
        observation_nesting = metadata["observation_space"]["description"]
        action_nesting = metadata["action_space"]["description"]
    except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
        raise InvalidArgumentError(
            f"{metadata_file}: expected a dataset's metadata (JSON with counts, fields and spaces): {exc!r}"
        ) from None
    # While a dataset is written, a flush rewrites the headers, then metadata.json: a file can
    # hold more rows than the metadata.json read a moment before counts, and the rows it counts
    # never change, so an incomplete dataset is read as those. A complete one agrees exactly.
    most = None if metadata.get("complete", True) else expected
    arrays: dict[str, np.ndarray] = {}
    for name in listed:
        array = map_npy(path / f"{name}.npy", most)
        if len(array) != expected:
            raise InvalidArgumentError(
                f"{path / (name + '.npy')}: expected {expected} rows as metadata.json says, got {len(array)}"
            )
        arrays[name] = array
    fields = {
        "observations": _nest(observation_nesting, "observations", arrays),
        "next_observations": _nest(observation_nesting, "next_observations", arrays),
        "actions": _nest(action_nesting, "actions", arrays),
    }
    for name in SCALAR_FIELDS:
        fields[name] = arrays[name]
    return Dataset(path, metadata, fields, arrays)


class _Mapper:
    """``mmap(2)`` and ``munmap(2)`` through ctypes: Python's ``mmap`` keeps a duplicate of the
    file's descriptor for as long as the mapping lives (until Python 3.13's ``trackfd``)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        # off_t is a long on the LP64 platforms this runs on (Linux, macOS); offset 0 only.
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        self.munmap = libc.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.failed = ctypes.c_void_p(-1).value

    def map(self, fd: int, length: int) -> ctypes.Array[ctypes.c_char] | None:
        """The first ``length`` bytes of ``fd``, unmapped when every array over them is gone;
        None if ``mmap`` refused (the caller then lets numpy map the file, and report why).

        The arrays are made read-only; the mapping is private (copy-on-write), so an array
        forced writable changes this process's copy, never the file, and cannot crash it.
        """
        protection = mmap.PROT_READ | mmap.PROT_WRITE
        address = self.mmap(None, length, protection, mmap.MAP_PRIVATE, fd, 0)
        if address is None or address == self.failed:
            return None
        memory = (ctypes.c_char * length).from_address(address)
        weakref.finalize(memory, self.munmap, address, length)
        return memory


_MAPPER: list[_Mapper | None] = []


def _mapper() -> _Mapper | None:
    """The ctypes mapper, or None where the C library has no ``mmap`` (then ``numpy.load``)."""
    if not _MAPPER:
        try:
            _MAPPER.append(_Mapper() if os.name == "posix" else None)
        except (OSError, AttributeError):
            _MAPPER.append(None)
    return _MAPPER[0]


def map_npy(path: Path, most: int | None = None) -> np.memmap:
    """The array of a ``.npy`` file as a read-only ``numpy.memmap`` that holds no descriptor;
    with ``most``, only its first ``most`` rows where it holds more.

    Falls back to ``numpy.load(path, mmap_mode="r")`` (which holds one while the array lives)
    for header versions other than 1.0 and 2.0, where ``mmap`` cannot be called directly, or
    when it refuses (numpy then tries, and raises its own error if it fails too).
    """
    mapper = _mapper()
    if mapper is None:
        return _first_rows(np.load(path, mmap_mode="r"), most)
    with open(path, "rb") as file:
        version = np.lib.format.read_magic(file)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(file)
        elif version == (2, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(file)
        else:
            return _first_rows(np.load(path, mmap_mode="r"), most)
        if dtype.hasobject:
            raise InvalidArgumentError(f"{path}: expected an array of fixed-size values, got dtype {dtype}")
        offset = file.tell()
        if most is not None and not fortran_order and shape and shape[0] > most:
            shape = (most, *shape[1:])
        size = offset + math.prod(shape) * dtype.itemsize
        if os.fstat(file.fileno()).st_size < size:
            raise InvalidArgumentError(f"{path}: expected at least {size} bytes for shape {shape}, got a shorter file")
        order: Literal["C", "F"] = "F" if fortran_order else "C"
        array: Any
        if size == offset:  # nothing to map
            array = np.ndarray.__new__(np.memmap, shape, dtype, order=order)
        else:
            buffer: Any = mapper.map(file.fileno(), size)
            if buffer is None:
                return _first_rows(np.load(path, mmap_mode="r"), most)
            array = np.ndarray.__new__(np.memmap, shape, dtype, buffer=buffer, offset=offset, order=order)
    array._mmap = None  # np.memmap's own fields: no mmap object (flush() has nothing to do)
    array.filename = str(path.resolve())
    array.offset = offset
    array.mode = "r"
    array.flags.writeable = False
    return array


def _first_rows(array: np.memmap, most: int | None) -> np.memmap:
    """``array``, or its first ``most`` rows where it has more."""
    if most is None or not array.ndim or len(array) <= most:
        return array
    return cast(np.memmap, array[:most])  # a memmap's slice is a memmap
