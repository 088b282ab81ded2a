"""The shared block's memfd is sealed: its size cannot change under the mappings.

Without the seals a stray ``ftruncate`` (ours, an env's, a worker's) on the block's descriptor
would shrink the file under the parent's mapping and the next access would kill the parent with
SIGBUS; with ``F_SEAL_SHRINK | F_SEAL_GROW`` it fails with ``PermissionError`` and nothing moves.
"""

from __future__ import annotations

import fcntl
import os

import gymnasium as gym
import numpy as np
import pytest

from vecenv.wire.buffers import HAVE_MEMFD, Buffers, BufferSpec, SharedBlock

pytestmark = pytest.mark.skipif(not HAVE_MEMFD, reason="the shared block is a memfd only on Linux")

SIZE = 4096 * 3


@pytest.fixture
def block():
    b = SharedBlock.create(SIZE, None)
    assert b.fd is not None  # the parent's memfd
    try:
        yield b
    finally:
        b.close(unlink=True)


def test_memfd_is_sealed_against_shrink_and_grow(block: SharedBlock) -> None:
    assert block.fd is not None
    seals = fcntl.fcntl(block.fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
    # Writes stay allowed: the seals only fix the size.
    assert not seals & fcntl.F_SEAL_WRITE


@pytest.mark.parametrize("new_size", [0, SIZE // 2, SIZE * 2], ids=["to-zero", "shrink", "grow"])
def test_stray_ftruncate_raises_and_mapping_still_works(block: SharedBlock, new_size: int) -> None:
    assert block.fd is not None
    view = np.frombuffer(block.buf, np.uint8)
    view[:] = 7
    with pytest.raises(PermissionError):
        os.ftruncate(block.fd, new_size)
    assert os.fstat(block.fd).st_size == SIZE
    # The last page is still backed: touching it would be SIGBUS had the shrink gone through.
    view[-1] = 9
    assert view[-1] == 9 and int(view[:-1].sum()) == 7 * (SIZE - 1)
    del view


def test_worker_side_mapping_shares_the_sealed_file(block: SharedBlock) -> None:
    """A second mapping made from the descriptor, as a worker makes it, sees the same bytes and
    cannot resize the file either."""
    assert block.fd is not None
    fd = os.dup(block.fd)
    other = SharedBlock.attach(SIZE, None, os.dup(fd))  # attach takes ownership of its fd
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
        mine, theirs = np.frombuffer(block.buf, np.uint8), np.frombuffer(other.buf, np.uint8)
        theirs[100] = 42
        assert mine[100] == 42
        del mine, theirs
    finally:
        os.close(fd)
        other.close(unlink=False)


def test_buffers_on_sealed_block_step_normally() -> None:
    """The parent's Buffers over the sealed block are writable through every field."""
    spec = BufferSpec.plan(4, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2), True)
    buffers = Buffers.create(spec)
    try:
        assert buffers.block is not None and buffers.block.fd is not None
        with pytest.raises(PermissionError):
            os.ftruncate(buffers.block.fd, 0)
        buffers.observations[:] = 0.5
        buffers.rewards[:] = 1.0
        buffers.terminations[2] = True
        assert float(buffers.observations.sum()) == 6.0 and buffers.terminations.tolist() == [False, False, True, False]
    finally:
        buffers.close()
