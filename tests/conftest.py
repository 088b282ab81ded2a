"""Shared fixtures: leak checks after every test, and start-method parametrization.

* ``_no_leaks`` (autouse): after each test, no child process of the test process may be alive
  (``multiprocessing.active_children()``), no descriptor of a vecenv memfd block (Linux) may be
  left open, and no ``/dev/shm/vecenv_*`` block (the named fallback) created during the
  test may be left behind. Blocks are attributed to this test process by recording the names of
  the shared-memory blocks it creates, so a concurrent test run on the same machine cannot make
  the check flaky; blocks that appeared in ``/dev/shm`` during the test are reported too.
* ``_no_progress_monitor_left`` (autouse): tqdm's monitor thread, which a bar of tqdm's own class
  starts and tqdm never ends, is ended after the test (a threaded parent's vector envs start
  their workers with ``forkserver``: later tests would depend on which test ran first).
* ``_start_method_kept`` (autouse): after each test, the global multiprocessing start method is
  what it was before (``tests/helpers/start_method.py``: starting a ``spawn`` process records
  ``fork`` for the rest of the session, and the Ray tests' process-backend envs then fork the
  Ray driver).
* The Ray and RLlib tests run after all the others (see ``pytest_collection_modifyitems``); the
  RLlib tests (marker ``rllib``) are deselected where the Gymnasium is not the one ray[rllib] pins.
* Test processes (pytest-xdist, ``-n auto`` in README's test command): one per core, at most
  :data:`MAX_TEST_PROCESSES`. The tests that share one local Ray run together in one of them,
  after its other tests (``tests/helpers/xdist_scheduling.py``).
* A watchdog (``tests/helpers/watchdog.py``) ends the session, with every thread's stack, when a
  test overruns its timeout by a minute: pytest-timeout cannot interrupt a test stuck in C code.
* Ctrl+C is delivered: a pytest started with SIGINT ignored (a background job of a
  non-interactive shell, as ``cmd &`` in a script starts it) gets Python's default handler
  back, so that the tests that send SIGINT to themselves or to the scripts they start (which
  inherit the disposition, and rightly keep an ignored SIGINT ignored) see it as a terminal's
  Ctrl+C reaches a user's program.
* SB3's logs go to pytest's temp dir (``SB3_LOGDIR``), not one new folder per ``learn()``.
* ``start_methods(*methods)``: a ``pytest.mark.parametrize`` over multiprocessing start methods
  with readable ids (``ctx=fork``); the ``start_method`` fixture runs a test once per method.
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import signal
import sys
import threading
from multiprocessing import shared_memory

import pytest

from tests.helpers.faults import open_fds
from tests.helpers.start_method import kept_start_method
from tests.helpers.watchdog import Watchdog
from vecenv import machine

SHM_GLOB = "/dev/shm/vecenv_*"

#: ``-n auto``: at most this many test processes, however many cores the machine has (each test
#: starts workers of its own, and every test process imports torch and Ray).
MAX_TEST_PROCESSES = 8

#: The start methods this platform offers, in the order tests use them.
START_METHODS = tuple(m for m in ("fork", "forkserver", "spawn") if m in multiprocessing.get_all_start_methods())


def start_methods(*methods: str):
    """``@start_methods("fork", "spawn")``: parametrize ``start_method`` with ids ``ctx=...``.

    Methods the platform lacks are skipped, not silently dropped.
    """
    chosen = methods or START_METHODS
    params = [
        pytest.param(
            m,
            id=f"ctx={m}",
            marks=() if m in START_METHODS else pytest.mark.skip(reason=f"no {m} start method here"),
        )
        for m in chosen
    ]
    return pytest.mark.parametrize("start_method", params)


@pytest.fixture(params=[pytest.param(m, id=f"ctx={m}") for m in START_METHODS])
def start_method(request: pytest.FixtureRequest) -> str:
    """Runs the test once per start method (unless the test parametrizes ``start_method``)."""
    return request.param


def rllib_absent() -> str | None:
    """``None`` when the Gymnasium here is the one ``ray[rllib]`` pins (the RLlib tests run here),
    else why not. Read from the installed metadata: nothing is imported."""
    from importlib import metadata

    try:
        requires = metadata.requires("ray") or []
        gymnasium = metadata.version("gymnasium")
    except metadata.PackageNotFoundError:
        return "no Ray here"
    pins = [r.split(";")[0].replace(" ", "") for r in requires if r.startswith("gymnasium") and '"rllib"' in r]
    if pins and pins != [f"gymnasium=={gymnasium}"]:
        return f"ray[rllib] pins {pins[0]}, this venv has gymnasium {gymnasium}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:  # see the module docstring
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``-n N`` with pytest-xdist's default distribution: the same, but the tests that share one
    local Ray run together, in one test process (``tests/helpers/xdist_scheduling.py``)."""
    if config.getvalue("dist") != "load":
        return None
    from tests.helpers.xdist_scheduling import RayTogether

    return RayTogether(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: a test process per core this process may use (vecenv's own count: the
    affinity mask and the CPU quota), at most MAX_TEST_PROCESSES (``PYTEST_XDIST_AUTO_NUM_WORKERS``,
    pytest-xdist's own variable, still decides if set)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return max(1, min(machine.available_cpus(), MAX_TEST_PROCESSES))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the RLlib tests (marker ``rllib``) where the Gymnasium is not the one ray[rllib]
    pins: they run in a venv of ``.[test-rllib]`` (docs/rllib.md, "Tests"), and everywhere else
    RLlib either is not installed or would have downgraded Gymnasium. Deselected, not skipped: a
    missing dependency in that venv fails them.

    Then run the Ray and RLlib tests last: a connected (or shut down) Ray leaves threads in this
    process, and the tests after it that fork on purpose (``ctx=fork``) would fork a threaded
    process (the 2-node cluster's test, which runs its cases in an interpreter of its own, goes
    with them)."""
    why = rllib_absent() if any(item.get_closest_marker("rllib") for item in items) else None
    if why:
        deselected = [item for item in items if item.get_closest_marker("rllib")]
        items[:] = [item for item in items if not item.get_closest_marker("rllib")]
        config.hook.pytest_deselected(items=deselected)
        config.stash[_RLLIB_DESELECTED] = (len(deselected), why)
        if hasattr(config, "workeroutput"):  # a pytest-xdist test process: tell the controller
            config.workeroutput["rllib_deselected"] = (len(deselected), why)
    items.sort(key=lambda item: item.path.name in ("test_ray.py", "test_ray_cluster.py", "test_rllib.py"))


_RLLIB_DESELECTED = pytest.StashKey[tuple[int, str]]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist's controlling process, which collects nothing itself: what a test process
    deselected, for the summary."""
    deselected = getattr(node, "workeroutput", {}).get("rllib_deselected")
    if deselected is not None:
        node.config.stash[_RLLIB_DESELECTED] = tuple(deselected)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Say why RLlib tests were deselected, and where they run."""
    if _RLLIB_DESELECTED in config.stash:
        count, why = config.stash[_RLLIB_DESELECTED]
        terminalreporter.write_line(
            f"{count} RLlib tests deselected ({why}): they run in a venv of .[test-rllib], see docs/rllib.md, Tests"
        )


@pytest.fixture(scope="session", autouse=True)
def _sb3_logs_in_the_session_tmp(tmp_path_factory: pytest.TempPathFactory):
    """SB3's ``learn()`` makes a log folder in the system's temp dir at every call unless
    ``SB3_LOGDIR`` names one: point it (for this process and the scripts the tests start) into
    pytest's own temp dir, so a test run leaves no folders behind."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3-logs")))
        yield


_WATCHDOG = pytest.StashKey[Watchdog]()


def _timeout_of(item: pytest.Item) -> float:
    """The test's pytest-timeout limit: its ``timeout`` marker, else the ini's (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout", 0)
    else:
        value = item.config.getini("timeout") or 0
    return float(value or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Arm the watchdog for the whole of one test (setup, call, teardown)."""
    timeout = _timeout_of(item)
    if timeout <= 0:
        yield
        return
    if _WATCHDOG not in item.config.stash:
        capture = item.config.pluginmanager.getplugin("capturemanager")
        release = (lambda: capture.suspend_global_capture(in_=True)) if capture is not None else (lambda: None)
        item.config.stash[_WATCHDOG] = Watchdog(release)
    watchdog = item.config.stash[_WATCHDOG]
    watchdog.arm(item.nodeid, timeout)
    try:
        yield
    finally:
        watchdog.disarm()


def _memfd_descriptors() -> set[int]:
    """This process's open descriptors of vecenv memfd blocks."""
    return {fd for fd, target in open_fds().items() if target.startswith("/memfd:vecenv")}


def _shm_blocks() -> set[str]:
    return {os.path.basename(p) for p in glob.glob(SHM_GLOB)}


@pytest.fixture(autouse=True)
def _start_method_kept():
    """Put the global start method back after each test: a test that starts a ``spawn`` process
    (a Gymnasium ``AsyncVectorEnv``) would otherwise choose every later vector env's."""
    with kept_start_method():
        yield


@pytest.fixture(autouse=True)
def _no_progress_monitor_left():
    """End tqdm's monitor thread after a test that made a bar of tqdm's own class: tqdm never
    ends it, and with that thread running every later test's vector env of ``context=None``
    started its workers with ``forkserver`` (a threaded parent) instead of ``fork``."""
    yield
    std = sys.modules.get("tqdm.std")
    if std is None:
        return
    for thread in threading.enumerate():
        if isinstance(thread, std.TMonitor):
            thread.exit()  # a later bar of that class starts a new one


@pytest.fixture(autouse=True)
def _no_leaks():
    """Fail the test if it leaves a child process or one of its shared-memory blocks behind."""
    created: list[str] = []
    original_init = shared_memory.SharedMemory.__init__

    def recording_init(self, name=None, create=False, size=0, *args, **kwargs):
        original_init(self, name, create, size, *args, **kwargs)
        if create:
            created.append(self.name.lstrip("/"))

    patch = pytest.MonkeyPatch()
    patch.setattr(shared_memory.SharedMemory, "__init__", recording_init)
    before_children = set(multiprocessing.active_children())
    before_blocks = _shm_blocks()
    before_memfds = _memfd_descriptors()
    try:
        yield
    finally:
        patch.undo()
    children = [p for p in multiprocessing.active_children() if p not in before_children]
    now = _shm_blocks()
    ours = sorted(b for b in created if b.startswith("vecenv_") and b in now)
    appeared = sorted(now - before_blocks)
    problems = []
    memfds = sorted(_memfd_descriptors() - before_memfds)
    if memfds:
        for fd in memfds:
            os.close(fd)
        problems.append(f"memfd block descriptors left open: {memfds}")
    if children:
        names = ", ".join(f"{p.name} (pid {p.pid})" for p in children)
        for p in children:  # do not leak into the next test's check
            p.kill()
            p.join(5)
        problems.append(f"child processes left running: {names}")
    if ours:
        for b in ours:
            try:
                os.unlink(os.path.join("/dev/shm", b))
            except FileNotFoundError:
                pass
        problems.append(f"shared-memory blocks left in /dev/shm: {ours}")
    if problems:
        extra = f" (blocks that appeared in /dev/shm during the test: {appeared})" if appeared else ""
        pytest.fail("; ".join(problems) + extra, pytrace=False)
