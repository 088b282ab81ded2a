"""The side-by-side training scripts: SB3's own PPO on three vector envs, CleanRL's ppo.py.

``scripts/sb3_ppo.py`` runs for real on 128 steps, one rollout and one update (every vector env
it names learns the same number of steps and reports a split of its time);
``scripts/cleanrl_ppo.py`` needs a CleanRL checkout, which CI does not have, so only its command
line is checked here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _run(script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.timeout(300)
def test_sb3_ppo_learns_the_same_steps_on_each_vector_env() -> None:
    done = _run("sb3_ppo.py", "--vec", "dummy,vecenv", "--total-timesteps", "128", "--num-envs", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| dummy") or line.startswith("| vecenv")]
    assert len(rows) == 2, done.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        # Collection per 1k steps has 3 decimals; the total (1 decimal) rounds to 0.0 on a quick host.
        sps, update, collect_per_k = float(cells[1]), float(cells[3]), float(cells[4])
        assert sps > 0 and collect_per_k > 0 and update >= 0, row


@pytest.mark.parametrize(
    ("script", "args", "named"),
    [
        ("sb3_ppo.py", ["--vec", "dummy,threads"], "--vec"),
        ("cleanrl_ppo.py", ["--ppo", "no/such/ppo.py"], "--ppo"),
        ("cleanrl_ppo.py", ["--ppo", __file__, "--vector", "sync,gpu"], "--vector"),
    ],
)
@pytest.mark.timeout(120)
def test_a_bad_argument_is_named_with_what_was_expected(script: str, args: list[str], named: str) -> None:
    done = _run(script, *args)
    assert done.returncode == 2, done.stdout
    assert named in done.stderr and "expected" in done.stderr and "got" in done.stderr, done.stderr


@pytest.mark.parametrize("script", ["sb3_ppo.py", "cleanrl_ppo.py"])
@pytest.mark.timeout(120)
def test_help_says_what_runs_and_what_it_needs(script: str) -> None:
    done = _run(script, "--help")
    assert done.returncode == 0, done.stderr
    assert "pip install" in done.stdout or "extra" in done.stdout, done.stdout
    assert "--total-timesteps" in done.stdout
