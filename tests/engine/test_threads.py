"""vecenv.worker.threads.limit_threads: variables set unless the user set them, loaded libraries limited.

Each check runs in a fresh interpreter (a subprocess) with no thread variables in its
environment, because the call changes the process's environment and its loaded libraries. The
OpenBLAS thread count is read through OpenBLAS's own ``get_num_threads`` (found among the
mapped shared objects), so the checks do not depend on threadpoolctl; where threadpoolctl is
installed it is asked too, and the fallback used without it is tested by hiding it.

Last, ``threads_per_worker`` end to end: the workers' variables are set, the parent's never.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from vecenv import SubprocVectorEnv
from vecenv.worker.threads import THREAD_ENV_VARS, limit_threads

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Prints a JSON dict; `hide_tpc` makes threadpoolctl unimportable (the fallback path).
PRELUDE = textwrap.dedent('''
    import ctypes, json, os, sys
    if HIDE_TPC:
        sys.modules["threadpoolctl"] = None
    import numpy as np
    from vecenv.worker.threads import THREAD_ENV_VARS, limit_threads, _mapped_shared_objects

    def openblas_threads():
        """OpenBLAS's own count, or None if numpy does not use OpenBLAS."""
        for path in _mapped_shared_objects():
            if "openblas" in os.path.basename(path):
                lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
                for prefix in ("", "scipy_"):
                    for suffix in ("", "64_", "_64"):
                        getter = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
                        if getter is not None:
                            return getter()
        return None

    def tpc_openblas():
        try:
            import threadpoolctl
        except ImportError:
            return None
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openblas"]

    np.ones((64, 64)) @ np.ones((64, 64))  # OpenBLAS is loaded and initialised before the call
''')


def run_child(body: str, *, hide_tpc: bool = False, env: dict[str, str] | None = None) -> dict:
    """Run PRELUDE + body in a fresh interpreter with no thread variables, unless ``env`` sets them."""
    child_env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV_VARS and k != "FLEXIBLAS_NUM_THREADS"}
    child_env["PYTHONPATH"] = ROOT + os.pathsep + child_env.get("PYTHONPATH", "")
    child_env.update(env or {})
    code = f"HIDE_TPC = {hide_tpc!r}\n" + PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def openblas_or_skip(result: dict) -> None:
    if result["before"] is None:
        pytest.skip("numpy here does not use OpenBLAS")


@pytest.mark.timeout(90)
@pytest.mark.parametrize("hide_tpc", [False, True], ids=["threadpoolctl", "fallback"])
def test_sets_variables_and_limits_loaded_openblas(hide_tpc: bool) -> None:
    result = run_child(
        """
        before = openblas_threads()
        limit_threads(1)
        print(json.dumps({"before": before, "after": openblas_threads(), "tpc": tpc_openblas(),
                          "env": {v: os.environ.get(v) for v in THREAD_ENV_VARS}}))
    """,
        hide_tpc=hide_tpc,
    )
    assert result["env"] == {v: "1" for v in THREAD_ENV_VARS}
    openblas_or_skip(result)
    assert result["after"] == 1
    if result["tpc"] is not None:  # threadpoolctl installed (and asked even on the fallback path)
        assert result["tpc"] and all(n == 1 for n in result["tpc"])


@pytest.mark.timeout(90)
def test_threadpoolctl_reports_one_thread_for_openblas() -> None:
    pytest.importorskip("threadpoolctl")
    result = run_child("""
        before = openblas_threads()
        limit_threads(1)
        print(json.dumps({"before": before, "tpc": tpc_openblas()}))
    """)
    openblas_or_skip(result)
    assert result["tpc"] == [1] * len(result["tpc"]) and result["tpc"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("hide_tpc", [False, True], ids=["threadpoolctl", "fallback"])
def test_user_settings_are_respected(hide_tpc: bool) -> None:
    """A variable the user set keeps its value, and the library it configures is not limited."""
    result = run_child(
        """
        before = openblas_threads()
        limit_threads(1)
        print(json.dumps({"before": before, "after": openblas_threads(),
                          "env": {v: os.environ.get(v) for v in THREAD_ENV_VARS}}))
    """,
        hide_tpc=hide_tpc,
        env={"OPENBLAS_NUM_THREADS": "2"},
    )
    expected = {v: "1" for v in THREAD_ENV_VARS} | {"OPENBLAS_NUM_THREADS": "2"}
    assert result["env"] == expected
    openblas_or_skip(result)
    assert result["after"] == result["before"]  # OpenBLAS read "2" at load; we left it alone


@pytest.mark.timeout(90)
def test_forked_child_limits_inherited_openblas_and_parent_keeps_its_own() -> None:
    """Under fork the worker inherits an initialised OpenBLAS: the call limits it in the child
    only."""
    result = run_child("""
        import multiprocessing
        before = openblas_threads()

        def child(q):
            limit_threads(1)
            q.put((openblas_threads(), os.environ.get("OMP_NUM_THREADS")))

        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        in_child = q.get(timeout=30)
        p.join(30)
        print(json.dumps({"before": before, "child": in_child, "parent": openblas_threads(),
                          "parent_env": os.environ.get("OMP_NUM_THREADS")}))
    """)
    openblas_or_skip(result)
    assert result["child"][0] == 1 and result["child"][1] == "1"
    assert result["parent"] == result["before"] and result["parent_env"] is None


@pytest.mark.timeout(90)
def test_none_leaves_everything_alone() -> None:
    result = run_child("""
        before = openblas_threads()
        limit_threads(None)
        print(json.dumps({"before": before, "after": openblas_threads(),
                          "env": {v: os.environ.get(v) for v in THREAD_ENV_VARS}}))
    """)
    assert result["env"] == {v: None for v in THREAD_ENV_VARS}
    assert result["after"] == result["before"]


@pytest.mark.parametrize(
    "bad, error", [(0, ValueError), (-2, ValueError), (True, TypeError), (1.0, TypeError), ("1", TypeError)]
)
def test_bad_counts_are_refused_before_anything_changes(bad: object, error: type[Exception]) -> None:
    saved = {v: os.environ.get(v) for v in THREAD_ENV_VARS}
    with pytest.raises(error, match="threads per worker"):
        limit_threads(bad)  # type: ignore[arg-type]
    assert {v: os.environ.get(v) for v in THREAD_ENV_VARS} == saved


@pytest.mark.timeout(60)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_threads_per_worker_limits_workers_only(start_method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.envs import ThreadVarsEnv

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with SubprocVectorEnv([ThreadVarsEnv] * 2, 2, context=start_method) as sub:
        assert sub.call("thread_vars") == (("1", "1"), ("1", "1"))  # one thread by default
    with SubprocVectorEnv([ThreadVarsEnv] * 2, 2, context=start_method, threads_per_worker=None) as sub:
        assert sub.call("thread_vars") == ((None, None), (None, None))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's setting wins
    with SubprocVectorEnv([ThreadVarsEnv] * 2, 2, context=start_method, threads_per_worker=2) as sub:
        assert sub.call("thread_vars") == (("3", "2"), ("3", "2"))
    assert os.environ.get("OPENBLAS_NUM_THREADS") is None  # the parent is never changed
    with pytest.raises(ValueError, match="threads_per_worker"):
        SubprocVectorEnv([ThreadVarsEnv] * 2, 2, threads_per_worker=0)
