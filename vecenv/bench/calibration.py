"""Calibration, run once per benchmark in a fresh process (BLAS limited to one thread): how many
loop iterations the busy envs burn, and how many matmuls make the learner's ~0.5 ms "inference"."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from vecenv.bench.envs import iterations_per_us

SEED = 0
INFERENCE_S = 0.5e-3


def calibrate() -> dict[str, Any]:
    """Loop iterations per µs and the matmul repeat count that takes ~0.5 ms."""
    per_us = iterations_per_us()
    a, b = inference_arrays()
    reps = 1
    while True:
        t = min(_timed(infer, a, b, reps) for _ in range(5))
        if t >= INFERENCE_S or reps > 10_000:
            break
        reps = max(reps + 1, int(reps * INFERENCE_S / max(t, 1e-9)))
    return {
        "iterations_per_us": per_us,
        "iters_100us": round(100 * per_us),
        "iters_1ms": round(1000 * per_us),
        "iters_50us": round(50 * per_us),
        "inference_reps": reps,
        "inference_ms": t * 1e3,  # the last round's best of 5, at these reps
    }


def calibrate_task(spec: dict[str, Any], on_result: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The ``calibrate`` task of a measuring process (the spec holds nothing else)."""
    return calibrate()


def _timed(fn: Callable[..., Any], *args: Any) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def inference_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The two 128x128 float32 matrices that the learner's "inference" multiplies."""
    rng = np.random.default_rng(SEED)
    return rng.standard_normal((128, 128), np.float32), rng.standard_normal((128, 128), np.float32)


def infer(a: np.ndarray, b: np.ndarray, reps: int) -> None:
    """The learner's "inference": ``reps`` matmuls of ``a @ b``."""
    for _ in range(reps):
        a @ b
