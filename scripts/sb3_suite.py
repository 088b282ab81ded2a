"""Run Stable-Baselines3's own tests against ``vecenv.sb3.SubprocVecEnv``.

SB3's test suite is an outside judge of the drop-in: this script runs it with every
``SubprocVecEnv`` that the test modules import replaced by ours (or, with ``--baseline``, as is,
for comparison). Nothing in SB3's tree is edited; the swap is a pytest plugin.

Get the tests of the SB3 release you have installed (only ``tests/`` and ``pyproject.toml``, so
that a source copy of ``stable_baselines3`` cannot shadow the installed package)::

    git clone https://github.com/DLR-RM/stable-baselines3 /tmp/sb3 && mkdir /tmp/sb3suite
    git -C /tmp/sb3 archive <tag> tests pyproject.toml | tar -x -C /tmp/sb3suite

then, with ``PYTHONHASHSEED=0`` as SB3's pytest config asks::

    PYTHONHASHSEED=0 python scripts/sb3_suite.py /tmp/sb3suite --baseline
    PYTHONHASHSEED=0 python scripts/sb3_suite.py /tmp/sb3suite                 # our default workers
    PYTHONHASHSEED=0 python scripts/sb3_suite.py /tmp/sb3suite --workers 1     # all envs in one worker
    PYTHONHASHSEED=0 python scripts/sb3_suite.py /tmp/sb3suite --workers per-env

Arguments after ``--`` go to pytest (default: ``tests/test_vec_envs.py -q --timeout 120``).
``--headless-render`` lets SB3's render test run without a display: SDL's dummy video driver
for ``render_mode="human"`` envs, and a no-op ``cv2.imshow`` (headless OpenCV has none).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from vecenv.bench.stopping import run_main

DEFAULT_PYTEST_ARGS = ["tests/test_vec_envs.py", "-q", "-p", "no:cacheprovider", "--timeout", "120", "-rs"]


def swapped_class(workers: str) -> type:
    """``vecenv.sb3.SubprocVecEnv`` with SB3's signature, its ``num_workers`` fixed by ``workers``."""
    import vecenv.sb3

    class SubprocVecEnv(vecenv.sb3.SubprocVecEnv):
        def __init__(self, env_fns: Any, start_method: str | None = None) -> None:
            env_fns = list(env_fns)
            if workers == "default":
                num_workers = None
            elif workers == "per-env":
                num_workers = len(env_fns)
            else:
                num_workers = min(int(workers), len(env_fns))
            super().__init__(env_fns, start_method=start_method, num_workers=num_workers)

    return SubprocVecEnv


class SwapCheck:
    """Pytest plugin: after collection, every collected test module holds the expected class."""

    def __init__(self, expected: type) -> None:
        self.expected = expected

    def pytest_report_header(self) -> str:
        return f"SubprocVecEnv under test: {self.expected.__module__}.{self.expected.__qualname__}"

    def pytest_collection_finish(self, session: Any) -> None:
        modules = {item.module for item in session.items if getattr(item, "module", None) is not None}
        stale = [m.__name__ for m in modules if getattr(m, "SubprocVecEnv", self.expected) is not self.expected]
        if stale:
            import pytest

            pytest.exit(f"the swap did not reach {stale}: they imported SubprocVecEnv before it", returncode=3)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description="Run Stable-Baselines3's own tests against vecenv.sb3.SubprocVecEnv.")
    parser.add_argument("suite", type=Path, help="folder holding SB3's tests/ and pyproject.toml")
    parser.add_argument("--baseline", action="store_true", help="run SB3's own SubprocVecEnv (no swap)")
    parser.add_argument("--workers", default="default", help="num_workers: default, per-env, or a number")
    parser.add_argument("--headless-render", action="store_true", help="let the render test run without a display")
    args = parser.parse_args(ours)
    if args.workers not in ("default", "per-env") and not args.workers.isdigit():
        parser.error(f"--workers must be default, per-env or a number, got {args.workers!r}")
    if not (args.suite / "tests").is_dir():
        parser.error(f"suite: expected a folder holding SB3's tests/ and pyproject.toml, got {str(args.suite)!r}")

    suite = args.suite.resolve()
    if (suite / "stable_baselines3").is_dir():
        parser.error(f"{suite}/stable_baselines3 would shadow the installed SB3; export only tests/ and pyproject.toml")
    if os.environ.get("PYTHONHASHSEED") != "0":
        print("note: SB3's pytest config sets PYTHONHASHSEED=0; set it in the environment to match", file=sys.stderr)

    if args.headless_render:
        os.environ.setdefault("DISPLAY", ":0")  # the render test skips without one
        os.environ["SDL_VIDEODRIVER"] = "dummy"
        import cv2

        cv2.imshow = lambda *a, **k: None
        cv2.waitKey = lambda *a, **k: -1

    import pytest
    import stable_baselines3
    import stable_baselines3.common.vec_env as sb3_vec_env

    # Before pytest imports the test modules, so that their `from ... import SubprocVecEnv` gets ours.
    if not args.baseline:
        setattr(sb3_vec_env, "SubprocVecEnv", swapped_class(args.workers))  # noqa: B010 - a monkeypatch
    print(f"SB3 {stable_baselines3.__version__} from {Path(stable_baselines3.__file__).parent}", file=sys.stderr)

    os.chdir(suite)
    return int(pytest.main(extra or DEFAULT_PYTEST_ARGS, plugins=[SwapCheck(sb3_vec_env.SubprocVecEnv)]))


if __name__ == "__main__":
    raise SystemExit(run_main("sb3_suite.py", main))
