"""``vecenv.wire.buffers``: the arrays a vector env's parent and workers share.

The layout a ``BufferSpec`` plans; a block made by the parent and mapped by a worker, in this
process (``attach``); what travels when a field is not shared; and the block's lifetime: it is
released with its last view, and the parent keeps no descriptor of it once the workers have
mapped it.

On Linux the block is a memfd, sealed against resizing: without the seals a stray ``ftruncate``
(ours, an env's, a worker's) on the block's descriptor would shrink the file under the parent's
mapping and the next access would kill the parent with SIGBUS; with ``F_SEAL_SHRINK |
F_SEAL_GROW`` it fails with ``PermissionError`` and nothing moves.
"""

from __future__ import annotations

import fcntl
import gc
import os
import signal

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import concatenate, create_empty_array

from tests.engine.test_differential import assert_same
from tests.helpers.envs import make_obs_space
from tests.helpers.faults import healthy_fns, open_fds
from vecenv import SubprocVectorEnv
from vecenv.spaces import leaf_layout, tree_slice
from vecenv.wire.buffers import HAVE_MEMFD, SHM_PREFIX, Buffers, BufferSpec, SharedBlock
from vecenv.wire.protocol import CHECKED_COPY_BYTES, MEMFD_WEIGHTS_BYTES, Pickled

memfd_only = pytest.mark.skipif(not HAVE_MEMFD, reason="the shared block is a memfd only on Linux")


def attach(parent: Buffers, start: int, stop: int) -> Buffers:
    """A worker's rows of ``parent`` mapped in this process, as a worker maps them."""
    fd = os.dup(parent.block.fd) if Buffers.needs_fd(parent.spec) else None
    return Buffers.attach(parent.spec, start, stop, fd)


def block_id(spec: BufferSpec, parent: Buffers) -> str | int:
    """What identifies the parent's block outside Python: its name, or its memfd's inode."""
    if spec.shm_name is not None:
        return spec.shm_name
    assert parent.block is not None and parent.block.fd is not None
    return os.fstat(parent.block.fd).st_ino


def block_alive(ident: str | int) -> bool:
    """Whether the block still exists for this process: its name in /dev/shm, or its memfd still
    mapped (``/proc/self/maps``) or open (``/proc/self/fd``)."""
    if isinstance(ident, str):
        return os.path.exists(os.path.join("/dev/shm", ident))
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/memfd:vecenv") and int(fields[4]) == ident:
                return True
    for fd, target in open_fds().items():
        try:
            if target.startswith("/memfd:vecenv") and os.stat(f"/proc/self/fd/{fd}").st_ino == ident:
                return True
        except OSError:
            pass
    return False


# -- the layout, and a block mapped twice in this process ----------------------------------------


def test_buffer_spec_plan() -> None:
    obs, act = make_obs_space("dict"), spaces.Box(-1, 1, (2,), np.float32)
    spec = BufferSpec.plan(4, obs, act, True)
    if HAVE_MEMFD:
        assert spec.shm_name is None and Buffers.needs_fd(spec)  # an anonymous block
    else:
        assert spec.shm_name.startswith(SHM_PREFIX)
    assert spec.shared_observations and spec.shared_actions and spec.shared_flags
    fields = [f for f, _, _ in spec.layout()]
    assert fields == ["observations"] * len(leaf_layout(obs, 4)) + ["actions", "rewards", "terminations", "truncations"]
    assert spec.layout()[-3:] == [
        ("rewards", (4,), np.dtype(np.float64)),
        ("terminations", (4,), np.dtype(np.bool_)),
        ("truncations", (4,), np.dtype(np.bool_)),
    ]
    text = BufferSpec.plan(4, make_obs_space("tuple_text"), act, True)
    assert not text.shared_observations and text.shared_actions and text.shared_flags
    off = BufferSpec.plan(4, obs, act, False)
    assert off.shm_name is None and off.layout() == [] and not Buffers.needs_fd(off)
    if not HAVE_MEMFD:
        assert BufferSpec.plan(4, obs, act, True).shm_name != spec.shm_name


def test_buffers_create_attach_round_trip_and_close() -> None:
    obs_space, act_space = make_obs_space("tuple"), spaces.MultiDiscrete([3, 5])
    spec = BufferSpec.plan(5, obs_space, act_space, True)
    parent = Buffers.create(spec)
    ident = block_id(spec, parent)
    assert block_alive(ident)
    left, right = attach(parent, 0, 2), attach(parent, 2, 5)
    try:
        assert right.rewards.shape == (3,) and parent.rewards.shape == (5,)
        # A worker's writes show in the parent's rows...
        obs_space.seed(3)
        samples = [obs_space.sample() for _ in range(3)]
        write = right.observation_writer()
        for j, s in enumerate(samples):
            write(j, s)
        right.rewards[:] = [1.5, -2.0, 3.25]
        right.terminations[1] = True
        right.truncations[2] = True
        assert_same(tree_slice(parent.observations, 2, 5), tree_slice(right.observations, 0, 3))
        assert parent.rewards.tolist() == [0.0, 0.0, 1.5, -2.0, 3.25]
        assert parent.terminations.tolist() == [False, False, False, True, False]
        assert parent.truncations.tolist() == [False, False, False, False, True]
        # ... and the parent's action rows show in each worker's.
        parent.actions[:] = np.arange(10).reshape(5, 2) % 3
        assert_same(left.actions, parent.actions[:2])
        assert_same(right.actions, parent.actions[2:])
        assert left.payload() is None and right.payload() is None  # everything is shared
        del write  # it holds views of right's rows, which would keep that mapping alive
    finally:
        right.close()
        left.close()
        right.close()  # twice is safe
        assert block_alive(ident)  # only the owner releases the block
        parent.close()
        parent.close()
    assert not block_alive(ident)


def test_buffers_payload_and_receive_without_shared_memory() -> None:
    obs_space = make_obs_space("dict")
    spec = BufferSpec.plan(4, obs_space, spaces.Discrete(2), False)
    parent = Buffers.create(spec)
    worker = attach(parent, 1, 4)
    obs_space.seed(1)
    samples = [obs_space.sample() for _ in range(3)]
    write = worker.observation_writer()
    for j, s in enumerate(samples):
        write(j, s)
    worker.rewards[:] = [1.0, 2.0, 3.0]
    worker.truncations[:] = [True, False, True]
    parent.receive(1, 4, worker.payload())
    expected = concatenate(obs_space, samples, create_empty_array(obs_space, 3, np.zeros))
    assert_same(tree_slice(parent.observations, 1, 4), expected)
    assert parent.rewards.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert parent.truncations.tolist() == [False, True, False, True]
    parent.close()
    worker.close()


def test_buffers_text_observations_travel_as_objects() -> None:
    space = make_obs_space("tuple_text")
    spec = BufferSpec.plan(3, space, spaces.Discrete(2), True)
    parent = Buffers.create(spec)
    ident = block_id(spec, parent)
    worker = attach(parent, 0, 3)
    try:
        assert not parent.fixed_observations
        items = [
            ("ab", np.array([1, 2], np.float32), 1),
            ("c", np.array([3, 4], np.float32), 2),
            ("dddd", np.array([5, 6], np.float32), 3),
        ]
        write = worker.observation_writer()
        for j, item in enumerate(items):
            write(j, item)
        rows = worker.payload()
        assert rows is not None and rows.flags is None  # the flags are shared
        parent.receive(0, 3, rows)
        expected = concatenate(space, items, create_empty_array(space, 3))
        assert_same(parent.batched_observations(), expected)
        assert parent.batched_observations()[0] == ("ab", "c", "dddd")
    finally:
        worker.close()
        parent.close()
    assert not block_alive(ident)


def test_buffers_close_with_a_live_view_still_unlinks() -> None:
    spec = BufferSpec.plan(2, spaces.Box(0, 1, (3,), np.float32), spaces.Discrete(2), True)
    parent = Buffers.create(spec)
    ident = block_id(spec, parent)
    view = parent.observations  # as copy=False hands out
    view[:] = 0.5
    parent.close()
    if spec.shm_name is not None:
        assert not block_alive(ident)  # the name is gone at once
    else:
        assert block_alive(ident)  # a memfd stays mapped while the view lives...
    assert view.sum() == 3.0  # the view is still readable: the mapping was not pulled from under it
    del view
    gc.collect()
    assert not block_alive(ident)  # ... and goes with its last view


# -- the sealed memfd ----------------------------------------------------------------------------


SIZE = 4096 * 3


@pytest.fixture
def block():
    b = SharedBlock.create(SIZE, None)
    assert b.fd is not None  # the parent's memfd
    try:
        yield b
    finally:
        b.close(unlink=True)


@memfd_only
def test_memfd_is_sealed_against_shrink_and_grow(block: SharedBlock) -> None:
    assert block.fd is not None
    seals = fcntl.fcntl(block.fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
    # Writes stay allowed: the seals only fix the size.
    assert not seals & fcntl.F_SEAL_WRITE


@memfd_only
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


@memfd_only
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


@memfd_only
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


# -- the parent keeps no descriptor of the block -------------------------------------------------


def memfd_mappings(pid: int | str) -> set[int]:
    """Inodes of the vecenv memfd blocks mapped in process ``pid``."""
    inodes = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/memfd:vecenv"):
                inodes.add(int(parts[4]))
    return inodes


def fd_inodes(pid: int | str) -> dict[str, int]:
    """Every open descriptor of ``pid``: its link target -> inode (sockets and memfds)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{fd}"
        try:
            link = os.readlink(path)
            found[f"{fd} -> {link}"] = os.stat(path).st_ino
        except OSError:
            pass
    return found


def memfd_fds(pid: int | str) -> list[str]:
    return [k for k in fd_inodes(pid) if "/memfd:vecenv" in k]


linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")


@linux_only
@pytest.mark.timeout(60)
def test_parent_holds_no_memfd_after_construction() -> None:
    before = memfd_fds("self")
    envs = SubprocVectorEnv(healthy_fns(2), num_workers=2, context="fork")
    try:
        assert memfd_mappings("self"), "the block should be a vecenv memfd mapped in the parent"
        assert memfd_fds("self") == before
    finally:
        envs.close()


@linux_only
@pytest.mark.timeout(60)
def test_blocks_kept_for_restarts_are_not_held_by_workers_forked_later() -> None:
    """With ``on_worker_death="restart"`` the parent keeps its blocks' descriptors (step buffers,
    rollout block, control block) for a replacement; workers of another vector env forked later
    must not keep copies, which would hold the memory after the first one's ``close()``."""
    first = SubprocVectorEnv(healthy_fns(2), num_workers=2, context="fork", on_worker_death="restart")
    try:
        first.reset(seed=0)
        first.rollout(2)
        assert len(memfd_fds("self")) >= 2, "the parent keeps its blocks' descriptors under restarts"
        with SubprocVectorEnv(healthy_fns(2), num_workers=2, context="fork") as later:
            later.reset(seed=0)
            held = {pid: memfd_fds(pid) for pid in later.worker_pids}
            assert held == {pid: [] for pid in later.worker_pids}
    finally:
        first.close()


@pytest.mark.skipif(not HAVE_MEMFD, reason="memfd blocks only")
def test_ctrl_c_as_a_blocks_descriptor_closes_never_closes_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+C raised as ``os.close`` returns in ``release_fd``: the descriptor is forgotten
    already, so ``close()`` later neither fails with EBADF nor closes the file that took its
    number meanwhile (the next rollout after such an interrupt raised ``OSError``)."""
    block = SharedBlock.create(4096, None)
    close = os.close

    def close_then_ctrl_c(fd: int) -> None:
        monkeypatch.setattr(os, "close", close)  # once
        close(fd)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "close", close_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        block.release_fd()
    monkeypatch.undo()
    reused = os.open(os.devnull, os.O_RDONLY)  # the lowest free number: the one just closed
    try:
        block.close(unlink=False)
        os.fstat(reused)  # still open
    finally:
        os.close(reused)


def _ctrl_c_as_memfds_are_made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make every ``os.memfd_create`` deliver a Ctrl+C as it returns; the descriptors it made."""
    made: list[int] = []
    memfd_create = os.memfd_create

    def memfd_create_then_ctrl_c(name: str, flags: int = 0) -> int:
        fd = memfd_create(name, flags)
        made.append(fd)
        signal.raise_signal(signal.SIGINT)  # its handler runs at the next bytecode: still here
        return fd

    monkeypatch.setattr(os, "memfd_create", memfd_create_then_ctrl_c)
    return made


def _is_open_memfd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:vecenv")
    except FileNotFoundError:
        return False


@linux_only
@pytest.mark.timeout(60)
def test_ctrl_c_as_a_rollout_block_is_made_keeps_it_to_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl+C as the rollout block's memfd is made is raised once the block is kept by its
    owner: ``close()`` then closes its descriptor (it was lost before, open until exit), and
    the next rollout uses the block."""
    with SubprocVectorEnv(healthy_fns(2), num_workers=1, context="fork", on_worker_death="restart") as envs:
        envs.reset(seed=0)
        made = _ctrl_c_as_memfds_are_made(monkeypatch)
        with pytest.raises(KeyboardInterrupt):
            envs.rollout(3)
        monkeypatch.undo()
        assert len(made) == 1 and _is_open_memfd(made[0])
        assert envs.rollout(3).rewards.shape == (3, 2)
    assert not _is_open_memfd(made[0]), "close() closes the block the interrupted rollout made"


@linux_only
def test_only_a_large_shared_copy_of_weights_reads_the_memory_limits_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the limits (/proc/meminfo, the cgroup's files) took ~0.5 ms, more than making a
    copy of a few hundred KiB, on every rollout that sent new weights; a copy from
    ``CHECKED_COPY_BYTES`` up is still refused clearly where it cannot fit."""
    from vecenv.errors import MemoryLimitError
    from vecenv.wire import memory

    read: list[bool] = []
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: read.append(shared) or [("a limit", 1000)])
    small = Pickled(bytes(MEMFD_WEIGHTS_BYTES))
    try:
        assert small.shared_fd() is not None and not read
    finally:
        small.close()
    with pytest.raises(MemoryLimitError, match="the new weights' shared copy needs"):
        Pickled(bytes(CHECKED_COPY_BYTES)).shared_fd()
    assert read == [True]


@linux_only
def test_ctrl_c_as_large_weights_shared_copy_is_made_keeps_it_to_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the shared copy of a rollout's large weights: recorded before the Ctrl+C is
    raised, so :meth:`Pickled.close` closes it."""
    weights = Pickled(bytes(MEMFD_WEIGHTS_BYTES))
    made = _ctrl_c_as_memfds_are_made(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        weights.shared_fd()
    monkeypatch.undo()
    assert len(made) == 1 and _is_open_memfd(made[0])
    assert weights.shared_fd() == made[0], "the copy made is the one sent"
    weights.close()
    assert not _is_open_memfd(made[0])
