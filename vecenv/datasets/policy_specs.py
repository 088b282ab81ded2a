"""Turning a ``--policy`` string into a callable: ``random``, ``module:attr`` or
``sb3:PATH.zip`` (a saved Stable-Baselines3 model, used through its ``predict``:
:mod:`vecenv.integrations.sb3.saved_model`)."""

from __future__ import annotations

import importlib
from typing import Any

from vecenv.datasets.action_checks import RECURRENT_REFUSED, is_recurrent
from vecenv.errors import PolicySpecError
from vecenv.integrations.sb3.saved_model import load_sb3


def load_policy(spec: str, deterministic: bool = False) -> Any:
    """The policy named by ``spec``: ``"random"`` (returned as is), ``sb3:PATH.zip`` or
    ``module:attr`` (attr may be dotted; must be callable). Raises PolicySpecError."""
    if spec == "random":
        if deterministic:
            raise PolicySpecError("--deterministic: only for sb3: policies, got --policy random")
        return spec
    if spec.startswith("sb3:"):
        return load_sb3(spec, deterministic)
    if deterministic:
        raise PolicySpecError(f"--deterministic: only for sb3: policies, got --policy {spec!r}")
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise PolicySpecError(f"--policy: expected 'random', 'sb3:PATH.zip' or 'module:attr', got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise PolicySpecError(
            f"--policy {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise PolicySpecError(f"--policy {spec!r}: {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        text = " ".join(repr(target).split())[:300]
        raise PolicySpecError(f"--policy {spec!r}: expected a callable, got {text}")
    if is_recurrent(target):
        raise PolicySpecError(f"--policy {spec!r}: {RECURRENT_REFUSED}")
    return target


__all__ = ["PolicySpecError", "load_policy"]
