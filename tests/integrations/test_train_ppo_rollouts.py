"""scripts/train_ppo_rollouts.py: PPO with the policy in the workers.

The fast tests check the mechanics (a few updates on every path: finite losses, the weights
version of every rollout, collection and update both timed); the slow ones that it learns.
Both need torch. The tests of the script's process (its exit status, its output, its
signals, its outputs written) run it in a fresh interpreter, as a user runs it; those of what
its training does run its ``main`` in this process, where torch is imported already.
"""

from __future__ import annotations

import csv
import json
import math
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.scripts import (
    assert_all_ended,
    help_text,
    load_script,
    refused_by_parse_args,
    run_with_bad_input,
    signalled_when,
    torch_settings_kept,
)

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


def _run_here(out: Path, *args: str) -> dict[str, Any]:
    """What :func:`_run` gives, from the script's ``main`` run in this process, where torch is
    imported already (the script's own process costs seconds of imports first). For the tests
    of what the training does, not of the process: that is :func:`_run`'s."""
    m = load_script("train_ppo_rollouts")
    with torch_settings_kept():
        assert m.main(["--out", str(out), "--quiet", *args]) == 0
    run: dict[str, Any] = json.loads((out / "summary.json").read_text())["run"]
    return run


@pytest.mark.timeout(120)
def test_summary_json_is_strict_json_with_null_when_no_episode_finished(tmp_path: Path) -> None:
    """Four CartPole steps end no episode: the mean return is null, not NaN (not JSON)."""
    # One env and no --num-workers: the default two workers were refused for one env.
    _run_here(tmp_path, "--num-envs", "1", "--num-steps", "4", "--total-timesteps", "4")

    def refuse(constant: str) -> None:
        raise AssertionError(f"summary.json holds {constant}, which is not JSON")

    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=refuse)
    assert summary["run"]["episodes"] == 0 and summary["run"]["final_mean_return"] is None
    assert summary["config"]["num_workers"] == 1


def test_a_result_file_that_cannot_be_written_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder where summary.json goes, once the training is done: one line names the file,
    the cause, and that episodes.csv was written; exit status 1. It was a traceback."""
    m = load_script("train_ppo_rollouts")
    timings = (1.0, 16.0, 0.5, 0.3, 0.2)  # wall time, SPS, start-up, collect, update
    summary = m.Summary("rollout", "mlp", False, 2, 16, 1, *timings, 0, None, False, None, None, [1], [])
    monkeypatch.setattr(m, "train", lambda args: (summary, []))
    (tmp_path / "summary.json").mkdir()
    with torch_settings_kept():
        status = m.run_main(m.PROG, lambda: m.main(["--out", str(tmp_path), "--quiet"]))
    assert status == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"train_ppo_rollouts.py: error: cannot write {tmp_path}/summary.json: Is a directory: "
        f"{tmp_path}/episodes.csv written; summary.json left as it was"
    )


def _check_mechanics(run: dict[str, Any], updates: int) -> None:
    assert run["updates"] == updates and run["env_steps"] == updates * 4 * 16
    assert all(math.isfinite(loss) for loss in run["losses"])
    assert run["collect_s"] > 0 and run["update_s"] > 0 and run["episodes"] > 0
    # The split adds up to the wall time: the envs' start-up (workers starting, most of a short
    # run) was in no part of it, so collecting and updating covered a fraction of the wall time.
    parts = run["startup_s"] + run["collect_s"] + run["update_s"]
    assert run["startup_s"] > 0 and -0.005 <= run["wall_time_s"] - parts <= 0.05 * run["wall_time_s"] + 0.02, run


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(["--minibatch-size", "32"], id="mlp"),
        pytest.param(["--policy", "lstm", "--hide-velocity", "--overlap"], id="lstm-overlap"),
        pytest.param(["--collect", "step", "--vector", "vecenv", "--policy", "lstm"], id="lstm-step"),
    ],
)
def test_a_few_updates_run_with_finite_losses_and_advancing_weights(tmp_path: Path, extra: list[str]) -> None:
    common = ["--num-envs", "4", "--num-workers", "2", "--num-steps", "16"]
    run = _run_here(tmp_path, *common, "--total-timesteps", "256", "--update-epochs", "2", *extra)
    _check_mechanics(run, 4)
    versions = run["weights_versions"]
    if "--overlap" in extra:
        # Each rollout after the first was started before the update that precedes it: one
        # version behind the weights then current, and the versions still advance.
        assert versions == [1, 1, 2, 3], versions
    else:
        assert versions == [1, 2, 3, 4], versions


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("args", "option", "value"),
    [
        (["--num-workers", "20"], "--num-workers", "20"),
        (["--num-workers", "-1"], "--num-workers", "-1"),
        (["--env-id", "Pendulum-v1"], "--env-id", "Pendulum-v1"),  # continuous actions
        (["--env-id", "Nope-v0"], "--env-id", "Nope-v0"),
        (["--env-id", "FrozenLake-v1"], "--env-id", "FrozenLake-v1"),  # Discrete observations: failed in the workers
        (["--env-id", "Acrobot-v1", "--hide-velocity"], "--hide-velocity", "Acrobot-v1"),
        (["--out", "afile"], "--out", "afile"),
        (["--learning-rate", "-1"], "--learning-rate", "-1"),
        (["--gamma", "2"], "--gamma", "2"),
        (["--gae-lambda", "nan"], "--gae-lambda", "nan"),
        (["--clip-coef", "-1"], "--clip-coef", "-1"),
        (["--target-kl", "0"], "--target-kl", "0"),
        (["--env-step-ms", "-1"], "--env-step-ms", "-1"),
        (["--solve-return", "nan"], "--solve-return", "nan"),
        (["--seed", "-1"], "--seed", "-1"),
        (["--hidden", "0"], "--hidden", "0"),
        (["--overlap", "--collect", "step"], "--overlap", "step"),
        (["--overlap", "--num-workers", "0"], "--overlap", "0"),
        (["--pin-cpus", "--collect", "step", "--vector", "sync"], "--pin-cpus", "sync"),  # was ignored
        (["--inline-group", "--collect", "step", "--vector", "sync"], "--inline-group", "sync"),
        (["--inline-group", "--num-workers", "1"], "--inline-group", "got 1"),
        (["--inline-group", "--overlap"], "--inline-group", "--overlap"),
        (["--minibatch-size", "85"], "--minibatch-size", "85"),
        # One transition's advantage has no standard deviation: NaN weights, then a traceback.
        (["--minibatch-size", "1", "--total-timesteps", "512"], "--minibatch-size", "1"),
        (["--num-envs", "1", "--num-steps", "1", "--num-workers", "1"], "--num-steps", "1 x --num-steps 1"),
        (
            ["--policy", "lstm", "--num-envs", "2", "--num-minibatches", "2", "--num-steps", "1"],
            "--num-minibatches",
            "2",
        ),
        # Options a combination makes no-ops: they were silently ignored, so a run did not use them.
        (["--hidden", "128"], "--hidden", "--policy mlp"),  # the MLP's layers are fixed
        (["--num-minibatches", "2"], "--num-minibatches", "--policy mlp"),
        (["--policy", "lstm", "--minibatch-size", "64"], "--minibatch-size", "--policy lstm"),
        (["--collect", "step", "--vector", "sync", "--num-workers", "2"], "--num-workers", "--vector sync"),
        (["--worker-nice", "20"], "--worker-nice", "20"),
        (["--collect", "step", "--vector", "sync", "--worker-nice", "3"], "--worker-nice", "--vector sync"),
        (["--num-workers", "0", "--worker-nice", "3"], "--worker-nice", "--num-workers 0"),
    ],
)
def test_bad_input_is_one_line_naming_the_option_before_anything_starts(
    tmp_path: Path, args: list[str], option: str, value: str
) -> None:
    (tmp_path / "afile").touch()
    line = refused_by_parse_args("train_ppo_rollouts", args, cwd=tmp_path)
    assert f"argument {option}: expected " in line and value in line, line
    assert not (tmp_path / "runs").exists(), "nothing written"


@pytest.mark.timeout(90)
def test_the_scripts_own_process_refuses_bad_input_with_status_2_and_one_line(tmp_path: Path) -> None:
    """The cases above are refused by ``parse_args`` in this process; the script's process turns
    that into exit status 2, the usage and one line, with nothing written."""
    line = run_with_bad_input("train_ppo_rollouts", ["--policy", "lstm", "--minibatch-size", "64"], cwd=tmp_path)
    assert "argument --minibatch-size: expected " in line and "--policy lstm" in line, line
    assert not (tmp_path / "runs").exists(), "nothing written"


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
def test_the_rollout_timeline_refuses_long_rollouts_no_longer_than_the_trainers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Its ``main`` in this process: a usage error (argparse's exit status 2) before anything
    is timed. Its process costs seconds of imports (the trainer's torch) and adds nothing."""
    timeline = load_script("rollout_timeline")
    with pytest.raises(SystemExit) as exit_info:
        timeline.main(["--long-steps", "32"])
    assert exit_info.value.code == 2
    assert "--long-steps must be more than the trainer's 32 steps per rollout, got 32" in capsys.readouterr().err


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
    ("policy", "hosting", "stepping"),
    [
        pytest.param(["--minibatch-size", "32"], ["--inline-group"], ["--vector", "sync"], id="mlp-inline-sync"),
        pytest.param(["--policy", "lstm"], [], ["--vector", "vecenv", "--num-workers", "4"], id="lstm-vecenv"),
    ],
)
def test_the_workers_rollouts_and_stepping_take_the_same_actions(
    tmp_path: Path, policy: list[str], hosting: list[str], stepping: list[str]
) -> None:
    """Each env samples from its own stream, and each row's forward is exact however the rows
    are split, so where the policy runs does not change what it does: the same episodes and the
    same losses, with groups of 2, 2, 1 and 1 rows (the first in this process with
    ``--inline-group``) against one forward over 6 (stepping)."""
    common = ["--num-envs", "6", "--num-steps", "16", "--seed", "3"]
    common += ["--total-timesteps", "576", "--update-epochs", "2", "--hide-velocity", *policy]
    rollout = _run(tmp_path / "rollout", *common, "--num-workers", "4", *hosting, timeout=220)
    step = _run_here(tmp_path / "step", *common, "--collect", "step", *stepping)  # the reference
    episodes = _episodes(tmp_path / "rollout")
    assert len(episodes) > 10 and episodes == _episodes(tmp_path / "step")
    assert rollout["losses"] == step["losses"]
    assert rollout["collect"] == "rollout" and step["collect"] == f"step-{stepping[1]}"


@pytest.mark.timeout(60)
def test_the_lstm_replays_every_segment_in_one_call_as_a_step_by_step_loop_does() -> None:
    """The update's batched replay gives the outputs, gradients and end-of-episode states of
    the loop it replaces: one step at a time, the state zeroed where an episode starts."""
    import numpy as np
    import torch

    m = load_script("train_ppo_rollouts")
    torch.manual_seed(0)
    agent = m.LSTMAgent(3, 2, 16)
    steps, n = 12, 5
    starts = (np.random.default_rng(0).random((steps, n)) < 0.25).astype(np.float32)
    starts[0, 1] = 1.0  # an episode starts at the first step: no state carried in
    starts[:, 2] = 0.0  # one segment the whole rollout long
    starts[:, 3] = 1.0  # one-step episodes only
    obs = torch.randn(steps, n, 3)
    h0, c0 = torch.randn(n, 16), torch.randn(n, 16)

    segments = m.Segments.of(starts)
    assert len(segments.env) == n + int(starts[1:].sum())
    assert (segments.start[segments.index] + segments.offset == np.arange(steps)[:, None]).all()
    assert (segments.env[segments.index] == np.arange(n)[None, :]).all()

    weights = torch.randn(steps, n, 16)
    batched = agent.replay(obs, segments, (h0, c0))
    (batched * weights).sum().backward()
    batched_grads = [p.grad.clone() for p in agent.lstm.parameters()]
    agent.zero_grad()

    h, c = h0, c0
    outs, after = [], []
    for t in range(steps):
        keep = torch.as_tensor(1.0 - starts[t])[:, None]
        out, (h, c) = agent.lstm(obs[t][None], ((h * keep)[None], (c * keep)[None]))
        h, c = h[0], c[0]
        outs.append(out[0])
        after.append((h, c))
    looped = torch.stack(outs)
    (looped * weights).sum().backward()

    assert torch.allclose(batched, looped, atol=1e-6)
    for mine, theirs in zip(batched_grads, (p.grad for p in agent.lstm.parameters())):
        assert theirs is not None and torch.allclose(mine, theirs, atol=1e-5)
    with torch.no_grad():
        for k in range(len(segments.env)):
            last, e = int(segments.start[k] + segments.length[k] - 1), int(segments.env[k])
            h_end, c_end = agent.state_after(obs, segments, (h0, c0), k)
            assert torch.allclose(h_end[0], after[last][0][e], atol=1e-6)
            assert torch.allclose(c_end[0], after[last][1][e], atol=1e-6)


@pytest.mark.timeout(60)
def test_the_lstm_advantages_bootstrap_truncated_episodes_from_the_state_after_their_last_step() -> None:
    """A truncated episode's reward gets ``gamma * V(final observation)``, the value taken from
    the state after its last step, and the rollout's last step is bootstrapped from the state
    after it: the batched replay gives the advantages a step-by-step loop gives."""
    import argparse

    import numpy as np
    import torch

    m = load_script("train_ppo_rollouts")
    torch.manual_seed(1)
    agent = m.LSTMAgent(2, 2, 8)
    steps, n = 10, 4
    rng = np.random.default_rng(1)
    terminations = np.zeros((steps, n), bool)
    truncations = np.zeros((steps, n), bool)
    truncations[3, 0] = truncations[9, 1] = truncations[6, 3] = True  # one at the last step
    terminations[2, 1] = terminations[5, 2] = truncations[1, 3] = True  # some in an env's second episode
    ended = terminations | truncations
    starts = np.zeros((steps, n), np.float32)
    starts[0, 2] = 1.0
    starts[1:] = ended[:-1]  # SAME_STEP: the step after an end is an episode's first
    batch = m.Batch(
        observations=rng.normal(size=(steps, n, 2)).astype(np.float32),
        actions=rng.integers(0, 2, (steps, n)),
        rewards=np.ones((steps, n), np.float32),
        terminations=terminations,
        truncations=truncations,
        final_observations=rng.normal(size=(steps, n, 2)).astype(np.float32),
        last_observations=rng.normal(size=(n, 2)).astype(np.float32),
        log_prob=np.zeros((steps, n), np.float32),
        value=rng.normal(size=(steps, n)).astype(np.float32),
        episode_starts=starts,
        initial_state=(rng.normal(size=(n, 8)).astype(np.float32), rng.normal(size=(n, 8)).astype(np.float32)),
        weights_version=0,
    )
    args = argparse.Namespace(gamma=0.98, gae_lambda=0.8)
    adv, ret = m.advantages_of(agent, "lstm", batch, args)

    with torch.no_grad():
        h, c = (torch.as_tensor(a) for a in batch.initial_state)
        after = []
        for t in range(steps + 1):
            x = torch.as_tensor(batch.observations[t] if t < steps else batch.last_observations)
            keep = torch.as_tensor(1.0 - (starts[t] if t < steps else ended[-1]), dtype=torch.float32)[:, None]
            _, (h1, c1) = agent.lstm(x[None], ((h * keep)[None], (c * keep)[None]))
            h, c = h1[0], c1[0]
            after.append((h, c))
        rewards = torch.as_tensor(batch.rewards).clone()
        for t, e in zip(*np.nonzero(truncations)):
            h_t, c_t = after[t][0][e : e + 1], after[t][1][e : e + 1]
            _, (h_fin, _) = agent.lstm(
                torch.as_tensor(batch.final_observations[t, e])[None, None], (h_t[None], c_t[None])
            )
            rewards[t, e] += args.gamma * agent.critic(h_fin[0]).squeeze()
        values = torch.as_tensor(batch.value)
        expected = m.ppo.gae_advantages(
            rewards,
            values,
            torch.as_tensor(starts),
            agent.critic(after[steps][0]).squeeze(-1),
            torch.as_tensor(ended[-1], dtype=torch.float32),
            args.gamma,
            args.gae_lambda,
        )
    assert not torch.allclose(rewards, torch.as_tensor(batch.rewards)), "the truncations were bootstrapped"
    assert torch.allclose(adv, expected, atol=1e-5) and torch.allclose(ret, expected + values, atol=1e-5)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("policy", ["mlp", "lstm"])
@pytest.mark.parametrize("overlap", [False, True], ids=["in-turn", "overlap"])
def test_advantages_are_bootstrapped_by_the_weights_that_acted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, overlap: bool
) -> None:
    """With ``--overlap`` a rollout acts with the weights of before the update that runs beside
    it. Its recorded values are those weights'; its last step's bootstrap value (and a truncated
    episode's final one) came from the weights the update had made meanwhile. The critic that
    computes the advantages now gives the recorded values, whichever weights are current: the
    MLP's exactly (the copies' own numpy forward), the LSTM's to float rounding (torch's)."""
    import numpy as np
    import torch

    m = load_script("train_ppo_rollouts")
    original = m.advantages_of
    gaps: list[float] = []

    def checked(agent: Any, kind: str, batch: Any, args: Any) -> Any:
        with torch.no_grad():
            if kind == "lstm":  # the first step's value, from the state the rollout started from
                keep = torch.as_tensor(1.0 - batch.episode_starts[0], dtype=torch.float32)[:, None]
                state = tuple(torch.as_tensor(a) * keep for a in batch.initial_state)
                value = agent.critic(agent.step(torch.as_tensor(batch.observations[0]), state)).squeeze(-1)
            else:
                value = agent.value(torch.as_tensor(batch.observations[0]))
        gaps.append(float(np.abs(value.numpy() - batch.value[0]).max()))
        return original(agent, kind, batch, args)

    monkeypatch.setattr(m, "advantages_of", checked)
    argv = ["--out", str(tmp_path), "--num-envs", "4", "--num-workers", "2", "--num-steps", "16"]
    argv += ["--total-timesteps", "320", "--update-epochs", "2", "--policy", policy]
    m.train(m.parse_args(argv + (["--overlap"] if overlap else [])))
    assert len(gaps) == 5 and max(gaps) <= (0.0 if policy == "mlp" else 1e-4), gaps


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
        "500000",
        "--stop-when-solved",
        timeout=1700,
    )
    assert lstm["solved"], lstm["final_mean_return"]
    mlp = _run(tmp_path / "mlp", "--hide-velocity", "--total-timesteps", "100000", timeout=600)
    assert not mlp["solved"] and mlp["final_mean_return"] < 200, mlp["final_mean_return"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_overlapped_training_ends_its_workers_and_says_so_in_one_line(
    tmp_path: Path, signum: int
) -> None:
    """Ctrl+C or SIGTERM mid-training with the next rollout under way (--overlap): one line (a
    warning about closing during a pending rollout came first), the exit status 128 + the
    signal, no worker left and nothing written."""
    from vecenv.bench import procfs

    out = tmp_path / "run"
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--overlap", "--total-timesteps", "10000000"]

    def mid_training(proc: subprocess.Popen[str]) -> list[int]:
        assert proc.stdout is not None
        progress = [proc.stdout.readline() for _ in range(3)]  # three updates done: mid-training
        assert all(line.startswith("[rollout/mlp] step") for line in progress), progress
        return procfs.children(proc.pid)

    err, workers = signalled_when(cmd, signum, mid_training)
    verb = "interrupted" if signum == signal.SIGINT else "terminated"
    assert err.strip().splitlines() == [f"train_ppo_rollouts.py: {verb}: nothing was written"], err
    assert len(workers) == 2
    assert_all_ended(workers, "a worker")
    assert not list(out.iterdir()), "nothing written"


def test_help_states_each_default_as_the_value_used() -> None:
    """Options whose default is filled in later say the value they then take, never
    "(default: None)" (which reads as no value at all)."""
    text = help_text("train_ppo_rollouts")
    assert "(default: None)" not in text, text
    for shown in (
        "(default: 256)",
        "(default: 1)",
        "(default: never)",
        "(default: 64)",
        "default: 5 with --overlap, else 0",
    ):
        assert shown in text, (shown, text)
