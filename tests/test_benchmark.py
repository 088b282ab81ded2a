"""Smoke tests of the benchmark script (vecenv/benchmark.py, shim scripts/benchmark.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from gymnasium.utils.env_checker import check_env

from vecenv.benchmark import BurnEnv, FrameEnv, burn, tree_pss_kib

ROOT = Path(__file__).resolve().parents[1]


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
