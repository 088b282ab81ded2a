"""The mechanics of ``vecenv-bench`` (``python -m vecenv.bench``): a tiny run of every suite (few
steps, small sizes) that checks its rows exist and its ratios are finite and positive; the
fresh-process runner, the options and the help. Speed is what the suites measure, not what these
tests check."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tests.helpers.scripts import assert_all_ended, signalled_once_started
from vecenv.bench import child, cli, step
from vecenv.bench.envs import ATARI_MISSING, BurnEnv, FrameEnv, atari_missing, burn, make_atari
from vecenv.bench.multiagent import WORKLOADS
from vecenv.bench.plan import plan
from vecenv.bench.procfs import tree_pss_kib
from vecenv.bench.runners import RUNNERS, Requirement
from vecenv.bench.suite import Outcome, SuiteFailed, missing_modules

ROOT = Path(__file__).resolve().parents[2]
ATARI_DEPS = ("ale_py", "cv2")


def bench(tmp_path: Path, suite: str, *args: str, timeout: float = 100) -> tuple[dict, str, str]:
    """``python -m vecenv.bench --suite SUITE --quick ARGS --out TMP``: its JSON, markdown and stdout."""
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "vecenv.bench", "--suite", suite, "--quick", *args, "--out", str(out)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env={**os.environ, "MPLBACKEND": "Agg"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (out / f"{suite}.md").read_text()
    assert md.strip() in proc.stdout
    data = json.loads((out / f"{suite}.json").read_text(), parse_constant=not_json)
    assert data["meta"]["command"].startswith(f"vecenv-bench --suite {suite} --quick")
    assert f"# vecenv benchmark: {suite}" in md and data["meta"]["date"] in md
    return data, md, proc.stdout


def not_json(constant: str) -> None:
    """``json.loads``'s ``parse_constant``: NaN and Infinity are Python's, not JSON's."""
    raise AssertionError(f"{constant} is not JSON: strict parsers refuse the file")


def test_results_are_strict_json_with_null_for_what_is_not_a_number(tmp_path, monkeypatch):
    """A suite's NaN or infinity (a rate of nothing, a ratio to zero) is null in SUITE.json, not
    the bare NaN that strict JSON parsers refuse; the files are whole, with no temporary left."""

    def run(args):
        return Outcome("| a | b |\n|---|---|\n", {"cells": [{"rate": math.nan, "ratio": [1.0, math.inf]}]})

    monkeypatch.setitem(cli.SUITES, "step", dataclasses.replace(cli.SUITES["step"], run=run))
    out = tmp_path / "bench"
    assert cli.main(["--suite", "step", "--out", str(out)]) == 0
    data = json.loads((out / "step.json").read_text(), parse_constant=not_json)
    assert data["cells"] == [{"rate": None, "ratio": [1.0, None]}]
    assert sorted(p.name for p in out.iterdir()) == ["step.json", "step.md"]


def positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


# -- the step suite -----------------------------------------------------------------------------


def test_benchmark_envs_pass_gymnasium_checks():
    check_env(BurnEnv(100, tail_prob=0.1), skip_render_check=True)
    check_env(FrameEnv(100), skip_render_check=True)
    assert burn(10) == 45


def test_heavy_tail_comes_from_the_env_seed():
    def costs(seed):
        env = BurnEnv(1, tail_prob=0.5, tail_factor=10)
        env.reset(seed=seed)
        return [env.step(0)[0][2] for _ in range(20)]

    assert costs(3) == costs(3)
    assert set(costs(3)) == {1.0, 10.0}


def test_tree_pss_counts_this_process():
    pss = tree_pss_kib()
    assert pss is None or pss > 1000


def test_step_suite_writes_markdown_json_and_chart(tmp_path):
    data, md, _ = bench(
        tmp_path,
        "step",
        "--workloads",
        "cartpole",
        "--sizes",
        "4",
        "--runners",
        "single,sync,vecenv-1w,envpool",
        "--seconds",
        "0.2",
    )
    assert "| cartpole | 4 | vecenv-1w |" in md
    cells = {c["runner"]: c for c in data["cells"]}
    assert {"single", "sync", "vecenv-1w"} <= set(cells)
    assert "envpool" in cells or any(n.startswith("envpool: not importable") for n in data["notes"])
    for c in cells.values():
        s = c["summary"]
        assert s is not None and s["rate_median"] > 0 and s["startup_s_median"] >= 0
        assert np.isfinite(s["rate_min"]) and s["rate_min"] <= s["rate_median"] <= s["rate_max"]
        assert c["reps"][0]["process_wall_s"] > 0 and c["reps"][0]["process_cpu_s"] > 0  # the whole process
    assert cells["sync"]["summary"]["ratio_to_baseline"] == 1.0
    assert positive(cells["vecenv-1w"]["summary"]["ratio_to_baseline"])
    assert positive(cells["vecenv-1w"]["summary"]["ideal_fraction"])
    if cells["vecenv-1w"]["summary"]["pss_mib_median"] is not None:  # /proc available
        assert cells["vecenv-1w"]["reps"][0]["processes"] >= 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert any(n.startswith("chart: matplotlib not installed") for n in data["notes"])
    else:
        assert (tmp_path / "bench" / "step.png").stat().st_size > 0


def test_scaling_suite_measures_each_worker_count_spinning_and_sleeping(tmp_path):
    data, md, _ = bench(tmp_path, "scaling", "--n", "6", "--workers", "2,1", "--seconds", "0.1")
    assert data["settings"]["workers"] == [1, 2]  # sorted
    cells = {c["runner"]: c for c in data["cells"]}
    curve = [f"vecenv-{k}w{s}" for k in (1, 2) for s in ("", "-sleep")]
    assert set(cells) == {"single", "single-par", "sync", "vecenv-auto", *curve}
    for c in cells.values():
        assert c["summary"] is not None and positive(c["summary"]["rate_median"]), c
    for k in (1, 2):  # the sleeping rows really ran with the spin off, the others with it on
        assert cells[f"vecenv-{k}w-sleep"]["reps"][0]["spin_limit_s"] == 0
        assert cells[f"vecenv-{k}w"]["reps"][0]["spin_limit_s"] > 0
        assert cells[f"vecenv-{k}w"]["workers"] == k and cells[f"vecenv-{k}w-sleep"]["spin"] is False
    assert cells["sync"]["reps"][0]["spin_limit_s"] is None  # no vecenv in that process
    assert "## cartpole, N=6" in md
    rows = [line for line in md.splitlines() if line.startswith(("| 1 |", "| 2 |", "| 3 |"))]
    assert len(rows) == 2 and all(line.count("**") == 4 for line in rows)  # a rate spinning and one sleeping


def test_scaling_suite_refuses_more_workers_than_envs(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vecenv.bench",
            "--suite",
            "scaling",
            "--n",
            "4",
            "--workers",
            "2,5",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "--workers: expected worker counts from 1 to --n (4), got 2,5" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_scaling_default_worker_counts():
    from vecenv.bench.scaling import default_workers

    assert default_workers(1) == [1]
    assert default_workers(2) == [1, 2]
    assert default_workers(4) == [1, 2, 3, 4]
    assert default_workers(16) == [1, 2, 4, 8, 15, 16]
    assert default_workers(12) == [1, 2, 4, 8, 11, 12]


def test_sleeping_rows_are_vecenv_only():
    from vecenv.bench.runners import MODE
    from vecenv.bench.vectors import VectorKind, make_vector
    from vecenv.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="spin=False is vecenv's alone, not sync's"):
        make_vector(VectorKind.SYNC, [], autoreset_mode=MODE, spin=False)


def test_an_unknown_workload_row_or_runner_is_refused_naming_the_choices():
    from vecenv.bench import envs, multiagent, rollouts
    from vecenv.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"^env_fn: expected a workload of cartpole, .*, got 'x'$"):
        envs.env_fn("x", {})
    with pytest.raises(InvalidArgumentError, match=r"^rollouts suite: expected a row of process, .*native, got 'x'$"):
        rollouts.measure_row({"row": "x", "n": 2})
    with pytest.raises(InvalidArgumentError, match=r"^multiagent suite: expected a runner of .*vecenv-2w.*, got 'x'$"):
        multiagent.build("x", "simple_spread", 1)


def test_plan_keeps_zero_workers_and_auto_at_every_size():
    cells, _ = plan(["cartpole"], [1, 2], ["vecenv-0w", "vecenv-2w", "vecenv-auto"], quick=True)
    assert sorted((c["n"], c["runner"]) for c in cells) == [
        (1, "vecenv-0w"),
        (1, "vecenv-auto"),
        (2, "vecenv-0w"),
        (2, "vecenv-2w"),
        (2, "vecenv-auto"),
    ]  # vecenv-2w needs N >= 2; 0w and auto (which picks at most N) fit every N
    assert RUNNERS["vecenv-0w"].fixed_workers() == 0 and RUNNERS["vecenv-auto"].workers == "auto"
    with pytest.raises(ValueError, match="chooses its worker count"):
        RUNNERS["vecenv-auto"].fixed_workers()
    args = step.resolve(cli.parse_args([]))
    assert args.suite == "step" and {"vecenv-0w", "vecenv-auto"} <= set(args.runners)
    assert not set(step.OPT_IN_RUNNERS) & set(args.runners)  # Ray rows only when named


@pytest.mark.timeout(90)
def test_zero_workers_and_auto_run_and_idle_workers_use_no_cpu(tmp_path):
    data, md, _ = bench(
        tmp_path, "step", "--workloads", "cartpole", "--sizes", "2", "--runners", "vecenv-0w,vecenv-2w,vecenv-auto"
    )
    cells = {c["runner"]: c for c in data["cells"]}
    assert set(cells) == {"vecenv-0w", "vecenv-2w", "vecenv-auto"}
    for c in cells.values():
        s, rep = c["summary"], c["reps"][0]
        assert s is not None and s["rate_median"] > 0
        assert rep["obs_shape"] == [2, 4] and rep["obs_dtype"] == "float32"
        idle = s["idle_cpu_cores_median"]
        assert idle is not None and math.isfinite(idle) and idle >= 0
        assert rep["idle_wall_s"] >= 0.45 and rep["idle_cpu_s"] >= 0
    assert cells["vecenv-0w"]["reps"][0]["processes"] == 1  # every env in the measuring process
    assert cells["vecenv-2w"]["reps"][0]["processes"] == 3
    assert cells["vecenv-2w"]["summary"]["idle_cpu_cores_median"] < 0.5  # workers block, they do not spin
    chosen = cells["vecenv-auto"]["reps"][0]["workers_chosen"]
    assert chosen in (0, 2) and cells["vecenv-auto"]["summary"]["workers_chosen"] == [chosen]
    assert cells["vecenv-auto"]["reps"][0]["processes"] == 1 + chosen
    assert cells["vecenv-auto"]["reps"][0]["workers_chosen_reason"]
    assert f"| cartpole | 2 | vecenv-auto ({chosen}w) |" in md and "| cartpole | 2 | vecenv-0w |" in md
    assert "idle CPU (cores) |" in md


def test_a_runner_is_planned_only_for_the_workloads_it_steps(monkeypatch):
    monkeypatch.setattr(Requirement, "missing", lambda self: False)  # as if every library were installed
    cells, notes = plan(["cartpole", "py100us"], [2], ["sync", "envpool"], quick=True)
    assert sorted((c["workload"], c["runner"]) for c in cells) == [
        ("cartpole", "envpool"),
        ("cartpole", "sync"),
        ("py100us", "sync"),
    ]
    assert notes == ["envpool: skipped for py100us (it steps only cartpole)"]
    assert RUNNERS["sync"].steps("py100us") and not RUNNERS["envpool"].steps("py100us")


def test_a_library_runner_is_skipped_with_the_extra_that_installs_it(monkeypatch):
    # SuperSuit imports PettingZoo without declaring it: `pip install supersuit`, as the note
    # said, made every supersuit cell fail; the notes name the .[anchors] extra, which brings both.
    installed = {"supersuit": True, "pettingzoo": False, "envpool": False}
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        if name in installed:
            return real_find_spec("json") if installed[name] else None  # any spec stands for installed
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    cells, notes = plan(["cartpole"], [2], ["sync", "supersuit", "envpool"], quick=True)
    assert [c["runner"] for c in cells] == ["sync"]
    assert notes == [
        'supersuit: needs pettingzoo, skipped (pip install -e ".[anchors]" to include it)',
        'envpool: not importable, skipped (pip install -e ".[anchors]" to include it)',
    ]
    installed.update(supersuit=False, pettingzoo=True)
    assert plan(["cartpole"], [2], ["supersuit"], quick=True)[1] == [
        'supersuit: not importable, skipped (pip install -e ".[anchors]" to include it)'
    ]


def test_atari_is_planned_only_when_importable(monkeypatch):
    installed = all(importlib.util.find_spec(m) is not None for m in ATARI_DEPS)
    assert (atari_missing() is None) == installed
    assert "atari" in cli.parse_args([]).workloads  # filtered by plan(), with a note
    runners = ["single", "vecenv-2w"]
    if installed:
        cells, notes = plan(["cartpole", "atari"], [2], runners, quick=True)
        assert {(c["workload"], c["runner"]) for c in cells if c["workload"] == "atari"} == {
            ("atari", "single"),
            ("atari", "vecenv-2w"),
        }
        assert ATARI_MISSING not in notes
    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 now raises ImportError
    assert atari_missing() == ATARI_MISSING
    cells, notes = plan(["cartpole", "atari"], [2], runners, quick=True)
    assert cells and all(c["workload"] == "cartpole" for c in cells)
    assert notes == [ATARI_MISSING]
    assert "opencv-python-headless" in notes[0] and "ale-py" in notes[0]


@pytest.mark.timeout(60)
def test_atari_envs_build_in_a_spawned_worker():
    for m in ATARI_DEPS:
        pytest.importorskip(m)
    import vecenv

    envs = vecenv.SubprocVectorEnv([make_atari], 1, context="spawn")  # a fresh interpreter builds it
    try:
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
        obs, *_ = envs.step(np.array([1]))
        assert obs.shape == (1, 4, 84, 84)
    finally:
        envs.close()


@pytest.mark.timeout(60)
def test_atari_workload_runs(tmp_path):
    for m in ATARI_DEPS:
        pytest.importorskip(m)
    data, md, _ = bench(
        tmp_path, "step", "--workloads", "atari", "--sizes", "2", "--runners", "single,vecenv-2w", "--seconds", "0.1"
    )
    cells = {c["runner"]: c for c in data["cells"]}
    assert set(cells) == {"single", "vecenv-2w"} and ATARI_MISSING not in data["notes"]
    assert cells["single"]["reps"][0]["obs_shape"] == [4, 84, 84]
    assert cells["vecenv-2w"]["reps"][0]["obs_shape"] == [2, 4, 84, 84]
    for c in cells.values():
        assert c["reps"][0]["obs_dtype"] == "uint8" and c["summary"]["rate_median"] > 0
    assert "| atari | 2 | vecenv-2w |" in md


# -- the other suites ---------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_rollouts_suite_rows_and_ratios(tmp_path):
    args = ["--rows", "process,parent,native", "--num-envs", "4", "--native-envs", "8", "--rollout-steps", "4"]
    data, md, _ = bench(tmp_path, "rollouts", *args, "--seconds", "0.1")
    backends = {s["row"]: s for s in data["summary"]["backends"]}
    assert set(backends) == {"process", "parent"}
    for s in backends.values():
        assert positive(s["rollout_median"]) and positive(s["step_median"])
        assert positive(s["rollout_x_step"]) and positive(s["rollout_x_process_step"])
        assert s["idle_cpu_cores"] is None or s["idle_cpu_cores"] >= 0
    assert backends["process"]["processes"] == 3 and backends["parent"]["processes"] == 1
    assert backends["process"]["rollout_x_process_step"] == pytest.approx(backends["process"]["rollout_x_step"])
    native = data["summary"]["native"]
    assert [s["label"] for s in native] == [
        "make_vec(8), precomputed actions",
        "make_vec(8), action_space.sample()",
        "2 workers × make_vec(4): step",
        "2 workers × make_vec(4): rollout(4)",
    ]
    assert native[0]["x_make_vec"] == 1.0 and all(positive(s["x_make_vec"]) for s in native)
    assert "## Rollouts against steps (CartPole, N=4, T=4, env-steps/s)" in md and "| every env in the parent" in md
    assert not data["summary"]["exact"] and not data["notes"]


def test_rollouts_exact_row_compares_batches():
    pytest.importorskip("torch")
    from vecenv.bench.rollouts import measure_row

    rows = measure_row({"row": "exact", "rows": 128})["rows"]
    assert {r["batch"] for r in rows} == {1, 2, 3, 4, 5, 8, 64} and {r["mlp"] for r in rows} == {
        "4x64x64x2",
        "84x256x256x18",
    }
    for r in rows:
        assert (
            r["whole_batch"] == 128
            and 0 <= r["rows_differing"] <= 1
            and r["argmax_flips"] >= 0
            and r["max_abs_diff"] >= 0
        )
        assert (r["rows_differing"] == 0) == (r["max_abs_diff"] == 0)


@pytest.mark.timeout(120)
def test_collection_suite_rows_and_ratios(tmp_path):
    data, md, _ = bench(tmp_path, "collection", "--rows", "plain,collect,collect-8-step", "--steps", "2000")
    rows = {s["row"]: s for s in data["summary"]}
    assert set(rows) == {"plain", "collect", "collect-8-step"}
    assert rows["plain"]["x_plain"] == 1.0 and rows["plain"]["x_plain_per_cpu_s"] == 1.0
    assert rows["plain"]["transitions"] == rows["collect"]["transitions"] == 2000
    assert rows["collect-8-step"]["transitions"] == 1000  # a quarter of --steps, at least 1,000
    for s in rows.values():
        assert positive(s["rate_median"]) and positive(s["x_plain"]) and positive(s["x_plain_per_cpu_s"])
    assert "| `vecenv-collect` defaults (rollouts; 8 envs, more for long runs) | 2,000 |" in md


def test_collection_suite_needs_the_plain_row():
    with pytest.raises(SystemExit) as e:
        cli.main(["--suite", "collection", "--rows", "collect-8"])
    assert e.value.code == 2


def test_a_module_that_only_some_versions_of_its_package_have_is_a_need():
    """The kaz workload needs knights_archers_zombies_v11, which PettingZoo 1.25 and 1.26 (within
    the [pettingzoo] extra) lack: skipped with a note, as a missing package is, not a crash.
    A dotted name under a package that is not installed at all is missing too."""
    assert "pettingzoo.butterfly.knights_archers_zombies_v11" in WORKLOADS["kaz"].needs
    assert missing_modules(["json", "json.decoder", "no_such_package.sub", "json.no_such_module"]) == [
        "no_such_package.sub",
        "json.no_such_module",
    ]


@pytest.mark.timeout(120)
def test_multiagent_suite_rows_and_ratios(tmp_path):
    for m in ("pettingzoo", "supersuit", "mpe2", "pymunk"):
        pytest.importorskip(m)
    args = ["--workloads", "simple_spread", "--runners", "supersuit-0,vecenv-2w,ceiling", "--kaz-steps", "40"]
    data, md, _ = bench(tmp_path, "multiagent", *args, "--copies", "2", "--seconds", "0.3")
    rows = {s["runner"]: s for s in data["summary"]["simple_spread"]}
    assert set(rows) == {"supersuit-0", "vecenv-2w", "ceiling"}
    assert rows["supersuit-0"]["x_baseline"] == 1.0 and rows["ceiling"]["x_ceiling"] == 1.0
    for s in rows.values():
        assert positive(s["rate_median"]) and positive(s["x_baseline"]) and positive(s["x_ceiling"])
        assert s["cpu_x_baseline"] is None or math.isfinite(s["cpu_x_baseline"])  # None: no clock tick counted
    kaz = data["kaz_deaths"]
    assert kaz["agent_steps"] >= 40 and kaz["agents_left_early"] >= 0 and kaz["rate"] > 0
    assert "## simple_spread_v3 (MPE2, 3 agents), 2 copies" in md and "## Agent death" in md


# -- the runner, the options and the help ---------------------------------------------------------


def test_run_child_reports_a_task_it_does_not_know():
    res = child.run_child({"task": "no-such-task"}, timeout=60)
    assert "unknown benchmark task 'no-such-task'" in res["error"] and "rollouts" in res["error"]


def test_run_process_kills_at_the_limit_and_times_the_process():
    done = child.run_process([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], timeout=60)
    assert (done.returncode, done.stdout.strip(), done.timed_out) == (3, "out", False)
    assert done.wall_s > 0 and done.cpu_s > 0
    hung = child.run_process([sys.executable, "-c", "import threading; threading.Event().wait()"], timeout=0.5)
    assert hung.timed_out and hung.returncode != 0


def test_help_lists_every_suite_and_explains_the_chosen_one(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    for name in cli.SUITES:
        assert f"\n  {name} " in text
    assert "The step suite (the default)" in text and "--workloads" in text
    with pytest.raises(SystemExit):
        cli.main(["--suite", "rollouts", "--help"])
    text = capsys.readouterr().out
    assert "The rollouts suite:" in text and "--rollout-steps" in text and "--workloads" not in text


def test_import_vecenv_loads_no_bench_cli_or_heavy_module():
    heavy = "('tqdm', 'ray', 'torch')"
    code = f"import sys, vecenv; print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy} or 'bench' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.timeout(60)
def test_the_supersuit_runner_steps_supersuits_processes_over_gymnasium_envs():
    """SuperSuit's own path for a Gymnasium env fails with Gymnasium 1.x (its single-env
    adapter takes ``reset()`` for the observation alone); the runner's adapter lets SuperSuit's
    processes step CartPoles through whole episodes, resetting each at its end."""
    pytest.importorskip("supersuit")
    import gymnasium as gym

    runner = RUNNERS["supersuit"]
    envs = runner.build(runner, [lambda: gym.make("CartPole-v1")] * 4, "cartpole")
    try:
        assert envs.num_envs == 4 and envs.single_action_space == gym.spaces.Discrete(2)
        obs, _ = envs.reset(seed=3)
        assert obs.shape == (4, 4)
        ends = 0
        for actions in np.random.default_rng(0).integers(0, 2, (200, 4)):
            obs, rewards, terms, truncs, infos = envs.step(actions)
            assert obs.shape == (4, 4) and rewards.tolist() == [1.0] * 4 and len(infos) == 4
            ends += int(terms.sum())
            assert (np.abs(obs[terms.astype(bool), 2]) < 0.05).all(), "an ended CartPole starts again upright"
        assert ends > 4
    finally:
        envs.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "0"], "--sizes: expected env counts >= 1, got 0"),
        (["--reps", "0"], "--reps: expected an int >= 1, got 0"),
        (["--seconds", "-1"], "--seconds: expected a finite number > 0, got -1.0"),
        (["--seconds", "inf"], "--seconds: expected a finite number > 0, got inf"),
        (["--sizes", ""], "argument --sizes: expected a comma-separated list of ints, got ''"),
        (["--sizes", "abc"], "argument --sizes: expected a comma-separated list of ints, got 'abc'"),
        (["--suite", "rollouts", "--native-envs", "3"], "--native-envs: expected an even int >= 2"),
        (["--suite", "multiagent", "--copies", "1"], "--copies: expected an int >= 2, got 1"),
        (["--suite", "collection", "--steps", "10"], "--steps: expected an int >= 1000, got 10"),
        (["--suite", "foo"], "argument --suite: invalid choice: 'foo'"),
        (["--out", "/proc/no-such-dir/x"], "--out: cannot write the results to /proc/no-such-dir/x"),
        (["--out", __file__], f"--out: expected a folder to write SUITE.md and SUITE.json into, got {__file__}"),
    ],
)
def test_a_bad_option_is_named_with_its_value_before_anything_runs(
    argv: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"vecenv-bench: error: {message}" in err, err


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("video_cost.py", ["--steps", "-1"], "argument --steps: expected a positive integer, got -1"),
        ("step_cost.py", ["--reps", "0"], "argument --reps: expected a positive integer, got 0"),
        ("bench_step_overhead.py", ["--num-envs", "0"], "argument --num-envs: expected a positive integer, got 0"),
        ("learner_pause.py", ["--steps", "0"], "argument --steps: expected a positive integer, got 0"),
        ("threads_demo.py", ["--sizes", "0"], "argument --sizes: expected matrix sizes >= 1, got 0"),
        ("bench_train_rollouts.py", ["--seeds", "x"], "argument --seeds: expected comma-separated non-negative"),
        ("bench_train_rollouts.py", ["--configs", "foo"], "argument --configs: expected a comma-separated subset"),
        ("bench_train_rollouts.py", ["--configs", ""], "argument --configs: expected a comma-separated subset"),
        ("bench_train_rollouts.py", ["--env-step-ms", "-1"], "argument --env-step-ms: expected a non-negative"),
        ("bench_train_rollouts.py", ["--num-envs", "12"], "argument --num-envs: expected at most 8 or a multiple"),
        ("bench_train_rollouts.py", ["--num-envs", "1"], "argument --num-envs: expected at least 2"),
        ("wake_latency.py", ["--pause-us", "-5"], "argument --pause-us: expected a non-negative number, got -5"),
        ("tutorial_equivalence.py", ["--rollouts", "0"], "argument --rollouts: expected a positive integer, got 0"),
        ("soak.py", ["--steps", "-1"], "argument --steps: expected a positive integer, got -1"),
        ("sb3_suite.py", ["/no/such/folder"], "suite: expected a folder holding SB3's tests/"),
        ("sb3_ppo.py", ["--num-envs", "0"], "argument --num-envs: expected a positive integer, got 0"),
        ("sb3_ppo.py", ["--total-timesteps", "-5"], "argument --total-timesteps: expected a positive integer, got -5"),
        ("sb3_ppo.py", ["--env-step-ms", "-1"], "argument --env-step-ms: expected a non-negative number, got -1"),
        ("sb3_ppo.py", ["--env-id", "Nope-v0"], "argument --env-id: expected a registered Gymnasium env id, got"),
        ("cleanrl_ppo.py", ["--ppo", __file__, "--num-envs", "0"], "argument --num-envs: expected a positive integer"),
        ("cleanrl_ppo.py", ["--ppo", __file__, "--env-id", "Nope-v0"], "argument --env-id: expected a registered"),
        ("gym_yardstick.py", ["--env-id", "Nope-v0"], "argument --env-id: expected a registered Gymnasium env id"),
        ("torchrl_collect.py", ["--runs", "sync,gpu"], "--runs: expected a comma-separated list of distinct runs"),
        ("torchrl_collect.py", ["--num-envs", "5"], "--num-envs: expected an even number"),
        ("torchrl_collect.py", ["--frames", "10"], "--frames: expected at least two batches, 800 frames"),
        ("torchrl_collect.py", ["--repeat", "0"], "argument --repeat: expected a positive integer, got 0"),
    ],
)
def test_scripts_refuse_bad_values_in_one_line(script: str, args: list[str], message: str) -> None:
    """A value out of range is a usage error (exit status 2, one line naming the option),
    not a traceback from wherever it would have failed later."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True, timeout=100
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_ends_its_measurement_and_says_so_in_one_line(tmp_path: Path, signum: int) -> None:
    """Ctrl+C or SIGTERM while a measurement runs in its fresh interpreter: the child is killed
    with the run (never left measuring on its own), one line says nothing was written, and the
    exit status is 128 + the signal."""
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "vecenv.bench", "--workloads", "cartpole", "--sizes", "8", "--runners", "sync"]
    cmd += ["--seconds", "30", "--reps", "1", "--out", str(out)]
    # Once the measurement's interpreter has started.
    err, measuring = signalled_once_started(cmd, signum, children=1, start_s=60, cwd=ROOT)
    lines = err.strip().splitlines()
    assert lines[-1].endswith("no results were written") and "Traceback" not in err, err
    assert_all_ended(measuring, "the measurement")
    assert not (out / "step.json").exists()


def test_many_cores_script_says_how_to_call_it():
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "many_cores.sh")], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "usage: bash scripts/many_cores.sh OUT_DIR [PYTHON]" in proc.stderr


# -- the measuring scripts' command lines -------------------------------------------------------

SCRIPTS = ROOT / "scripts"


def test_every_script_ends_through_run_main():
    """Each script's ``__main__`` block runs its ``main`` through ``run_main``: one line and status
    130/143 on Ctrl+C or SIGTERM, not a traceback or a silent death that skips closing workers.
    (``collect_rollouts.py`` is ``vecenv-collect``, which ends so itself.)"""
    import ast

    bare = []
    for path in sorted(SCRIPTS.glob("*.py")):
        if path.name == "collect_rollouts.py":
            continue
        tree = ast.parse(path.read_text())
        guard = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
        called = {
            c.func.id for g in guard for c in ast.walk(g) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
        }
        if "run_main" not in called:
            bare.append(path.name)
    assert bare == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("script", "args", "option"),
    [
        ("bench_step_overhead", ["--kinds", "foo"], "--kinds"),  # was: the hidden --child, exit 1
        ("bench_step_overhead", ["--kinds", ","], "--kinds"),
        ("bench_step_overhead", ["--baseline", "nowhere"], "--baseline"),
        ("learner_pause", ["--think-ms", "-1"], "--think-ms"),
        ("tutorial_equivalence", ["--seed", "-1"], "--seed"),
        ("bench_rllib", ["cartpole", "--num-envs", "0"], "--num-envs"),
        ("ray_paired", ["cartpole", "--seconds", "nan"], "--seconds"),
        ("threads_demo", ["--context", "nope"], "--context"),
        ("weights_push", ["--rounds", "0"], "--rounds"),  # torch is imported after the options
        ("rollout_timeline", ["--idle-ms", "-1"], "--idle-ms"),  # its trainer (torch) loads after the options
        ("supersuit_suite", ["somewhere", "--min-cpus", "-1"], "--min-cpus"),
    ],
)
def test_a_script_refuses_bad_input_in_one_line(tmp_path, script, args, option):
    from tests.helpers.scripts import run_with_bad_input

    line = run_with_bad_input(script, args, cwd=tmp_path)
    assert f"argument {option}: " in line, line


@pytest.mark.timeout(120)
def test_bench_step_overhead_measures_a_baseline_from_before_its_helpers(tmp_path):
    """docs/benchmarks.md's ``bench_step_overhead.py --baseline DIR``: the rows of DIR run in
    processes that import vecenv from DIR, an earlier checkout. They imported the script's own
    helpers (vecenv.argtypes, vecenv.bench.stopping) from there too, so a checkout from before
    those existed failed every baseline row with ModuleNotFoundError. This baseline holds only
    what the rows use, and a vecenv.bench without those helpers, as an old checkout would."""
    baseline = tmp_path / "baseline"
    (baseline / "vecenv" / "bench").mkdir(parents=True)
    (baseline / "vecenv" / "bench" / "__init__.py").write_text("")
    (baseline / "vecenv" / "__init__.py").write_text(
        "import gymnasium as gym\n\n\n"
        "def SubprocVectorEnv(fns, num_workers):\n"
        "    return gym.vector.SyncVectorEnv(fns)\n"
    )
    cmd = [sys.executable, str(SCRIPTS / "bench_step_overhead.py"), "--baseline", str(baseline)]
    cmd += ["--kinds", "sync,vecenv-w0", "--num-envs", "2", "--steps", "50", "--reps", "1"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[:2] for line in proc.stdout.splitlines()]
    assert ["vecenv-w0", "(baseline)"] in rows and ["vecenv-w0", "(this)"] in rows, proc.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_script_closes_its_workers_and_says_so_in_one_line(tmp_path, signum):
    """step_cost.py stands for the measuring scripts: Ctrl+C printed a traceback, SIGTERM killed
    it without a word and without closing its workers. Its sync row comes first (at 50,000
    steps about a second of CPU; it took ten at 200,000), then the 2-worker row, which steps
    slower than sync and is still stepping when the signal comes. Were that row over before its
    workers were seen, the next repetition's 2-worker row would be signalled instead."""
    cmd = [sys.executable, str(SCRIPTS / "step_cost.py"), "--num-envs", "2", "--steps", "50000", "--reps", "3"]
    # Once "vecenv 2 workers" has started.
    err, workers = signalled_once_started(cmd, signum, children=2, start_s=90, cwd=tmp_path)
    ended = "interrupted" if signum == signal.SIGINT else "terminated"
    assert err.strip().splitlines() == [f"step_cost.py: {ended}: nothing was written"], err
    assert_all_ended(workers, "a worker")


@pytest.mark.timeout(60)
def test_skip_notes_of_the_other_suites_name_what_installs_the_module(tmp_path, monkeypatch, capsys):
    # They said only "mpe2 not importable, skipped": nothing on what brings it back.
    from vecenv.bench import multiagent, rollouts

    monkeypatch.setattr(multiagent, "missing_modules", lambda modules: ["mpe2"])
    out = tmp_path / "bench"
    assert cli.main(["--suite", "multiagent", "--workloads", "simple_spread", "--out", str(out)]) == 0
    notes = json.loads((out / "multiagent.json").read_text())["notes"]
    assert notes == ['simple_spread: mpe2 not importable, skipped (pip install -e ".[test]" to include it)']
    monkeypatch.setattr(rollouts, "missing_modules", lambda modules: list(modules))
    assert cli.main(["--suite", "rollouts", "--rows", "exact", "--out", str(out)]) == 0
    notes = json.loads((out / "rollouts.json").read_text())["notes"]
    assert notes == ['exact: torch not importable, skipped (pip install -e ".[train]" to include it)']
    capsys.readouterr()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", ["refused", "failed", "interrupted"])
def test_a_run_that_writes_nothing_leaves_no_out_folder(ending, tmp_path, monkeypatch, capsys):
    # The --out folder was made before the options were checked: "--sizes 0" left an empty
    # bench-results/ behind in the working folder, as did a failed or interrupted run.
    out = tmp_path / "new" / "bench"

    def run(args):
        raise {"failed": SuiteFailed("calibration failed: no"), "interrupted": KeyboardInterrupt()}[ending]

    if ending != "refused":
        monkeypatch.setitem(cli.SUITES, "step", dataclasses.replace(step.SUITE, run=run))
    with pytest.raises(SystemExit) if ending == "refused" else contextlib.nullcontext() as exit_info:
        status = cli.main(["--sizes", "0", "--out", str(out)])
    status = exit_info.value.code if ending == "refused" else status
    assert status == {"refused": 2, "failed": 1, "interrupted": 130}[ending]
    assert sorted(tmp_path.iterdir()) == []
    capsys.readouterr()


def test_a_repeated_item_of_a_list_option_is_measured_once():
    # "--sizes 8,32,8" planned N=8 twice: two rows of one name, measured twice, each one's
    # "× Sync" taken against the other's Sync rather than its own.
    args = cli.parse_args(["--sizes", "8,32,8", "--runners", "sync,single,sync", "--workloads", "cartpole,cartpole"])
    assert (args.sizes, args.runners, args.workloads) == ([8, 32], ["sync", "single"], ["cartpole"])
    cells, _ = plan(args.workloads, args.sizes, args.runners, quick=True)
    assert [(c["n"], c["runner"]) for c in cells] == [(8, "sync"), (32, "sync"), (1, "single")]
    assert cli.parse_args(["--suite", "scaling", "--workers", "2,1,2"]).workers == [2, 1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cut", ["header", "json"])
def test_ctrl_c_while_the_results_are_written_ends_in_one_line(cut, tmp_path, monkeypatch, capsys):
    # After the measurements the handlers were gone: Ctrl+C while the header's facts were read
    # (git, twice) or the files written printed a traceback, and SIGTERM killed the run silently.
    out = tmp_path / "bench"
    monkeypatch.setitem(
        cli.SUITES, "step", dataclasses.replace(step.SUITE, run=lambda args: Outcome("## rows\n", {"cells": []}))
    )
    real_write = cli.write_text_atomically

    def cut_in(stage, real):
        def call(*args, **kwargs):
            if cut == stage and (stage == "header" or str(args[0]).endswith(".json")):
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(cli, "meta", cut_in("header", cli.meta))
    monkeypatch.setattr(cli, "write_text_atomically", cut_in("json", real_write))
    assert cli.main(["--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    if cut == "header":
        assert err == ["vecenv-bench: interrupted: no results were written"]
        assert not out.exists()
    else:
        assert err == [f"vecenv-bench: interrupted: only {out / 'step.md'} written"]
        assert sorted(p.name for p in out.iterdir()) == ["step.md"]


#: What the calibration child gives, for the step suite's method line.
_CALIBRATION = {
    "iterations_per_us": 10.0,
    "iters_100us": 1000,
    "iters_1ms": 10000,
    "iters_50us": 500,
    "inference_reps": 1,
    "inference_ms": 0.5,
}


def _measured(rate: float) -> dict:
    """One repetition's result, as a step measurement's child gives it."""
    return {"rate": rate, "startup_s": 0.5, "pss_mib": 40.0, "processes": 1, "idle_cpu_cores": 0.0}


def _children(monkeypatch, results: list) -> None:
    """The step suite's children replaced by ``results``, one per measurement in order (an
    exception is raised there, as Ctrl+C or SIGTERM would be while the child measures)."""
    measure = _replayed(results)

    def run_child(spec, timeout, extra_env=None):
        return dict(_CALIBRATION) if spec["task"] == "calibrate" else measure()

    monkeypatch.setattr(step, "run_child", run_child)


_ONE_CELL = ["--workloads", "cartpole", "--sizes", "8,32", "--runners", "sync", "--seconds", "0.1"]


@pytest.mark.timeout(60)
def test_a_cell_whose_repetition_failed_is_marked_with_how_many_and_why(tmp_path, monkeypatch, capsys):
    # Its figures came from the repetitions before the failure, and its row looked like a clean
    # cell's: only a note far below said that one of them had failed.
    out = tmp_path / "bench"
    failure = {"error": "EOFError: worker died"}
    # Interleaved: N=8, N=32, N=8 (fails, not measured again), N=32, N=32.
    _children(monkeypatch, [_measured(1000.0), _measured(2000.0), failure, _measured(2000.0), _measured(2000.0)])
    assert cli.main([*_ONE_CELL, "--reps", "3", "--out", str(out)]) == 0
    capsys.readouterr()
    md, data = (out / "step.md").read_text(), json.loads((out / "step.json").read_text())
    n8, n32 = data["cells"]
    assert (n8["summary"]["failed_reps"], n8["summary"]["failure"]) == (1, "EOFError: worker died")
    assert (n32["summary"]["failed_reps"], n32["summary"]["failure"]) == (0, None)
    assert data["partial"] is None
    rows = [line for line in md.splitlines() if line.startswith("| cartpole")]
    assert rows[0].startswith("| cartpole | 8 | sync | **1,000** (1,000–1,000) † |"), rows
    assert "†" not in rows[1], rows
    assert (
        "† cartpole N=8 sync: 1 of 3 repetitions failed (EOFError: worker died) and the cell was not measured "
        "again: its figures are from 1 of 3." in md.splitlines()
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_writes_what_it_measured_marked_as_partial(tmp_path, monkeypatch, capsys, signum):
    # Ctrl+C or SIGTERM after minutes of measurements threw all of them away.
    from vecenv.interrupts import Terminated

    out = tmp_path / "bench"
    interrupt = KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
    _children(monkeypatch, [_measured(1000.0), interrupt])
    assert cli.main([*_ONE_CELL, "--reps", "2", "--out", str(out)]) == 128 + signum
    err = capsys.readouterr().err.strip().splitlines()
    ended = "interrupted" if signum == signal.SIGINT else "terminated"
    assert err[-1] == (
        f"vecenv-bench: {ended} after 1 of 4 measurements: partial results written to "
        f"{out / 'step.md'}, {out / 'step.json'}"
    )
    assert sorted(p.name for p in out.iterdir()) == ["step.json", "step.md"]  # no chart of a cut run
    md, data = (out / "step.md").read_text(), json.loads((out / "step.json").read_text())
    how = "interrupted (Ctrl+C)" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert data["partial"] == f"the run was {how} after 1 of 4 measurements; what was not measured is missing"
    assert f"**Partial results**: {data['partial']}." in md
    n8, n32 = data["cells"]
    assert n8["summary"]["reps"] == 1 and n32["summary"] is None and n32["reps"] == []
    assert "| cartpole | 32 | sync | not measured |" in md
    assert "the run was interrupted after 1 of 4 measurements: the others were not measured" in data["notes"]


def _replayed(results: list):
    """A stand-in for a measurement that gives ``results`` in order, one a call (an exception
    is raised there, as Ctrl+C or SIGTERM would be while the measurement runs)."""
    pending = list(results)

    def measure(*args, **kwargs):
        result = pending.pop(0)
        if isinstance(result, BaseException):
            raise result
        return result

    return measure


@dataclasses.dataclass(frozen=True)
class _OtherSuite:
    """How to run one of the suites beside step and scaling on stand-in measurements: its
    options (two rows, two repetitions: four measurements, interleaved as A, B, A, B), the
    measurement it calls, one result of it at ``rate``, its two rows' labels and where its JSON
    keeps their summaries."""

    args: tuple[str, ...]
    measurement: str
    result: Callable[[float], dict]
    labels: tuple[str, str]
    summaries: Callable[[dict], list]


def _other_suites() -> dict[str, _OtherSuite]:
    from vecenv.bench import collection, multiagent, rollouts

    return {
        "rollouts": _OtherSuite(
            ("--rows", "process,inline", "--seconds", "0.1"),
            "vecenv.bench.rollouts.run_child",
            lambda rate: {"rollout": rate, "step": rate / 2, "processes": 3, "idle_cpu_cores": 0.0},
            (rollouts.BACKENDS["process"], rollouts.BACKENDS["inline"]),
            lambda data: data["summary"]["backends"],
        ),
        "collection": _OtherSuite(
            ("--rows", "plain,collect", "--steps", "1000"),
            "vecenv.bench.collection._measure",
            lambda rate: {"transitions": 1000, "wall_s": 1000 / rate, "cpu_s": 1.0, "rate": rate, "per_cpu_s": 1000.0},
            (collection.ROWS["plain"].label, collection.ROWS["collect"].label),
            lambda data: data["summary"],
        ),
        "multiagent": _OtherSuite(
            ("--workloads", "simple_spread", "--runners", "supersuit-0,vecenv-2w", "--seconds", "0.1"),
            "vecenv.bench.multiagent.run_child",
            lambda rate: {"rate": rate, "cpu_per_step": 1e-5, "rows": 6},
            (multiagent.RUNNERS["supersuit-0"], multiagent.RUNNERS["vecenv-2w"]),
            lambda data: data["summary"]["simple_spread"],
        ),
    }


def _table_row(md: str, label: str) -> str | None:
    return next((line for line in md.splitlines() if line.startswith(f"| {label} |")), None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("suite", ["rollouts", "collection", "multiagent"])
def test_a_row_of_another_suite_whose_repetition_failed_is_marked(tmp_path, monkeypatch, capsys, suite):
    # The row that failed at its second repetition showed the first one's figures as a clean
    # row's; only a note far below said that it had failed.
    case = _other_suites()[suite]
    monkeypatch.setattr("vecenv.bench.multiagent.missing_modules", lambda modules: [])
    failure = {"error": "EOFError: worker died"}
    results = [case.result(1000.0), case.result(2000.0), failure, case.result(2000.0)]
    monkeypatch.setattr(case.measurement, _replayed(results))
    out = tmp_path / "bench"
    assert cli.main(["--suite", suite, *case.args, "--reps", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    md, data = (out / f"{suite}.md").read_text(), json.loads((out / f"{suite}.json").read_text())
    first, second = case.summaries(data)
    assert (first["reps"], first["failed_reps"], first["failure"]) == (1, 1, "EOFError: worker died")
    assert (second["reps"], second["failed_reps"], second["failure"]) == (2, 0, None)
    assert data["partial"] is None
    a, b = (_table_row(md, label) for label in case.labels)
    assert a is not None and "**1,000** †" in a, a
    assert b is not None and "†" not in b, b
    assert (
        f"† {case.labels[0]}: 1 of 2 repetitions failed (EOFError: worker died) and the row was not measured "
        "again: its figures are from 1 of 2." in md.splitlines()
    )


@pytest.mark.timeout(60)
def test_a_failed_exact_row_of_the_rollouts_suite_is_marked(tmp_path, monkeypatch, capsys):
    # The exact row's one run failed: its table vanished, unmarked, and only a note said why.
    monkeypatch.setattr("vecenv.bench.rollouts.missing_modules", lambda modules: [])
    monkeypatch.setattr("vecenv.bench.rollouts.run_child", _replayed([{"error": "EOFError: worker died"}]))
    md, data = _one_run_suite(tmp_path, capsys, "rollouts", ["--rows", "exact"])
    _assert_one_run_failed(md, data["summary"]["exact_failed"][0], "| MLPs | failed † |", "exact", "row")


@pytest.mark.timeout(60)
def test_a_failed_agent_death_run_of_the_multiagent_suite_is_marked(tmp_path, monkeypatch, capsys):
    # The agent-death run failed: its table vanished, unmarked, and only a note said why.
    monkeypatch.setattr("vecenv.bench.multiagent.missing_modules", lambda modules: [])
    stepping = {"rate": 1000.0, "cpu_per_step": 1e-5, "rows": 6}
    replies = _replayed([stepping, {"error": "EOFError: worker died"}])
    monkeypatch.setattr("vecenv.bench.multiagent.run_child", replies)
    args = ["--workloads", "simple_spread", "--runners", "supersuit-0", "--seconds", "0.1", "--kaz-steps", "40"]
    md, data = _one_run_suite(tmp_path, capsys, "multiagent", [*args, "--reps", "1"])
    _assert_one_run_failed(md, data["kaz_deaths"], "| 40 planned | — | — | failed † |", "agent-death run", "run")


def _one_run_suite(tmp_path, capsys, suite: str, args: list[str]) -> tuple[str, dict]:
    """``vecenv-bench --suite SUITE ARGS`` on stand-in measurements: its markdown and JSON."""
    out = tmp_path / "bench"
    assert cli.main(["--suite", suite, *args, "--out", str(out)]) == 0
    capsys.readouterr()
    return (out / f"{suite}.md").read_text(), json.loads((out / f"{suite}.json").read_text())


def _assert_one_run_failed(md: str, summary: dict, row: str, name: str, what: str) -> None:
    """A measurement run once that failed: its summary counts the failure, its table has the
    ``row`` marked †, and the footnote says why."""
    assert (summary["reps"], summary["failed_reps"], summary["failure"]) == (0, 1, "EOFError: worker died")
    assert row in md.splitlines(), md
    assert (
        f"† {name}: 1 of 1 repetitions failed (EOFError: worker died) and the {what} was not measured again: "
        "its figures are from 0 of 1." in md.splitlines()
    ), md


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("suite", ["rollouts", "collection", "multiagent"])
def test_another_suite_interrupted_writes_what_it_measured_marked_as_partial(
    tmp_path, monkeypatch, capsys, suite, signum
):
    # Ctrl+C or SIGTERM after minutes of measurements threw all of them away: "interrupted: no
    # results were written".
    from vecenv.interrupts import Terminated

    case = _other_suites()[suite]
    monkeypatch.setattr("vecenv.bench.multiagent.missing_modules", lambda modules: [])
    interrupt = KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
    monkeypatch.setattr(case.measurement, _replayed([case.result(1000.0), interrupt]))
    out = tmp_path / "bench"
    assert cli.main(["--suite", suite, *case.args, "--reps", "2", "--out", str(out)]) == 128 + signum
    err = capsys.readouterr().err.strip().splitlines()
    ended = "interrupted" if signum == signal.SIGINT else "terminated"
    assert err[-1] == (
        f"vecenv-bench: {ended} after 1 of 4 measurements: partial results written to "
        f"{out / f'{suite}.md'}, {out / f'{suite}.json'}"
    )
    assert sorted(p.name for p in out.iterdir()) == [f"{suite}.json", f"{suite}.md"]
    md, data = (out / f"{suite}.md").read_text(), json.loads((out / f"{suite}.json").read_text())
    how = "interrupted (Ctrl+C)" if signum == signal.SIGINT else "terminated (SIGTERM)"
    assert data["partial"] == f"the run was {how} after 1 of 4 measurements; what was not measured is missing"
    assert f"**Partial results**: {data['partial']}." in md
    assert [s["reps"] for s in case.summaries(data)] == [1]
    assert "**1,000**" in (_table_row(md, case.labels[0]) or "")
    assert _table_row(md, case.labels[1]) is None
    assert "the run was interrupted after 1 of 4 measurements: the others were not measured" in data["notes"]
