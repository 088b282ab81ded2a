"""The arrays that hold a vector env's observations, actions, rewards and flags.

With shared memory on, every fixed-shape field lives in one shared block that the parent creates
after the handshake and each worker maps once; a worker then writes its rows in place and the
step path pickles none of it. On Linux the block is an anonymous ``memfd`` whose descriptor is
passed to the workers over their pipes: it has no name, so nothing can be left behind in
``/dev/shm`` whatever kills the processes, and no resource-tracker process is needed. Elsewhere
it is a named ``multiprocessing.shared_memory.SharedMemory``. Fields that are not shared (``shared_memory=False``,
or an observation space with no fixed shape) are ordinary arrays or lists on each side, and their
rows travel in the step reply as :class:`~vecenv.wire.protocol.Rows` (:meth:`Buffers.payload`).

The layout is computed from a small picklable :class:`BufferSpec`, the same way on both sides.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import math
import mmap
import os
import secrets
import sys
import weakref
from collections.abc import Callable, Iterator
from multiprocessing import shared_memory
from typing import Any, NamedTuple

import numpy as np
from gymnasium import Space
from gymnasium.vector.utils import concatenate, create_empty_array

from vecenv.spaces import build_tree, is_fixed, leaf_layout, row_writer, tree_assign, tree_slice
from vecenv.wire.memory import INHERITED_FDS, check_block, descriptor_limit, make_memfd, seal_memfd
from vecenv.wire.protocol import Flags, Rows

__all__ = [
    "BufferSpec",
    "Buffers",
    "SharedBlock",
    "SHM_PREFIX",
    "HAVE_MEMFD",
    "block_name",
    "layout_nbytes",
    "map_fields",
]

#: Names of vecenv's shared-memory blocks start with this, so leaks are easy to find.
SHM_PREFIX = "vecenv_"
_ALIGN = 64
_STILL_VIEWED: list[shared_memory.SharedMemory] = []
#: Linux: the block is an anonymous memfd passed by descriptor (see the module docstring).
HAVE_MEMFD = hasattr(os, "memfd_create")


@dataclasses.dataclass(frozen=True)
class BufferSpec:
    """Everything a worker needs to map the arrays the parent made."""

    num_envs: int
    observation_space: Space
    action_space: Space
    shm_name: str | None  # the named fallback block; None with a memfd (or nothing shared)
    shared_observations: bool
    shared_actions: bool
    shared_flags: bool

    @classmethod
    def plan(cls, num_envs: int, observation_space: Space, action_space: Space, shared_memory: bool) -> BufferSpec:
        """Decide which fields can be shared, and how the block reaches the workers."""
        shared_obs = shared_memory and is_fixed(observation_space)
        shared_act = shared_memory and is_fixed(action_space)
        return cls(
            num_envs, observation_space, action_space, block_name(shared_memory), shared_obs, shared_act, shared_memory
        )

    def layout(self) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        """The shared arrays in block order: (field, shape, dtype)."""
        fields: list[tuple[str, tuple[int, ...], np.dtype]] = []
        if self.shared_observations:
            fields += [("observations", s, d) for s, d in leaf_layout(self.observation_space, self.num_envs)]
        if self.shared_actions:
            fields += [("actions", s, d) for s, d in leaf_layout(self.action_space, self.num_envs)]
        if self.shared_flags:
            n = self.num_envs
            fields += [
                ("rewards", (n,), np.dtype(np.float64)),
                ("terminations", (n,), np.dtype(np.bool_)),
                ("truncations", (n,), np.dtype(np.bool_)),
            ]
        return fields


#: What mapping a new block takes beside its memfd, for the error when no descriptor is free.
_MAPPING_NEEDS = (
    "a file descriptor (a memfd)"
    if sys.version_info >= (3, 13)
    else "a memfd and, while it is mapped, up to 3 more file descriptors (before Python 3.13 a mapping keeps one)"
)


def _map(fd: int, size: int) -> mmap.mmap:
    """Map a memfd without the duplicate descriptor ``mmap`` keeps of it.

    That duplicate would outlive :meth:`Buffers.release_fd` and be inherited by every process
    forked later, pinning the block until they exit. Python 3.13 can map without one; before
    that, the duplicate is pointed at ``/dev/null`` (so the mmap object's own close later closes
    that, never another file that reused the number).
    """
    if sys.version_info >= (3, 13):
        return mmap.mmap(fd, size, trackfd=False)  # type: ignore[call-arg,unused-ignore]
    before = _descriptors_of(fd)
    mm = mmap.mmap(fd, size)
    try:
        for dup in _descriptors_of(fd) - before:
            null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            os.dup2(null, dup, inheritable=False)
            os.close(null)
    except BaseException:
        # Out of descriptors part-way, say: the duplicate goes now, not when a traceback that
        # holds this frame is collected.
        mm.close()
        raise
    return mm


def _descriptors_of(fd: int) -> set[int]:
    """This process's descriptors open on the same file as ``fd``."""
    inode = os.fstat(fd).st_ino
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.fstat(int(name)).st_ino == inode and os.readlink(f"/proc/self/fd/{name}").startswith("/memfd:"):
                found.add(int(name))
        except OSError:
            pass
    return found


def block_name(shared_memory: bool) -> str | None:
    """A new named block's name where one is shared and memfds are missing; ``None`` for a
    memfd (or when nothing is shared)."""
    return f"{SHM_PREFIX}{secrets.token_hex(8)}" if shared_memory and not HAVE_MEMFD else None


@contextlib.contextmanager
def _memory_limit(size: int, what: str, named: bool) -> Iterator[None]:
    """Within it, an ``OSError`` of sizing a block of ``size`` bytes for ``what`` (a file size
    limit, a full ``/dev/shm``) becomes the :class:`~vecenv.errors.MemoryLimitError` naming the
    limit, as where a block is checked before it is made (small blocks are not: the check reads
    several files); an error that no limit explains goes on unchanged."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.EFBIG, errno.ENOSPC, errno.ENOMEM):
            raise
        check_block(size, what, shared=True, named=named)  # raises where a limit says why
        raise


class SharedBlock:
    """One shared-memory block as mapped in one process: a memfd mapping or a SharedMemory."""

    def __init__(self, buf: Any, fd: int | None, shm: shared_memory.SharedMemory | None) -> None:
        self.buf = buf
        self.fd = fd  # the parent's memfd, to pass to workers
        self._shm = shm
        # (address, length) of a second mapping of a block this process made (see :meth:`attach`).
        self._second_mapping: tuple[int, int] | None = None

    @classmethod
    def create(cls, size: int, name: str | None, what: str = "a shared block", label: str = "vecenv") -> SharedBlock:
        """A new block of ``size`` bytes: a memfd when ``name`` is None (``label`` names it in
        ``/proc/<pid>/fd``), else a named block.

        The memfd is sealed against shrinking and growing once it has its size: a stray
        ``ftruncate`` on the descriptor (in the parent or in a worker, which receives the same
        file) then fails with ``PermissionError`` instead of leaving mappings that point past
        the end of the file, whose next access would kill the process with SIGBUS. While the
        parent keeps the descriptor (for a restarted worker), a worker forked later closes its
        copy (:data:`~vecenv.wire.memory.INHERITED_FDS`): it would pin the memory after
        :meth:`close`.
        """
        if name is None:
            fd = make_memfd(label, what)  # DescriptorLimitError where none is free
            try:
                with _memory_limit(size, what, named=False):
                    os.ftruncate(fd, size)
                seal_memfd(fd)
                with descriptor_limit(what, _MAPPING_NEEDS):
                    mm = _map(fd, size)
                _remember_mapping(mm, os.fstat(fd).st_ino)
                INHERITED_FDS.add(fd)
                return cls(mm, fd, None)
            except BaseException:
                os.close(fd)
                raise
        with _memory_limit(size, what, named=True):
            shm = shared_memory.SharedMemory(name, create=True, size=size)
        return cls(shm.buf, None, shm)

    def release_fd(self) -> None:
        """Close the parent's descriptor of a memfd block (the mapping keeps the memory).

        Forgotten before it is closed: a Ctrl+C raised as ``os.close`` returns would otherwise
        leave it recorded, and the next call would close it again (``EBADF``, or another file
        that took its number meanwhile)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            INHERITED_FDS.discard(fd)
            os.close(fd)

    @classmethod
    def attach(cls, size: int, name: str | None, fd: int | None) -> SharedBlock:
        """Map a block another side made: a worker's mapping, or the second mapping that the
        group the parent hosts makes of the parent's own block (marked so that :meth:`close`
        can let its memory go even while something still views it)."""
        if name is None:
            assert fd is not None
            try:
                block = cls(_map(fd, size), None, None)
                inode = os.fstat(fd).st_ino
                if any(created.inode == inode for created in _CREATED_MAPPINGS.values()):
                    block._second_mapping = _address_of(block.buf)
                return block
            finally:
                os.close(fd)  # the mapping keeps the memory alive
        shm = shared_memory.SharedMemory(name)
        return cls(shm.buf, None, shm)

    def close(self, unlink: bool) -> None:
        """Unmap (unless a caller still holds a view), close the descriptor, unlink a name."""
        target = self._shm if self._shm is not None else self.buf
        self.buf = None
        try:
            target.close()
            _CREATED_MAPPINGS.pop(id(target), None)
        except BufferError:
            # A caller still holds a view (copy=False); memory in use is never unmapped. A memfd
            # mapping is freed with the last view (the views keep it alive). A SharedMemory
            # object would try again, noisily, when collected: keep it for the process's life.
            if self._shm is not None:
                _STILL_VIEWED.append(target)
            elif self._second_mapping is not None:
                # The group the parent hosts mapped the parent's block a second time; nobody but
                # that group sees this mapping, and once it is closed nothing reads it. What still
                # views it is its own objects kept by a traceback: a Ctrl+C (or another
                # BaseException) raised in its env or policy code goes up with its frames, whose
                # locals and closures view these rows, for as long as the exception lives
                # (``sys.last_value`` in a REPL). Its pages are given back now, replaced in place
                # by private memory, so that close() leaves none of the block mapped; the views
                # stay valid (the placeholder is unmapped with the last of them).
                _private_placeholder(*self._second_mapping)
        self._second_mapping = None
        self.release_fd()
        if unlink and self._shm is not None:
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass


class _CreatedMapping(NamedTuple):
    """Where a memfd block this process created is mapped, and its memfd's inode (a block
    mapped again in this process with that inode is its own)."""

    address: int
    length: int
    inode: int


#: The memfd blocks this process created and still maps, by mmap id.
_CREATED_MAPPINGS: dict[int, _CreatedMapping] = {}
_MAP_FIXED = 0x10  # Linux


def _address_of(mm: mmap.mmap) -> tuple[int, int]:
    """The (address, length) of a mapping."""
    view = ctypes.c_char.from_buffer(mm)
    address = ctypes.addressof(view)
    del view
    return address, len(mm)


def _remember_mapping(mm: mmap.mmap, inode: int) -> None:
    """Record a block this process created: a worker forked later gives it up
    (:func:`drop_inherited_mappings`), and a second mapping of it here is known for one."""
    _CREATED_MAPPINGS[id(mm)] = _CreatedMapping(*_address_of(mm), inode)
    weakref.finalize(mm, _CREATED_MAPPINGS.pop, id(mm), None)  # unmapped with its last view


def _private_placeholder(address: int, length: int) -> None:
    """Replace the mapping at ``address`` in place by private anonymous memory: the block's
    pages are let go, and the objects that still point there stay valid (their mmap unmaps the
    placeholder when it is collected)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED
    libc.mmap(address, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)


def drop_inherited_mappings() -> None:
    """In a process just forked (a worker): give up the parent's blocks.

    A forked worker inherits the mappings of every block its parent had made (other vector
    envs'), and each mapping keeps its block alive until the worker exits. They are replaced in
    place by private anonymous memory: the blocks are released, and the address ranges stay
    reserved for the inherited Python objects that still point there (freeing those later
    unmaps the placeholder, never a mapping made since). Call before mapping anything new.
    """
    if not _CREATED_MAPPINGS:
        return
    for created in _CREATED_MAPPINGS.values():
        _private_placeholder(created.address, created.length)
    _CREATED_MAPPINGS.clear()


#: What a closed Buffers holds instead of its arrays (their views would pin the block).
_RELEASED = np.zeros(0)


def _aligned_nbytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Bytes an array of ``shape`` and ``dtype`` takes in a block, rounded up to the alignment
    (Python ints: a huge rollout's size must not wrap around)."""
    size = math.prod(shape) * dtype.itemsize
    return -(-size // _ALIGN) * _ALIGN


def layout_nbytes(layout: list[tuple[str, tuple[int, ...], np.dtype]]) -> int:
    """Bytes a block holding ``layout``'s arrays takes."""
    return sum(_aligned_nbytes(shape, dtype) for _, shape, dtype in layout)


def map_fields(
    layout: list[tuple[str, tuple[int, ...], np.dtype]],
    shm_name: str | None,
    create: bool,
    fd: int | None,
    what: str = "the shared block",
) -> tuple[SharedBlock, list[tuple[str, np.ndarray]]]:
    """Create (``create``) or attach the block that holds ``layout``'s arrays, in order and
    aligned, and view each whole array in it: ``(field, array)`` per entry of ``layout``.

    A new block is first checked against the memory the machine can give it
    (:func:`~vecenv.wire.memory.check_block`: ``MemoryLimitError`` naming ``what``).
    The views are ``np.frombuffer`` exports, so the block cannot be unmapped under one.
    """
    total = layout_nbytes(layout)
    if create:
        check_block(total, what, shared=True, named=shm_name is not None)
    block = SharedBlock.create(total, shm_name, what) if create else SharedBlock.attach(total, shm_name, fd)
    views, offset = [], 0
    for field, shape, dtype in layout:
        count = int(np.prod(shape, dtype=np.int64))
        views.append((field, np.frombuffer(block.buf, dtype, count, offset).reshape(shape)))
        offset += _aligned_nbytes(shape, dtype)
    return block, views


class Buffers:
    """One side's view of the arrays: the parent sees all rows, a worker only its own.

    Attributes:
        observations: a tree of arrays for fixed spaces, else a list of per-env objects.
        actions: a tree of arrays for fixed spaces, else ``None`` (actions then travel as objects).
        rewards, terminations, truncations: 1-d arrays.
    """

    def __init__(self, spec: BufferSpec, start: int, stop: int, *, create: bool, fd: int | None = None) -> None:
        self.spec = spec
        self.start, self.stop = start, stop
        n = stop - start
        self.block: SharedBlock | None = None
        self._owner = create
        shared: dict[str, list[np.ndarray]] = {}
        layout = spec.layout()
        if layout:
            what = f"the step buffers of {spec.num_envs} envs"
            self.block, views = map_fields(layout, spec.shm_name, create, fd, what)
            for field, array in views:
                shared.setdefault(field, []).append(array[start:stop])

        def fixed_tree(field: str, space: Space) -> Any:
            arrays = shared.get(field) or [np.zeros(s, d) for s, d in leaf_layout(space, n)]
            return build_tree(space, iter(arrays))

        obs_space, act_space = spec.observation_space, spec.action_space
        self.fixed_observations = is_fixed(obs_space)
        self.observations: Any = fixed_tree("observations", obs_space) if self.fixed_observations else [None] * n
        self.actions: Any = fixed_tree("actions", act_space) if is_fixed(act_space) else None
        flags = shared.get("rewards")
        if flags is not None:
            self.rewards, self.terminations, self.truncations = (
                flags[0],
                shared["terminations"][0],
                shared["truncations"][0],
            )
        else:
            self.rewards = np.zeros(n, np.float64)
            self.terminations = np.zeros(n, np.bool_)
            self.truncations = np.zeros(n, np.bool_)
        # The batched value of object observations, built the way SyncVectorEnv builds it.
        self._object_batch: Any = None if self.fixed_observations else create_empty_array(obs_space, n)

    @classmethod
    def create(cls, spec: BufferSpec) -> Buffers:
        """The parent's buffers: every row, and the owner of the shared block."""
        return cls(spec, 0, spec.num_envs, create=True)

    @classmethod
    def attach(cls, spec: BufferSpec, start: int, stop: int, fd: int | None = None) -> Buffers:
        """A worker's buffers: rows ``[start, stop)`` mapped from the parent's block.

        ``fd``: the block's descriptor as received from the parent, when it is a memfd
        (:attr:`needs_fd`); this process takes ownership of it.
        """
        return cls(spec, start, stop, create=False, fd=fd)

    @staticmethod
    def needs_fd(spec: BufferSpec) -> bool:
        """Whether workers receive the block as a file descriptor (after the ``Attach``)."""
        return bool(spec.layout()) and spec.shm_name is None

    def release_fd(self) -> None:
        """Parent: close the block's descriptor once every worker has mapped the block.

        The mapping keeps the memory alive; the descriptor would only be inherited by processes
        forked later, pinning the block until they exit.
        """
        if self.block is not None:
            self.block.release_fd()

    def observation_writer(self) -> Callable[[int, Any], None]:
        """A fast ``write(row, value)`` for one env's observation, which checks the value fits."""
        if not self.fixed_observations:
            return self.observations.__setitem__
        return row_writer(self.spec.observation_space, self.observations)

    # -- what crosses the pipe for fields that are not shared ---------------------------------

    def payload(self) -> Rows | None:
        """The rows a worker must send after a step or reset, or ``None`` if all are shared."""
        spec = self.spec
        obs = None if spec.shared_observations else self.observations
        flags = None if spec.shared_flags else Flags(self.rewards, self.terminations, self.truncations)
        if obs is None and flags is None:
            return None
        return Rows(obs, flags)

    def receive(self, start: int, stop: int, rows: Rows | None) -> None:
        """Parent side: store a worker's :meth:`payload` into rows ``[start, stop)``."""
        if rows is None:
            return
        obs, flags = rows.observations, rows.flags
        if obs is not None:
            if self.fixed_observations:
                tree_assign(tree_slice(self.observations, start, stop), obs)
            else:
                self.observations[start:stop] = obs
        if flags is not None:
            self.rewards[start:stop] = flags.rewards
            self.terminations[start:stop] = flags.terminations
            self.truncations[start:stop] = flags.truncations

    def batched_observations(self) -> Any:
        """The batched observation, in the parent's own buffers (not a copy)."""
        if self.fixed_observations:
            return self.observations
        self._object_batch = concatenate(self.spec.observation_space, self.observations, self._object_batch)
        return self._object_batch

    def close(self) -> None:
        """Unmap the block; the parent also unlinks a named one. Safe to call twice."""
        block, self.block = self.block, None
        if block is None:
            return
        # Our own views into the block must go before it can be unmapped.
        self.observations = self.actions = None
        self.rewards = self.terminations = self.truncations = _RELEASED
        block.close(unlink=self._owner)
