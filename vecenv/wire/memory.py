"""What memory the machine can give a new block, checked before the block is made.

A shared block is sparse when it is made: ``ftruncate`` of a memfd (or of a file in
``/dev/shm``) succeeds for any size, and the pages arrive only as the workers write rows. A
block larger than the machine's memory is then found late and badly: the shared memory grows
until the OOM killer ends a worker (or, on a full ``/dev/shm``, a write kills it with SIGBUS).
So :func:`check_block` compares a block's size with every limit that applies before anything
is made, and raises :class:`~vecenv.errors.MemoryLimitError` naming the size and the tightest
limit. The step buffers (:mod:`vecenv.wire.buffers`) and the rollout block
(:mod:`vecenv.wire.rollout_buffers`) both call it.

The limits, each where the platform has it: the memory available (``MemAvailable`` plus
``SwapFree`` in ``/proc/meminfo``), the headroom of this process's memory cgroup
(``memory.max`` less ``memory.current``, with its swap), the free space of ``/dev/shm`` for a
named block, ``RLIMIT_FSIZE`` for a shared block (a larger ``ftruncate`` fails), and
``RLIMIT_AS`` less what this process maps already.

It also keeps the descriptors this process holds to pass to workers (:data:`INHERITED_FDS`),
which a worker started by ``fork`` closes first (:func:`close_inherited`): its copies would pin
the blocks' memory for as long as it lives.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
from collections.abc import Callable, Iterator

from vecenv.errors import DescriptorLimitError, MemoryLimitError
from vecenv.machine import cgroups, descriptor_usage

__all__ = [
    "Limit",
    "memory_limits",
    "check_block",
    "format_bytes",
    "INHERITED_FDS",
    "close_inherited",
    "seal_memfd",
    "make_memfd",
    "descriptor_limit_error",
    "descriptor_limit",
    "cgroup_headroom",
]

#: (what the limit is, in words; bytes left under it)
Limit = tuple[str, int]


def format_bytes(size: int) -> str:
    """``size`` in binary units, for messages (``"2.1 TiB"``)."""
    if size < 1024:
        return f"{size} B"
    value, unit = size / 1024, "KiB"
    for larger in ("MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{value:.1f} {unit}"


def _meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes (empty where there is none)."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return fields


def _available_memory() -> Limit | None:
    info = _meminfo()
    if "MemAvailable" not in info:
        return None
    return "available memory (MemAvailable + SwapFree in /proc/meminfo)", info["MemAvailable"] + info.get("SwapFree", 0)


def _read_number(path: str) -> int | None:
    """A cgroup file's number (``None``: missing, unreadable, or ``max``)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cgroup_headroom(root: str = "/sys/fs/cgroup", membership: str = "/proc/self/cgroup") -> Limit | None:
    """The least headroom of this process's memory cgroup and its ancestors (cgroup v2), or of
    its v1 memory cgroup. A container often sees its own cgroup as the mount's root while
    ``/proc/self/cgroup`` names the host's path to it (cgroup v1 without a cgroup namespace),
    so a v1 path that is not under the mount falls back to the mount's root. (``root`` and
    ``membership``: where the cgroup file systems are mounted and the file naming this
    process's cgroups.)"""
    best: Limit | None = None
    for group in cgroups("memory", root, membership):
        if group.version == 2:
            for directory in group.directories:
                limit = _read_number(f"{directory}/memory.max")
                used = _read_number(f"{directory}/memory.current")
                if limit is not None and used is not None:
                    swap = (_read_number(f"{directory}/memory.swap.max") or 0) - (
                        _read_number(f"{directory}/memory.swap.current") or 0
                    )
                    room = max(0, limit - used) + max(0, swap)
                    if best is None or room < best[1]:
                        best = (f"the memory cgroup's headroom (memory.max - memory.current in {directory})", room)
        else:
            directory = next(
                (d for d in group.directories if os.path.exists(f"{d}/memory.limit_in_bytes")), group.directories[-1]
            )
            limit = _read_number(f"{directory}/memory.limit_in_bytes")
            used = _read_number(f"{directory}/memory.usage_in_bytes")
            if limit is not None and used is not None and limit < 2**62:
                room = max(0, limit - used)
                if best is None or room < best[1]:
                    best = (f"the memory cgroup's headroom (memory.limit_in_bytes - usage in {directory})", room)
    return best


def _shm_free() -> Limit | None:
    try:
        stats = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "free space in /dev/shm", stats.f_bavail * stats.f_frsize


def _rlimit(which: int, name: str, used: Callable[[], int] | None = None) -> Limit | None:
    soft, _ = resource.getrlimit(which)
    if soft == resource.RLIM_INFINITY:
        return None
    taken = used() if used is not None else 0
    return (f"{name} ({soft} bytes) less what this process maps ({taken})" if used else name), max(0, soft - taken)


def _mapped() -> int:
    """This process's address space in use (``VmSize``), 0 where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def memory_limits(shared: bool, named: bool) -> list[Limit]:
    """Every limit on a new block here: ``shared`` (a memfd or a named block, else private
    arrays); ``named`` (in ``/dev/shm``)."""
    found = [
        _available_memory(),
        cgroup_headroom(),
        _rlimit(resource.RLIMIT_AS, "RLIMIT_AS", _mapped) if hasattr(resource, "RLIMIT_AS") else None,
    ]
    if shared:
        found.append(_rlimit(resource.RLIMIT_FSIZE, "RLIMIT_FSIZE (the largest file this process may make)"))
        if named:
            found.append(_shm_free())
    return [limit for limit in found if limit is not None]


def check_block(size: int, what: str, *, shared: bool, named: bool = False) -> None:
    """Raise :class:`~vecenv.errors.MemoryLimitError` when ``size`` bytes for ``what`` exceed
    a limit of :func:`memory_limits`; nothing is made either way."""
    limits = memory_limits(shared, named)
    if not limits:
        return
    name, room = min(limits, key=lambda limit: limit[1])
    if size > room:
        kind = "shared memory" if shared else "memory"
        raise MemoryLimitError(
            f"{what} needs {format_bytes(size)} ({size} bytes) of {kind}, more than this machine can give it: "
            f"{format_bytes(room)} ({room} bytes; {name}). Nothing was allocated",
            needed=size,
            available=room,
            limit=name,
        )


def make_memfd(name: str, what: str) -> int:
    """A new sealable, close-on-exec memfd for ``what``; where this process may open no more
    descriptors (``RLIMIT_NOFILE``, or the system's table), a
    :class:`~vecenv.errors.DescriptorLimitError` naming ``what``, the limit and the count, not a
    bare ``OSError`` (the call that needed it made nothing and can be retried once some are
    free)."""
    with descriptor_limit(what, "a file descriptor (a memfd)"):
        return os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)


def descriptor_limit_error(exc: OSError, what: str, needs: str) -> OSError:
    """``exc`` as a :class:`~vecenv.errors.DescriptorLimitError` naming ``what`` and what it
    ``needs`` where it says this process may open no more descriptors (``RLIMIT_NOFILE``, or
    the system's table); any other ``OSError`` is returned as it is."""
    if exc.errno not in (errno.EMFILE, errno.ENFILE):
        return exc
    soft, count = descriptor_usage()
    return DescriptorLimitError(
        exc.errno,
        f"cannot make {what}: it needs {needs}, and this process may open {soft} "
        f"(RLIMIT_NOFILE) and {count}. Nothing was made; raise the limit (ulimit -n, "
        "resource.setrlimit) or close some descriptors",
    )


@contextlib.contextmanager
def descriptor_limit(what: str, needs: str) -> Iterator[None]:
    """Within it, an ``OSError`` saying this process may open no more descriptors becomes the
    :class:`~vecenv.errors.DescriptorLimitError` of :func:`descriptor_limit_error` (the
    ``OSError`` itself is dropped from the chain: the new message says all of it); any other
    ``OSError`` goes on unchanged."""
    try:
        yield
    except OSError as exc:
        error = descriptor_limit_error(exc, what, needs)
        if error is exc:
            raise
        raise error from None


def seal_memfd(fd: int, *, contents: bool = False) -> None:
    """Seal a memfd against shrinking and growing (and, with ``contents``, against any write
    and any further seal): every process it is passed to gets the same file, and a stray
    ``ftruncate`` or write there then fails with ``PermissionError``."""
    import fcntl  # memfds exist only on Linux, where fcntl does too

    # Python's fcntl has these on Linux since 3.8; the numbers are Linux's own.
    seals = getattr(fcntl, "F_SEAL_SHRINK", 2) | getattr(fcntl, "F_SEAL_GROW", 4)
    if contents:
        seals |= getattr(fcntl, "F_SEAL_WRITE", 8) | getattr(fcntl, "F_SEAL_SEAL", 1)
    fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", 1033), seals)


#: Descriptors this process holds to pass to workers: its memfd blocks
#: (:class:`~vecenv.wire.buffers.SharedBlock`: step buffers, rollout blocks, the fast path's
#: control blocks) and new weights' shared copies (:class:`~vecenv.wire.protocol.Pickled`).
INHERITED_FDS: set[int] = set()


def close_inherited() -> None:
    """In a worker just forked: close the parent's descriptors of :data:`INHERITED_FDS`."""
    for fd in list(INHERITED_FDS):
        try:
            os.close(fd)
        except OSError:
            pass
    INHERITED_FDS.clear()
