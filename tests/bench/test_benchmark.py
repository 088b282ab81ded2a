"""Smoke tests of the benchmark script (vecenv/benchmark.py, shim scripts/benchmark.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from vecenv import benchmark
from vecenv.bench.runners import RUNNERS
from vecenv.benchmark import BurnEnv, FrameEnv, burn, tree_pss_kib

ROOT = Path(__file__).resolve().parents[2]
ATARI_DEPS = ("ale_py", "cv2")


def run_quick(tmp_path: Path, *args: str, timeout: float = 50) -> tuple[dict, str]:
    """``python -m vecenv.benchmark --quick ARGS --out TMP``: its JSON and markdown."""
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "vecenv.benchmark", "--quick", *args, "--out", str(out)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env={**os.environ, "MPLBACKEND": "Agg"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "benchmark.json").read_text()), (out / "benchmark.md").read_text()


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


def test_quick_run_writes_markdown_and_json(tmp_path):
    out = tmp_path / "bench"
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "benchmark.py"),
        "--quick",
        "--workloads",
        "cartpole",
        "--sizes",
        "4",
        "--runners",
        "single,sync,vecenv-1w,envpool",
        "--seconds",
        "0.2",
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, cwd=ROOT, env={**os.environ, "MPLBACKEND": "Agg"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    md = (out / "benchmark.md").read_text()
    assert "| cartpole | 4 | vecenv-1w |" in md and md.strip() in proc.stdout
    data = json.loads((out / "benchmark.json").read_text())
    cells = {c["runner"]: c for c in data["cells"]}
    assert {"single", "sync", "vecenv-1w"} <= set(cells)
    assert "envpool" in cells or any(n.startswith("envpool: not importable") for n in data["notes"])
    for c in cells.values():
        s = c["summary"]
        assert s is not None and s["rate_median"] > 0 and s["startup_s_median"] >= 0
        assert np.isfinite(s["rate_min"]) and s["rate_min"] <= s["rate_median"] <= s["rate_max"]
    assert cells["sync"]["summary"]["ratio_to_baseline"] == 1.0
    assert cells["vecenv-1w"]["summary"]["ideal_fraction"] > 0
    if cells["vecenv-1w"]["summary"]["pss_mib_median"] is not None:  # /proc available
        assert cells["vecenv-1w"]["reps"][0]["processes"] >= 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert any(n.startswith("chart: matplotlib not installed") for n in data["notes"])
    else:
        assert (out / "benchmark.png").stat().st_size > 0


def test_plan_keeps_zero_workers_and_auto_at_every_size():
    cells, _ = benchmark.plan(["cartpole"], [1, 2], ["vecenv-0w", "vecenv-2w", "vecenv-auto"], quick=True)
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
    assert {"vecenv-0w", "vecenv-auto"} <= set(benchmark.parse_args([]).runners)


@pytest.mark.timeout(60)
def test_zero_workers_and_auto_run_and_idle_workers_use_no_cpu(tmp_path):
    data, md = run_quick(
        tmp_path, "--workloads", "cartpole", "--sizes", "2", "--runners", "vecenv-0w,vecenv-2w,vecenv-auto"
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


def test_atari_is_planned_only_when_importable(monkeypatch):
    installed = all(importlib.util.find_spec(m) is not None for m in ATARI_DEPS)
    assert (benchmark.atari_missing() is None) == installed
    assert "atari" in benchmark.parse_args([]).workloads  # filtered by plan(), with a note
    runners = ["single", "vecenv-2w"]
    if installed:
        cells, notes = benchmark.plan(["cartpole", "atari"], [2], runners, quick=True)
        assert {(c["workload"], c["runner"]) for c in cells if c["workload"] == "atari"} == {
            ("atari", "single"),
            ("atari", "vecenv-2w"),
        }
        assert benchmark.ATARI_MISSING not in notes
    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 now raises ImportError
    assert benchmark.atari_missing() == benchmark.ATARI_MISSING
    cells, notes = benchmark.plan(["cartpole", "atari"], [2], runners, quick=True)
    assert cells and all(c["workload"] == "cartpole" for c in cells)
    assert notes == [benchmark.ATARI_MISSING]
    assert "opencv-python-headless" in notes[0] and "ale-py" in notes[0]


@pytest.mark.timeout(60)
def test_atari_envs_build_in_a_spawned_worker():
    for m in ATARI_DEPS:
        pytest.importorskip(m)
    import vecenv

    envs = vecenv.SubprocVectorEnv([benchmark.make_atari], 1, context="spawn")  # a fresh interpreter builds it
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
    data, md = run_quick(
        tmp_path, "--workloads", "atari", "--sizes", "2", "--runners", "single,vecenv-2w", "--seconds", "0.1"
    )
    cells = {c["runner"]: c for c in data["cells"]}
    assert set(cells) == {"single", "vecenv-2w"} and benchmark.ATARI_MISSING not in data["notes"]
    assert cells["single"]["reps"][0]["obs_shape"] == [4, 84, 84]
    assert cells["vecenv-2w"]["reps"][0]["obs_shape"] == [2, 4, 84, 84]
    for c in cells.values():
        assert c["reps"][0]["obs_dtype"] == "uint8" and c["summary"]["rate_median"] > 0
    assert "| atari | 2 | vecenv-2w |" in md
