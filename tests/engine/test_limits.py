"""Limits a hostile or unlucky user meets: commands that a stuck worker cannot take, rollouts
and buffers larger than the memory the machine can give, weight pushes that do not fit the
policy.

Every wait has a bound, asserted here; the autouse leak check of ``conftest.py`` fails a test
that leaves a process or a shared block behind.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import resource
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import vecenv
from tests.helpers.envs import SlowReplacementEnv, diff_env_fns, greedy_module
from tests.helpers.faults import FrameEnv, fault_fns, open_fds
from tests.helpers.limits import file_size_limit
from vecenv import VecEnvTimeoutError, WorkerDiedError
from vecenv.errors import DescriptorLimitError, MemoryLimitError, WeightsMismatchError
from vecenv.parent import rollouts, subproc
from vecenv.parent.sizing import WorkerChoice
from vecenv.transports import sending
from vecenv.transports.sending import SendTimeout, send_within
from vecenv.wire import memory
from vecenv.wire.memory import format_bytes

# -- bounded sends -------------------------------------------------------------------------------


def _pipe_pair() -> tuple[object, socket.socket]:
    """A Connection over one end of a socketpair (as a worker pipe's parent end) and the other end."""
    from multiprocessing.connection import Connection

    a, b = socket.socketpair()
    conn = Connection(a.detach())
    sending.bound_writes(conn)
    return conn, b


@pytest.mark.timeout(30)
def test_send_within_a_deadline_says_whether_part_of_the_message_was_sent() -> None:
    """A message larger than the pipe's buffer to a reader that reads nothing: the send returns
    at its deadline, saying part of it is in the pipe; once the pipe is full, the next send
    says none of it is. A reader that reads gets the bytes ``Connection.send_bytes`` writes."""
    conn, other = _pipe_pair()
    try:
        big = bytes(8 * 2**20)
        start = time.monotonic()
        with pytest.raises(SendTimeout) as info:
            send_within(conn, big, None, 0.3)
        assert info.value.written
        assert 0.3 <= time.monotonic() - start < 5.0
        # Empty messages (a 4-byte header each) fill what is left; the first that does not fit
        # is not sent at all.
        with pytest.raises(SendTimeout) as info:
            for _ in range(100_000):
                send_within(conn, b"", None, 0.05)
        assert not info.value.written
        assert isinstance(info.value, VecEnvTimeoutError)
    finally:
        conn.close()
        other.close()
    conn, other = _pipe_pair()
    try:
        from multiprocessing.connection import Connection

        reader = Connection(other.detach())
        messages = [b"", b"x" * 100, bytes(range(256)) * 4000]  # the last is larger than the buffer
        received: list[bytes] = []
        thread = threading.Thread(target=lambda: received.extend(reader.recv_bytes() for _ in messages))
        thread.start()
        for message in messages:
            send_within(conn, message, None, 10)
        thread.join(10)
        assert received == messages
        reader.close()
        with pytest.raises(OSError):  # the reader is gone: a broken pipe, at once
            send_within(conn, b"after", None, 5)
    finally:
        conn.close()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("restart", [False, True], ids=["raise", "restart"])
def test_large_command_to_a_stuck_worker_is_bounded(restart: bool, tmp_path: Path, monkeypatch) -> None:
    """After a step timed out on a hung env, a command larger than a pipe's buffer
    (``call_async`` with a 40 MB array) returns within the send bound: the stuck worker,
    which took part of it, is ended (a dead worker; or replaced, and the call goes through)."""
    monkeypatch.setattr(sending, "SEND_TIMEOUT", 1.0)
    fns = fault_fns(2, "hang", "step", 0, once=str(tmp_path / "once"))
    envs = vecenv.SubprocVectorEnv(fns, 2, context="fork", on_worker_death="restart" if restart else "raise")
    try:
        envs.reset(seed=1)
        with pytest.raises(VecEnvTimeoutError):
            envs.step(np.zeros((2, 2), np.float32), timeout=0.5)
        big = np.zeros(40 * 2**20 // 8)
        start = time.monotonic()
        if restart:
            envs.call_async("size_of", big)
            assert time.monotonic() - start < 20.0  # the bound (1 s) and a restart
            assert envs.call_wait(timeout=30) == (big.nbytes, big.nbytes)
            assert envs.restart_count == 1
        else:
            with pytest.raises(WorkerDiedError, match="took .* bytes of a .*-byte command and then nothing") as info:
                envs.call_async("size_of", big)
            assert info.value.worker == 0
            assert time.monotonic() - start < 10.0  # the bound is 1 s
    finally:
        envs.close(terminate=True)


@pytest.mark.timeout(60)
def test_a_sync_call_bounds_its_send_by_its_timeout(tmp_path: Path) -> None:
    """``set_attr(..., timeout=1)`` with a value larger than a pipe's buffer, to a worker stuck
    in a step that timed out: the call's own timeout bounds the send (the default bound is
    not waited for)."""
    fns = fault_fns(2, "hang", "step", 0)
    envs = vecenv.SubprocVectorEnv(fns, 2, context="fork")
    try:
        envs.reset(seed=1)
        with pytest.raises(VecEnvTimeoutError):
            envs.step(np.zeros((2, 2), np.float32), timeout=0.5)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match="took .* bytes of a .*-byte command and then nothing"):
            envs.set_attr("payload", np.zeros(2**22), timeout=1.0)
        assert time.monotonic() - start < 10.0
    finally:
        envs.close(terminate=True)


@pytest.mark.timeout(60)
def test_a_restart_found_while_sending_ends_with_the_call_s_timeout(tmp_path: Path) -> None:
    """A stopped worker takes part of a command larger than a pipe's buffer and is ended, so
    it is replaced (``on_worker_death="restart"``); its replacement hangs while it builds. The
    rebuild had no bound when the death was found by the send (only a wait's deadline bounded
    it): ``set_attr(..., timeout=1)`` returned after the whole rebuild. It now ends within the
    call's ``timeout=``, as a death found while waiting does."""
    marker = str(tmp_path / "replacement-hangs")
    fns = [functools.partial(SlowReplacementEnv, i, marker=marker, dies=0, build_s=15.0) for i in range(4)]
    envs = vecenv.SubprocVectorEnv(fns, 2, context="fork", on_worker_death="restart")
    victim = None
    try:
        envs.reset(seed=1)
        victim = envs.worker_pids[0]
        assert victim is not None
        open(marker, "w").close()  # the replacement of env 0's worker sleeps while it builds
        os.kill(victim, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match="took longer than what was left of the call's timeout") as info:
            envs.set_attr("payload", np.zeros(2**22), timeout=1.0)
        assert "and then nothing" in str(info.value)
        assert time.monotonic() - start < 10.0
    finally:
        if victim is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
        envs.close(terminate=True)


# -- memory budget -------------------------------------------------------------------------------


def _shmem() -> int:
    """The machine's shared memory in use (``Shmem`` in /proc/meminfo), bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem line")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared_memory", [True, False], ids=["shared", "private"])
def test_a_rollout_longer_than_memory_is_refused_at_once(shared_memory: bool) -> None:
    """``rollout(10_000_000)`` on 8 envs of 84x84x4 frames (2.2 TB of rows) is refused before
    anything is made, naming the size and the memory available; the vector env is as it was."""
    envs = vecenv.SubprocVectorEnv([FrameEnv] * 8, 2, context="fork", shared_memory=shared_memory)
    try:
        envs.reset(seed=0)
        before = _shmem()
        start = time.monotonic()
        with pytest.raises(MemoryLimitError) as info:
            envs.rollout_async(10_000_000)
        assert time.monotonic() - start < 5.0
        error = info.value
        assert isinstance(error, MemoryError) and isinstance(error, vecenv.VecEnvError)
        assert error.needed > 2 * 10**12 > error.available
        message = str(error)
        assert "10000000 steps of 8 envs" in message
        assert format_bytes(error.needed) in message and format_bytes(error.available) in message
        assert str(error.needed) in message and str(error.available) in message
        assert _shmem() - before < 2**30  # nothing was written (other processes share the machine)
        rollout = envs.rollout(3)
        assert rollout.observations.shape == (3, 8, 84, 84, 4)
    finally:
        envs.close(terminate=True)


def _start_under_a_low_descriptor_limit(num_workers: int | str) -> DescriptorLimitError:
    """The error of starting 8 workers with room for about three (each keeps up to 4 here)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = open_fds()
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(before) + 25, hard))
    try:
        with pytest.raises(DescriptorLimitError) as info:
            vecenv.SubprocVectorEnv(fault_fns(8, None, "step", 0), num_workers, context="fork")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert isinstance(info.value, OSError) and info.value.errno == errno.EMFILE
    assert open_fds().keys() == before.keys()  # nothing of the workers started is left open
    return info.value


@pytest.mark.timeout(60)
def test_too_few_descriptors_for_an_explicit_worker_count_says_to_use_fewer() -> None:
    message = str(_start_under_a_low_descriptor_limit(8))
    assert re.search(r"cannot start worker \d of 8: .*RLIMIT_NOFILE", message), message
    assert "ulimit -n" in message and "use fewer workers" in message, message
    assert "auto" not in message, message


@pytest.mark.timeout(60)
def test_too_few_descriptors_for_the_workers_auto_chose_says_how_they_were_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``num_workers="auto"`` the user chose no count: the message names the count auto
    asked for and why, and the ways out (a higher limit, an explicit smaller count)."""
    reason = "8 envs x 900.0 µs per step = 7200 µs of work per vector step: 8 groups on 8 cores"
    choice = WorkerChoice(8, 9e-4, reason, cpu_share=1.0)
    monkeypatch.setattr(subproc, "choose_num_workers", lambda fn, n: choice)
    message = str(_start_under_a_low_descriptor_limit("auto"))
    assert re.search(r"cannot start worker \d of 8: .*RLIMIT_NOFILE", message), message
    assert f"num_workers='auto' asked for 8 workers ({reason})" in message, message
    assert "ulimit -n" in message and "resource.setrlimit" in message, message
    assert "pass a smaller num_workers explicitly" in message, message
    assert "use fewer workers" not in message, message


@pytest.mark.timeout(60)
@pytest.mark.parametrize("free", [0, 1, 2, 3])
def test_a_rollout_block_without_a_free_descriptor_is_a_descriptor_limit_error(free: int) -> None:
    """A rollout block is a memfd, which Python before 3.13 maps through a duplicate descriptor
    (and a look at ``/proc/self/fd``): with every descriptor ``RLIMIT_NOFILE`` allows in use, or
    all but one or two, the rollout raised a bare ``OSError`` ("Too many open files") naming
    nothing. It is a ``DescriptorLimitError`` naming the block and the limit (or the rollout
    runs, where what is free suffices); nothing was sent, and once descriptors are free the
    rollout runs."""
    envs = vecenv.make("CartPole-v1", 4, num_workers=2, context="fork")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    try:
        envs.reset(seed=0)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(open_fds()) + 8, hard))
        with contextlib.suppress(OSError):
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        for _ in range(free):
            os.close(held.pop())
        if free == 0:
            with pytest.raises(DescriptorLimitError, match="rollout block of 5 steps of 4 envs") as info:
                envs.rollout(5)
        else:
            try:
                envs.rollout(5)
            except OSError as exc:  # a DescriptorLimitError, or a bare OSError naming nothing
                assert isinstance(exc, DescriptorLimitError), repr(exc)
                assert "rollout block of 5 steps of 4 envs" in str(exc), str(exc)
                info = pytest.ExceptionInfo.from_exception(exc)
            else:
                assert free > 1 or sys.version_info >= (3, 13), "one descriptor cannot hold the block and its map"
                info = None
        if info is not None:
            assert isinstance(info.value, OSError) and info.value.errno == errno.EMFILE
            assert "RLIMIT_NOFILE" in str(info.value)
        for fd in held:
            os.close(fd)
        held.clear()
        assert envs.rollout(5).rewards.shape == (5, 4)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        envs.close()


@pytest.mark.timeout(60)
def test_step_buffers_larger_than_the_limit_are_refused_and_nothing_is_left(monkeypatch) -> None:
    """The step buffers go through the same check: under a limit smaller than 8 envs' frames
    the constructor refuses them, naming them and both sizes, and leaves no process or block
    behind (the leak check)."""
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: [("free space in /dev/shm", 100_000)])
    expected = r"the step buffers of 8 envs needs 220.8 KiB \(226048 bytes\) .*: 97.7 KiB \(100000 bytes; free space"
    with pytest.raises(MemoryLimitError, match=expected):
        vecenv.SubprocVectorEnv([FrameEnv] * 8, 2, context="fork")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("named", [False, True], ids=["memfd", "named"])
def test_a_small_block_over_a_file_size_limit_is_a_memory_limit_error_naming_it(named: bool) -> None:
    """Blocks too small to be checked before they are made (the fast path's control block, a
    small weights slot) raised ``ftruncate``'s bare ``OSError`` (File too large) over a file
    size limit; it is the MemoryLimitError naming the block and the limit, and nothing is left."""
    import secrets

    from vecenv.wire.buffers import SHM_PREFIX, SharedBlock

    name = SHM_PREFIX + secrets.token_hex(8) if named else None
    expected = r"the new weights' shared slot needs 64.0 KiB.*RLIMIT_FSIZE"
    with file_size_limit(4096), pytest.raises(MemoryLimitError, match=expected) as info:
        SharedBlock.create(65536, name, "the new weights' shared slot")
    assert info.value.needed == 65536 and info.value.available == 4096
    assert isinstance(info.value.__context__, OSError) and info.value.__context__.errno == errno.EFBIG


class _HugeObservations(gym.Env):
    """1 TB observations, a space that allocates nothing until batched (never reset)."""

    observation_space = gym.spaces.MultiBinary([1_000_000, 1_000_000])
    action_space = gym.spaces.Discrete(2)


@pytest.mark.timeout(60)
def test_step_buffers_beyond_this_machine_are_refused_before_the_spaces_are_batched() -> None:
    """Gymnasium's batch_space allocates a batched Box's bounds, as large as the buffers: the
    buffers are checked first, so the constructor gives MemoryLimitError, not numpy's error
    (or the OOM killer) half-way."""
    with pytest.raises(MemoryLimitError, match=r"the step buffers of 4 envs needs 3.6 TiB") as info:
        vecenv.SubprocVectorEnv([_HugeObservations] * 4, 2, context="fork")
    assert info.value.needed >= 4 * 10**12 > info.value.available


@pytest.mark.timeout(60)
def test_spaces_whose_batching_would_not_fit_are_refused_without_shared_memory_too(monkeypatch) -> None:
    """Without a shared block (``shared_memory=False``, or Ray) batching the spaces is still
    checked: under a limit smaller than 8 envs' frames, bounds included, one clear error."""
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: [("available memory", 400_000)])
    with pytest.raises(MemoryLimitError, match=r"batching the spaces of 8 envs needs 1.7 MiB"):
        vecenv.SubprocVectorEnv([FrameEnv] * 8, 2, context="fork", shared_memory=False)


@pytest.mark.timeout(60)
def test_what_the_start_holds_at_once_is_checked_together(monkeypatch) -> None:
    """The step buffers (221 KiB for 8 frames), batching the spaces (1.7 MiB: bounds and the
    temporaries Gymnasium's Box makes while checking them) and the copy of the observations a
    reset returns are alive at once: under a limit that each fits alone, but not their sum,
    the constructor refuses them together, before making any, rather than ending in numpy's
    MemoryError (or the OOM killer) half-way."""
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: [("available memory", 2_000_000)])
    together = r"the step buffers, batching the spaces and a copy of the observations of 8 envs together needs 2.2 MiB"
    with pytest.raises(MemoryLimitError, match=together) as info:
        vecenv.SubprocVectorEnv([FrameEnv] * 8, 2, context="fork")
    assert info.value.needed > info.value.available == 2_000_000


def test_check_block_names_the_tightest_limit(monkeypatch) -> None:
    """The tightest of the limits decides; a size within it passes; no limit known passes."""
    limits = [("available memory", 10 * 2**30), ("free space in /dev/shm", 2**30)]
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: limits)
    memory.check_block(2**30, "a block", shared=True)
    with pytest.raises(MemoryLimitError, match=r"a block needs 1.0 GiB \(1073741825 bytes\) of shared memory") as info:
        memory.check_block(2**30 + 1, "a block", shared=True)
    assert (info.value.available, info.value.limit) == (2**30, "free space in /dev/shm")
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: [])
    memory.check_block(2**60, "a block", shared=True)


def test_memory_limits_read_this_machine() -> None:
    """On Linux the available memory is always among the limits, and RLIMIT_FSIZE joins them
    for shared blocks when it is set."""
    import resource

    names = [name for name, _ in memory.memory_limits(shared=True, named=False)]
    assert any(name.startswith("available memory") for name in names)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    assert (soft != resource.RLIM_INFINITY) == any("RLIMIT_FSIZE" in name for name in names)


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_memory_cgroup_of_a_v1_container_is_read_at_the_mount_root(tmp_path: Path) -> None:
    """Docker under cgroup v1 (no cgroup namespace): ``/proc/self/cgroup`` names the host's
    path (``/docker/<id>``) while the container's own cgroup is the mount's root. The limit of
    ``--memory=2g`` was looked for under the host's path, not found, and left out: blocks were
    compared with the host's free memory, and one past the container's limit met the OOM killer."""
    _write_tree(
        tmp_path,
        {
            "memory/memory.limit_in_bytes": f"{2 * 2**30}\n",
            "memory/memory.usage_in_bytes": f"{2**29}\n",
            "self-cgroup": "5:memory:/docker/c1\n4:cpu,cpuacct:/docker/c1\n0::/\n",
        },
    )
    headroom = memory.cgroup_headroom(str(tmp_path), str(tmp_path / "self-cgroup"))
    assert headroom is not None and headroom[1] == 2 * 2**30 - 2**29
    assert str(tmp_path / "memory") in headroom[0]
    # under the path where it is there (a host's cgroup, or a namespaced container's)
    _write_tree(
        tmp_path,
        {"memory/docker/c1/memory.limit_in_bytes": f"{2**30}\n", "memory/docker/c1/memory.usage_in_bytes": "0\n"},
    )
    headroom = memory.cgroup_headroom(str(tmp_path), str(tmp_path / "self-cgroup"))
    assert headroom is not None and headroom[1] == 2**30


# -- weight pushes -------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_weight_push_that_does_not_fit_is_refused_and_the_copies_keep_theirs() -> None:
    """Wrong keys, shapes, dtypes or types in ``update_policy_weights`` are refused in the
    parent, naming what was expected and received; the copies keep the weights they had (the
    next rollouts, and those after a reset, act as before), and a good push still works."""
    torch = pytest.importorskip("torch")

    module = greedy_module()
    weight, bias = torch.zeros(4, 3), torch.tensor([0.0, 0, 0, 9])
    bad = [
        ({"linear.weight": weight}, r"missing 'linear.bias'"),
        ({"linear.weight": weight, "linear.bias": bias, "extra": bias}, r"unexpected 'extra'"),
        ({"weight": weight, "bias": bias}, r"missing 'linear.weight', 'linear.bias'; unexpected 'weight', 'bias'"),
        ({"linear.weight": weight, "linear.bias": torch.zeros(5)}, r"must have shape \(4,\) .*got shape \(5,\)"),
        ({"linear.weight": weight.double(), "linear.bias": bias}, r"dtype torch.float32, got .*dtype torch.float64"),
        (
            {"linear.weight": weight.numpy(), "linear.bias": bias},
            r"\['linear.weight'\]` .* must be a torch.Tensor",
        ),
        ([weight, bias], r"must be a state dict"),
    ]
    with vecenv.SubprocVectorEnv(diff_env_fns(4, obs_kind="box", act_kind="discrete"), 2, context="fork") as envs:
        envs.reset(seed=0)
        assert (envs.rollout(3, module).actions == 2).all()
        for weights, match in bad:
            with pytest.raises(WeightsMismatchError, match=match):
                envs.update_policy_weights(weights)
            assert (envs.rollout(3, module).actions == 2).all(), match
        envs.reset(seed=0)
        assert (envs.rollout(3, module).actions == 2).all()
        envs.update_policy_weights({"linear.weight": weight, "linear.bias": bias})
        assert (envs.rollout(3, module).actions == 3).all()
        envs.rollout(2, "random")
        with pytest.raises(TypeError, match="policy random has no weights"):
            envs.update_policy_weights({"linear.weight": weight})
        envs.rollout(2, lambda obs: np.zeros(len(obs), np.int64))
        with pytest.raises(TypeError, match="has no weights"):
            envs.update_policy_weights({"linear.weight": weight})
        assert (envs.rollout(2).actions >= 0).all()  # nothing was poisoned


@pytest.mark.timeout(120)
def test_weights_pushed_while_a_rollout_is_in_flight_reach_the_next_rollout() -> None:
    """``rollout_async``, then ``update_policy_weights`` while it runs (a learner overlapping
    the two): the rollout in flight acts with the old weights, the next one with the new."""
    torch = pytest.importorskip("torch")

    module = greedy_module()
    with vecenv.SubprocVectorEnv(diff_env_fns(4, obs_kind="box", act_kind="discrete"), 2, context="fork") as envs:
        envs.reset(seed=0)
        envs.rollout_async(3, module)
        envs.update_policy_weights({"linear.weight": torch.zeros(4, 3), "linear.bias": torch.tensor([0.0, 0, 0, 9])})
        assert (envs.rollout_wait().actions == 2).all()
        assert (envs.rollout(3, module).actions == 3).all()


# -- hostile arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((3, -1), ValueError, r"`num_envs` must be a non-negative int, got -1"),
        ((3, 1.5), TypeError, r"`num_envs` must be a non-negative int, got 1.5"),
        ((3, "4"), TypeError, r"`num_envs` must be a non-negative int, got '4'"),
        ((-1, 4), ValueError, r"`seed` must be a non-negative int, got -1"),
        ((True, 4), TypeError, r"`seed` must be a non-negative int, got True"),
        (("0", 4), TypeError, r"`seed` must be a non-negative int"),
    ],
)
def test_spawn_seeds_refuses_what_is_not_a_count_or_a_seed(args: tuple, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        vecenv.spawn_seeds(*args)
    assert vecenv.spawn_seeds(np.int64(3), np.int64(2)) == vecenv.spawn_seeds(3, 2)


class _NoWriter:
    def append(self, frame: np.ndarray) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.timeout(60)
def test_record_video_refuses_bad_arguments_at_once(tmp_path: Path) -> None:
    """``fps``, ``name_prefix`` and ``writer`` are checked when the wrapper is made, not at the
    first episode's first frame (a nan or negative fps, a prefix naming another folder)."""
    from vecenv.video import RecordVideo

    envs = vecenv.make("CartPole-v1", 2, 1, context="fork", render_mode="rgb_array")
    try:
        for kwargs, error, match in [
            ({"fps": 0}, ValueError, r"`fps` must be None or a positive number"),
            ({"fps": -1.0}, ValueError, r"`fps` must be None or a positive number"),
            ({"fps": float("nan")}, ValueError, r"`fps` must be None or a positive number"),
            ({"fps": "30"}, ValueError, r"`fps` must be None or a positive number"),
            ({"name_prefix": "a/b"}, ValueError, r"`name_prefix` must be a non-empty file name"),
            ({"name_prefix": 3}, ValueError, r"`name_prefix` must be a non-empty file name"),
            ({"name_prefix": ""}, ValueError, r"`name_prefix` must be a non-empty file name"),
            ({"writer": 3}, TypeError, r"`writer` must be a callable"),
        ]:
            options: dict[str, Any] = {"writer": lambda path, fps: _NoWriter(), **kwargs}
            with pytest.raises(error, match=match):
                RecordVideo(envs, tmp_path / "videos", **options)
        recorder = RecordVideo(envs, tmp_path / "videos", fps=np.int64(24), writer=lambda path, fps: _NoWriter())
        recorder.reset(seed=0)
        assert recorder.fps == 24.0 and recorder.recording == [0]
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_collect_names_a_bad_out(tmp_path: Path) -> None:
    envs = vecenv.make("CartPole-v1", 2, 1, context="fork")
    try:
        with pytest.raises(TypeError, match=r"out: expected None or a path .* got 3 of type int"):
            vecenv.collect(envs, steps=10, out=3, progress=False)
    finally:
        envs.close()


def test_load_names_what_is_not_a_dataset(tmp_path: Path) -> None:
    """A path that is not one, and a ``metadata.json`` that is not JSON or not a dataset's: the
    error names the argument or the file."""
    with pytest.raises(TypeError, match=r"path: expected a dataset directory .* got 3 of type int"):
        vecenv.load(3)
    for text in ["{", "[]", '{"counts": {}}']:
        (tmp_path / "metadata.json").write_text(text)
        with pytest.raises(ValueError, match=r"metadata.json: expected a dataset's metadata"):
            vecenv.load(tmp_path)


@pytest.mark.timeout(60)
def test_a_rollout_whose_copy_does_not_fit_is_refused_before_it_runs(monkeypatch) -> None:
    """With ``copy=True`` the rollout's returned arrays need as much memory again as its block:
    where the block would fit and the block and the copy would not, the rollout is refused at
    once, naming both; with ``copy=False`` (views of the block) it runs."""
    per_step = 8 * (84 * 84 * 4 + 8 + 8 + 1 + 1)  # observations, actions, rewards, flags of 8 envs
    steps = 2 * (rollouts.CHECKED_FROM // per_step)
    room = int(1.5 * steps * per_step)  # the block (and its infos) fit, the block and its copy do not
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: [("available memory", room)])
    for copy in (True, False):
        envs = vecenv.SubprocVectorEnv([FrameEnv] * 8, 2, context="fork", copy=copy)
        try:
            envs.reset(seed=0)
            if copy:
                with pytest.raises(
                    MemoryLimitError, match=r"its block, the arrays rollout_wait returns with copy=True, a dict"
                ):
                    envs.rollout_async(steps)
                assert envs.rollout(2).num_steps == 2
            else:
                assert envs.rollout(steps).num_steps == steps
        finally:
            envs.close()


@pytest.mark.timeout(60)
def test_a_rollout_whose_infos_do_not_fit_is_refused(monkeypatch) -> None:
    """Ten million steps of a small env: the block (136 bytes a step) would fit, the list of a
    dict of infos per step that rollout_wait builds would not; refused before it runs."""
    steps = 10_000_000
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: [("available memory", 2 * 10**9)])
    envs = vecenv.make("CartPole-v1", 4, 2, context="fork", copy=False)
    try:
        envs.reset(seed=0)
        with pytest.raises(MemoryLimitError, match=r"10000000 steps of 4 envs \(its block, a dict of infos per step\)"):
            envs.rollout_async(steps)
        assert envs.rollout(2).num_steps == 2
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_the_memory_check_skipped_for_a_small_rollout_again_still_refuses_a_large_one(monkeypatch) -> None:
    """A rollout found small is not measured again when it comes again; a longer one still is,
    and is refused."""
    room = rollouts.CHECKED_FROM  # whatever reaches the line is refused
    monkeypatch.setattr(memory, "memory_limits", lambda shared, named: [("available memory", room)])
    per_step = 8 * (84 * 84 * 4 + 8 + 8 + 1 + 1)
    steps = 2 * (rollouts.CHECKED_FROM // per_step)  # the block alone is over the line
    envs = vecenv.SubprocVectorEnv([FrameEnv] * 8, 2, context="fork", copy=False)
    try:
        envs.reset(seed=0)
        for _ in range(2):
            assert envs.rollout(2).num_steps == 2
        with pytest.raises(MemoryLimitError, match=rf"a rollout of {steps} steps of 8 envs"):
            envs.rollout_async(steps)
        assert envs.rollout(2).num_steps == 2
    finally:
        envs.close()


def test_a_worker_that_takes_none_of_a_command_is_a_timeout_and_is_left_as_it_was() -> None:
    """On the fake transport: worker 1's pipe takes nothing. The send raises the library's
    timeout naming worker 1 and saying nothing was sent to it; worker 0, sent to first, is
    BUSY (the caller abandons it), worker 1 is untouched; every send got the default bound,
    or the call's own timeout through ``CallRunner.within``."""
    from tests.engine.test_pool import _started
    from tests.helpers.fakes import FakeClock
    from vecenv.parent.calls import CallRunner
    from vecenv.parent.records import WorkerStatus
    from vecenv.parent.state import CallState, State
    from vecenv.wire.protocol import Command

    pool, transport = _started(FakeClock(), 2, 2)
    transport.full.add(1)
    with pytest.raises(
        VecEnvTimeoutError,
        match=r"worker 1 \(envs 2..3 on the fake node\) took none of a command for 60 s.*Nothing was sent to it",
    ):
        pool.send(pool.workers, Command.STEP, [None, None], "step_async")
    assert [w.status for w in pool.workers] == [WorkerStatus.BUSY, WorkerStatus.IDLE]
    assert transport.send_timeouts[-2:] == [sending.SEND_TIMEOUT] * 2
    pool.abandon(pool.workers)
    runner = CallRunner(pool, CallState("Fake"))
    with runner.within(2.5), runner.within(7.0), pytest.raises(VecEnvTimeoutError, match="for 2.5 s"):
        runner.send(pool.workers, Command.STEP, [None, None], "step_async", State.WAITING_STEP)
    assert transport.send_timeouts[-1] == 2.5 and runner.timeout is None


def test_an_sb3_policy_checks_a_push_against_its_policy_network() -> None:
    """The same check for a Stable-Baselines3 model: its policy network's state dict passes,
    one missing an entry is refused; the layout stays in the parent (not pickled to workers)."""
    sb3 = pytest.importorskip("stable_baselines3")
    import pickle

    import cloudpickle
    import gymnasium as gym

    from vecenv.policies import SB3Policy

    model = sb3.PPO("MlpPolicy", gym.make("CartPole-v1"), seed=0, device="cpu")
    policy = SB3Policy(model)
    state = model.policy.state_dict()
    assert set(policy.check_weights(state)) == set(state)
    first = next(iter(state))
    with pytest.raises(WeightsMismatchError, match=f"policy sb3:PPO: missing '{first}'"):
        policy.check_weights({k: v for k, v in state.items() if k != first})
    assert not hasattr(pickle.loads(cloudpickle.dumps(policy)), "_layout")


_RELEASE = threading.Event()


def _waits_for_release(observations: np.ndarray) -> np.ndarray:
    """A policy that hangs until the test releases it (or 30 s)."""
    _RELEASE.wait(30)
    return np.zeros(len(observations), np.int64)


@pytest.mark.timeout(60)
def test_a_policy_that_hangs_when_first_called_in_the_parent_is_a_timeout() -> None:
    """A new policy is called once in the parent to learn its outputs: one that hangs there
    makes ``rollout(..., timeout=1)`` raise the library's timeout within the bound (not wait
    forever), naming the policy; nothing was sent, and the vector env goes on."""
    _RELEASE.clear()
    envs = vecenv.make("CartPole-v1", 4, 2, context="fork")
    try:
        envs.reset(seed=0)
        start = time.monotonic()
        with pytest.raises(VecEnvTimeoutError, match=r"policy .*_waits_for_release .*did not return within 1 s"):
            envs.rollout(3, _waits_for_release, timeout=1.0)
        assert time.monotonic() - start < 10.0
        assert envs.rollout(2).num_steps == 2
    finally:
        _RELEASE.set()
        envs.close()


class _SlowToExit(threading.Thread):
    """A thread that lingers after its target returned (as one may while it shuts down)."""

    def run(self) -> None:
        super().run()
        time.sleep(0.3)


def test_a_bounded_call_that_returned_leaves_no_thread_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy's probe runs in a thread; once it returned, that thread must be gone before
    the rollout goes on, since a worker restarted next is forked from this process."""
    from vecenv.parent import bounded

    monkeypatch.setattr(bounded.threading, "Thread", _SlowToExit)
    assert bounded.bounded_call(lambda: 7, 5.0, "unused", "vecenv-test-probe") == 7
    assert not [t for t in threading.enumerate() if t.name == "vecenv-test-probe"]
