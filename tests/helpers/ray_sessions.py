"""Real Ray for the tests: one local Ray shared by the whole session, and a 2-node cluster.

Starting Ray costs seconds, so every Ray test shares one local instance (``ray_local``), started
on first use and shut down when the session ends. ``ray_cluster`` starts a
``ray.cluster_utils.Cluster`` of two nodes of one CPU each on this machine (its nodes listen on
the machine's own address: Ray 2.60's cluster helper cannot be bound to loopback); a
driver is connected to one Ray at a time, so using it disconnects the local Ray, and the next
``ray_local`` user starts a fresh one. Do not mix them in one process: a driver that connects to
a second Ray after shutting the first down has been seen waiting forever inside Ray's native GCS
client (the session's main Ray tests use ``ray_local`` only; the cluster cases run in a pytest
process of their own, ``tests/integrations/ray_cluster_cases.py``).

Nothing is left behind: every Ray started here writes its session files under one temporary
directory (also ``RAY_TMPDIR`` for the session, so that nothing lands in Ray's default
``/tmp/ray``, not even the cluster helper's address file) that is removed at the end, and after
each shutdown the fixtures check that none of the Ray processes they started is still running
(Ray's processes are not ``multiprocessing`` children, so conftest's leak check cannot see them).

Use: ``from tests.helpers.ray_sessions import _ray_sessions, ray_local, ray_cluster`` in a test
module (pytest makes one fixture per module that imports it; they share one ``RaySessions``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vecenv.bench import procfs

ray = pytest.importorskip("ray", reason="the Ray tests need Ray: pip install -e '.[test]'")
from ray.cluster_utils import Cluster  # noqa: E402

#: Ray's object store per node: the default (30% of RAM, in /dev/shm) is far more than tests need.
OBJECT_STORE_BYTES = 100 * 1024 * 1024
#: How the cluster's head notices a node that went away (the lost-node cases remove one): a
#: health check every second, dead after 3 missed ones of 2 s each. Ray's defaults (every 3 s,
#: dead after 5 misses of 10 s) take 15-30 s to declare it dead; the cases' outcome is the same.
CLUSTER_HEALTH_CHECKS = {
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 2000,
    "health_check_failure_threshold": 3,
}
#: The local Ray listens on loopback only.
LOOPBACK = "127.0.0.1"


ROOT = Path(__file__).resolve().parents[2]


def run_driver(script: str, *args: str, timeout: float = 100) -> None:
    """Run ``script`` (Python source) as a Ray driver of its own, in a fresh interpreter from the
    project root, as a user's script runs (no ``RAY_ADDRESS`` to join); it must print ``ok`` last
    within ``timeout`` seconds. This process never connects to the Ray that script starts or joins."""
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


def _ray_pids(temp_dir: str) -> set[int]:
    """Ray's processes under ``temp_dir``: those whose command line names it (gcs, raylet,
    monitors) and all their descendants (workers rename themselves ``ray::...``)."""
    parents = procfs.parent_map()
    found: set[int] = set()
    for pid in parents:
        if temp_dir in (procfs.cmdline(pid) or ""):
            found.update(procfs.tree(pid, parents))
    return found


def _wait_gone(pids: set[int], timeout: float = 15.0) -> set[int]:
    """Wait until none of ``pids`` is alive (zombies count as gone); return the survivors."""
    deadline = time.monotonic() + timeout
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if procfs.alive(p)}
        if alive:
            time.sleep(0.1)
    return alive


def _retry_start(start: Callable[[], Any], clean_up: Callable[[], None]) -> None:
    """``start()``, once more after a start-up timeout: Ray gives its raylet a fixed 30 s to
    register, which a heavily loaded CI machine can overrun (seen here at load 25 on 2 cores)."""
    try:
        start()
    except Exception as exc:
        if "timed out during startup" not in str(exc):
            raise
        clean_up()
        start()


class RaySessions:
    """Which Ray this test process is connected to, and what to tear down at the end."""

    def __init__(self) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="vecenv-ray-")
        self.current: str | None = None  # "local" or "cluster"
        self.cluster: Cluster | None = None
        self.seen_pids: set[int] = set()
        # Ray's default temp dir, for the whole session: the cluster helper writes the head's
        # address file there (where a later plain ray.init() would look for a cluster).
        self._previous_tmpdir = os.environ.get("RAY_TMPDIR")
        os.environ["RAY_TMPDIR"] = self.temp_dir
        os.makedirs(os.path.join(self.temp_dir, "ray"), exist_ok=True)  # Ray writes there, not creates

    def local(self) -> None:
        """Connect to the shared local Ray (2 CPUs), starting it if needed."""
        if self.current == "local" and ray.is_initialized():
            return
        self.disconnect()
        _retry_start(
            lambda: ray.init(
                address="local",  # a new instance, even when another Ray runs on this machine
                num_cpus=2,
                include_dashboard=False,
                object_store_memory=OBJECT_STORE_BYTES,
                log_to_driver=False,
                _node_ip_address=LOOPBACK,
                _temp_dir=self.temp_dir,
            ),
            self.disconnect,
        )
        self.current = "local"
        self.note_pids()

    def two_nodes(self) -> Cluster:
        """Connect to the 2-node cluster (1 CPU each) on this machine, starting it if needed."""
        if self.current == "cluster" and ray.is_initialized() and self.cluster is not None:
            return self.cluster
        self.disconnect()
        node_args: dict[str, Any] = {
            "num_cpus": 1,
            "object_store_memory": OBJECT_STORE_BYTES,
        }

        def start() -> None:
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args={
                    **node_args,
                    "include_dashboard": False,
                    "temp_dir": self.temp_dir,
                    "_system_config": CLUSTER_HEALTH_CHECKS,
                },
            )
            self.cluster.add_node(**node_args)
            self.cluster.wait_for_nodes()
            ray.init(address=self.cluster.address, log_to_driver=False)

        _retry_start(start, self.disconnect)
        self.current = "cluster"
        self.note_pids()
        return self.cluster

    def note_pids(self) -> None:
        """Remember the Ray processes running now, to check at the end that they are gone."""
        self.seen_pids |= _ray_pids(self.temp_dir)

    def disconnect(self) -> None:
        """Leave the current Ray: a local one ends with it; a cluster is shut down."""
        self.note_pids()
        if ray.is_initialized():
            ray.shutdown()
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.shutdown()
        self.current = None

    def close(self) -> set[int]:
        """Shut everything down and remove the session files; return Ray pids still running."""
        self.disconnect()
        survivors = _wait_gone(self.seen_pids | _ray_pids(self.temp_dir))
        for pid in survivors:  # reported by the caller; not left to run on
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        if self._previous_tmpdir is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = self._previous_tmpdir
        return survivors


#: The one RaySessions of this test process: each module that imports the fixtures gets its own
#: copy of them from pytest, and they all share this (the first to be torn down closes it).
_SHARED: list[RaySessions] = []


@pytest.fixture(scope="session")
def _ray_sessions() -> Iterator[RaySessions]:
    """The session's Ray bookkeeping; tears every Ray down at the end and checks for leftovers."""
    if not _SHARED:
        _SHARED.append(RaySessions())
    sessions = _SHARED[0]
    try:
        yield sessions
    finally:
        if _SHARED:
            _SHARED.clear()
            survivors = sessions.close()
            if survivors:
                pytest.fail(f"Ray processes left running after shutdown: pids {sorted(survivors)}", pytrace=False)


@pytest.fixture
def ray_local(_ray_sessions: RaySessions) -> Iterator[RaySessions]:
    """A connected local Ray with 2 CPUs, shared by every test of the session."""
    _ray_sessions.local()
    yield _ray_sessions
    _ray_sessions.note_pids()


@pytest.fixture
def ray_cluster(_ray_sessions: RaySessions) -> Iterator[Cluster]:
    """A connected 2-node Ray cluster (one CPU per node) on this machine.

    Started on first use and kept until a ``ray_local`` test or the session's end, so keep the
    tests that use it together.
    """
    cluster = _ray_sessions.two_nodes()
    yield cluster
    _ray_sessions.note_pids()
