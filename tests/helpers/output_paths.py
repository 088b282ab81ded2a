"""Monkeypatches for the ``vecenv-collect`` output checks: a folder this process may not write
in, and a command line whose envs must never be built.

Why ``os.access`` and not ``chmod``: as root (CI containers) ``access()`` ignores the mode bits,
so a 0o555 folder is writable and a test of the refusal would never see it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def deny_writes_in(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """``os.access(folder, W_OK ...)`` answers False from now on (every other question as before)."""
    real_access = os.access

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        if Path(path) == folder and mode & os.W_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)


def refuse_to_build_envs(monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    """The command line fails the test if it builds its envs: ``why`` they must not be built."""
    from vecenv.datasets import cli as cli_module

    def no_envs(*args: Any) -> None:
        raise AssertionError(f"the envs were built for {why}")

    monkeypatch.setattr(cli_module, "_make_envs", no_envs)
