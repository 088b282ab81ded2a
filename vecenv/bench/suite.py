"""What every suite is to the command line: its name, its help, its options and its run; and the
small helpers the suites share (comma-separated options, medians, markdown tables, the marks of
failed repetitions, and what an interrupted run keeps)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.machinery
import importlib.util
import statistics
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from vecenv.bench.child import kill_children
from vecenv.errors import VecEnvError


class OptionError(VecEnvError, ValueError):
    """An option out of range, or options that do not go together: the command line says
    which, as a usage error."""


class SuiteFailed(VecEnvError, RuntimeError):
    """A suite could not run at all (its calibration failed, for one)."""


@dataclasses.dataclass
class Outcome:
    """What a suite's run gives: its tables as markdown (``##`` sections; the command line adds
    the run's header), everything measured as JSON data, and notes (rows skipped or failed)."""

    markdown: str
    data: dict[str, Any]
    notes: list[str] = dataclasses.field(default_factory=list)
    files: list[str] = dataclasses.field(default_factory=list)  # more files written to --out


class PartialRun(Exception):
    """A suite's run cut by Ctrl+C or SIGTERM after some measurements: what it had measured,
    for the command line to write marked as partial (the measurements cost minutes; an
    interrupted run kept none of them). A run cut before any measurement raises the interrupt
    itself.

    Attributes:
        interrupt: the ``KeyboardInterrupt`` (or :class:`~vecenv.interrupts.Terminated`) that
            cut the run; it decides the exit status.
        outcome: the tables and data of what was measured before it.
        measured: how much that is, for the results' header (``"5 of 12 measurements"``).
    """

    def __init__(self, interrupt: KeyboardInterrupt, outcome: Outcome, measured: str) -> None:
        super().__init__(f"interrupted after {measured}")
        self.interrupt, self.outcome, self.measured = interrupt, outcome, measured


@dataclasses.dataclass(frozen=True)
class Cut:
    """Measurements that a Ctrl+C or SIGTERM ended after some of them ran (:func:`measure_all`).

    Attributes:
        interrupt: the ``KeyboardInterrupt`` (or :class:`~vecenv.interrupts.Terminated`).
        measured: how many ran, for the results' header (``"5 of 12 measurements"``).
    """

    interrupt: KeyboardInterrupt
    measured: str


def measure_all(measure: Callable[[], object], ran: Callable[[], int], total: int, notes: list[str]) -> Cut | None:
    """Run a suite's ``measure`` (all of its ``total`` measurements, keeping each result as it
    comes). A Ctrl+C or SIGTERM once ``ran()`` of them have run ends them: the measurement it cut
    is killed (none outlives the run), a note says how many ran, and the returned :class:`Cut`
    is for :func:`finished`; before the first one the interrupt propagates (nothing to keep)."""
    try:
        measure()
    except KeyboardInterrupt as exc:
        done = ran()
        if not done:
            raise
        kill_children()
        measured = f"{done} of {total} measurements"
        notes.append(f"the run was interrupted after {measured}: the others were not measured")
        return Cut(exc, measured)
    return None


def finished(outcome: Outcome, cut: Cut | None) -> Outcome:
    """``outcome`` of a whole run; :class:`PartialRun` with it when ``cut``, for the command line
    to write it marked as partial."""
    if cut is not None:
        raise PartialRun(cut.interrupt, outcome, cut.measured)
    return outcome


K = TypeVar("K", bound=Hashable)


@dataclasses.dataclass
class Repetitions(Generic[K]):
    """The repetitions of a suite's rows as they are measured, by each row's key: the results,
    the rows that failed with their errors (a row that fails is not measured again), and the
    run's notes, which say why.

    Attributes:
        notes: the run's notes; a failure adds one.
        results: each row's results, in the order they ran.
        failed: each failed row's error.
    """

    notes: list[str]
    results: dict[K, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    failed: dict[K, str] = dataclasses.field(default_factory=dict)

    def record(
        self, key: K, name: str, rep: int, result: dict[str, Any], shown: Callable[[dict[str, Any]], str]
    ) -> None:
        """Keep ``result`` of row ``key`` (``name`` in the notes and the progress line, which
        ``shown`` ends), or note its error and measure the row no more."""
        if "error" in result:
            self.failed[key] = result["error"]
            self.notes.append(f"{name}: failed, {result['error']}")
            text = f"error: {result['error']}"
        else:
            self.results.setdefault(key, []).append(result)
            text = shown(result)
        print(f"rep {rep + 1} {name}: {text}", file=sys.stderr, flush=True)

    def ran(self) -> int:
        """How many measurements ran (a failed one counts), for :func:`measure_all`."""
        return sum(map(len, self.results.values())) + len(self.failed)

    def failures(self, key: K) -> dict[str, Any]:
        """:func:`failures` of row ``key``."""
        return failures([self.failed[key]] if key in self.failed else [])


#: The mark of figures that come from fewer repetitions than planned, after their footnote.
FAILED_MARK = "†"


def failures(errors: Sequence[str]) -> dict[str, Any]:
    """A summary's ``failed_reps`` and ``failure`` (the first error, ``None`` for none): a row
    whose other repetitions failed has figures from fewer of them than a clean row, and says so."""
    return {"failed_reps": len(errors), "failure": errors[0] if errors else None}


def failed_mark(summary: dict[str, Any] | None) -> str:
    """`` †`` after the figures of a summary with :func:`failures`, else ``""``."""
    return f" {FAILED_MARK}" if summary and summary.get("failed_reps") else ""


def failed_footnotes(rows: Iterable[tuple[str, dict[str, Any] | None]], planned: int, what: str) -> list[str]:
    """The lines under a table for its ``(name, summary)`` rows marked by :func:`failed_mark`:
    how many of the ``planned`` repetitions failed, why, and how many the figures (the
    summary's ``reps``) come from; a ``what`` (row, cell) that failed is not measured again."""
    lines = []
    for name, s in rows:
        if s and s.get("failed_reps"):
            failure = str(s["failure"]).replace("|", "/")
            lines.append(
                f"{FAILED_MARK} {name}: {s['failed_reps']} of {planned} repetitions failed ({failure}) and the "
                f"{what} was not measured again: its figures are from {s['reps']} of {planned}."
            )
    return lines + [""] if lines else []


@dataclasses.dataclass(frozen=True)
class Suite:
    """One suite of ``vecenv-bench``: ``--suite NAME`` runs it."""

    name: str
    summary: str  # one line for the list of suites in --help
    doc: str  # its rows, method and output, for its --help
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], Outcome]


def csv(
    kind: Callable[[str], Any], choices: Sequence[Any] | None = None, empty_ok: bool = False
) -> Callable[[str], list[Any]]:
    """An argparse type: a comma-separated list of ``kind``, each one of ``choices`` when given;
    ``""`` is the empty list only where ``empty_ok``. A repeated item counts once (in the place
    it first has): ``--sizes 8,32,8`` measured N=8 twice, in two rows of the same name whose
    ratios were each other's."""

    def parse(text: str) -> list[Any]:
        name = getattr(kind, "__name__", "value")
        # "a subset of , got ''" said nothing for an option without choices: name the kind there
        expected = (
            f"a comma-separated list of {name}s"
            if choices is None
            else f"a comma-separated subset of {', '.join(map(str, choices))}"
        )
        try:
            items = [kind(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {name}s, got {text!r}") from None
        bad = [x for x in items if choices is not None and x not in choices]
        if bad or not (items or empty_ok):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return list(dict.fromkeys(items))

    return parse


def require(ok: bool, option: str, rule: str, value: Any) -> None:
    """``OptionError`` naming ``option``, the ``rule`` it breaks and its ``value``, unless ``ok``."""
    if not ok:
        raise OptionError(f"{option}: expected {rule}, got {value}")


def pick(value: Any, full: Any, quick: Any, args: argparse.Namespace) -> Any:
    """An option's value: as given, else its ``--quick`` or its full default."""
    if value is not None:
        return value
    return quick if args.quick else full


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules of ``modules`` that are not importable here; a dotted name (a module that only
    some versions of its package have) is missing too when its package is."""
    return [m for m in modules if _find_spec(m) is None]


def _find_spec(module: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        return None


def spread(name: str, values: Sequence[float]) -> dict[str, float]:
    """``{name}_median``, ``{name}_min`` and ``{name}_max`` of ``values`` (not empty)."""
    return {f"{name}_median": statistics.median(values), f"{name}_min": min(values), f"{name}_max": max(values)}


def ratio(x: float | None, y: float | None) -> float | None:
    """``x / y``, or ``None`` when either is missing or ``y`` is 0."""
    return None if x is None or not y else x / y


def rate_text(summary: dict[str, Any], name: str = "rate") -> str:
    """``**median** (min–max)`` of a :func:`spread`, the median alone when min equals max."""
    med, lo, hi = summary[f"{name}_median"], summary[f"{name}_min"], summary[f"{name}_max"]
    return f"**{med:,.0f}**" if lo == hi else f"**{med:,.0f}** ({lo:,.0f}–{hi:,.0f})"


def ratio_text(x: float | None) -> str:
    """``1.23×``, or ``—`` for no ratio."""
    return "—" if x is None else f"{x:.2f}×"


def table(head: Sequence[str], rows: Iterable[Sequence[str]], left: int = 1) -> list[str]:
    """Markdown table lines: the first ``left`` columns left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * left + ["---:"] * (len(head) - left)) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]
    return lines + [""]
