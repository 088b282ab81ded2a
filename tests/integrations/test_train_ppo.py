"""scripts/train_ppo.py: exact across vector envs (fast) and learning CartPole (slow).

Both need torch (the ``train`` extra) and are skipped without it. The script runs in a fresh
interpreter, as a user runs it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.scripts import (
    assert_all_ended,
    help_text,
    load_script,
    refused_by_parse_args,
    run_with_bad_input,
    signalled_once_started,
    signalled_when,
    torch_settings_kept,
)

pytest.importorskip("torch", reason="train_ppo.py needs torch (pip install -e '.[train]')")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_ppo.py"


def _train(out: Path, *args: str, timeout: float) -> dict[str, list[dict[str, str]]]:
    """Run the script; returns the episodes.csv rows of each vector kind."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return _episodes_by_kind(out)


def _train_here(out: Path, *args: str, quiet: bool = True) -> dict[str, list[dict[str, str]]]:
    """What :func:`_train` gives, from the script's ``main`` run in this process: for a reference
    run that a test compares the script's own process with (that process costs seconds of
    imports: torch, gymnasium, matplotlib; this one has them already)."""
    module = load_script("train_ppo")
    with torch_settings_kept():
        assert module.main(["--out", str(out), *(["--quiet"] if quiet else []), *args]) == 0
    return _episodes_by_kind(out)


def _episodes_by_kind(out: Path) -> dict[str, list[dict[str, str]]]:
    """The episodes.csv rows in ``out``, by vector kind (the ``vector`` column taken out)."""
    with (out / "episodes.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    by_kind: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_kind.setdefault(row.pop("vector"), []).append(row)
    return by_kind


@pytest.mark.timeout(300)
def test_same_seed_same_returns_with_vecenv_sync_and_async(tmp_path: Path) -> None:
    by_kind = _train(
        tmp_path,
        "--compare",
        "vecenv,sync,async",
        "--num-envs",
        "4",
        "--num-workers",
        "2",
        "--num-steps",
        "32",
        "--total-timesteps",
        "768",
        "--update-epochs",
        "4",
        "--seed",
        "3",
        timeout=280,
    )
    assert list(by_kind) == ["vecenv", "sync", "async"]
    # Every finished episode: when (env step), which env, its return and length; not wall time.
    trace = {
        kind: [(r["env_step"], r["env_index"], r["episode_return"], r["episode_length"]) for r in rows]
        for kind, rows in by_kind.items()
    }
    assert len(trace["sync"]) > 15  # a random CartPole policy ends an episode every ~20 steps
    assert trace["vecenv"] == trace["sync"]
    assert trace["async"] == trace["sync"]
    runs = json.loads((tmp_path / "summary.json").read_text())["runs"]
    assert [r["vector"] for r in runs] == ["vecenv", "sync", "async"]
    assert all(r["env_steps"] == 768 and r["sps"] > 0 for r in runs)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "learning_curve.png").stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ppo_learns_cartpole(tmp_path: Path) -> None:
    rows = _train(tmp_path, "--vector", "vecenv", "--num-envs", "8", "--total-timesteps", "60000", timeout=580)[
        "vecenv"
    ]
    returns = [float(r["episode_return"]) for r in rows]
    early, late = sum(returns[:20]) / 20, sum(returns[-20:]) / 20
    assert late > early + 100, f"mean return of the first 20 episodes {early:.1f}, of the last 20 {late:.1f}"


@pytest.mark.timeout(120)
def test_auto_workers_say_what_they_chose_and_stay_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The script's ``main`` in this process (a fresh interpreter costs seconds importing torch)."""
    by_kind = _train_here(
        tmp_path,
        *["--compare", "vecenv,sync", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128"],
        *["--update-epochs", "1", "--seed", "2"],
        quiet=False,
    )
    assert "vecenv: num_workers='auto' chose " in capsys.readouterr().out  # auto is the default
    trace = {k: [(r["env_step"], r["env_index"], r["episode_return"]) for r in by_kind[k]] for k in ("vecenv", "sync")}
    assert trace["vecenv"] and trace["vecenv"] == trace["sync"]


@pytest.mark.timeout(120)
def test_summary_json_is_strict_json_with_null_when_no_episode_finished(tmp_path: Path) -> None:
    """Four CartPole steps end no episode: the mean return is null, not the NaN that strict JSON
    parsers refuse, and the line printed says so."""
    _train_here(tmp_path, "--vector", "sync", "--num-envs", "1", "--num-steps", "4", "--total-timesteps", "4")

    def refuse(constant: str) -> None:
        raise AssertionError(f"summary.json holds {constant}, which is not JSON")

    (run,) = json.loads((tmp_path / "summary.json").read_text(), parse_constant=refuse)["runs"]
    assert run["episodes"] == 0 and run["final_mean_return"] is None and run["solved_at_step"] is None
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [], "no temporary file left"


@pytest.mark.parametrize("bad", ["all", "-1", "5"])
def test_bad_num_workers_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    """Refused by ``parse_args`` in this process (exit status 2, the usage and one line); that the
    script's own process turns this into its exit status and stderr is checked below, once."""
    args = ["--out", str(tmp_path), "--num-envs", "4", "--num-workers", bad]
    line = refused_by_parse_args("train_ppo", args, cwd=tmp_path)
    assert "--num-workers" in line and bad in line, line


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("args", "option", "value"),
    [
        (["--out", "afile"], "--out", "afile"),
        (["--out", "afile/sub"], "--out", "afile/sub"),
        (["--plot", "nonexistent.csv"], "--plot", "nonexistent.csv"),
        (["--plot", "afile"], "--plot", "afile"),  # a CSV, but not an episodes.csv
        (["--learning-rate", "-1"], "--learning-rate", "-1"),
        (["--learning-rate", "0"], "--learning-rate", "0"),
        (["--gamma", "nan"], "--gamma", "nan"),
        (["--gamma", "2"], "--gamma", "2"),
        (["--gae-lambda", "-0.1"], "--gae-lambda", "-0.1"),
        (["--clip-coef", "-1"], "--clip-coef", "-1"),
        (["--target-kl", "-1"], "--target-kl", "-1"),
        (["--env-step-ms", "-1"], "--env-step-ms", "-1"),
        (["--solve-return", "nan"], "--solve-return", "nan"),
        (["--solve-return", "inf"], "--solve-return", "inf"),
        (["--max-grad-norm", "0"], "--max-grad-norm", "0"),
        (["--vf-coef", "-1"], "--vf-coef", "-1"),
        (["--seed", "-1"], "--seed", "-1"),
        (["--num-envs", "0"], "--num-envs", "0"),
        (["--num-workers", "20"], "--num-workers", "20"),
        (["--minibatch-size", "100"], "--minibatch-size", "100"),  # 8 envs x 32 steps = 256
        # One transition's advantage has no standard deviation: NaN weights, then a traceback.
        (["--minibatch-size", "1", "--total-timesteps", "512"], "--minibatch-size", "1"),
        (["--num-envs", "1", "--num-steps", "1", "--num-workers", "0"], "--num-steps", "1 x --num-steps 1"),
        (["--env-id", "Nope-v0"], "--env-id", "Nope-v0"),
        (["--env-id", "Pendulum-v1"], "--env-id", "Pendulum-v1"),  # continuous actions
        (["--compare", ""], "--compare", "''"),  # was ignored: trained --vector instead
        (["--compare", "vecenv,"], "--compare", "'vecenv,'"),
        (["--compare", "sync,sync", "--total-timesteps", "256"], "--compare", "'sync,sync'"),  # one plot line, two runs
        (["--video-every", "3"], "--video-every", "without --capture-video"),  # was ignored: no video, no word
        # vecenv's worker count, given to kinds that have a worker per env: it was silently ignored.
        (["--vector", "async", "--num-workers", "2"], "--num-workers", "async"),
        (["--compare", "sync,async", "--num-workers", "1"], "--num-workers", "sync,async"),
    ],
)
def test_bad_input_is_one_line_naming_the_option_before_anything_starts(
    tmp_path: Path, args: list[str], option: str, value: str
) -> None:
    (tmp_path / "afile").write_text("x,y\n1,2\n")
    line = refused_by_parse_args("train_ppo", args, cwd=tmp_path)
    assert f"argument {option}: expected " in line and value in line, line
    assert not (tmp_path / "runs").exists(), "nothing written"


EPISODES_HEADER = "vector,env_step,wall_time_s,episode_return,episode_length,env_index\n"


@pytest.mark.timeout(90)
def test_the_scripts_own_process_refuses_bad_input_with_status_2_and_one_line(tmp_path: Path) -> None:
    """The cases above are refused by ``parse_args`` in this process; the script's process turns
    that into exit status 2, the usage and one line, with nothing written."""
    line = run_with_bad_input("train_ppo", ["--gamma", "2"], cwd=tmp_path)
    assert "argument --gamma: expected " in line and "2" in line, line
    assert not (tmp_path / "runs").exists(), "nothing written"


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("args", "option", "shown"),
    [
        (["--total-timesteps", "5000"], "--total-timesteps", "--total-timesteps 5000"),
        (["--total-timesteps", "100000"], "--total-timesteps", "--total-timesteps 100000"),  # the default, given
        (["--compare", "vecenv,sync"], "--compare", "--compare vecenv,sync"),
        (["--vector", "sync"], "--vector", "--vector sync"),
        (["--learning-rate", "0.01"], "--learning-rate", "--learning-rate 0.01"),
        (["--no-anneal-lr"], "--no-anneal-lr", "--no-anneal-lr"),
        (["--stop-when-solved"], "--stop-when-solved", "--stop-when-solved"),
        (["--capture-video"], "--capture-video", "--capture-video"),
    ],
)
def test_a_training_option_with_plot_is_refused_not_ignored(
    tmp_path: Path, args: list[str], option: str, shown: str
) -> None:
    """``--plot`` trains nothing: a training option given with it was silently ignored."""
    (tmp_path / "episodes.csv").write_text(EPISODES_HEADER + "sync,8,0.5,12.0,12,3\n")
    line = refused_by_parse_args("train_ppo", ["--plot", "episodes.csv", "--out", "again", *args], cwd=tmp_path)
    assert f"argument {option}: expected no training option with --plot" in line, line
    assert line.endswith(f"got {shown} with --plot"), line
    assert not (tmp_path / "again").exists(), "nothing written"


@pytest.mark.timeout(90)
def test_plot_takes_the_options_its_title_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``--plot`` does read (the folder and the title's words) is still accepted (the
    script's ``main`` in this process: a fresh interpreter costs seconds importing torch)."""
    (tmp_path / "episodes.csv").write_text(EPISODES_HEADER + "sync,8,0.5,12.0,12,3\n")
    monkeypatch.chdir(tmp_path)
    argv = ["--plot", "episodes.csv", "--out", "again", "--env-id", "CartPole-v1"]
    argv += ["--num-envs", "4", "--seed", "3", "--env-step-ms", "1"]
    assert load_script("train_ppo").main(argv) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("wrote again/learning_curve.png"), out
    assert (tmp_path / "again" / "learning_curve.png").stat().st_size > 0


@pytest.mark.timeout(200)
def test_capture_video_records_env_0_every_k_episodes_and_keeps_the_returns(tmp_path: Path) -> None:
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg", reason="needs the video extra: pip install -e '.[video]'")
    common = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "256", "--update-epochs", "1"]
    common += ["--minibatch-size", "64", "--seed", "4"]
    # Without video, sync alone and in this process: vecenv's runs equal sync's episode for
    # episode (test_same_seed_same_returns_with_vecenv_sync_and_async), so both recorded runs
    # are held to this one.
    plain = _train_here(tmp_path / "plain", *common, "--vector", "sync")
    recorded = _train(
        tmp_path / "video",
        *common,
        "--compare",
        "vecenv,sync",
        "--num-workers",
        "2",
        "--capture-video",
        "--video-every",
        "3",
        timeout=90,
    )
    strip = [(r["env_step"], r["env_index"], r["episode_return"]) for r in plain["sync"]]
    for kind in ("vecenv", "sync"):
        assert [(r["env_step"], r["env_index"], r["episode_return"]) for r in recorded[kind]] == strip
    episodes_of_env0 = sum(1 for r in plain["sync"] if r["env_index"] == "0")
    folder = {kind: tmp_path / "video" / "videos" / kind for kind in ("vecenv", "sync")}
    names = sorted(p.name for p in folder["sync"].iterdir())
    assert names == sorted(p.name for p in folder["vecenv"].iterdir())
    expected = [f"CartPole-v1-env0-episode-{e}.mp4" for e in range(0, episodes_of_env0 + 1, 3)]
    assert names == sorted(expected), "episodes 0, 3, 6... of env 0 (the last one open at the end)"
    for name in names:
        counts = [imageio_ffmpeg.count_frames_and_secs(str(folder[k] / name))[0] for k in ("vecenv", "sync")]
        assert counts[0] == counts[1] > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_training_ends_its_workers_and_says_so_in_one_line(tmp_path: Path, signum: int) -> None:
    """Ctrl+C or SIGTERM while training: one line says nothing was written (Ctrl+C printed a
    traceback from wherever the loop waited, SIGTERM killed the script without a word before
    it could close its workers), the exit status is 128 + the signal, and no worker is left."""
    out = tmp_path / "run"
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), "--quiet", "--num-workers", "2"]
    # Once its two workers have started.
    err, workers = signalled_once_started([*cmd, "--total-timesteps", "10000000"], signum, 2, 90, tmp_path)
    verb = "interrupted" if signum == signal.SIGINT else "terminated"
    assert err.strip().splitlines() == [f"train_ppo.py: {verb}: nothing was written"], err
    assert_all_ended(workers, "a worker")
    assert not list(out.iterdir()), "nothing written"


#: The training of the compare tests below: both runs of ``--compare sync,vecenv``, and the whole
#: sync run their first run is compared with.
COMPARE_COMMON = ["--num-envs", "2", "--num-steps", "32", "--minibatch-size", "64"]
COMPARE_COMMON += ["--update-epochs", "1", "--seed", "2", "--total-timesteps", "4096"]


@pytest.fixture(scope="module")
def whole_sync_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, str]]]]:
    """The whole ``--vector sync`` run of :data:`COMPARE_COMMON` (its folder and episodes), trained
    once in this process for both signals: a reference, not the process under test."""
    out = tmp_path_factory.mktemp("whole")
    return out, _train_here(out, *COMPARE_COMMON, "--vector", "sync")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_compare_interrupted_in_its_second_run_keeps_the_first_as_an_uninterrupted_run_writes_it(
    tmp_path: Path, signum: int, whole_sync_run: tuple[Path, dict[str, list[dict[str, str]]]]
) -> None:
    """Ctrl+C or SIGTERM during run b of ``--compare a,b``: run a's episodes and summary are
    written as a whole run of a writes them, b is left out and summary.json's ``partial`` says
    so (the finished run, minutes of training, was dropped with the cut one)."""
    whole_out, whole = whole_sync_run
    common = COMPARE_COMMON

    def second_run_under_way(proc: subprocess.Popen[str]) -> str:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # without --quiet: a line per update, so vecenv's first one says it runs
            seen.append(line)
            if line.startswith("[vecenv] step"):
                return "".join(seen)
        raise AssertionError(f"the vecenv run never reported an update:\n{''.join(seen)}")

    out = tmp_path / "cut"
    cmd = [sys.executable, str(SCRIPT), "--out", str(out), *common, "--compare", "sync,vecenv", "--num-workers", "0"]
    err, _ = signalled_when(cmd, signum, second_run_under_way, tmp_path)
    verb = "interrupted" if signum == signal.SIGINT else "terminated"
    (line,) = err.strip().splitlines()
    assert line.startswith(f"train_ppo.py: {verb} during the vecenv run: the finished runs (sync) written to "), err
    assert line.endswith("; vecenv left out"), err
    with (out / "episodes.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {row.pop("vector") for row in rows} == {"sync"}
    no_time = [{k: v for k, v in row.items() if k != "wall_time_s"} for row in rows]
    assert no_time == [{k: v for k, v in row.items() if k != "wall_time_s"} for row in whole["sync"]]
    summary = json.loads((out / "summary.json").read_text())
    assert [run["vector"] for run in summary["runs"]] == ["sync"]
    assert "during the vecenv run" in summary["partial"] and "vecenv left out" in summary["partial"]
    assert json.loads((whole_out / "summary.json").read_text())["partial"] is None


@pytest.mark.parametrize(
    ("args", "cut", "written", "left"),
    [
        # Ctrl+C in run b of --compare a,b, then again while run a's files were written.
        (
            ["--compare", "sync,vecenv"],
            "interrupted during the vecenv run and again while writing the finished runs (sync)",
            "/episodes.csv, summary.json written",
            "learning_curve.png left as it was",
        ),
        # Ctrl+C once the runs are over, while their files were written.
        (
            ["--vector", "sync"],
            "interrupted while writing the results",
            "/episodes.csv, summary.json written",
            "learning_curve.png left as it was",
        ),
    ],
    ids=["second-ctrl-c", "ctrl-c-at-the-end"],
)
def test_an_interrupt_while_the_results_are_written_names_what_was_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    cut: str,
    written: str,
    left: str,
) -> None:
    """An interrupt while episodes.csv, summary.json and learning_curve.png are written (here:
    while the picture is drawn) said "nothing was written", with the first two written."""
    module = load_script("train_ppo")

    def train(_: object, kind: str) -> tuple[list[object], object]:
        if kind == "vecenv":
            raise KeyboardInterrupt
        episode = module.Episode(kind, 8, 0.5, 12.0, 12, 0)
        summary = module.RunSummary(kind, 2, 0.0, 16, 1.0, 16.0, 1, None, False, None, None)
        return [episode], summary

    def plot(*_: object) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "train", train)
    monkeypatch.setattr(module, "plot", plot)
    with torch_settings_kept():
        status = module.run_main("train_ppo.py", lambda: module.main(["--out", str(tmp_path), *args]))
    assert status == 130
    line = capsys.readouterr().err.strip()
    assert line == f"train_ppo.py: {cut}: {tmp_path}{written}; {left}", line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes.csv", "summary.json"], "no temporary file"
    with (tmp_path / "episodes.csv").open(newline="") as f:
        assert [row["vector"] for row in csv.DictReader(f)] == ["sync"]


@pytest.mark.parametrize("where", ["picture", "folder"])
def test_a_result_file_that_cannot_be_written_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """The training is done but a result file cannot be written (a full disk while the picture
    is saved; a folder where episodes.csv goes): one line names the file, the cause and what was
    written or left as it was, exit status 1. It was a traceback."""
    module = load_script("train_ppo")

    def train(_: object, kind: str) -> tuple[list[object], object]:
        episode = module.Episode(kind, 8, 0.5, 12.0, 12, 0)
        return [episode], module.RunSummary(kind, 2, 0.0, 16, 1.0, 16.0, 1, None, False, None, None)

    def plot(*_: object) -> bool:
        raise OSError(27, "File too large")

    monkeypatch.setattr(module, "train", train)
    monkeypatch.setattr(module, "plot", plot)
    if where == "folder":
        (tmp_path / "episodes.csv").mkdir()
    with torch_settings_kept():
        status = module.run_main("train_ppo.py", lambda: module.main(["--out", str(tmp_path), "--vector", "sync"]))
    assert status == 1
    line = capsys.readouterr().err.strip()
    if where == "picture":
        want = (
            f"train_ppo.py: error: cannot write {tmp_path}/learning_curve.png: File too large: "
            f"{tmp_path}/episodes.csv, summary.json written; learning_curve.png left as it was"
        )
    else:
        want = (
            f"train_ppo.py: error: cannot write {tmp_path}/episodes.csv: Is a directory: nothing was written; "
            "episodes.csv, summary.json, learning_curve.png left as they were"
        )
    assert line == want, line


def test_the_guide_and_the_docstring_name_every_column_of_episodes_csv() -> None:
    """The columns a user reads episodes.csv by are the ones written (the guide named five of six)."""
    module = load_script("train_ppo")
    guide = (SCRIPT.parents[1] / "docs" / "guide.md").read_text()
    for field in dataclasses.fields(module.Episode):
        assert f"`{field.name}`" in guide, field.name
        assert f"``{field.name}``" in (module.__doc__ or ""), field.name


def test_help_states_one_default_per_option_the_one_used() -> None:
    """An option whose default is filled in later (--video-every) shows that value once, never a
    second "(default: None)" that contradicts it."""
    text = help_text("train_ppo")
    assert "(default: None)" not in text, text
    assert "--video-every K with --capture-video: episodes 0, K, 2K... (default: 10) --plot" in text, text
    assert "'auto': time one env" in text and "(default: auto)" in text, text
