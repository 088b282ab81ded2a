"""This process's open file descriptors, for the tests' leak checks."""

from __future__ import annotations

import os


def open_fds() -> dict[int, str]:
    """Each open descriptor and what it points to (``readlink`` of ``/proc/self/fd/N``)."""
    table = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            table[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the descriptor of the listing itself, closed by now
    return table
