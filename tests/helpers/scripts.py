"""The project's scripts (``scripts/*.py``) as modules, for tests of their parts, and run on bad input."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@functools.cache
def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py``, executed once per test session under a module name of its own."""
    path = SCRIPTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_vecenv_tested_script_{name}", path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def run_with_bad_input(script: str, args: list[str], cwd: Path, timeout: float = 60) -> str:
    """Runs ``scripts/<script>.py args`` in ``cwd`` and checks that it refused the input as a
    usage error: exit status 2, argparse's usage line(s), then exactly one line, and no
    traceback. Returns that line (``<script>.py: error: ...``) for the caller to check."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / f"{script}.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    err = proc.stderr
    assert proc.returncode == 2, f"exit status {proc.returncode}\n{proc.stdout}{err}"
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert lines and lines[0].startswith("usage: "), err
    usage = 1
    while usage < len(lines) and lines[usage].startswith(" "):  # the usage line, wrapped
        usage += 1
    after = lines[usage:]
    assert len(after) == 1 and after[0].startswith(f"{script}.py: error: "), err
    return after[0]
