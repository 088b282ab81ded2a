"""The watchdog ends a session whose test is stuck where pytest-timeout cannot reach it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vecenv.bench import procfs

ROOT = Path(__file__).resolve().parents[1]

STUCK = textwrap.dedent(
    """
    import signal
    import subprocess
    import time

    import pytest


    @pytest.mark.timeout(1)
    def test_stuck(tmp_path_factory):
        child = subprocess.Popen(["sleep", "120"])
        with open({pid_file!r}, "w") as f:
            f.write(str(child.pid))
        # SIGALRM blocked: pytest-timeout's signal never arrives, as in a test stuck in C code.
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})
        time.sleep(120)


    def test_after():
        pass
    """
)


def run_session(folder: Path, grace_s: str) -> subprocess.CompletedProcess[str]:
    """pytest on ``folder`` (its own empty ini) with this project's conftest as a plugin and
    the watchdog's grace set to ``grace_s`` seconds."""
    (folder / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "VECENV_TEST_WATCHDOG_GRACE_S": grace_s, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", str(folder)]
        # Temp folders of its own: one in pytest's shared temp root would clear folders of this
        # session's that it takes for old ones, while their tests use them.
        + ["--basetemp", str(folder / "basetemp")],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
    )


@pytest.mark.timeout(60)
def test_a_test_stuck_past_its_timeout_ends_the_session_and_its_processes(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    (tmp_path / "test_stuck.py").write_text(STUCK.format(pid_file=str(pid_file)))
    start = time.monotonic()
    done = run_session(tmp_path, "2")
    elapsed = time.monotonic() - start
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    assert "[watchdog] test_stuck.py::test_stuck still running 3 s" in output, output
    assert "test_stuck" in output.split("Every thread's stack:", 1)[1], output
    assert "killed" in output, output
    assert elapsed < 40, f"the session took {elapsed:.1f} s to end"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while procfs.alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procfs.alive(child), f"the stuck test's child {child} still runs"


@pytest.mark.timeout(60)
def test_the_watchdog_stays_quiet_for_tests_that_end_in_time(tmp_path: Path) -> None:
    (tmp_path / "test_quick.py").write_text(
        "import pytest, time\n\n@pytest.mark.timeout(1)\ndef test_quick():\n    time.sleep(0.1)\n"
    )
    done = run_session(tmp_path, "0.5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[watchdog]" not in done.stdout + done.stderr
