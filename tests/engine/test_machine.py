"""``vecenv.machine``: what the machine and this process allow.

The cores: ``available_cpus`` follows the affinity mask (which container CPU sets limit), and the
default ``num_workers`` follows it.

The start method for ``context=None``: a parent running other Python threads is not forked.
A fork copies the locks that other threads hold at that instant, and a worker that needs one waits
forever (CI hung so once, in the handshake, after the Ray tests had left their threads in the test
process). With the start method unset, vecenv uses the platform default in a single-threaded
parent and ``forkserver`` in a threaded one; a method the user chose is always used as given.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import io
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv
from tqdm import tqdm
from tqdm.std import TqdmDefaultWriteLock

import vecenv
from tests.engine.test_differential import assert_same
from tests.helpers.envs import BUILD_LOCK, locked_cartpole
from tests.helpers.faults import healthy_fns
from tests.helpers.start_method import kept_start_method
from vecenv import SubprocVectorEnv, checks, machine
from vecenv.machine import default_start_method
from vecenv.parent.vector_env import GroupVectorEnv
from vecenv.transports import process as process_transport

#: The start-method rule is about platforms that fork by default.
forks_by_default = pytest.mark.skipif(
    multiprocessing.get_all_start_methods()[0] != "fork", reason="the rule is about platforms that fork by default"
)


# -- the cores ----------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_available_cpus_follows_the_affinity_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no sched_getaffinity here")
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3})
    monkeypatch.setattr(machine, "cpu_quota", lambda: None)  # (a quota here would count too)
    assert machine.available_cpus() == 2
    assert checks.check_num_workers(None, 10) == 2
    assert checks.check_num_workers(None, 1) == 1


@pytest.mark.timeout(30)
def test_pin_cpus_deals_the_cores_by_one_rule_to_the_parents_group_and_to_the_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``pin_cpus`` with ``inline_group``: the group this process hosts is worker 0 and the
    processes are workers 1, 2, ...; worker ``w`` gets the ``w``-th core of the affinity mask,
    round robin, by one rule on both sides (:func:`vecenv.machine.pinned_core`). A mask that is
    not ``0..n-1`` (``{1, 3}``, a container's cpuset) shows a side that counts otherwise."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no sched_getaffinity here")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 1})
    built: list[Any] = []  # the transport, caught before any process starts (none could pin to 3 here)
    monkeypatch.setattr(GroupVectorEnv, "__init__", lambda self, transport, *args: built.append(transport))
    SubprocVectorEnv(healthy_fns(6), 3, inline_group=True, pin_cpus=True, context="fork")
    (transport,) = built
    assert [machine.pinned_core(w) for w in range(4)] == [1, 3, 1, 3]
    assert transport.inline.core.options.cpu == machine.pinned_core(0) == 1
    processes = transport.processes_transport  # its workers 0 and 1 are the vector env's 1 and 2
    assert [processes.core(i) for i in range(2)] == [machine.pinned_core(w) for w in (1, 2)] == [3, 1]


@pytest.mark.timeout(30)
def test_available_cpus_without_affinity_uses_cpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 5)
    assert machine.available_cpus() == 5
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert machine.available_cpus() == 1


@pytest.mark.timeout(30)
def test_available_cpus_keeps_to_the_cpu_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    """``docker --cpus=1.5`` and Kubernetes' CPU limits set a CFS quota and leave every core of
    the host in the affinity mask: the default worker count was the host's cores (64 busy
    processes taking turns on 1.5 cores' time, spinning while they fit the "cores")."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no sched_getaffinity here")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(machine, "cpu_quota", lambda: 1.5)
    assert machine.available_cpus() == 2
    assert checks.check_num_workers(None, 10) == 2
    monkeypatch.setattr(machine, "cpu_quota", lambda: 0.2)
    assert machine.available_cpus() == 1
    monkeypatch.setattr(machine, "cpu_quota", lambda: None)
    assert machine.available_cpus() == 64


def _cgroup_tree(root: Path, files: dict[str, str], membership: str) -> str:
    """Write ``files`` (path under ``root``: content) and the membership file; its path."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "self-cgroup").write_text(membership)
    return str(root / "self-cgroup")


@pytest.mark.timeout(30)
def test_cpu_quota_reads_cgroup_v2_and_its_ancestors(tmp_path: Path) -> None:
    files = {"cpu.max": "max 100000\n", "pod/cpu.max": "150000 100000\n", "pod/box/cpu.max": "400000 100000\n"}
    membership = _cgroup_tree(tmp_path, files, "0::/pod/box\n")
    assert machine.cpu_quota(str(tmp_path), membership) == 1.5  # the parent's is the tighter
    membership = _cgroup_tree(tmp_path, {"pod/cpu.max": "max 100000\n"}, "0::/pod/box\n")
    assert machine.cpu_quota(str(tmp_path), membership) == 4.0
    membership = _cgroup_tree(tmp_path, {"pod/box/cpu.max": "max 100000\n"}, "0::/pod/box\n")
    assert machine.cpu_quota(str(tmp_path), membership) is None


@pytest.mark.timeout(30)
def test_cpu_quota_reads_cgroup_v1(tmp_path: Path) -> None:
    files = {
        "cpu,cpuacct/docker/c1/cpu.cfs_quota_us": "250000\n",
        "cpu,cpuacct/docker/c1/cpu.cfs_period_us": "100000\n",
    }
    membership = _cgroup_tree(tmp_path, files, "4:memory:/docker/c1\n3:cpu,cpuacct:/docker/c1\n")
    assert machine.cpu_quota(str(tmp_path), membership) == 2.5
    # a container whose own cgroup is the mount's root, with no quota (-1)
    files = {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}
    membership = _cgroup_tree(tmp_path / "other", files, "3:cpu:/docker/c2\n")
    assert machine.cpu_quota(str(tmp_path / "other"), membership) is None
    assert machine.cpu_quota(str(tmp_path), str(tmp_path / "missing")) is None


@pytest.mark.timeout(60)
def test_default_num_workers_follows_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no sched_getaffinity here")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    envs = SubprocVectorEnv(healthy_fns(4))
    try:
        assert envs.num_workers == 1
    finally:
        envs.close()


# -- the start method ---------------------------------------------------------------------------


@pytest.fixture
def unset_start_method() -> Iterator[None]:
    """The global start method unset for the test (as in a fresh program), restored after it."""
    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method(None, force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)


@pytest.fixture
def other_thread() -> Iterator[threading.Event]:
    """A second Python thread, alive for the test; set the event to let it end."""
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name="test-other-thread", daemon=True)
    thread.start()
    try:
        yield done
    finally:
        done.set()
        thread.join(10)


@contextlib.contextmanager
def _lock_held_by_a_thread() -> Iterator[None]:
    """:data:`BUILD_LOCK` held by another thread of this process for the duration."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with BUILD_LOCK:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold, name="test-lock-holder", daemon=True)
    holder.start()
    assert held.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join(10)


def _only_thread() -> bool:
    return threading.active_count() == 1


@forks_by_default
def test_single_threaded_parent_keeps_the_platform_default(unset_start_method: None) -> None:
    if not _only_thread():  # an earlier test's library thread (tqdm's monitor) may still run
        assert default_start_method() == "forkserver"
        return
    assert default_start_method() == "fork"


@forks_by_default
def test_threaded_parent_gets_forkserver(unset_start_method: None, other_thread: threading.Event) -> None:
    assert default_start_method() == "forkserver"


@pytest.mark.timeout(60)
def test_start_method_is_none_when_no_worker_process_starts() -> None:
    """``num_workers=0`` (or one group hosted in this process) starts no process: no start
    method was used, so none is reported; with a worker process, the one it was started with."""
    with vecenv.make("CartPole-v1", 2, 0) as envs:
        assert envs.start_method is None and envs.worker_pids == [None]
    with vecenv.SubprocVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 2, 1, inline_group=True) as envs:
        assert envs.start_method is None
    with vecenv.make("CartPole-v1", 2, 1) as envs:
        assert envs.start_method in multiprocessing.get_all_start_methods()


@forks_by_default
def test_user_choice_wins(unset_start_method: None, other_thread: threading.Event) -> None:
    multiprocessing.set_start_method("fork", force=True)
    assert default_start_method() == "fork"
    with vecenv.make("CartPole-v1", 2, 1) as envs:
        assert envs.start_method == "fork"


@forks_by_default
@pytest.mark.timeout(60)
def test_a_spawn_start_records_fork_which_the_suite_puts_back_after_each_test(
    unset_start_method: None, other_thread: threading.Event
) -> None:
    """Starting any ``spawn`` process (a Gymnasium ``AsyncVectorEnv(context="spawn")``) makes
    CPython record ``fork`` as if the program had chosen it, and vecenv then forks a threaded
    parent: after one video test, the Ray tests' process-backend envs forked the Ray driver, whose
    next ``ray.cluster_resources()`` stalled. The suite puts the start method back after every
    test (``kept_start_method``, in conftest)."""
    with kept_start_method():
        process = multiprocessing.get_context("spawn").Process(target=os.getpid, name="test-spawned")
        process.start()
        process.join(30)
        assert process.exitcode == 0
        process.close()
        assert multiprocessing.get_start_method(allow_none=True) == "fork"
        assert default_start_method() == "fork"  # taken as the user's choice
    assert multiprocessing.get_start_method(allow_none=True) is None
    assert default_start_method() == "forkserver"


@forks_by_default
def test_script_from_stdin_keeps_fork(
    unset_start_method: None, other_thread: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    # forkserver and spawn load __main__ again by path: a script read from stdin has none.
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "<stdin>", raising=False)
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None, raising=False)
    assert default_start_method() == "fork"


@pytest.mark.skipif(sys.platform != "linux", reason="Linux's start methods")
def test_script_from_stdin_is_forked_where_the_default_would_import_it(
    unset_start_method: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.14 makes forkserver the default on Linux: a script read from stdin has no file
    that forkserver's workers could import, so vecenv forks them (unless the user chose)."""
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "<stdin>", raising=False)
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None, raising=False)
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["forkserver", "fork", "spawn"])
    assert default_start_method() == "fork"
    monkeypatch.setattr(sys.modules["__main__"], "__file__", __file__)
    assert default_start_method() == "forkserver"


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_script_from_stdin_with_a_method_that_imports_it_is_refused_before_anything_starts(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user chose a method that imports the script again, which has no file: one clear
    error naming the method and both ways out, instead of workers dying at start-up."""
    monkeypatch.setattr(sys.modules["__main__"], "__file__", "<stdin>", raising=False)
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None, raising=False)
    with pytest.raises(
        vecenv.errors.UnguardedMainError,
        match=f"cannot start its workers with '{method}': this script was read from stdin",
    ) as raised:
        SubprocVectorEnv(healthy_fns(2), num_workers=2, context=method)
    assert "context='fork'" in str(raised.value)


def test_a_zipapps_main_is_reloadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``python app.pyz``: ``__main__.__file__`` is ``app.pyz/__main__.py``, no file on disk, but
    ``__main__`` has a spec, which spawn and forkserver load it by; stdin's has none."""
    main = sys.modules["__main__"]
    monkeypatch.setattr(main, "__file__", "/nowhere/app.pyz/__main__.py", raising=False)
    monkeypatch.setattr(main, "__spec__", importlib.machinery.ModuleSpec("__main__", None), raising=False)
    assert machine.guard_main("spawn", True, "SubprocVectorEnv", "context") == "spawn"
    monkeypatch.setattr(main, "__spec__", None, raising=False)
    with pytest.raises(vecenv.errors.UnguardedMainError, match="file /nowhere/app.pyz/__main__.py no longer exists"):
        machine.guard_main("spawn", True, "SubprocVectorEnv", "context")


@pytest.mark.parametrize(
    ("spec_name", "file", "runs_again"),
    [
        ("pkg.__main__", "/src/pkg/__main__.py", False),  # python -m pkg
        ("__main__", "/src/pkg/__main__.py", False),  # python pkg/ (or app.pyz)
        ("pkg.train", "/src/pkg/train.py", True),  # python -m pkg.train
        (None, "/src/train.py", True),  # python train.py
        (None, "/usr/bin/ipython", False),  # IPython's launcher
        (None, None, False),  # python -c, a notebook
    ],
)
def test_the_main_module_runs_again_in_workers_by_cpythons_rule(
    monkeypatch: pytest.MonkeyPatch, spec_name: str | None, file: str | None, runs_again: bool
) -> None:
    """spawn and forkserver never run a package's ``__main__`` again: its top level needs no
    guard there, and no method is changed or refused for it."""
    main = sys.modules["__main__"]
    spec = None if spec_name is None else importlib.machinery.ModuleSpec(spec_name, None)
    monkeypatch.setattr(main, "__spec__", spec, raising=False)
    if file is None:
        monkeypatch.delattr(main, "__file__", raising=False)
    else:
        monkeypatch.setattr(main, "__file__", file, raising=False)
    assert machine._main_runs_again() is runs_again
    if not runs_again:
        assert machine.guard_main("spawn", True, "SubprocVectorEnv", "context") == "spawn"


def _build_in(fns: list, num_workers: int) -> str:
    """In a child process: build a vector env, step it once, say what happened."""
    try:
        with SubprocVectorEnv(fns, num_workers=num_workers, context="fork") as envs:
            envs.reset(seed=0)
        return "ok"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.timeout(60)
def test_a_daemonic_process_gets_a_clear_error_unless_every_env_stays_in_it() -> None:
    """Python lets no daemonic process (a ``multiprocessing.Pool`` worker) start children: the
    constructor says so and how out, before anything starts; ``num_workers=0`` works there."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        with_workers = pool.apply(_build_in, (healthy_fns(2), 2))
        in_process = pool.apply(_build_in, (healthy_fns(2), 0))
    assert with_workers.startswith("InvalidStateError: SubprocVectorEnv cannot start worker processes"), with_workers
    assert "daemonic" in with_workers and "num_workers=0" in with_workers, with_workers
    assert in_process == "ok"


@forks_by_default
@pytest.mark.timeout(120)
def test_worker_never_inherits_a_held_lock(unset_start_method: None, other_thread: threading.Event) -> None:
    """A thread of the parent holds a lock that env construction takes: the workers still start,
    step as Sync does, and the start method stays unset for the program's next vector env."""
    sync = SyncVectorEnv([locked_cartpole] * 4)
    want = [sync.reset(seed=5)]
    actions = [np.array([0, 1, 1, 0]), np.array([1, 1, 0, 0])]
    want += [sync.step(a) for a in actions]
    sync.close()
    with _lock_held_by_a_thread():
        envs = vecenv.SubprocVectorEnv([locked_cartpole] * 4, num_workers=2, start_timeout=60)
        with envs:
            assert envs.start_method == "forkserver"
            got = [envs.reset(seed=5)] + [envs.step(a) for a in actions]
    for g, w in zip(got, want):
        assert_same(g, w, "forkserver workers")
    assert multiprocessing.get_start_method(allow_none=True) is None


@forks_by_default
def test_make_with_gym_id_in_threaded_parent(unset_start_method: None, other_thread: threading.Event) -> None:
    with vecenv.make("CartPole-v1", 4, 2) as envs:
        assert envs.start_method == "forkserver"
        obs, _ = envs.reset(seed=1)
    sync_obs, _ = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 4).reset(seed=1)
    np.testing.assert_array_equal(obs, sync_obs)


@forks_by_default
@pytest.mark.timeout(60)
def test_forking_anyway_inherits_the_held_lock(other_thread: threading.Event) -> None:
    """What the rule avoids: with ``context="fork"`` the workers wait for the lock forever, and
    only ``start_timeout`` ends the wait (with an error that names the call)."""
    with _lock_held_by_a_thread(), pytest.raises(vecenv.VecEnvTimeoutError, match="__init__"):
        vecenv.SubprocVectorEnv([locked_cartpole] * 2, num_workers=2, context="fork", start_timeout=2)


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@forks_by_default
@pytest.mark.timeout(120)
@pytest.mark.parametrize("chosen", [False, True], ids=["vecenv-chose-fork", "user-chose-fork"])
def test_a_replacement_worker_of_a_parent_that_started_threads_is_not_forked(
    unset_start_method: None, monkeypatch: pytest.MonkeyPatch, chosen: bool
) -> None:
    """The workers were forked (a single-threaded parent, vecenv's choice); the parent then
    started threads (a TensorBoard writer): a restarted worker starts as a threaded parent's
    would, from the fork server, not forked from this process. A method the user chose stays."""
    monkeypatch.setattr(checks, "default_start_method", lambda: "fork")  # a single-threaded parent's
    envs = SubprocVectorEnv(healthy_fns(4), 2, context="fork" if chosen else None, on_worker_death="restart")
    with envs:
        assert envs.start_method == "fork"
        envs.reset(seed=0)
        monkeypatch.setattr(process_transport, "own_start_method", lambda: "forkserver")  # threads now
        victim = envs.worker_pids[1]
        os.kill(victim, signal.SIGKILL)
        _, _, _, truncations, _ = envs.step(np.zeros((4, 2), np.float32))
        assert envs.restart_count == 1 and truncations[2:].all()
        replacement = envs.worker_pids[1]
        assert replacement != victim
        assert (_parent_of(replacement) == os.getpid()) is chosen
        envs.step(np.zeros((4, 2), np.float32))  # and it steps


@forks_by_default
@pytest.mark.timeout(120)
def test_a_replacement_worker_is_not_forked_after_a_progress_bar_recorded_fork(
    unset_start_method: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tqdm bar starts a monitor thread and, making its ``multiprocessing.RLock()``, has
    Python record ``fork`` as if the user had set it. The vector env's method was vecenv's
    choice (``context=None`` in a single-threaded parent): its replacement worker must start as
    a threaded parent's would, from the fork server, not be forked from this threaded process
    because of what the bar recorded (it was, with Python 3.12's DeprecationWarning)."""
    # Made as a single-threaded parent's would be, even where an earlier test's library thread
    # still runs (which would have the workers start from the fork server already).
    monkeypatch.setattr(checks, "default_start_method", lambda: "fork")
    # tqdm makes its multiprocessing lock once per process: where an earlier test's bar made it,
    # this bar would record nothing. Have it make the lock afresh, as a program's first bar does.
    monkeypatch.delattr(TqdmDefaultWriteLock, "mp_lock", raising=False)
    monkeypatch.delattr(tqdm, "_lock", raising=False)
    with kept_start_method(), SubprocVectorEnv(healthy_fns(4), 2, on_worker_death="restart") as envs:
        assert envs.start_method == "fork"
        envs.reset(seed=0)
        bar = tqdm(total=10, file=io.StringIO(), mininterval=0.01)
        try:
            assert multiprocessing.get_start_method(allow_none=True) == "fork"  # recorded by the bar
            assert not _only_thread()  # its monitor
            victim = envs.worker_pids[1]
            os.kill(victim, signal.SIGKILL)
            _, _, _, truncations, _ = envs.step(np.zeros((4, 2), np.float32))
            assert envs.restart_count == 1 and truncations[2:].all()
            replacement = envs.worker_pids[1]
            assert replacement is not None and replacement != victim
            assert _parent_of(replacement) != os.getpid()
            envs.step(np.zeros((4, 2), np.float32))  # and it steps
        finally:
            bar.close()


@pytest.mark.timeout(60)
def test_loading_constructors_in_one_thread_does_not_refuse_a_vector_env_built_in_another() -> None:
    """A worker refuses a vector env built while it loads its constructors (an import's
    top-level code); a parent loading its own group (``inline_group``) in one thread must not
    make another thread's vector env, built at the same moment, look like one."""
    loading, release = threading.Event(), threading.Event()

    def load() -> None:
        with machine.loading_constructors():
            loading.set()
            release.wait(30)

    thread = threading.Thread(target=load, name="test-loading", daemon=True)
    thread.start()
    try:
        assert loading.wait(10)
        with SubprocVectorEnv(healthy_fns(2), 2, context="fork") as envs:
            assert len(envs.reset(seed=0)[0]) == 2
        with pytest.raises(vecenv.errors.UnguardedMainError, match="loading its env constructors"):
            with machine.loading_constructors():
                SubprocVectorEnv(healthy_fns(2), 2, context="fork")
    finally:
        release.set()
        thread.join(10)


class _ReadsEnviron(gym.Wrapper):
    """CartPole that reports an environment variable as its process sees it."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def variable(self, name: str) -> str | None:
        return os.environ.get(name)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["forkserver", "spawn", "fork"])
def test_workers_see_the_environment_of_the_moment_they_start(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork server's children inherit the environment the server started with: a variable
    set since (``MUJOCO_GL`` before a second vector env) must reach the workers all the same,
    as it does with fork and spawn, replacement workers included."""
    name = "VECENV_TEST_VARIABLE"
    for value in ("first", "second"):
        monkeypatch.setenv(name, value)
        with SubprocVectorEnv([_ReadsEnviron] * 2, 2, context=method, on_worker_death="restart") as envs:
            assert envs.call("variable", name) == (value, value)
            envs.reset(seed=0)
            monkeypatch.setenv(name, value + "-later")
            os.kill(envs.worker_pids[1], signal.SIGKILL)
            assert envs.call("variable", name) == (value, value + "-later")  # the replacement's
    monkeypatch.delenv(name)
    with SubprocVectorEnv([_ReadsEnviron] * 2, 2, context=method) as envs:
        assert envs.call("variable", name) == (None, None)  # unset since: gone there too


def _own_forkserver_vector_env() -> None:
    """In a forked child: build, step and close a vector env with forkserver workers."""
    with SubprocVectorEnv(healthy_fns(2), 1, context="forkserver", start_timeout=30) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros((2, 2), np.float32))
    os._exit(0)


@pytest.mark.timeout(120)
def test_a_forked_child_of_a_forkserver_parent_starts_its_own_fork_server() -> None:
    """Python's record of the parent's fork server is inherited by a forked child, where it
    names a process that is not the child's own: its workers would not start
    (``ChildProcessError``). The child starts a server of its own instead."""
    with SubprocVectorEnv(healthy_fns(2), 1, context="forkserver") as envs:
        envs.reset(seed=0)
        child = multiprocessing.get_context("fork").Process(target=_own_forkserver_vector_env)
        child.start()
        child.join(90)
        assert child.exitcode == 0
        envs.step(np.zeros((2, 2), np.float32))  # the parent's own goes on


@pytest.mark.parametrize("chosen", [False, True], ids=["vecenv-chose", "user-chose"])
def test_a_removed_current_directory_forks_or_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, chosen: bool) -> None:
    """spawn and forkserver start each worker in the current directory: one removed after the
    process changed into it would fail in multiprocessing with a bare FileNotFoundError."""

    def gone() -> str:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(machine.os, "getcwd", gone)
    if chosen:
        with pytest.raises(vecenv.errors.InvalidStateError, match="current directory no longer exists") as raised:
            machine.guard_main("spawn", True, "SubprocVectorEnv", "context")
        assert "context='fork'" in str(raised.value)
    else:
        assert machine.guard_main("forkserver", False, "SubprocVectorEnv", "context") == "fork"
    assert machine.guard_main("fork", chosen, "SubprocVectorEnv", "context") == "fork"
