"""Streaming rows to a dataset directory with bounded memory (see ``DatasetWriter``)."""

from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import json
import math
import os
import platform
import shutil
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from io import FileIO
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

from vecenv.datasets.errors import KEYWORDS, DatasetWriteError, OptionNames, OutputExistsError, write_error
from vecenv.datasets.format import FORMAT_NAME, METADATA_FILE, SPILL_DIR, Leaf, json_default
from vecenv.files import write_text_atomically

# Rows are buffered in memory up to this many bytes (all fields together) per chunk.
CHUNK_BYTES = 8 * 1024 * 1024
# A partially filled chunk is also flushed after this many seconds, so a slow collection
# shows progress on disk and loses little if the process is killed outright.
FLUSH_INTERVAL_S = 1.0


def chunk_rows(row_bytes: int) -> int:
    """How many rows of ``row_bytes`` bytes one chunk holds (at least one)."""
    return max(1, CHUNK_BYTES // max(1, row_bytes))


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


def _write_all(file: FileIO, column: np.ndarray) -> None:
    """Write every byte of ``column`` at the file's position (an unbuffered write may take
    part of them; the rest is written again, and a failure raises)."""
    data = np.ascontiguousarray(column).reshape(-1).view(np.uint8).data
    while data.nbytes:
        data = data[file.write(data) :]


class DatasetWriter:
    """Streams rows of every field into ``<out>/<field>.npy`` with bounded memory.

    Each file starts with a ``.npy`` v1.0 header whose padding leaves room for any row
    count (``numpy.lib.format`` pads headers for in-place growth), followed by raw rows.
    Rows are buffered per field in one fixed-size chunk. ``flush`` writes the buffered rows
    at the offset after the last *committed* row, then rewrites every header and the
    metadata: it is idempotent, so if it is interrupted the next flush (or ``finalize``)
    simply rewrites the same rows, and ``finalize`` truncates any bytes written past the
    committed rows. Thus all files always agree on the row count recorded in the headers
    and in ``metadata.json``.

    Rows that end where the dataset may end are appended with ``whole=True`` (every row of a
    transitions dataset; an episode's last piece). The headers and ``metadata.json`` count
    only the rows up to the last such point: an episode handed over in pieces is never seen
    cut, while collection runs or after it was killed, and ``finalize`` leaves out the pieces
    of one whose last piece never came.

    A write that fails (a full disk, a read-only directory) raises
    :class:`~vecenv.datasets.errors.DatasetWriteError` naming the file and the cause; the
    dataset keeps the rows committed before it, and ``finalize`` then trims the files to them
    and marks the dataset incomplete without raising again.
    """

    def __init__(self, out: Path, fields: list[Leaf], metadata: dict[str, Any]) -> None:
        self.out = out
        self.fields = fields
        self.metadata = metadata
        self.transitions = 0  # rows appended: committed to files or buffered
        self.episodes = 0  # complete episodes among those rows
        self.returns = _RunningStats()
        self.lengths = _RunningStats()
        self._flushed = 0  # rows committed to the files
        self._buffered = 0  # rows in the chunk buffers
        self._flushed_episodes = 0  # complete episodes among the committed rows
        self._buffered_episodes = 0  # ... and among the buffered ones
        self._ends: collections.deque[int] = collections.deque()  # where whole appends end, uncommitted
        self._whole = 0  # the committed rows up to the end of the last whole append
        self._started = time.monotonic()
        self._last_flush = self._started
        self._chunk_rows = chunk_rows(sum(f.row_bytes for f in fields))
        self._buffers = [np.empty((self._chunk_rows, *f.shape), f.dtype) for f in fields]
        self._row_bytes = [f.row_bytes for f in fields]
        #: The first write that failed; from then on only ``finalize`` touches the files.
        self.failed: DatasetWriteError | None = None
        # Unbuffered: a write that fails (a full disk) fails where it is made, before its rows
        # count as committed, never later in a seek or a close that flushes a buffer.
        self._files: list[FileIO] = []
        with self._writing(out):
            out.mkdir(parents=True)
        try:
            for field in fields:
                with self._writing(out / f"{field.name}.npy"):
                    self._files.append(open(out / f"{field.name}.npy", "w+b", buffering=0))  # noqa: SIM115
            self._data_offset = [self._write_header(f, field, 0) for f, field in zip(self._files, fields)]
            self._write_metadata(complete=False)  # loadable from the start, before the first rows come
        except BaseException:  # a full disk, or Ctrl+C: no file is left open (the caller removes them)
            for file in self._files:
                with contextlib.suppress(OSError):
                    file.close()
            raise

    def append(
        self, columns: Sequence[np.ndarray], returns: np.ndarray, lengths: np.ndarray, whole: bool = True
    ) -> None:
        """Append rows (one array per field, equal lengths) holding ``len(returns)``
        complete episodes whose returns and lengths are given; ``whole=False``: the rows are
        the first pieces of an episode, which the files count only once its last piece came."""
        count = len(columns[0])
        if self._buffered + count > self._chunk_rows:
            self.flush()
        if count > self._chunk_rows:  # an episode longer than a chunk goes straight to disk
            self._commit(columns, count)
            self._flushed_episodes += len(returns)
        else:
            start = self._buffered
            for buffer, column in zip(self._buffers, columns):
                buffer[start : start + count] = column
            self._buffered = start + count
            self._buffered_episodes += len(returns)
        self.transitions += count
        if whole:
            self._ends.append(self.transitions)
        self.episodes += len(returns)
        self.returns.add(returns)
        self.lengths.add(lengths)
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    @property
    def kept(self) -> int:
        """The rows the dataset holds: committed to the files, up to the end of the last whole
        append (what its headers and ``metadata.json`` count; after a failed write, what stays)."""
        return self._whole

    def flush(self) -> None:
        """Commit the buffered rows to the files and make headers and metadata agree."""
        self._commit([b[: self._buffered] for b in self._buffers], self._buffered)
        self._buffered = 0
        self._flushed_episodes += self._buffered_episodes
        self._buffered_episodes = 0
        for file, field in zip(self._files, self.fields):
            self._write_header(file, field, self._whole)  # before metadata.json says the rows are there
        self._write_metadata(complete=False)
        self._last_flush = time.monotonic()

    def finalize(self, complete: bool) -> None:
        """Flush, trim the files to the committed rows, close them and write the final
        metadata (``complete`` says whether the requested count was reached).

        After a failed write (here or before) the dataset keeps the committed rows, marked
        ``"complete": false``; a failure here is raised once that is done, one from before
        is not raised again.
        """
        failed_before = self.failed is not None
        if not failed_before:
            with contextlib.suppress(DatasetWriteError):
                self.flush()
        for file, field, offset, row_bytes in zip(self._files, self.fields, self._data_offset, self._row_bytes):
            # Each file closed whatever the others do; a failure is kept in ``failed`` (see
            # _writing). Its header says the rows kept (a failed flush may have left it behind),
            # and the bytes past them go: what a failed write left, and the pieces of an
            # episode left open.
            with contextlib.suppress(DatasetWriteError), self._writing(Path(file.name)):
                try:
                    self._write_header(file, field, self._whole)
                    file.truncate(offset + self._whole * row_bytes)
                finally:
                    file.close()
        self.metadata["end_time"] = now()
        with contextlib.suppress(DatasetWriteError) if self.failed is not None else contextlib.nullcontext():
            self._write_metadata(complete=complete and self.failed is None)
        if self.failed is not None and not failed_before:
            raise self.failed

    def _commit(self, columns: Sequence[np.ndarray], count: int) -> None:
        for file, offset, row_bytes, column in zip(self._files, self._data_offset, self._row_bytes, columns):
            with self._writing(Path(file.name)):
                file.seek(offset + self._flushed * row_bytes)
                _write_all(file, column)
        self._flushed += count
        while self._ends and self._ends[0] <= self._flushed:
            self._whole = self._ends.popleft()

    @contextlib.contextmanager
    def _writing(self, path: Path) -> Iterator[None]:
        """Turn an ``OSError`` of writing ``path`` into a :class:`DatasetWriteError` that names it."""
        try:
            yield
        except DatasetWriteError:
            raise
        except OSError as exc:
            error = write_error(exc, path)
            if self.failed is None:
                self.failed = error
            raise error from exc

    def _write_header(self, file: FileIO, field: Leaf, rows: int) -> int:
        header = {
            "descr": np.lib.format.dtype_to_descr(field.dtype),
            "fortran_order": False,
            "shape": (rows, *field.shape),
        }
        with self._writing(Path(file.name)):
            file.seek(0)
            np.lib.format.write_array_header_1_0(file, header)
            return file.tell()

    def _write_metadata(self, complete: bool) -> None:
        elapsed = time.monotonic() - self._started
        self.metadata["complete"] = complete
        rows = self._whole
        self.metadata["counts"] = {"transitions": rows, "episodes": self._flushed_episodes}
        self.metadata["stats"] = {
            "episode_return": self.returns.as_json(),
            "episode_length": self.lengths.as_json(),
            "duration_s": elapsed,
            "steps_per_second": rows / elapsed if elapsed > 0 else None,
        }
        with self._writing(self.out / METADATA_FILE):  # on an error the previous one stays, and is right
            write_text_atomically(
                self.out / METADATA_FILE, json.dumps(self.metadata, indent=2, default=json_default) + "\n"
            )


def now() -> str:
    """The time in UTC, to the second, as ISO 8601 (``2026-01-02T03:04:05+00:00``): a dataset's timestamps."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def versions() -> dict[str, str | None]:
    """The versions a dataset records. vecenv's is its ``__version__``, which the package
    metadata is built from (``importlib.metadata`` would scan every installed distribution)."""
    return {
        "vecenv": getattr(sys.modules.get("vecenv"), "__version__", None),
        "gymnasium": gymnasium.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def check_out(out: Path, overwrite: bool, names: OptionNames = KEYWORDS) -> None:
    """Raise FileExistsError if writing to ``out`` would clobber something we must not, and
    DatasetWriteError (``EACCES``) where it cannot be written or replaced (``names``: how the
    message names the options, ``FLAGS`` for the command line)."""
    check_directory_path(out, names.out)
    check_outside_datasets(out, names.out, include_self=False)
    if not out.exists():
        return
    if not overwrite:
        raise OutputExistsError(f"output directory {str(out)!r} already exists (pass {names.overwrite} to replace it)")
    if any(out.iterdir()) and not is_rollout_dataset(out):
        raise OutputExistsError(
            f"refusing to overwrite {str(out)!r}: it is not empty and not a rollout dataset (a dataset "
            f"has only files, among them a {METADATA_FILE} of format {FORMAT_NAME!r}, and its {SPILL_DIR} folder)"
        )
    check_replaceable(out, names)


def check_directory_path(path: Path, name: str) -> None:
    """Raise OutputExistsError when ``path`` cannot be (or become) a directory: it is an
    existing file, or a folder it would go under is; and DatasetWriteError (``EACCES``, or
    ``EROFS`` on a read-only file system) when
    the nearest existing folder (``path`` itself, or the one its folders would be made in)
    does not let this process create entries in it (a read-only directory). Found here, before
    any env starts, instead of as a write error once they run; ``name`` is how the message
    names the option."""
    for existing in (path, *path.parents):
        if not existing.exists():
            continue
        if not existing.is_dir():
            where = "which is an existing file" if existing == path else f"where {str(existing)!r} is an existing file"
            raise OutputExistsError(f"{name}: expected a directory path, got {str(path)!r}, {where}")
        denied = _why_not_writable(existing)
        if denied is not None:
            where = "which" if existing == path else f"where {str(existing)!r}"
            raise DatasetWriteError(
                denied,
                f"{name}: expected a directory this process may write in, got {str(path)!r}, {where} "
                f"is not writable ({_REASONS[denied]})",
            )
        return


def check_outside_datasets(path: Path, name: str, include_self: bool) -> None:
    """Raise OutputExistsError when ``path`` lies inside an existing dataset's folder (ours, or
    a Minari dataset), or is one when ``include_self`` (a Minari datasets root must not be a
    dataset). Written there, the output would mix with that dataset's files: a rollout
    dataset then no longer is one to ``overwrite`` (it holds a foreign folder), and deleting
    the dataset would delete the output with it. ``name`` is how the message names the option.

    The folders are those the file system finds (``os.path.realpath``), not the path's text:
    ``../b`` given in a dataset's folder lies beside it, and a link into a dataset leads into it.
    A relative ``path`` has the folder named relative to the current directory."""
    real = Path(os.path.realpath(path))
    folders = (real, *real.parents) if include_self else real.parents
    for folder in folders:
        kind = _dataset_kind(folder)
        if kind is not None:
            shown = str(folder) if path.is_absolute() else os.path.relpath(folder)
            where = "which is" if folder == real else f"which lies in {shown!r},"
            raise OutputExistsError(
                f"{name}: expected a path outside any dataset, got {str(path)!r}, {where} {kind}; "
                "choose a folder beside it"
            )


def _dataset_kind(folder: Path) -> str | None:
    """What dataset ``folder`` holds, in words for a message ('a rollout dataset', 'the Minari
    dataset ...'), or None: a ``metadata.json`` of our format, or a ``data/metadata.json``
    that names a Minari dataset id (Minari's layout: ``<root>/<id>/data/metadata.json``)."""
    for metadata_path in (folder / METADATA_FILE, folder / "data" / METADATA_FILE):
        try:
            metadata = json.loads(metadata_path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(metadata, dict):
            continue
        if metadata_path.parent == folder and metadata.get("format") == FORMAT_NAME:
            return "a rollout dataset"
        if metadata_path.parent != folder and isinstance(metadata.get("dataset_id"), str):
            return f"the Minari dataset {metadata['dataset_id']!r}"
    return None


#: How a message says why a folder is not writable, by errno.
_REASONS = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied"}


def _why_not_writable(folder: Path) -> int | None:
    """``None`` when this process may create and rename entries in ``folder``; else the errno a
    write there would fail with: ``EROFS`` on a read-only file system, ``EACCES`` otherwise."""
    if os.access(folder, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    return errno.EROFS if read_only else errno.EACCES


def check_replaceable(path: Path, names: OptionNames = KEYWORDS) -> None:
    """Raise DatasetWriteError (``EACCES`` or ``EROFS``) when the folder holding the existing ``path`` does
    not let this process rename entries in it: replacing an output with ``overwrite`` moves it
    aside there first (:func:`set_aside`), which would otherwise fail only after the envs ran.
    Raise OutputExistsError when ``path`` names its folder by no name of its own (``.``, ``..``,
    ``/``), which cannot be moved aside: the folder's own path can."""
    if path.name in ("", ".."):  # pathlib drops a "." anywhere but alone
        raise OutputExistsError(
            f"{names.out}: expected an output that {names.overwrite} may replace, got {str(path)!r}, which names "
            f"no folder of its own to move aside; name the folder itself: {str(path.resolve())!r}"
        )
    parent = path.parent
    denied = _why_not_writable(parent)
    if denied is not None:
        raise DatasetWriteError(
            denied,
            f"{names.out}: expected an output that {names.overwrite} may replace, got {str(path)!r}, whose folder "
            f"{str(parent)!r} is not writable ({_REASONS[denied]})",
        )


def set_aside(target: Path) -> Path | None:
    """Move the output that ``overwrite`` replaces (checked by the caller) to a hidden sibling,
    so that a run which ends before it writes anything can put it back (bad input found at the
    first step, Ctrl+C during start-up); ``None`` when there is none. :func:`settle` ends it."""
    if not target.exists():
        return None
    aside = target.with_name(f".{target.name}.vecenv-replaced-{uuid.uuid4().hex[:12]}")
    os.rename(target, aside)
    return aside


def settle(target: Path, aside: Path | None, wrote: bool) -> None:
    """After a run into ``target``: when it wrote something, the output it replaced (``aside``)
    is deleted; when it wrote nothing, what it left at ``target`` is removed and the replaced
    output put back, as if the run had never started."""
    if wrote:
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        return
    shutil.rmtree(target, ignore_errors=True)
    if aside is not None:
        os.rename(aside, target)


def is_rollout_dataset(folder: Path) -> bool:
    """Whether ``folder`` holds a rollout dataset, which ``overwrite`` may delete: only files (and
    the hidden folder of its spilled episodes, which a run killed outright leaves), and a
    ``metadata.json`` that says it is one (another program's ``metadata.json`` is not)."""
    try:
        if any(entry.is_dir() and entry.name != SPILL_DIR for entry in folder.iterdir()):
            return False
        metadata = json.loads((folder / METADATA_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(metadata, dict) and metadata.get("format") == FORMAT_NAME
