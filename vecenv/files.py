"""Output files written whole or not at all, and JSON that strict parsers read.

A command interrupted (Ctrl+C, SIGTERM, a full disk) while it writes a result file must not
leave a partial file that looks complete: :func:`replaced` has the writer write a temporary file
in the same folder, then moves it over the target in one step (``os.replace``, atomic within one
file system); on any error the temporary file is removed and an older target is left as it was.

Python's ``json`` writes a float NaN or infinity as the bare words ``NaN``/``Infinity``, which
are not JSON (``JSON.parse``, ``jq`` and other strict parsers refuse the whole file):
:func:`json_text` writes ``null`` for them instead.

This module imports nothing heavy: the scripts, ``vecenv-bench`` and ``vecenv.datasets`` share it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["replaced", "write_text_atomically", "json_text", "finite_or_none"]


@contextlib.contextmanager
def replaced(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields a temporary path beside ``path`` (same folder, so the same file system, and the
    same suffix, so writers that pick a format by it, like matplotlib's ``savefig``, still do);
    once the block ends normally it replaces ``path`` in one step. If the block raises
    (including ``KeyboardInterrupt``), the temporary file is removed and ``path`` is untouched."""
    target = Path(path)
    temporary = target.with_name(f".{target.stem}.{os.getpid()}.tmp{target.suffix}")
    try:
        yield temporary
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """``path`` holds ``text`` whole, or (on an error or interrupt) what it held before."""
    with replaced(path) as temporary:
        temporary.write_text(text)


def finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, +-infinity) in it, at any depth of dicts,
    lists and tuples, replaced by ``None``: the ``null`` that JSON has for "no value"."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(v) for v in value]
    return value


def json_text(value: Any, *, indent: int | None = 2, default: Callable[[Any], Any] | None = None) -> str:
    """``value`` as strict JSON text (non-finite floats written as ``null``), ending in a newline.
    ``default`` converts objects ``json`` cannot write, as in :func:`json.dumps`; a non-finite
    float it returns is refused (``ValueError``), not written as ``NaN``."""
    return json.dumps(finite_or_none(value), indent=indent, default=default, allow_nan=False) + "\n"
