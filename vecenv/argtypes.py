"""Value types for the command lines (``vecenv-collect``, ``vecenv-bench``, ``scripts/``).

Each is an argparse ``type=``: it returns the value, or raises ``argparse.ArgumentTypeError``,
which argparse reports as one line naming the option (``argument --steps: expected a positive
integer, got 0``) with exit status 2, instead of a traceback from wherever the value would
have failed later.
"""

from __future__ import annotations

import argparse
import math

__all__ = ["positive_int", "non_negative_int", "positive_float", "non_negative_float", "int_list"]


def _number(text: str, kind: type, what: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    value = int(_number(text, int, "a positive integer"))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(_number(text, int, "a non-negative integer"))
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float, "a positive number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value:g}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float, "a non-negative number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {value:g}")
    return value


def int_list(text: str) -> list[int]:
    """Comma-separated non-negative integers, at least one (``1,2,3``)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated non-negative integers (e.g. 1,2,3), got {text!r}")
    return values
