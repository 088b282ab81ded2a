"""Value types for the command lines (``vecenv-collect``, ``vecenv-bench``, ``scripts/``).

Each is an argparse ``type=``: it returns the value, or raises ``argparse.ArgumentTypeError``,
which argparse reports as one line naming the option (``argument --steps: expected a positive
integer, got 0``) with exit status 2, instead of a traceback from wherever the value would
have failed later.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib

__all__ = [
    "positive_int",
    "non_negative_int",
    "finite_float",
    "positive_float",
    "non_negative_float",
    "unit_float",
    "int_list",
    "existing_file",
    "out_folder",
    "env_id",
    "DefaultsHelpFormatter",
]


def _number(text: str, kind: type, what: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer above 0."""
    value = int(_number(text, int, "a positive integer"))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An integer of 0 or more."""
    value = int(_number(text, int, "a non-negative integer"))
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def finite_float(text: str) -> float:
    """Any number but ``nan`` and ``inf``."""
    return _number(text, float, "a finite number")


def positive_float(text: str) -> float:
    """A finite number above 0."""
    value = _number(text, float, "a positive number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value:g}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number of 0 or more."""
    value = _number(text, float, "a non-negative number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {value:g}")
    return value


def unit_float(text: str) -> float:
    """A number in ``[0, 1]`` (a discount factor, a fraction)."""
    value = _number(text, float, "a number in [0, 1]")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {value:g}")
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


def existing_file(text: str) -> pathlib.Path:
    """A file that exists (an input)."""
    path = pathlib.Path(text)
    if not path.is_file():
        what = "a folder" if path.is_dir() else "no such file"
        raise argparse.ArgumentTypeError(f"expected an existing file, got {text!r} ({what})")
    return path


def out_folder(text: str) -> pathlib.Path:
    """An output folder: one that exists, or that can be made (its nearest existing ancestor
    is a folder this process may write in). Nothing is created here."""
    path = pathlib.Path(text)
    if not text:
        raise argparse.ArgumentTypeError("expected an output folder, got ''")
    existing = next((p for p in (path, *path.parents) if p.exists()), pathlib.Path("."))
    if not existing.is_dir():
        where = "it is" if existing == path else f"{str(existing)!r} is"
        raise argparse.ArgumentTypeError(f"expected an output folder, got {text!r} ({where} a file)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"expected an output folder, got {text!r} ({str(existing)!r} is not writable)")
    return path


def env_id(text: str) -> str:
    """A Gymnasium env id that ``gymnasium.make`` can make here (the env is made once, then
    closed), with Gymnasium's own reason, and its suggestion if it has one, when it cannot."""
    import gymnasium as gym  # here: the other types, and the modules importing them, stay light

    try:
        gym.make(text).close()
    except (gym.error.Error, ImportError) as exc:
        reason = " ".join(str(exc).split())
        raise argparse.ArgumentTypeError(f"expected a registered Gymnasium env id, got {text!r} ({reason})") from None
    return text


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter, minus ``(default: None)``: an option whose default is
    filled in after parsing (``--video-every``) says the value it then takes in its own help, and
    a second, contradicting ``(default: None)`` after it would mislead."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)
