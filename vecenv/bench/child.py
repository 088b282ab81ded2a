"""Every measurement runs in a fresh interpreter: the parent passes a JSON spec on the command
line, the child prints its result as one tagged JSON line on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

RESULT_TAG = "VECENV_BENCH_RESULT "
CHILD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_CHILD_CODE = "from vecenv.bench.child import child_main; child_main()"


def _emit(result: dict[str, Any]) -> None:
    print(RESULT_TAG + json.dumps(result), flush=True)


def child_main() -> None:
    """The child's side: calibrate, or measure the spec in ``sys.argv[1]``; print the result."""
    spec = json.loads(sys.argv[1])
    if spec.get("calibrate"):
        from vecenv.bench.calibration import calibrate

        _emit(calibrate())
    else:
        from vecenv.bench.measure import measure

        measure(spec, on_result=_emit)


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run ``spec`` in a fresh interpreter; its result, or ``{"error": ...}``."""
    env = {**os.environ, **CHILD_ENV}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD_CODE, json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG) :])
    err = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return {"error": (err[-1] if err else f"exit status {proc.returncode}, no result")[:300]}


def run_concurrently(spec: dict[str, Any], k: int, timeout: float) -> dict[str, Any]:
    """Run ``spec`` in ``k`` fresh interpreters at once; rates and memory summed."""
    from concurrent.futures import ThreadPoolExecutor  # only the parent runs this

    with ThreadPoolExecutor(k) as pool:
        results = list(pool.map(lambda _: run_child(spec, timeout), range(k)))
    failed = [r for r in results if "error" in r]
    if failed:
        return failed[0]
    pss = [r["pss_mib"] for r in results]
    idle = [r.get("idle_cpu_cores") for r in results]
    return {
        "rate": sum(r["rate"] for r in results),
        "env_steps": sum(r["env_steps"] for r in results),
        "calls": sum(r["calls"] for r in results),
        "elapsed_s": max(r["elapsed_s"] for r in results),
        "startup_s": max(r["startup_s"] for r in results),
        "pss_mib": None if None in pss else sum(pss),
        "processes": k,
        "idle_cpu_cores": None if None in idle else sum(idle),
        "obs_shape": results[0].get("obs_shape"),
        "obs_dtype": results[0].get("obs_dtype"),
    }
