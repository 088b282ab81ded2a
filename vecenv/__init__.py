"""vecenv: many Gymnasium envs stepped in a few worker processes, identical to SyncVectorEnv.

Every public name is listed in ``__all__`` and imported on first use (a module ``__getattr__``,
as ``concurrent.futures`` does), so ``import vecenv`` is cheap: every worker started with
``spawn`` or ``forkserver`` imports it again. ``RayVectorEnv`` imports Ray only when it is
first used; it is left out of ``__all__`` so that ``from vecenv import *`` does not import Ray.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "AutoresetMode": "gymnasium.vector",
    "Dataset": "vecenv.datasets.dataset",
    "DEFAULT_CLOSE_TIMEOUT": "vecenv.parent.closing",
    "GroupVectorEnv": "vecenv.parent.vector_env",
    "InvalidObservationError": "vecenv.errors",
    "MultiAgentVectorEnv": "vecenv.multiagent.vector_env",
    "NeedsResetError": "vecenv.errors",
    "PolicyOutputError": "vecenv.errors",
    "RemoteEnvError": "vecenv.errors",
    "Rollout": "vecenv.parent.rollouts",
    "SpaceMismatchError": "vecenv.errors",
    "State": "vecenv.parent.state",
    "SubprocVectorEnv": "vecenv.parent.subproc",
    "VecEnvError": "vecenv.errors",
    "VecEnvTimeoutError": "vecenv.errors",
    "WorkerDiedError": "vecenv.errors",
    "WorkerStatus": "vecenv.parent.records",
    "collect": "vecenv.datasets.collection",
    "load": "vecenv.datasets.dataset",
    "make": "vecenv.factory",
    "make_parallel": "vecenv.multiagent.vector_env",
    "spawn_seeds": "vecenv.seeding",
}
_LAZY_ONLY = {"RayVectorEnv": "vecenv.integrations.ray.vector_env"}
# Subpackages and modules reachable as attributes (``vecenv.datasets.collect``) without importing them first.
_SUBPACKAGES = ("datasets", "policies", "rollout")

__all__ = [
    "AutoresetMode",
    "Dataset",
    "DEFAULT_CLOSE_TIMEOUT",
    "GroupVectorEnv",
    "InvalidObservationError",
    "MultiAgentVectorEnv",
    "NeedsResetError",
    "PolicyOutputError",
    "RemoteEnvError",
    "Rollout",
    "SpaceMismatchError",
    "State",
    "SubprocVectorEnv",
    "VecEnvError",
    "VecEnvTimeoutError",
    "WorkerDiedError",
    "WorkerStatus",
    "collect",
    "load",
    "make",
    "make_parallel",
    "spawn_seeds",
    "__version__",
]

if TYPE_CHECKING:
    from gymnasium.vector import AutoresetMode

    from vecenv.datasets.collection import collect
    from vecenv.datasets.dataset import Dataset, load
    from vecenv.errors import (
        InvalidObservationError,
        NeedsResetError,
        PolicyOutputError,
        RemoteEnvError,
        SpaceMismatchError,
        VecEnvError,
        VecEnvTimeoutError,
        WorkerDiedError,
    )
    from vecenv.factory import make
    from vecenv.integrations.ray.vector_env import RayVectorEnv  # noqa: F401 - lazy only: not in __all__
    from vecenv.multiagent.vector_env import MultiAgentVectorEnv, make_parallel
    from vecenv.parent.closing import DEFAULT_CLOSE_TIMEOUT
    from vecenv.parent.records import WorkerStatus
    from vecenv.parent.rollouts import Rollout
    from vecenv.parent.state import State
    from vecenv.parent.subproc import SubprocVectorEnv
    from vecenv.parent.vector_env import GroupVectorEnv
    from vecenv.seeding import spawn_seeds


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and keep the name here."""
    if name in _SUBPACKAGES:
        return importlib.import_module(f"vecenv.{name}")
    module = _EXPORTS.get(name) or _LAZY_ONLY.get(name)
    if module is None:
        raise AttributeError(f"module 'vecenv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_LAZY_ONLY, *_SUBPACKAGES])
