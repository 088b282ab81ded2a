"""scripts/train_ppo_rollouts.py: PPO with the policy in the workers.

The fast tests check the mechanics (a few updates on every path: finite losses, the weights
version of every rollout, collection and update both timed); the slow ones that it learns.
Both need torch and run the script in a fresh interpreter, as a user runs it.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="train_ppo_rollouts.py needs torch (pip install -e '.[train]')")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_ppo_rollouts.py"


def _run(out: Path, *args: str, timeout: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run: dict[str, Any] = json.loads((out / "summary.json").read_text())["run"]
    return run


def _check_mechanics(run: dict[str, Any], updates: int) -> None:
    assert run["updates"] == updates and run["env_steps"] == updates * 4 * 16
    assert all(math.isfinite(loss) for loss in run["losses"])
    assert run["collect_s"] > 0 and run["update_s"] > 0 and run["episodes"] > 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "extra",
    [
        pytest.param([], id="mlp"),
        pytest.param(["--policy", "lstm", "--hide-velocity", "--overlap"], id="lstm-overlap"),
        pytest.param(["--collect", "step", "--vector", "vecenv", "--policy", "lstm"], id="lstm-step"),
    ],
)
def test_a_few_updates_run_with_finite_losses_and_advancing_weights(tmp_path: Path, extra: list[str]) -> None:
    common = ["--num-envs", "4", "--num-workers", "2", "--num-steps", "16", "--minibatch-size", "32"]
    run = _run(tmp_path, *common, "--total-timesteps", "256", "--update-epochs", "2", *extra, timeout=220)
    _check_mechanics(run, 4)
    versions = run["weights_versions"]
    if "--overlap" in extra:
        # Each rollout after the first was started before the update that precedes it: one
        # version behind the weights then current, and the versions still advance.
        assert versions == [1, 1, 2, 3], versions
    else:
        assert versions == [1, 2, 3, 4], versions


TIMELINE = SCRIPT.with_name("rollout_timeline.py")


@pytest.mark.timeout(240)
def test_the_rollout_timeline_times_every_setting_and_the_sync_trainer() -> None:
    """scripts/rollout_timeline.py: a row for each setting, with the step counts it ran and
    finite, positive times; the slope and the SyncVectorEnv trainer's collection below it."""
    proc = subprocess.run(
        [sys.executable, str(TIMELINE), "--total-timesteps", "512", "--long-steps", "64", "--idle-ms", "5"],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.strip("|").split("|") for line in proc.stdout.splitlines() if line.startswith("| ")][1:]
    assert [(r[0].strip(), int(r[1])) for r in rows] == [
        ("in the trainer (a PPO update between)", 32),
        ("asleep 5 ms between", 32),
        ("back to back", 32),
        ("back to back", 64),
    ], proc.stdout
    for row in rows:
        per_rollout, per_step, cpu = (float(row[i].replace(",", "")) for i in (2, 3, 5))
        assert per_rollout > 0 and per_step > 0 and cpu >= 0 and math.isfinite(float(row[4])), row
    assert "Per vector step (the slope between 32 and 64 steps)" in proc.stdout
    assert "The trainer stepping SyncVectorEnv:" in proc.stdout


@pytest.mark.timeout(150)
def test_the_rollout_timeline_refuses_long_rollouts_no_longer_than_the_trainers() -> None:
    proc = subprocess.run(
        [sys.executable, str(TIMELINE), "--long-steps", "32"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "--long-steps must be more than the trainer's 32 steps per rollout, got 32" in proc.stderr


@pytest.mark.timeout(150)
def test_weights_push_times_each_cell() -> None:
    """scripts/weights_push.py: a row per hidden size and worker count, the weights' size right."""
    script = str(SCRIPT.with_name("weights_push.py"))
    proc = subprocess.run(
        [sys.executable, script, "--workers", "1,2", "--hidden", "64", "--rounds", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.strip("|").split("|") for line in proc.stdout.splitlines() if line.startswith("| ")][1:]
    megabytes = ((4 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2)) * 4 / 1e6  # two hidden layers of 64, two logits
    assert [(int(r[0]), float(r[1])) for r in rows] == [(1, round(megabytes, 2)), (2, round(megabytes, 2))], proc.stdout
    assert all(float(v) >= 0 for r in rows for v in r[2:]), proc.stdout


def _episodes(out: Path) -> list[tuple[str, str, str]]:
    with open(out / "episodes.csv", newline="") as f:
        return [(row["env_step"], row["env_index"], row["episode_return"]) for row in csv.DictReader(f)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("policy", "stepping"),
    [
        pytest.param([], ["--vector", "sync"], id="mlp-sync"),
        pytest.param(["--policy", "lstm"], ["--vector", "vecenv"], id="lstm-vecenv"),
    ],
)
def test_the_workers_rollouts_and_stepping_take_the_same_actions(
    tmp_path: Path, policy: list[str], stepping: list[str]
) -> None:
    """Each env samples from its own stream, so where the policy runs does not change what it
    does: the same episodes, and losses equal up to the float rounding of a forward over 2 rows
    (in a worker) against 4 (stepping)."""
    common = ["--num-envs", "4", "--num-workers", "2", "--num-steps", "16", "--minibatch-size", "32", "--seed", "3"]
    common += ["--total-timesteps", "1024", "--update-epochs", "2", "--hide-velocity", *policy]
    rollout = _run(tmp_path / "rollout", *common, timeout=220)
    step = _run(tmp_path / "step", *common, "--collect", "step", *stepping, timeout=220)
    episodes = _episodes(tmp_path / "rollout")
    assert len(episodes) > 10 and episodes == _episodes(tmp_path / "step")
    assert rollout["losses"] == pytest.approx(step["losses"], rel=1e-4)
    assert rollout["collect"] == "rollout" and step["collect"] == f"step-{stepping[1]}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_mlp_in_the_workers_solves_cartpole(tmp_path: Path) -> None:
    run = _run(tmp_path, "--total-timesteps", "150000", "--stop-when-solved", "--overlap", timeout=880)
    assert run["solved"], run["final_mean_return"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_only_the_lstm_balances_cartpole_without_velocities(tmp_path: Path) -> None:
    lstm = _run(
        tmp_path / "lstm",
        "--policy",
        "lstm",
        "--hide-velocity",
        "--total-timesteps",
        "300000",
        "--stop-when-solved",
        timeout=1700,
    )
    assert lstm["solved"], lstm["final_mean_return"]
    mlp = _run(tmp_path / "mlp", "--hide-velocity", "--total-timesteps", "100000", timeout=600)
    assert not mlp["solved"] and mlp["final_mean_return"] < 200, mlp["final_mean_return"]
