"""The project's scripts (``scripts/*.py``) as modules, for tests of their parts, and run on bad input."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TypeVar

T = TypeVar("T")

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
    assert proc.returncode == 2, f"exit status {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return _usage_error_line(script, proc.stderr)


def refused_by_parse_args(script: str, args: list[str], cwd: Path) -> str:
    """Like :func:`run_with_bad_input`, in this process: ``scripts/<script>.py``'s
    ``parse_args(args)`` in ``cwd`` must refuse ``args`` as a usage error (``SystemExit(2)``,
    argparse's usage line(s), then exactly one line), which is all the script does with them
    before its work starts. Returns that line. A script's own process costs seconds (it imports
    torch); its exit status and stderr are checked by :func:`run_with_bad_input` cases."""
    module = load_script(script)
    err = io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stderr(err), _program(f"{script}.py"):
        try:
            module.parse_args(args)
        except SystemExit as exc:
            status = exc.code
        else:
            status = 0
    text = err.getvalue()
    assert status == 2, f"exit status {status}\n{text}"
    return _usage_error_line(script, text)


def help_text(script: str) -> str:
    """``scripts/<script>.py --help``'s text from its ``parse_args(["--help"])`` in this process
    (which must exit with status 0), its whitespace runs made single spaces (argparse wraps the
    lines). The width is the 80 columns a script's process with its output captured gets, so
    that argparse wraps the text as it does there, whatever this process's terminal. The
    script's own process costs seconds (it imports torch) and adds nothing: ``--help`` is
    argparse's, printed and ended inside ``parse_args``."""
    module = load_script(script)
    out = io.StringIO()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        with contextlib.redirect_stdout(out), _program(f"{script}.py"):
            try:
                module.parse_args(["--help"])
            except SystemExit as exc:
                status = exc.code
            else:
                status = "no exit"
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    assert status in (0, None), f"exit status {status}"
    return " ".join(out.getvalue().split())


@contextlib.contextmanager
def torch_settings_kept() -> Iterator[None]:
    """torch's thread count and deterministic-algorithms flag put back on the way out: a script's
    ``main`` run in this process sets both for the whole process."""
    import torch

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


@contextlib.contextmanager
def _program(name: str) -> Iterator[None]:
    """``sys.argv[0]`` as a script's own process has it: argparse names the program by it."""
    saved = sys.argv
    sys.argv = [name]
    try:
        yield
    finally:
        sys.argv = saved


def _usage_error_line(script: str, err: str) -> str:
    """The one line after argparse's usage line(s) in ``err``, checked to be ``script``'s error."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert lines and lines[0].startswith("usage: "), err
    usage = 1
    while usage < len(lines) and lines[usage].startswith(" "):  # the usage line, wrapped
        usage += 1
    after = lines[usage:]
    assert len(after) == 1 and after[0].startswith(f"{script}.py: error: "), err
    return after[0]


def signalled_once_started(
    cmd: Sequence[str], signum: int, children: int, start_s: float, cwd: Path
) -> tuple[str, list[int]]:
    """Runs ``cmd``, sends it ``signum`` once it has ``children`` child processes (its workers, or
    its measurement's interpreter: waited for up to ``start_s`` seconds), and checks that it then
    exits with status 128 + ``signum``. Returns its stderr and the children it had, which the
    caller checks are gone (:func:`assert_all_ended`)."""
    from vecenv.bench import procfs

    def started(proc: subprocess.Popen[str]) -> list[int]:
        deadline = time.monotonic() + start_s
        found: list[int] = []
        while len(found) < children and time.monotonic() < deadline and proc.poll() is None:
            found = procfs.children(proc.pid)
            time.sleep(0.05)  # polling for the children to appear, not waiting in their place
        assert len(found) >= children, f"{len(found)} of {children} child processes started"
        return found

    return signalled_when(cmd, signum, started, cwd)


def signalled_when(
    cmd: Sequence[str], signum: int, ready: Callable[[subprocess.Popen[str]], T], cwd: Path | None = None
) -> tuple[str, T]:
    """Runs ``cmd`` (stdout and stderr piped, as text), sends it ``signum`` once ``ready(proc)``
    has returned (it waits for what "under way" means to the caller, and asserts it), and checks
    that it then exits with status 128 + ``signum``. Returns its stderr and what ``ready``
    returned; the process is killed if anything fails first."""
    proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        got = ready(proc)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err
    return err, got


def assert_all_ended(pids: Sequence[int], what: str, within_s: float = 10) -> None:
    """No process of ``pids`` is alive after at most ``within_s`` seconds."""
    from vecenv.bench import procfs

    deadline = time.monotonic() + within_s
    while any(procfs.alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for them to be reaped, not waiting in their place
    assert not any(procfs.alive(pid) for pid in pids), f"{what} outlived the run"
