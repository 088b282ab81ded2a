"""The one fresh-process runner of every suite: each measurement runs in a new interpreter.

The parent passes a JSON spec on the command line; its ``task`` names what the child runs (one
of :data:`TASKS`); the child prints its result as one tagged JSON line on stdout. The parent
also times the whole process: every result carries ``process_wall_s`` and ``process_cpu_s``
(user + system CPU of the child and of every descendant it waited for, its workers), read with
``wait4`` for that process alone, so processes run at once are counted apart.
:func:`run_process` does the same for any command (``vecenv-collect``, for one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

RESULT_TAG = "VECENV_BENCH_RESULT "
CHILD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_CHILD_CODE = "from vecenv.bench.child import child_main; child_main()"

#: What a measuring process can run, by the spec's ``task``: ``"module:function"``, each
#: ``function(spec, on_result)``, returning its result (``on_result`` gets it first where the
#: task would rather report before closing its envs).
TASKS = {
    "calibrate": "vecenv.bench.calibration:calibrate_task",
    "step": "vecenv.bench.measure:measure",
    "rollouts": "vecenv.bench.rollouts:measure_row",
    "collection": "vecenv.bench.collection:measure_row",
    "multiagent": "vecenv.bench.multiagent:measure_row",
}

Task = Callable[[dict[str, Any], Callable[[dict[str, Any]], None] | None], dict[str, Any]]


def _emit(result: dict[str, Any]) -> None:
    print(RESULT_TAG + json.dumps(result), flush=True)


def task_named(name: str) -> Task:
    """The function of the task ``name``; ``ValueError`` for a name not in :data:`TASKS`."""
    if name not in TASKS:
        # Imported only to refuse: a child imports nothing before its task (numpy would be
        # part of what it measures).
        from vecenv.errors import InvalidArgumentError

        raise InvalidArgumentError(f"unknown benchmark task {name!r}; expected one of {', '.join(TASKS)}")
    module, _, function = TASKS[name].partition(":")
    fn: Task = getattr(importlib.import_module(module), function)
    return fn


def child_main() -> None:
    """The child's side: run the task of the spec in ``sys.argv[1]``; print its result once."""
    spec = json.loads(sys.argv[1])
    emitted = []

    def on_result(result: dict[str, Any]) -> None:
        emitted.append(True)
        _emit(result)

    result = task_named(spec["task"])(spec, on_result)
    if not emitted:
        _emit(result)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a measured process: BLAS limited to one thread, and bytecode caches
    written and used as an installed package has them (a sandbox's ``PYTHONDONTWRITEBYTECODE``
    would make every process compile its modules again, which whole-process timings count)."""
    env = {**os.environ, **CHILD_ENV, **(extra or {})}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


@dataclasses.dataclass(frozen=True)
class Finished:
    """A command that ran: its exit status, output, wall seconds and CPU seconds (user + system,
    its own and its waited-for descendants'); ``timed_out`` when it was killed at the limit."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float
    timed_out: bool


#: The commands :func:`run_process` runs now, from any thread: :func:`kill_children` ends them.
_RUNNING: set[subprocess.Popen[bytes]] = set()
_RUNNING_LOCK = threading.Lock()


def kill_children() -> None:
    """Kill every command that :func:`run_process` runs now, in any thread (the benchmark was
    interrupted: none of them outlives it; each thread's wait then returns)."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for proc in running:
        with contextlib.suppress(OSError):
            proc.kill()


def run_process(command: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> Finished:
    """Run ``command`` in ``env`` (default :func:`child_env`), killed after ``timeout`` seconds;
    its :class:`Finished`. The CPU time is this process's alone (``os.wait4``), even while
    others run at once."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(command), stdout=out, stderr=err, env=child_env() if env is None else env)
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:  # Ctrl+C or SIGTERM in this thread: the command goes with it
            proc.kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
            with _RUNNING_LOCK:
                _RUNNING.discard(proc)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        return Finished(
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            wall,
            usage.ru_utime + usage.ru_stime,
            killed.is_set(),
        )


def run_child(spec: dict[str, Any], timeout: float, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``spec`` (its ``task`` names what) in a fresh interpreter, with ``extra_env`` added to
    :func:`child_env`; its result with the process's ``process_wall_s`` and ``process_cpu_s``,
    or ``{"error": ...}``."""
    done = run_process([sys.executable, "-c", _CHILD_CODE, json.dumps(spec)], timeout, child_env(extra_env))
    if done.timed_out:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return {**json.loads(line[len(RESULT_TAG) :]), "process_wall_s": done.wall_s, "process_cpu_s": done.cpu_s}
    err = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    return {"error": (err[-1] if err else f"exit status {done.returncode}, no result")[:300]}


def run_many(specs: Sequence[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """Run every spec at once, each in its own fresh interpreter; their results, in order."""
    from concurrent.futures import ThreadPoolExecutor  # only the parent runs this

    with ThreadPoolExecutor(max(1, len(specs))) as pool:
        try:
            return list(pool.map(lambda spec: run_child(spec, timeout), specs))
        except BaseException:  # interrupted: end the children, or leaving the pool waits for them
            kill_children()
            raise


def run_concurrently(spec: dict[str, Any], k: int, timeout: float) -> dict[str, Any]:
    """Run ``spec`` in ``k`` fresh interpreters at once; rates and memory summed."""
    results = run_many([spec] * k, timeout)
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
