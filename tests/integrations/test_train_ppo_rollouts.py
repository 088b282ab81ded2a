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
