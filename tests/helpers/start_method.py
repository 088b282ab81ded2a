"""The global multiprocessing start method, put back as it was after a test.

CPython records the platform's default start method as if the program had chosen it whenever
a ``spawn`` or ``forkserver`` process starts (``multiprocessing.spawn.get_preparation_data``
calls the global ``get_start_method()``, which fixes the default), whatever context started it:
a Gymnasium ``AsyncVectorEnv(context="spawn")`` in one test leaves ``fork`` recorded for the rest
of the session on Linux. vecenv takes a recorded method as the user's choice and uses it even in
a threaded parent, so every later vector env with ``context=None`` forks; in the Ray tests (run
last) that forks the Ray driver, whose gRPC state the children share, and the driver's next
``ray.nodes()``/``ray.cluster_resources()`` can wait minutes, or for ever, for its reply. A test may start
processes however it likes; :func:`kept_start_method` keeps the effect inside it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator

__all__ = ["kept_start_method"]


@contextlib.contextmanager
def kept_start_method() -> Iterator[None]:
    """Put the global start method back, after the block, to what it was before (unset stays
    unset), so that what the block started cannot choose later vector envs' start method."""
    before = multiprocessing.get_start_method(allow_none=True)
    try:
        yield
    finally:
        if multiprocessing.get_start_method(allow_none=True) != before:
            multiprocessing.set_start_method(before, force=True)
