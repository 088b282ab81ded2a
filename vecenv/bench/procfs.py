"""Linux ``/proc`` readings: process states, parents and trees, CPU time, PSS, command lines.

The one reader of ``/proc/<pid>/stat`` and ``/proc/<pid>/status`` for every benchmark suite, the
scripts (soak, threads demo) and the tests, which check that no process is left behind. Processes exit
while they are read, so a reader skips (or answers ``None`` for) a pid that is gone or
unreadable, unless its docstring says that it raises. ``import vecenv`` never imports this.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence

#: States of a process that has exited: a zombie not yet reaped, or one being torn down.
GONE_STATES = ("Z", "X")


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, from field 3 (state) on;
    ``None`` for a pid that is gone or unreadable. The name may hold spaces and parentheses,
    so the split starts after its last ``)``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def state(pid: int) -> str | None:
    """The state letter of ``pid`` (``R``, ``S``, ``Z``, ...), ``None`` when it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else fields[0]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not reaped yet) counts as gone."""
    s = state(pid)
    return s is not None and s not in GONE_STATES


def parent_map() -> dict[int, int]:
    """``{pid: parent pid}`` of every process readable now."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None:
                parents[int(entry)] = int(fields[1])  # ppid (field 4)
    return parents


def children(pid: int, parents: Mapping[int, int] | None = None) -> list[int]:
    """The live child processes of ``pid`` (zombies left out), sorted."""
    parents = parent_map() if parents is None else parents
    return sorted(child for child, ppid in parents.items() if ppid == pid and alive(child))


def tree(root: int, parents: Mapping[int, int] | None = None) -> list[int]:
    """``root`` and all its descendants (zombies included), ``root`` first."""
    below: dict[int, list[int]] = {}
    for child, ppid in (parent_map() if parents is None else parents).items():
        below.setdefault(ppid, []).append(child)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(below.get(pid, ()))
    return out


def descendants(root: int, parents: Mapping[int, int] | None = None) -> set[int]:
    """Every process below ``root`` (zombies included), ``root`` itself not."""
    return set(tree(root, parents)) - {root}


def cpu_ticks(pids: Iterable[int]) -> dict[int, int]:
    """User + system CPU time of each readable pid (all its threads), in clock ticks."""
    out = {}
    for pid in pids:
        fields = stat_fields(pid)
        if fields is not None:
            out[pid] = int(fields[11]) + int(fields[12])  # utime (14), stime (15)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds that ``pid`` has used; raises ``ProcessLookupError`` when it is gone."""
    ticks = cpu_ticks([pid])
    if pid not in ticks:
        raise ProcessLookupError(f"cpu_seconds: no readable /proc/{pid}/stat")
    return ticks[pid] / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int | None = None) -> float:
    """User + system CPU seconds used so far by ``root`` (default: this process) and every live
    descendant; a process that exited is no longer counted, so read it while the tree runs."""
    return sum(cpu_ticks(tree(os.getpid() if root is None else root)).values()) / os.sysconf("SC_CLK_TCK")


def idle_cpu(seconds: float, pids: Sequence[int] | None = None) -> tuple[float, float] | None:
    """Sleep ``seconds``; the CPU seconds (user + system) that ``pids`` (default: this process and
    its descendants) used meanwhile, and the wall seconds slept. ``None`` without /proc. A pid
    that exits in the window is not counted; resolution is one clock tick (usually 10 ms)."""
    pids = tree(os.getpid()) if pids is None else pids
    before = cpu_ticks(pids)
    t0 = time.perf_counter()
    time.sleep(seconds)
    wall = time.perf_counter() - t0
    after = cpu_ticks(list(before))
    if not before:
        return None
    ticks = sum(after[p] - before[p] for p in before if p in after)
    return ticks / os.sysconf("SC_CLK_TCK"), wall


def tree_pss_kib(root: int | None = None) -> float | None:
    """Sum of ``Pss`` over /proc/<pid>/smaps_rollup of ``root`` (default: self) and descendants."""
    total, seen = 0, False
    for pid in tree(os.getpid() if root is None else root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        seen = True
                        break
        except OSError:
            continue
    return total if seen else None


def status(pid: int) -> dict[str, str]:
    """The ``key: value`` lines of ``/proc/<pid>/status`` (``VmRSS``, ``Threads``, ``PPid``, ...),
    values stripped; raises ``OSError`` (``FileNotFoundError``, ...) when ``pid`` is gone."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def cmdline(pid: int) -> str | None:
    """The command line of ``pid``, its arguments joined by spaces; ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()
