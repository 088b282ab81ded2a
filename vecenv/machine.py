"""What this machine and this process allow: the cores it may run on, the start method a
vector env uses when none is given, and whether the running script can be imported again by
its workers. These read the platform; :mod:`vecenv.checks` stays pure.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import math
import multiprocessing
import os
import resource
import sys
import threading
import tokenize
import warnings
from collections.abc import Iterator, Sequence
from types import CodeType, FrameType, ModuleType

from vecenv.errors import InvalidStateError, UnguardedMainError, UnguardedMainWarning

__all__ = [
    "available_cpus",
    "pin_cores",
    "pinned_core",
    "cpu_quota",
    "Cgroup",
    "cgroups",
    "descriptor_usage",
    "default_start_method",
    "own_start_method",
    "guard_main",
    "unguarded_main",
    "guarded_line",
    "check_may_start_processes",
    "loading_constructors",
]

#: The start methods that start a worker by importing the main script again (as ``__mp_main__``).
REIMPORTING = ("spawn", "forkserver")


def available_cpus() -> int:
    """The cores this process may run on: its affinity mask (which container CPU sets limit),
    not ``os.cpu_count()``, which counts every core of the machine, and no more than its CPU
    quota allows (:func:`cpu_quota`: what ``docker --cpus`` and Kubernetes' CPU limits set,
    leaving the affinity mask at every core of the host)."""
    try:
        cores = len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
    quota = cpu_quota()
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def pin_cores() -> list[int]:
    """The cores ``pin_cpus`` deals out, in order: this process's affinity mask, sorted."""
    return sorted(os.sched_getaffinity(0))


def pinned_core(number: int, cores: Sequence[int] | None = None) -> int:
    """The core ``pin_cpus`` gives the vector env's worker ``number``: the ``number``-th of
    ``cores`` (default :func:`pin_cores`), round robin. A group the parent hosts
    (``inline_group``) is worker 0 and the worker processes are numbered after it, so the
    parent's thread and every process follow this one rule."""
    cores = pin_cores() if cores is None else cores
    return cores[number % len(cores)]


def _cgroup_cpu_limit(directory: str, v2: bool) -> float | None:
    """The cores one cgroup's CPU quota gives (``None``: no quota, or none readable there)."""
    try:
        if v2:
            with open(f"{directory}/cpu.max") as f:
                quota, _, period = f.read().strip().partition(" ")
        else:
            with open(f"{directory}/cpu.cfs_quota_us") as f:
                quota = f.read().strip()
            with open(f"{directory}/cpu.cfs_period_us") as f:
                period = f.read().strip()
    except OSError:
        return None
    if not quota.isdigit() or not period.isdigit() or int(period) == 0:
        return None  # "max" (v2) or -1 (v1): no quota
    return int(quota) / int(period)


@dataclasses.dataclass(frozen=True)
class Cgroup:
    """Where one of this process's cgroups may be read. ``version`` 2: ``directories`` are the
    cgroup and each of its ancestors up to the mount's root (a limit anywhere there applies).
    ``version`` 1: where the cgroup may be, best first: the path ``/proc/self/cgroup`` names,
    under the controller's mount, then the mount's root, which a container without a cgroup
    namespace sees as its own cgroup while the file names the host's path to it."""

    version: int
    directories: tuple[str, ...]


def cgroups(controller: str, root: str = "/sys/fs/cgroup", membership: str = "/proc/self/cgroup") -> list[Cgroup]:
    """This process's cgroups that may limit ``controller`` (``"cpu"``, ``"memory"``): the v2
    one, and the v1 one of that controller. (``root`` and ``membership``: where the cgroup file
    systems are mounted and the file that names this process's cgroups.)"""
    try:
        with open(membership) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found: list[Cgroup] = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        path = path.rstrip("/")
        if hierarchy == "0" and controllers == "":  # v2: up to the root
            directories = []
            directory = root + path
            while directory.startswith(root):  # (a container's own root included)
                directories.append(directory)
                if directory == root:
                    break
                directory = os.path.dirname(directory)
            found.append(Cgroup(2, tuple(directories)))
        elif controller in controllers.split(","):  # v1: mounted as "cpu,cpuacct", or as "cpu" (a link)
            mounts = list(dict.fromkeys((f"{root}/{controllers}", f"{root}/{controller}")))
            found.append(Cgroup(1, tuple([mount + path for mount in mounts] + mounts)))
    return found


def cpu_quota(root: str = "/sys/fs/cgroup", membership: str = "/proc/self/cgroup") -> float | None:
    """The cores this process's CPU quota gives (``quota / period``, the least of its cgroup's
    and its ancestors' under cgroup v2, of its v1 ``cpu`` cgroup's), or ``None`` where none is
    set. A container limited this way keeps every core of the host in its affinity mask, but
    more busy processes than the quota only take turns, and the step's fast path, which spins
    while the processes fit the cores, would spend the quota waiting. (``root`` and
    ``membership``: as for :func:`cgroups`.)"""
    found: list[float] = []
    for group in cgroups("cpu", root, membership):
        limits = [_cgroup_cpu_limit(directory, v2=group.version == 2) for directory in group.directories]
        readable = [limit for limit in limits if limit is not None]
        # v2: every level's quota applies; v1: the first place the cgroup is found.
        found.extend(readable if group.version == 2 else readable[:1])
    return min(found) if found else None


def _open_descriptors() -> int | None:
    """How many descriptors this process has open (``None``: no /proc, or no descriptor free
    to list them with: listing them needs one too)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one the listing used
    except OSError:
        return None


def descriptor_usage() -> tuple[int, str]:
    """This process's descriptor limit (``RLIMIT_NOFILE``'s soft one) and how many it has
    open, in words: for the errors of running out of them."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = _open_descriptors()
    return soft, "all are in use" if count is None else f"{count} are open"


def free_descriptors() -> int | None:
    """How many more descriptors this process may open under ``RLIMIT_NOFILE``'s soft limit
    (``None``: no limit, or none that can be counted)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = _open_descriptors()
    return None if soft == resource.RLIM_INFINITY or count is None else soft - count


def default_start_method() -> str:
    """The start method for ``context=None``: the one set with ``multiprocessing.set_start_method``
    if any (a method the user set is always used as given), else :func:`own_start_method`.

    Python also records its platform default as if the user had set it once anything asks for
    the default context: a ``spawn`` or ``forkserver`` process started, or a top-level
    ``multiprocessing.Queue()``, ``Lock()`` or ``Manager()`` made (each tqdm bar makes one),
    which no public API tells apart from a choice. Before Python 3.14 that is ``fork`` on Linux,
    which is then used in a threaded parent too (see the docs' "Start methods").
    """
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen is not None:
        return chosen
    return own_start_method()


def own_start_method() -> str:
    """The start method vecenv picks itself: the platform's, except fork in a threaded parent.

    Forking while other Python threads run (Ray's, a notebook kernel's, a progress bar's
    monitor) copies whatever locks those threads held at that instant (an output stream's, a
    logging handler's), and a worker that needs one waits forever; Python 3.12 warns about it
    and 3.14 stops forking by default. So where the platform's default is fork, a parent running
    more than one Python thread starts its workers with ``forkserver``. Native thread pools
    (OpenBLAS, OpenMP) handle fork themselves and do not count. A script read from stdin cannot
    be imported again: where the platform's default would import it (``forkserver``, Python
    3.14's default on Linux), its workers are forked, as ``fork`` is the only method that can
    start them. A replacement worker of a vector env whose method vecenv picked starts with
    this too, whatever Python has recorded since.
    """
    # The platform default comes first. (get_context(None) would fix it as if the user had.)
    methods = multiprocessing.get_all_start_methods()
    if not _main_reloadable():
        return "fork" if methods[0] in REIMPORTING and "fork" in methods and sys.platform != "darwin" else methods[0]
    if methods[0] != "fork" or threading.active_count() <= 1:
        return methods[0]
    return "forkserver" if "forkserver" in methods else "spawn"


def _main_runs_again() -> bool:
    """Whether forkserver/spawn run ``__main__``'s top-level code again in each worker, by
    CPython's rule (``multiprocessing.spawn``): a main run by module name is run again unless it
    is a package's or a zipapp's ``__main__`` (``python -m pkg``, ``python pkg/``, ``python
    app.pyz``), which never is; one run from a file is, unless it is IPython's launcher."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if isinstance(name, str):
        return name != "__main__" and not name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    return isinstance(path, str) and os.path.splitext(os.path.basename(path))[0] != "ipython"


def _main_reloadable() -> bool:
    """Whether forkserver/spawn can load ``__main__`` again where they would: not a script read
    from stdin, nor one whose file is gone (no spec, and a file that does not exist)."""
    main = sys.modules.get("__main__")
    if not _main_runs_again() or getattr(main, "__spec__", None) is not None:
        return True
    path = getattr(main, "__file__", None)
    return isinstance(path, str) and os.path.exists(path)


def guard_main(method: str, chosen: bool, what: str, option: str) -> str:
    """The start method to use instead of ``method`` so that the running script never runs twice.

    ``spawn`` and ``forkserver`` start each worker by importing the main script again. A script
    whose top-level code builds the vector env outside an ``if __name__ == "__main__":`` block
    would run again in every worker (training as many times over, or dying in CPython's
    "bootstrapping phase" error). Then, where vecenv chose the method (``chosen`` false), the
    workers are forked instead, with one :class:`~vecenv.errors.UnguardedMainWarning`: fork
    copies this process and imports nothing. Where the user chose it, it is not overridden:
    :class:`~vecenv.errors.UnguardedMainError` says what happened and both ways out, before any
    process starts. ``what`` names the vector env class, ``option`` its start-method keyword.
    """
    if method not in REIMPORTING:
        return method
    forkable = "fork" in multiprocessing.get_all_start_methods() and sys.platform != "darwin"
    try:
        os.getcwd()
    except FileNotFoundError:  # spawn and forkserver start each worker in it
        if not chosen and forkable:
            return "fork"
        raise InvalidStateError(
            f"{what} cannot start its workers with {method!r}: this process's current directory no longer "
            f"exists (removed after it changed into it), and {method!r} starts each worker there. Change to an "
            f"existing directory first, or pass {option}='fork'"
        ) from None
    if not _main_runs_again():
        return method
    if not _main_reloadable():  # a script read from stdin, or deleted: no file to import again
        if not chosen and forkable:
            return "fork"
        path = getattr(sys.modules.get("__main__"), "__file__", None)
        how = "this script was read from stdin" if path == "<stdin>" else f"this script's file {path} no longer exists"
        raise UnguardedMainError(
            f"{what} cannot start its workers with {method!r}: {how}, and "
            f"{method!r} starts each worker by importing the script again from its file. Run the "
            f"script from a file, or pass {option}='fork'"
        )
    site = unguarded_main()
    if site is None:
        return method
    path, line = site
    guard = 'if __name__ == "__main__":'
    if not chosen and forkable:
        warnings.warn_explicit(
            f"{what} is built by this script's top-level code, outside `{guard}`: its workers are "
            f"started with 'fork', not {method!r}, which would import the script again and run it once "
            f"more in every worker; put the script's code under `{guard}` to use {method!r}",
            UnguardedMainWarning,
            path,
            line,
            module="__main__",
            # No module_globals: a script's have no __spec__.loader, which Python 3.12+ reports
            # with a DeprecationWarning of its own; the line is read from the file instead.
        )
        return "fork"
    raise UnguardedMainError(
        f"{what} cannot start its workers with {method!r}: it is built by the top-level code of {path}, "
        f"line {line}, outside `{guard}`, and {method!r} starts each worker by importing that script again, "
        f"which would run it once more in every worker. Put the script's code under `{guard}`, or pass "
        f"{option}='fork'"
    )


class _Loading(threading.local):
    """Whether this thread is loading (unpickling) env constructors: per thread, so that a
    vector env built in another thread of a parent that loads a group of its own meanwhile
    (``inline_group``) is not taken for one built by an import."""

    depth = 0


_loading = _Loading()


@contextlib.contextmanager
def loading_constructors() -> Iterator[None]:
    """A worker loading its env constructors: unpickling imports each module they refer to by
    name, which runs that module's top-level code in a worker that was not forked. Where that
    code builds a vector env, :func:`check_may_start_processes` refuses it (every worker would
    build one more, and each of their workers one more again)."""
    _loading.depth += 1
    try:
        yield
    finally:
        _loading.depth -= 1


def _importing_module() -> tuple[str, str, int] | None:
    """``(module name, file, line)`` of the innermost module whose top-level code is running
    (an import in progress), or ``None``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    if frame is None:
        return None
    return str(frame.f_globals.get("__name__")), frame.f_code.co_filename, frame.f_lineno


def check_may_start_processes(what: str) -> None:
    """Refuse clearly, before anything starts, where Python will not start a child process:
    in a daemonic multiprocessing process (a ``multiprocessing.Pool`` worker, say); or where it
    must not: in a worker importing a module its env constructors refer to, whose top-level code
    builds this vector env (started with ``spawn`` or ``forkserver``, each worker would build one
    more, recursively: with ``daemon=False``, without end)."""
    if _loading.depth:
        site = _importing_module()
        how = "code that loading them runs builds this vector env"
        if site is not None:
            module, path, line = site
            how = (
                f"they refer to module {module!r}, and importing it runs that module's top-level code, which "
                f"builds this vector env ({path}, line {line})"
            )
        raise UnguardedMainError(
            f"{what} cannot be built in {multiprocessing.current_process().name}: the worker is loading its env "
            f"constructors, and {how}: every worker would build one more, and each of theirs one more again. Move "
            "that code into a function the program calls, define the envs in a module that builds nothing when "
            "imported, or start the workers with 'fork' (which imports nothing)"
        )
    process = multiprocessing.current_process()
    if process.daemon:
        if process.name.startswith("vecenv-worker-"):
            kind, way = "a vecenv worker", "pass daemon=False to the vector env this worker belongs to"
        else:
            kind, way = "a multiprocessing.Pool worker, say", "build it in a process started with daemon=False"
        raise InvalidStateError(
            f"{what} cannot start worker processes in this process: it is a daemonic multiprocessing "
            f"process ({process.name!r}; {kind}), and Python does not let those have children. Pass "
            f"num_workers=0 to step every env in this process, or {way}"
        )


def unguarded_main() -> tuple[str, int] | None:
    """``(path, line)`` of the running script's top-level statement that is running now (it is
    what called us; in another thread than the main one, what the main thread runs meanwhile),
    when that statement is not under ``if __name__ == "__main__":``; else ``None``. No script
    file (a notebook, ``python -c``, stdin) means nothing to import again.

    The script's top level may run further top-level code in its own namespace
    (``exec(open("cell.py").read())``): workers importing the script run that again too, so
    each such level counts. The statement is guarded where any level's is; a level whose
    source cannot be read (a string) can hold a guard only if its code reads ``__name__``, and
    then nothing is known. The line reported is the script's own.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or not os.path.isfile(path):
        return None
    levels = _main_levels(sys._getframe(1), main)
    if not levels and threading.current_thread() is not threading.main_thread():
        # Built in a thread: the script's top level may be running in the main thread meanwhile
        # (it started this thread and joins it), and a worker importing the script runs it again.
        levels = _main_levels(sys._current_frames().get(threading.main_thread().ident or 0), main)
    if not levels:
        return None
    if any(_level_guarded(level) is not False for level in levels[:-1]):
        return None  # guarded at an inner level, or not known
    script = levels[-1]
    try:
        source, code = _read(path, os.stat(path).st_mtime_ns)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    if not _same_code(code, script.f_code):
        # The file was edited since the script started (during a long run, say): its line
        # numbers say nothing about the running statement, so nothing is known, nothing changed.
        return None
    line = script.f_lineno
    return None if guarded_line(source, line) else (path, line)


def _main_levels(frame: FrameType | None, main: ModuleType) -> list[FrameType]:
    """The frames of ``main``'s top-level code on the stack that ``frame`` ends, innermost first."""
    levels = []
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            levels.append(frame)
        frame = frame.f_back
    return levels


def _level_guarded(frame: FrameType) -> bool | None:
    """Whether the statement running in ``frame`` (top-level code that the script ran in its own
    namespace with ``exec``) lies under a main guard of that code; ``None``: not known."""
    path = frame.f_code.co_filename
    if os.path.isfile(path):
        try:
            source, code = _read(path, os.stat(path).st_mtime_ns)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            code = None
        if code is not None and _same_code(code, frame.f_code):
            return guarded_line(source, frame.f_lineno)
    # No source to read: top-level code that never reads __name__ holds no guard.
    return None if "__name__" in frame.f_code.co_names else False


@functools.lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int) -> tuple[str, CodeType]:
    """The script's source and its module code, compiled as Python compiled the script (none of
    this module's ``__future__`` flags; its warnings were shown when the script started)."""
    with tokenize.open(path) as f:
        source = f.read()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = compile(source, path, "exec", dont_inherit=True)
    return source, code


def _same_code(compiled: CodeType, running: CodeType) -> bool:
    """Whether the running module code is the one compiled from the file as it is now: the same
    bytecode at the same lines."""
    return compiled.co_code == running.co_code and list(compiled.co_lines()) == list(running.co_lines())


def guarded_line(source: str, line: int) -> bool:
    """Whether ``line`` of module ``source`` runs only as the main script, at any depth: in the
    body of ``if __name__ == "__main__":`` (also ``"__main__" == __name__``, ``__name__ in
    ("__main__",)`` or ``... and __name__ == "__main__"``), in the ``else`` of its negation
    (``!=``, ``not``), or in ``case "__main__":`` of ``match __name__``. Unparsable source
    counts as guarded: nothing is known, so nothing is changed."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True
    body: list[ast.stmt] = tree.body
    while True:
        stmt = _at(body, line)
        if stmt is None:
            return False
        guarded = _main_only_block(stmt)
        if guarded is not None and _at(guarded, line) is not None:
            return True
        inner = [s for block in _blocks(stmt) for s in block]
        if not inner:
            return False
        body = inner


def _at(body: list[ast.stmt], line: int) -> ast.stmt | None:
    """The statement of ``body`` that spans ``line``, if one does."""
    return next((s for s in body if s.lineno <= line <= (s.end_lineno or s.lineno)), None)


def _main_only_block(stmt: ast.stmt) -> list[ast.stmt] | None:
    """The statements of ``stmt`` that run only where ``__name__`` is ``"__main__"`` (``None``:
    it has no such block)."""
    if isinstance(stmt, ast.If):
        if _main_only(stmt.test, True):
            return stmt.body
        return stmt.orelse if _main_only(stmt.test, False) else None
    if isinstance(stmt, ast.Match) and _is_name(stmt.subject):
        for case in stmt.cases:
            pattern = case.pattern
            if case.guard is None and isinstance(pattern, ast.MatchValue) and _is_main(pattern.value):
                return case.body
    return None


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists nested in a compound statement (none for a simple one)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []  # a definition's body does not run at import
    names = ("body", "orelse", "finalbody")
    blocks = [getattr(stmt, name) for name in names if isinstance(getattr(stmt, name, None), list)]
    blocks += [h.body for h in getattr(stmt, "handlers", [])]
    blocks += [c.body for c in getattr(stmt, "cases", [])]
    return blocks


def _main_only(test: ast.expr, when: bool) -> bool:
    """``test`` is ``when`` only where ``__name__`` is ``"__main__"``: with ``True``, its
    body is guarded; with ``False``, its ``else``. ``not`` flips ``when``; an ``and`` (an
    ``or`` for ``False``) needs one such part."""
    joins = ast.And if when else ast.Or
    if isinstance(test, ast.BoolOp) and isinstance(test.op, joins):
        return any(_main_only(value, when) for value in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _main_only(test.operand, not when)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(op, ast.Eq if when else ast.NotEq):
        return _names_main(left, right)
    if when and isinstance(op, ast.In) and _is_name(left) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
        return bool(right.elts) and all(_is_main(e) for e in right.elts)
    return False


def _names_main(left: ast.expr, right: ast.expr) -> bool:
    """One side is ``__name__`` and the other ``"__main__"``."""
    return (_is_name(left) and _is_main(right)) or (_is_main(left) and _is_name(right))


def _is_name(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "__name__"


def _is_main(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == "__main__"
