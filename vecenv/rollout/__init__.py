"""Deprecated: the dataset package is :mod:`vecenv.datasets`; this alias goes in vecenv 0.4.

``import vecenv.rollout`` (and ``vecenv.rollout.<module>``) still works and gives the very
same objects as :mod:`vecenv.datasets`, with a ``DeprecationWarning``: "rollout" now means
``envs.rollout()`` alone, worker-side rollouts with the policy in the workers.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence
from typing import Any

import vecenv.datasets as _datasets

#: Old module names under ``vecenv.rollout`` -> their modules now.
MOVED = {
    "action_checks": "vecenv.datasets.action_checks",
    "actions": "vecenv.datasets.action_checks",
    "cli": "vecenv.datasets.cli",
    "cli_arguments": "vecenv.datasets.cli_arguments",
    "cli_summary": "vecenv.datasets.cli_summary",
    "collection": "vecenv.datasets.collection",
    "dataset": "vecenv.datasets.dataset",
    "errors": "vecenv.datasets.errors",
    "format": "vecenv.datasets.format",
    "minari": "vecenv.datasets.minari",
    "policies": "vecenv.datasets.policy_specs",
    "policy_specs": "vecenv.datasets.policy_specs",
    "recording": "vecenv.datasets.recording",
    "sinks": "vecenv.datasets.sinks",
    "sources": "vecenv.datasets.sources",
    "staging": "vecenv.datasets.staging",
    "writer": "vecenv.datasets.writer",
}

__all__ = list(_datasets.__all__)

warnings.warn(
    "vecenv.rollout is deprecated and will be removed in vecenv 0.4: import vecenv.datasets instead "
    "(the same names: collect, load, Dataset, export_minari, main)",
    DeprecationWarning,
    stacklevel=2,
)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``vecenv.rollout.<old>`` as the module that now holds it, so both names give one
    module object (and ``isinstance`` on its classes holds across the two names)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix, _, leaf = fullname.rpartition(".")
        if prefix != __name__ or leaf not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return importlib.import_module(MOVED[spec.name.rpartition(".")[2]])

    def exec_module(self, module: types.ModuleType) -> None:
        """The module ran when it was first imported under its own name."""


if not any(type(finder).__module__ == __name__ for finder in sys.meta_path):  # once, even if re-imported
    sys.meta_path.insert(0, _Alias())


def __getattr__(name: str) -> Any:
    if name in MOVED:
        return importlib.import_module(MOVED[name])
    return getattr(_datasets, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *MOVED})
