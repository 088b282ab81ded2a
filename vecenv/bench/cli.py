"""vecenv-bench (also python -m vecenv.bench): vecenv's benchmarks, one suite per run.

Every measurement runs in a fresh Python process (BLAS limited to one thread there); /proc gives
the CPU time, memory and process counts. Each run writes to --out (made if missing): SUITE.md
(also printed), the tables and the notes (rows skipped or failed), headed by the date, the
commit, the command and the machine; and SUITE.json, the same run as data: that header, the
settings, every repetition's measurements, their summaries and the notes. The tables of
docs/benchmarks.md come from these files. A row (a cell) some of whose repetitions failed is
marked with a dagger and a line under its table saying how many failed and why. A run that is
refused or fails writes none of the files; one interrupted (Ctrl+C, SIGTERM) writes what it
measured before it, marked as partial (none before the first measurement). Only ratios measured
in one run compare fairly; on a machine that other jobs share, the load average in the header
says how much to trust them.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vecenv.bench import collection, multiagent, rollouts, scaling, step
from vecenv.bench.child import kill_children
from vecenv.bench.suite import OptionError, Outcome, PartialRun, Suite, SuiteFailed
from vecenv.files import json_text, write_text_atomically
from vecenv.interrupts import Terminated, exit_status, sigterm_raises

#: The suites, by the name --suite takes, in the order --help lists them.
SUITES: dict[str, Suite] = {
    s.name: s for s in (step.SUITE, rollouts.SUITE, collection.SUITE, multiagent.SUITE, scaling.SUITE)
}
DEFAULT_SUITE = "step"
PROG = "vecenv-bench"


def _overview() -> str:
    lines = [__doc__.strip(), "", "Suites (--suite NAME; `vecenv-bench --suite NAME --help` explains its rows):"]
    for s in SUITES.values():
        lines.append(textwrap.fill(s.summary, 96, initial_indent=f"  {s.name:<12}", subsequent_indent=" " * 14))
    return "\n".join(lines)


def build_parser(suite: str) -> argparse.ArgumentParser:
    """The parser of ``suite``: the overview of every suite, then this one's rows and options."""
    chosen = SUITES[suite]
    p = argparse.ArgumentParser(
        prog=PROG,
        description=f"{_overview()}\n\nThe {chosen.name} suite{' (the default)' if suite == DEFAULT_SUITE else ''}:"
        f"\n\n{chosen.doc}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--suite", choices=list(SUITES), default=DEFAULT_SUITE, help="the suite to run (default: %(default)s)"
    )
    p.add_argument("--quick", action="store_true", help="a smoke run: small sizes, short timings, one repetition")
    p.add_argument("--out", default="bench-results", help="output folder (default: %(default)s)")
    group = p.add_argument_group(f"options of the {chosen.name} suite")
    chosen.add_arguments(group)  # type: ignore[arg-type]  # an argument group takes add_argument alike
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options of the suite that ``--suite`` names (default: step)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argparse.ArgumentParser(prog=PROG, add_help=False)
    first.add_argument("--suite", choices=list(SUITES), default=DEFAULT_SUITE)
    known, _ = first.parse_known_args(argv)
    return build_parser(known.suite).parse_args(argv)


def commit() -> str | None:
    """The short commit of the vecenv checkout that runs (``+dirty`` with uncommitted changes);
    ``None`` for an installed copy or without git."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if sha.returncode != 0:
        return None
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _load() -> tuple[float, ...] | None:
    return os.getloadavg() if hasattr(os, "getloadavg") else None


def meta(argv: Sequence[str], load_start: tuple[float, ...] | None) -> dict[str, Any]:
    """The run's date, commit, command, machine and versions, for the header and the JSON."""
    import gymnasium as gym
    import numpy as np

    import vecenv
    from vecenv.machine import available_cpus

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commit": commit(),
        "command": " ".join([PROG, *map(shlex.quote, argv)]),
        "machine": f"{platform.system()} {platform.machine()}",
        "processor": platform.processor(),
        "cores": available_cpus(),
        "python": platform.python_version(),
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "vecenv": vecenv.__version__,
        "load_average": [load_start, _load()],
    }


def header(suite: str, m: dict[str, Any]) -> str:
    """The markdown header of a run: what was run, where, when, on which commit, under what load."""
    load = " / ".join("?" if la is None else ", ".join(f"{x:.1f}" for x in la) for la in m["load_average"])
    return "\n".join(
        [
            f"# vecenv benchmark: {suite}",
            "",
            f"{m['date']} · commit {m['commit'] or 'unknown (not a git checkout)'} · `{m['command']}`",
            "",
            f"{m['machine']} · {m['cores']} cores · Python {m['python']} · gymnasium {m['gymnasium']} · "
            f"numpy {m['numpy']} · vecenv {m['vecenv']}; load average (1, 5, 15 min) at start / end: {load}.",
            "",
        ]
    )


def make_folders(path: str) -> list[str]:
    """Make the folder ``path`` and its missing parents (``OSError`` when it cannot be made);
    the folders made, outermost first."""
    missing = []
    folder = os.path.abspath(path)
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        remove_if_empty(missing[::-1])  # the parents made before the one that failed
        raise
    return missing[::-1]


def remove_if_empty(folders: Sequence[str]) -> None:
    """Remove ``folders`` (outermost first, as :func:`make_folders` gives them), innermost
    first, each only while it is empty: a refused or interrupted run leaves no empty --out."""
    for folder in reversed(folders):
        try:
            os.rmdir(folder)
        except OSError:  # not empty (a file was written there meanwhile), or already gone
            return


def main(argv: Sequence[str] | None = None) -> int:
    """``vecenv-bench``: run the suite, write SUITE.md and SUITE.json to --out, print the markdown."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    # Before the run: a run of minutes must not end in a folder that cannot be written. Making
    # the folder is the one sure test (root may write anywhere that access() allows, /proc too);
    # a run that writes nothing removes the folders it made.
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        build_parser(args.suite).error(
            f"--out: expected a folder to write SUITE.md and SUITE.json into, got {args.out}, which is a file"
        )
    try:
        created = make_folders(args.out)
    except OSError as exc:
        build_parser(args.suite).error(f"--out: cannot write the results to {args.out}: {exc.strerror or exc}")
    if not os.access(args.out, os.W_OK | os.X_OK):
        remove_if_empty(created)
        build_parser(args.suite).error(f"--out: cannot write the results to {args.out}: Permission denied")
    t_start = time.perf_counter()
    load_start = _load()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, sigterm_raises()) if in_main_thread else None
    written: list[str] = []  # the result files on disk so far, for the line of an interrupted run
    cut: PartialRun | None = None  # a run interrupted after some measurements, whose results are kept
    try:
        try:
            outcome: Outcome = SUITES[args.suite].run(args)
        except PartialRun as partial:
            kill_children()
            cut, outcome = partial, partial.outcome
        written += outcome.files
        # Still under the handlers: Ctrl+C or SIGTERM while the files are written ends as during
        # the run (one line saying what was written), not in a traceback or a silent kill.
        _write_results(args, argv, load_start, t_start, outcome, written, cut)
    except OptionError as e:  # an option out of range, found while resolving the defaults
        remove_if_empty(created)
        build_parser(args.suite).error(str(e))
    except SuiteFailed as e:
        remove_if_empty(created)
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl+C, or SIGTERM (Terminated): no measurement outlives the run
        kill_children()
        remove_if_empty(created)
        what = f"only {', '.join(written)} written" if written else "no results were written"
        print(f"{PROG}: {'terminated' if isinstance(e, Terminated) else 'interrupted'}: {what}", file=sys.stderr)
        return exit_status(e)
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    if cut is not None:
        ended = "terminated" if isinstance(cut.interrupt, Terminated) else "interrupted"
        print(f"{PROG}: {ended} after {cut.measured}: partial results written to {', '.join(written)}", file=sys.stderr)
        return exit_status(cut.interrupt)
    return 0


def _write_results(
    args: argparse.Namespace,
    argv: Sequence[str],
    load_start: tuple[float, ...] | None,
    t_start: float,
    outcome: Outcome,
    written: list[str],
    cut: PartialRun | None = None,
) -> None:
    """Write SUITE.md and SUITE.json to --out (each added to ``written`` once it is whole) and
    print the markdown and the line naming every file. A ``cut`` run's results say, under the
    header and as ``partial`` in the JSON (``null`` for a whole run), that they are partial."""
    m = meta(argv, load_start)
    m["wall_s"] = time.perf_counter() - t_start
    notes = [f"- {n}" for n in outcome.notes]
    partial = None
    if cut is not None:
        ended = "terminated (SIGTERM)" if isinstance(cut.interrupt, Terminated) else "interrupted (Ctrl+C)"
        partial = f"the run was {ended} after {cut.measured}; what was not measured is missing"
    top = [header(args.suite, m)] + ([f"**Partial results**: {partial}.", ""] if partial else [])
    md = "\n".join([*top, outcome.markdown.rstrip(), ""] + (["## Notes", "", *notes, ""] if notes else []))
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, args.suite)
    write_text_atomically(f"{stem}.md", md)
    written.insert(0, f"{stem}.md")
    write_text_atomically(
        f"{stem}.json", json_text({"meta": m, "partial": partial, "notes": outcome.notes, **outcome.data}, indent=1)
    )
    written.insert(1, f"{stem}.json")
    print(md)
    print(f"wrote {', '.join(written)} in {m['wall_s']:.0f} s", file=sys.stderr)
