"""What this machine and this process allow: the cores it may run on, and the start method a
vector env uses when none is given. These read the platform; :mod:`vecenv.checks` stays pure.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading

__all__ = ["available_cpus", "default_start_method"]


def available_cpus() -> int:
    """The cores this process may run on: its affinity mask (which container CPU sets limit),
    not ``os.cpu_count()``, which counts every core of the machine."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_start_method() -> str:
    """The start method for ``context=None``: the platform's, except fork in a threaded parent.

    Forking while other Python threads run (Ray's, a notebook kernel's, a progress bar's
    monitor) copies whatever locks those threads held at that instant (an output stream's, a
    logging handler's), and a worker that needs one waits forever; Python 3.12 warns about it
    and 3.14 stops forking by default. So where the start method is still the platform's unset
    default and that default is fork, a parent running more than one Python thread starts its
    workers with ``forkserver``. Native thread pools (OpenBLAS, OpenMP) handle fork themselves
    and do not count. A method the user set (here or with ``multiprocessing.set_start_method``)
    is always used as given.
    """
    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen is not None:
        return chosen
    # The platform default comes first. (get_context(None) would fix it as if the user had.)
    methods = multiprocessing.get_all_start_methods()
    if methods[0] != "fork" or threading.active_count() <= 1 or not _main_reloadable():
        return methods[0]
    return "forkserver" if "forkserver" in methods else "spawn"


def _main_reloadable() -> bool:
    """Whether forkserver/spawn can load ``__main__`` again: not a script read from stdin."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return path is None or os.path.exists(path)
