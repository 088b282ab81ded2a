"""Soak tests: nothing leaks over many steps or many create/step/close cycles.

They call the functions of ``scripts/soak.py`` (the script behind the long runs in issue 13) with
modest sizes. The long ones are marked ``slow`` (not run in CI: ``pytest -m slow``); one short
cycle test runs in CI and checks that creating and closing vector envs, under fork and spawn,
leaves no descriptor, child process, ``/dev/shm`` entry or memory map behind.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.helpers.scripts import load_script, run_with_bad_input
from vecenv.bench import procfs

soak = load_script("soak")

pytestmark = pytest.mark.skipif(not pathlib.Path("/proc/self/fd").is_dir(), reason="reads Linux /proc")


def _explain(result, verdict) -> str:
    return f"{verdict.describe()}\n{soak.summary_table(result, verdict)}"


@pytest.mark.timeout(240)
def test_create_step_close_cycles_leave_nothing_behind() -> None:
    """10 cycles under fork and 10 under spawn, interleaved: after every close the parent has
    the same descriptors, children and /dev/shm entries as after the warm-up, and at most
    ``MAPS_SLACK`` more memory maps (an allocator arena, not one per cycle)."""
    result = soak.run_cycles(
        cycles=10, methods=("fork", "spawn"), num_envs=4, num_workers=2, steps_per_cycle=5, progress=False
    )
    # Sample 0 is taken before the first cycle, sample k after cycle k; the warm-up (first import
    # of spawn's machinery, the resource tracker) ends after cycle 2: the baseline is sample 3
    # (ceil(11 * 0.2)), and the 7 cycles after it show a leak of one of anything per cycle.
    verdict = soak.judge(result, tolerance=0.05, warmup=0.2)
    leaks = [m for m in soak.EXACT_CYCLE_METRICS if m in verdict.grew]
    assert not leaks, _explain(result, verdict)
    last = result.rows[-1]
    assert last["shm_vecenv"] == result.rows[0]["shm_vecenv"], _explain(result, verdict)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_steps_soak_is_flat() -> None:
    """1,000,000 CartPole steps at 128 envs, 2 workers: RSS, fds, threads, maps flat within 5%."""
    # Children of this process already running (multiprocessing's resource tracker or fork
    # server, started by an earlier test) are not the soak's.
    before = len(procfs.children(os.getpid()))
    result = soak.run_steps(steps=1_000_000, num_envs=128, num_workers=2, samples=60, progress=False)
    verdict = soak.judge(result, tolerance=0.05, warmup=0.1)
    assert verdict.flat, _explain(result, verdict)
    assert result.rows[-1]["children"] == before + 2


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_recv_send_soak_is_flat() -> None:
    """300,000 steps through async_reset/recv/send with random batch orders: flat within 5%."""
    result = soak.run_recv_send(steps=300_000, num_envs=128, num_workers=4, batch_size=64, samples=60, progress=False)
    verdict = soak.judge(result, tolerance=0.05, warmup=0.1)
    assert verdict.flat, _explain(result, verdict)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_many_cycles_leave_nothing_behind(method: str) -> None:
    """100 create/step/close cycles: no growth in fds, children, /dev/shm or maps; RSS within 5%."""
    result = soak.run_cycles(cycles=100, methods=(method,), num_envs=8, num_workers=2, progress=False)
    verdict = soak.judge(result, tolerance=0.05, warmup=0.1)
    assert verdict.flat, _explain(result, verdict)


def test_judge_reports_what_grew() -> None:
    """The verdict names a metric that grew past the tolerance and an exact one that grew at all."""
    rows = [{"step": i, "rss": 100 + (20 if i > 15 else 0), "fds": 10 + (i > 18), "t": i} for i in range(20)]
    verdict = soak.judge(soak.SoakResult("x", {}, rows, ("rss",), ("fds",)), tolerance=0.05, warmup=0.1)
    assert not verdict.flat and verdict.grew == ["rss", "fds"]
    assert "rss 100 -> 120 (+20.0%)" in verdict.describe()
    flat = soak.judge(soak.SoakResult("x", {}, [dict(r, rss=100, fds=10) for r in rows], ("rss",), ("fds",)))
    assert flat.flat and flat.describe().startswith("FLAT")


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("args", "option", "value"),
    [
        (["--num-workers", "200"], "--num-workers", "200"),
        (["--context", "foo"], "--context", "foo"),
        (["--mode", "cycles", "--methods", "foo"], "--methods", "foo"),
        (["--mode", "recv-send", "--batch-size", "7"], "--batch-size", "7"),
        (["--mode", "recv-send", "--batch-size", "256"], "--batch-size", "256"),  # more than --num-envs
        (["--mode", "recv-send", "--num-envs", "8", "--num-workers", "3"], "--num-workers", "3"),
        (["--steps", "10", "--num-envs", "8"], "--steps", "10"),
        (["--out", "afile"], "--out", "afile"),
        (["--tolerance", "-1"], "--tolerance", "-1"),
        (["--tolerance", "nan"], "--tolerance", "nan"),
        (["--warmup", "1"], "--warmup", "1"),
        (["--seed", "-1"], "--seed", "-1"),
    ],
)
def test_bad_input_is_one_line_naming_the_option_before_anything_starts(
    tmp_path: pathlib.Path, args: list[str], option: str, value: str
) -> None:
    (tmp_path / "afile").touch()
    line = run_with_bad_input("soak", ["--no-progress", *args], cwd=tmp_path)
    assert f"argument {option}: " in line and value in line, line
    assert not (tmp_path / "bench-results").exists(), "nothing written"
