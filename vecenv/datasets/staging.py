"""Holding each env's open episode with bounded memory until it ends (``EpisodeStager``).

Used when whole episodes are written contiguously (``episodes=N``, and every Minari
output): rows of an episode arrive interleaved with other envs' rows and the episode may
never end, so rows cannot simply wait in memory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np

from vecenv.datasets.errors import write_error
from vecenv.datasets.format import Leaf
from vecenv.datasets.writer import chunk_rows


class EpisodeStager:
    """The rows of every env's open episode: a fixed block in memory per env, spilled to disk.

    Each env owns one in-memory block of ``block_rows`` rows per field (all envs together
    hold about ``CHUNK_BYTES``, at least one row each). A full block is appended to raw
    per-field spill files in ``spill_dir``; the env keeps only the block's offset. So memory
    stays at one block per env plus one integer per spilled block, whatever the episode
    lengths. When an episode ends, ``pieces`` reads its blocks back in order, and the spill
    files are truncated whenever no env has rows on disk.
    """

    def __init__(self, fields: Sequence[Leaf], num_envs: int, spill_dir: Path) -> None:
        self.fields = list(fields)
        self.num_envs = num_envs
        self.spill_dir = spill_dir
        self.block_rows = chunk_rows(sum(f.row_bytes for f in self.fields) * num_envs)
        self._blocks = [np.empty((num_envs, self.block_rows, *f.shape), f.dtype) for f in self.fields]
        self.filled = np.zeros(num_envs, dtype=np.int64)  # rows in each env's memory block
        self._spilled: list[list[int]] = [[] for _ in range(num_envs)]  # block offsets on disk
        self._spill_rows = 0  # rows in the spill files
        self._files: list[IO[bytes]] | None = None

    def extend(self, env: int, columns: Sequence[np.ndarray]) -> None:
        """Append all rows of ``columns`` (one array per field) to env ``env``'s open episode."""
        count, at = len(columns[0]), 0
        while at < count:
            filled = int(self.filled[env])
            take = min(self.block_rows - filled, count - at)
            for block, column in zip(self._blocks, columns):
                block[env, filled : filled + take] = column[at : at + take]
            self.filled[env] = filled + take
            at += take
            if self.filled[env] == self.block_rows:
                self._spill(env)

    def length(self, env: int) -> int:
        """Rows of ``env``'s open episode."""
        return len(self._spilled[env]) * self.block_rows + int(self.filled[env])

    def pieces(self, env: int) -> Iterator[list[np.ndarray]]:
        """The rows of ``env``'s open episode, in order, as non-empty lists of columns.

        The last piece is a view of the memory block: use it before calling ``extend`` again.
        """
        for offset in self._spilled[env]:
            yield [self._read(file, field, offset) for file, field in zip(self._files or [], self.fields)]
        count = int(self.filled[env])
        if count:
            yield [block[env, :count] for block in self._blocks]

    def discard(self, env: int) -> None:
        """Forget ``env``'s open episode (it was written, or is dropped)."""
        self._spilled[env] = []
        self.filled[env] = 0
        if self._files and self._spill_rows and not any(self._spilled):
            for file in self._files:
                file.truncate(0)
            self._spill_rows = 0

    def close(self) -> None:
        """Close and delete the spill files, whatever closing them raises: a spill that failed
        on a full disk leaves bytes in a file's buffer, whose flush at close fails again, and
        the files (often the largest thing on that disk) must go all the same. Their contents
        are thrown away, so an error closing them loses nothing."""
        files, self._files = self._files or [], None
        for file in files:
            with contextlib.suppress(OSError):
                file.close()
        shutil.rmtree(self.spill_dir, ignore_errors=True)

    def _spill(self, env: int) -> None:
        """Append env ``env``'s full memory block to the spill files; an ``OSError`` (a full
        disk, a file size limit) is raised as a :class:`DatasetWriteError` naming the file."""
        path = self.spill_dir
        try:
            if self._files is None:
                self.spill_dir.mkdir(parents=True, exist_ok=True)
                self._files = [open(self.spill_dir / f"{f.name}.raw", "w+b") for f in self.fields]  # noqa: SIM115
            for file, field, block in zip(self._files, self.fields, self._blocks):
                path = self.spill_dir / f"{field.name}.raw"
                file.seek(self._spill_rows * field.row_bytes)
                file.write(np.ascontiguousarray(block[env]).data)
                file.flush()  # _read uses pread on the descriptor
        except OSError as exc:
            raise write_error(exc, path) from exc
        self._spilled[env].append(self._spill_rows)
        self._spill_rows += self.block_rows
        self.filled[env] = 0

    def _read(self, file: IO[bytes], field: Leaf, offset: int) -> np.ndarray:
        data = os.pread(file.fileno(), self.block_rows * field.row_bytes, offset * field.row_bytes)
        return np.frombuffer(data, dtype=field.dtype).reshape(self.block_rows, *field.shape)
