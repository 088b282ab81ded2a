"""A file size limit (``RLIMIT_FSIZE``) for the span of a block: what a full disk looks like to
the writes in it, without filling one."""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Files of this process may not grow past ``limit`` bytes inside the block: a write beyond
    it fails with ``EFBIG`` (SIGXFSZ, which would end the process, is ignored meanwhile). The
    limit and the signal's handler are restored after it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
