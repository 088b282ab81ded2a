"""Shared fixtures: leak checks after every test, and start-method parametrization.

* ``_no_leaks`` (autouse): after each test, no child process of the test process may be alive
  (``multiprocessing.active_children()``), no descriptor of a vecenv memfd block (Linux) may be
  left open, and no ``/dev/shm/vecenv_*`` block (the named fallback) created during the
  test may be left behind. Blocks are attributed to this test process by recording the names of
  the shared-memory blocks it creates, so a concurrent test run on the same machine cannot make
  the check flaky; blocks that appeared in ``/dev/shm`` during the test are reported too.
* The Ray tests run after all the others (see ``pytest_collection_modifyitems``).
* ``start_methods(*methods)``: a ``pytest.mark.parametrize`` over multiprocessing start methods
  with readable ids (``ctx=fork``); the ``start_method`` fixture runs a test once per method.
"""

from __future__ import annotations

import glob
import multiprocessing
import os
from multiprocessing import shared_memory

import pytest

from tests.helpers.faults import open_fds

SHM_GLOB = "/dev/shm/vecenv_*"

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the Ray tests last: a connected (or shut down) Ray leaves threads in this process, and
    the tests after it that fork on purpose (``ctx=fork``) would fork a threaded process."""
    items.sort(key=lambda item: item.path.name == "test_ray.py")


def _memfd_descriptors() -> set[int]:
    """This process's open descriptors of vecenv memfd blocks."""
    return {fd for fd, target in open_fds().items() if target.startswith("/memfd:vecenv")}


def _shm_blocks() -> set[str]:
    return {os.path.basename(p) for p in glob.glob(SHM_GLOB)}


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
