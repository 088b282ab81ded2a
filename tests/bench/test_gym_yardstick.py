"""scripts/gym_yardstick.py: Gymnasium's benchmark_vector_step over Sync, Async and vecenv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gym_yardstick.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.timeout(180)
def test_every_runner_is_measured_and_compared_with_sync() -> None:
    done = _run("--sizes", "2", "--runners", "sync,vecenv", "--duration", "1", "--reps", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[2].strip(): line for line in done.stdout.splitlines() if line.startswith("| 2 |")}
    assert set(rows) == {"sync", "vecenv"}, done.stdout
    assert rows["sync"].rstrip().endswith("| 1.00 |"), rows["sync"]
    rate = float(rows["vecenv"].split("|")[3].split("(")[0].replace(",", ""))
    assert rate > 0, rows["vecenv"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--runners", "sync,threads"], "--runners"),
        (["--sizes", "eight"], "--sizes"),
        (["--duration", "0"], "--duration"),
        (["--env-id", "Nope-v0"], "--env-id"),
    ],
)
@pytest.mark.timeout(60)
def test_a_bad_argument_is_named_with_what_was_expected(args: list[str], named: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert named in done.stderr and "expected" in done.stderr and "got" in done.stderr, done.stderr
