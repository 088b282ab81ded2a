"""vecenv: many Gymnasium envs stepped in a few worker processes, identical to SyncVectorEnv.

``__all__`` is what most users need: the constructors (``make``, ``SubprocVectorEnv``,
``MultiAgentVectorEnv``, ``make_parallel``), the class that holds the vector env API
(``GroupVectorEnv``), dataset collection (``collect``, ``load``) and the errors a caller
catches (``VecEnvError`` and the three that faults raise). Other names stay reachable here
without being in ``__all__``: the types calls return (``Rollout``, ``Dataset``, ``State``), the
other errors (their home is :mod:`vecenv.errors`), ``DEFAULT_CLOSE_TIMEOUT``, ``spawn_seeds``,
Gymnasium's ``AutoresetMode`` and ``RayVectorEnv`` (left out so that ``from vecenv import *``
does not import Ray).

Every name is imported on first use (a module ``__getattr__``, as ``concurrent.futures`` does),
so ``import vecenv`` is cheap: every worker started with ``spawn`` or ``forkserver`` imports it
again.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

__version__ = "0.3.0.dev0"

# Names in ``__all__`` -> the module that defines each.
_EXPORTS = {
    "GroupVectorEnv": "vecenv.parent.vector_env",
    "MultiAgentVectorEnv": "vecenv.multiagent.vector_env",
    "NeedsResetError": "vecenv.errors",
    "SubprocVectorEnv": "vecenv.parent.subproc",
    "VecEnvError": "vecenv.errors",
    "VecEnvTimeoutError": "vecenv.errors",
    "WorkerDiedError": "vecenv.errors",
    "collect": "vecenv.datasets.collection",
    "load": "vecenv.datasets.dataset",
    "make": "vecenv.factory",
    "make_parallel": "vecenv.multiagent.vector_env",
}
# Reachable here, not in ``__all__`` (see the module docstring) -> the module that defines each.
_REACHABLE = {
    "AutoresetMode": "gymnasium.vector",
    "Dataset": "vecenv.datasets.dataset",
    "DEFAULT_CLOSE_TIMEOUT": "vecenv.parent.closing",
    "InvalidInfoError": "vecenv.errors",
    "InvalidObservationError": "vecenv.errors",
    "PolicyOutputError": "vecenv.errors",
    "RayVectorEnv": "vecenv.integrations.ray.vector_env",
    "RemoteEnvError": "vecenv.errors",
    "Rollout": "vecenv.parent.rollouts",
    "SpaceMismatchError": "vecenv.errors",
    "State": "vecenv.parent.state",
    "spawn_seeds": "vecenv.seeding",
}
# Top-level names on their way out: name -> (its module, the release that removes it here).
_DEPRECATED = {"WorkerStatus": ("vecenv.parent.records", "0.4")}
# Subpackages and modules reachable as attributes (``vecenv.datasets.collect``) without importing them first.
_SUBPACKAGES = ("datasets", "policies", "rollout")

# A literal list, so that static tools see it; tests/test_public_api.py checks it against _EXPORTS.
__all__ = [
    "GroupVectorEnv",
    "MultiAgentVectorEnv",
    "NeedsResetError",
    "SubprocVectorEnv",
    "VecEnvError",
    "VecEnvTimeoutError",
    "WorkerDiedError",
    "collect",
    "load",
    "make",
    "make_parallel",
    "__version__",
]

if TYPE_CHECKING:
    from gymnasium.vector import AutoresetMode as AutoresetMode

    from vecenv.datasets.collection import collect
    from vecenv.datasets.dataset import Dataset as Dataset
    from vecenv.datasets.dataset import load
    from vecenv.errors import InvalidInfoError as InvalidInfoError
    from vecenv.errors import InvalidObservationError as InvalidObservationError
    from vecenv.errors import NeedsResetError, VecEnvError, VecEnvTimeoutError, WorkerDiedError
    from vecenv.errors import PolicyOutputError as PolicyOutputError
    from vecenv.errors import RemoteEnvError as RemoteEnvError
    from vecenv.errors import SpaceMismatchError as SpaceMismatchError
    from vecenv.factory import make
    from vecenv.integrations.ray.vector_env import RayVectorEnv as RayVectorEnv
    from vecenv.multiagent.vector_env import MultiAgentVectorEnv, make_parallel
    from vecenv.parent.closing import DEFAULT_CLOSE_TIMEOUT as DEFAULT_CLOSE_TIMEOUT
    from vecenv.parent.rollouts import Rollout as Rollout
    from vecenv.parent.state import State as State
    from vecenv.parent.subproc import SubprocVectorEnv
    from vecenv.parent.vector_env import GroupVectorEnv
    from vecenv.seeding import spawn_seeds as spawn_seeds


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use and keep the name here."""
    if name in _SUBPACKAGES:
        return importlib.import_module(f"vecenv.{name}")
    if name in _DEPRECATED:
        home, removal = _DEPRECATED[name]
        warnings.warn(
            f"vecenv.{name} is deprecated and will be removed in {removal}; import it from {home}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)  # not cached: each use warns
    module = _EXPORTS.get(name) or _REACHABLE.get(name)
    if module is None:
        raise AttributeError(f"module 'vecenv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_REACHABLE, *_SUBPACKAGES])
