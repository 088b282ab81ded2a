"""Progress bars (tqdm's) that start no thread.

tqdm starts a monitor thread with the first bar a process makes, shown or disabled, and never
ends it (tqdm 4.70). A process that once collected a dataset or ran a soak kept that thread for
good, and every vector env it made afterwards forked its workers from a threaded parent: a
worker can inherit a lock the thread held at that instant (tqdm's own, which the monitor takes
every ten seconds), and where nothing has recorded a start method vecenv avoids that by starting
the workers with ``forkserver`` instead (see :func:`vecenv.machine.own_start_method`), slower to
start. The monitor only refreshes a bar that its updates left stale for ten seconds; vecenv's
bars are updated at every chunk of work, so they go without it.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(**kwargs: Any) -> Any:
    """A ``tqdm.tqdm(**kwargs)`` bar whose class starts no monitor thread. tqdm is imported
    here, when a bar is made, not with vecenv."""
    return _bar_class()(**kwargs)


@functools.cache
def _bar_class() -> type:
    from tqdm import tqdm

    # tqdm reads monitor_interval from the bar's class when it makes a bar: 0 starts no thread.
    return type("Bar", (tqdm,), {"monitor_interval": 0, "__module__": __name__})
