"""Run SuperSuit's own vector tests against ``vecenv.supersuit``, and against SuperSuit itself.

SuperSuit's tests are an outside judge of the drop-in: this script runs ``test/test_vector/`` of
a SuperSuit snapshot twice, in two pytest processes, once as is (the baseline: SuperSuit's own
vectorizers) and once with ``supersuit.concat_vec_envs_v1`` and
``supersuit.pettingzoo_env_to_vec_env_v1`` replaced by vecenv's before the test modules are
collected (they import both names at import time). Nothing in SuperSuit's tree is edited: the swap
and the un-skipping are a pytest plugin. Every multiprocess test that upstream skips ("Wrapper
depreciated") runs too; those take ``num_cpus`` >= 2 already. ``--min-cpus N`` also makes every
drop-in call use at least ``N`` worker processes, so that the in-process tests run through
workers as well. It prints, per test, the baseline's outcome and ours.

Get the tests (SuperSuit's PyPI package ships none), e.g. with a clone of SuperSuit's repository::

    mkdir /tmp/sssuite && git -C SuperSuit archive HEAD test | tar -x -C /tmp/sssuite
    python scripts/supersuit_suite.py /tmp/sssuite
    python scripts/supersuit_suite.py /tmp/sssuite --min-cpus 2

Their dependencies: pettingzoo, pymunk, mpe2, stable-baselines3, moviepy (the render test).
Arguments after ``--`` go to both pytest runs (default: ``test/test_vector -q --tb=line``); each
run's full output is written to ``supersuit-suite-<run>.log`` in the suite folder.

PettingZoo 1.27 replaced ``knights_archers_zombies_v10``, which five of the tests build, by
``_v11`` (the old name now raises ``DeprecatedEnv``), and renamed its ``spawn_rate`` argument
``spawn_delay`` (same meaning: cycles between two zombies). ``--kaz-v11`` lets those tests build
v11 under the old name, in both runs, so that they test the vectorizers rather than the rename.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from vecenv.argtypes import non_negative_int
from vecenv.bench.stopping import run_main

DEFAULT_PYTEST_ARGS = ["test/test_vector", "-q", "--tb=line", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs"]
#: The reason upstream gives for skipping its multiprocess tests.
UPSTREAM_SKIP = "Wrapper depreciated"


def drop_in(min_cpus: int) -> dict[str, Any]:
    """vecenv's two functions, ``concat_vec_envs_v1`` with at least ``min_cpus`` workers."""
    import vecenv.supersuit as vs

    def concat_vec_envs_v1(vec_env: Any, num_vec_envs: int, num_cpus: int = 0, base_class: str = "gymnasium") -> Any:
        return vs.concat_vec_envs_v1(vec_env, num_vec_envs, max(num_cpus, min_cpus), base_class)

    return {"concat_vec_envs_v1": concat_vec_envs_v1, "pettingzoo_env_to_vec_env_v1": vs.pettingzoo_env_to_vec_env_v1}


class SuitePlugin:
    """Removes upstream's "Wrapper depreciated" skips, and checks that the swap reached every
    test module that imported the two names."""

    def __init__(self, expected: dict[str, Any] | None) -> None:
        self.expected = expected
        self.unskipped: list[str] = []

    def pytest_report_header(self) -> str:
        return "vectorizers under test: " + ("vecenv.supersuit" if self.expected else "SuperSuit's own")

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            keep = [m for m in item.own_markers if not (m.name == "skip" and UPSTREAM_SKIP in str(m.kwargs))]
            if len(keep) != len(item.own_markers):
                item.own_markers[:] = keep
                self.unskipped.append(item.nodeid)

    def pytest_collection_finish(self, session: Any) -> None:
        if self.expected is None:
            return
        for item in session.items:
            module = getattr(item, "module", None)
            for name, ours in self.expected.items():
                if module is not None and name in vars(module) and vars(module)[name] is not ours:
                    import pytest

                    pytest.exit(f"the swap did not reach {module.__name__}.{name}", returncode=3)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(f"upstream skips removed: {len(self.unskipped)}")


def alias_kaz_v11() -> None:
    """Make ``pettingzoo.butterfly.knights_archers_zombies_v10`` build v11 (``spawn_rate`` becomes
    ``spawn_delay``)."""
    import types
    import warnings

    import pettingzoo.butterfly

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pettingzoo.butterfly import knights_archers_zombies_v11 as v11

    def renamed(make: Any) -> Any:
        def build(*args: Any, **kwargs: Any) -> Any:
            if "spawn_rate" in kwargs:
                kwargs["spawn_delay"] = kwargs.pop("spawn_rate")
            return make(*args, **kwargs)

        return build

    shim = types.ModuleType("pettingzoo.butterfly.knights_archers_zombies_v10")
    shim.env, shim.parallel_env, shim.raw_env = renamed(v11.env), renamed(v11.parallel_env), renamed(v11.raw_env)
    sys.modules[shim.__name__] = shim
    pettingzoo.butterfly.knights_archers_zombies_v10 = shim  # type: ignore[attr-defined]


def run_one(suite: Path, ours: bool, min_cpus: int, junit: Path, pytest_args: list[str], kaz_v11: bool) -> int:
    """One pytest run in this process (the child of :func:`main`)."""
    import pytest
    import supersuit

    if kaz_v11:
        alias_kaz_v11()
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame renders rgb_array frames without a display
    expected = drop_in(min_cpus) if ours else None
    if expected is not None:
        for name, value in expected.items():
            setattr(supersuit, name, value)  # before the test modules import them
    os.chdir(suite)
    return int(pytest.main([*pytest_args, f"--junitxml={junit}"], plugins=[SuitePlugin(expected)]))


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """``test id -> (passed|failed|error|skipped, first line of the message)`` from a junit file."""
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or "").splitlines()[0][:150] if child.get("message") else ""
        results[name] = (outcome, message)
    return results


def report(baseline: dict[str, tuple[str, str]], ours: dict[str, tuple[str, str]]) -> list[str]:
    lines = []
    for label, results in (("baseline (SuperSuit)", baseline), ("vecenv.supersuit", ours)):
        counts = {k: sum(1 for o, _ in results.values() if o == k) for k in ("passed", "failed", "error", "skipped")}
        lines.append(f"{label}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    lines.append("")
    lines.append(f"{'test':<88} {'baseline':<9} ours")
    for name in sorted(set(baseline) | set(ours)):
        b, o = baseline.get(name, ("-", "")), ours.get(name, ("-", ""))
        lines.append(f"{name:<88} {b[0]:<9} {o[0]}")
        for label, (outcome, message) in (("baseline", b), ("ours", o)):
            if outcome in ("failed", "error") and message:
                lines.append(f"    {label}: {message}")
    regressions = [n for n in ours if ours[n][0] in ("failed", "error") and baseline.get(n, ("",))[0] == "passed"]
    lines.append("")
    lines.append(f"pass with SuperSuit, fail with vecenv: {regressions or 'none'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    mine, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description="Run SuperSuit's vector tests against vecenv.supersuit.")
    parser.add_argument("suite", type=Path, help="folder holding SuperSuit's test/ (from a snapshot of its repository)")
    parser.add_argument(
        "--min-cpus", type=non_negative_int, default=0, help="every drop-in call uses at least this many workers"
    )
    parser.add_argument("--kaz-v11", action="store_true", help="build knights_archers_zombies_v11 for _v10")
    parser.add_argument("--run", choices=("baseline", "ours"), help=argparse.SUPPRESS)  # the child runs
    parser.add_argument("--junit", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(mine)
    suite = args.suite.resolve()
    if not (suite / "test" / "test_vector").is_dir():
        parser.error(f"{suite} has no test/test_vector: export SuperSuit's test/ folder there")
    if (suite / "supersuit").is_dir():
        parser.error(f"{suite}/supersuit would shadow the installed SuperSuit; export only test/")
    pytest_args = extra or DEFAULT_PYTEST_ARGS
    if args.run is not None:
        return run_one(suite, args.run == "ours", args.min_cpus, args.junit, pytest_args, args.kaz_v11)

    with tempfile.TemporaryDirectory(prefix="supersuit-suite-") as tmp:
        results = {}
        for run in ("baseline", "ours"):
            junit = Path(tmp) / f"{run}.xml"
            command = [sys.executable, __file__, str(suite), "--run", run, "--junit", str(junit)]
            command += ["--min-cpus", str(args.min_cpus), *(["--kaz-v11"] if args.kaz_v11 else []), "--", *pytest_args]
            log = suite / f"supersuit-suite-{run}.log"
            print(f"== {run}: {' '.join(command)} > {log}", file=sys.stderr, flush=True)
            with open(log, "w") as out:
                subprocess.run(command, check=False, stdout=out, stderr=subprocess.STDOUT)
            results[run] = outcomes(junit) if junit.exists() else {}
    print("\n".join(report(results["baseline"], results["ours"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main("supersuit_suite.py", main))
