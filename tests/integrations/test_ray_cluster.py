"""The Ray backend on a 2-node cluster: ``tests/integrations/ray_cluster_cases.py`` run by pytest
in an interpreter of its own, whose driver connects to that cluster only (one Ray per driver).

In a file of its own, apart from ``test_ray.py``: this process never touches Ray here, so under
pytest-xdist this test may run in one test process while another runs the tests that share its
local Ray (``tests/conftest.py``).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations.test_ray import SB3_MISSING


@pytest.mark.timeout(600)
def test_the_two_node_cluster_cases_pass_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """``tests/integrations/ray_cluster_cases.py`` (groups spread over both nodes, rollouts, env
    errors naming the node, a lost node, a restart that moves a group, SB3 on the cluster), run
    by pytest in a process whose driver connects to that cluster only: one Ray per driver."""
    root = Path(__file__).resolve().parents[2]
    env = {key: value for key, value in os.environ.items() if key not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "-rfEs"]
    # Its temp folders in this test's own: a session in pytest's shared temp root clears the
    # folders it takes for old ones there, which can be this session's, in use (a test process
    # beside this one had a tmpfs mounted in its folder, and that session failed on EBUSY).
    command += ["--basetemp", str(tmp_path / "basetemp")]
    # A session of its own: if it overruns, the whole group goes (its Ray's processes too).
    child = subprocess.Popen(
        [*command, "tests/integrations/ray_cluster_cases.py"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=560)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        stdout, stderr = child.communicate()
        pytest.fail(f"the cluster cases ran past 560 s:\n{stdout[-8000:]}{stderr[-4000:]}", pytrace=False)
    done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    output = done.stdout[-8000:] + done.stderr[-4000:]
    assert done.returncode == 0, output
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "deselected" not in summary, output
    # Nothing skips, but the SB3 case in a venv without SB3 (the Ray extra alone).
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    sb3_here = importlib.util.find_spec("stable_baselines3") is not None
    assert all(not sb3_here and SB3_MISSING in line for line in skips), output
