"""Collect rollouts from a vector environment into an on-disk dataset, and load them back.

A *dataset* is a directory holding ``metadata.json`` and one ``.npy`` file per field,
all of the same length N (the number of transitions) and in collection order:

``observations``, ``next_observations``, ``actions``
    One file per leaf of the space. A Box/Discrete/MultiDiscrete/MultiBinary space is
    one file (``observations.npy``); Dict and Tuple spaces give one file per leaf, named
    with dots (``observations.pos.npy``, ``actions.0.npy``, ``observations.a.1.npy``).
``rewards`` (float64), ``terminations`` (bool), ``truncations`` (bool)
    As returned by the environment step.
``env_ids`` (int64)
    Index of the sub-environment that produced the transition.
``episode_ids`` (int64)
    A global episode counter numbered in the order episodes *start*: the initial reset
    numbers env ``0..num_envs-1`` as episodes ``0..num_envs-1``; later episodes are
    numbered when their reset observation is produced, in vector-step order, ascending
    env index within a step. With ``episodes=N`` only the first N episodes to finish are
    written, so the ids written can have gaps (episodes that started but lost the race).

Every record is a real environment step: ``next_observations`` of the last step of an
episode is that episode's final observation, never the reset observation, and the
NEXT_STEP autoreset "reset step" (where the env resets and ignores the action) is never
recorded. Records are written with bounded memory (``episodes=N`` keeps open episodes in a
fixed block per env that spills to disk): each field is streamed to its file in
chunks and the ``.npy`` headers and ``metadata.json`` are rewritten after every chunk, so
the directory is a valid (``"complete": false``) dataset while collection is running and
after an interruption.

``collect`` is the library entry point (``format="minari"`` writes a Minari dataset
instead), ``load`` reads a dataset back as memory-mapped arrays that hold no file descriptor
(``with load(path) as dataset:`` or ``dataset.close()`` drops them early), ``export_minari`` turns
one into a Minari dataset, and ``main`` is the ``vecenv-collect`` command line tool.
Modules: ``collection`` (``collect``: checks, output, finish), ``recording`` (the collection
loop), ``actions`` (checking the policy's actions), ``sinks`` (where transitions go, and the
``.npy`` dataset sink), ``writer`` (streaming ``.npy`` files), ``staging`` (open episodes with
bounded memory), ``format`` (file layout, reading space descriptions), ``dataset`` (``load``),
``minari`` (Minari output and export), ``policies`` (``--policy`` strings, Stable-Baselines3
models), ``errors``, and ``cli`` with ``cli_arguments`` and ``cli_summary``
(``vecenv-collect``, entered through ``command``). For example::

    envs = vecenv.make("CartPole-v1", 8)
    try:
        dataset = collect(envs, "random", steps=10_000, seed=0, out="rollouts/cartpole")
    finally:
        envs.close()
    dataset["observations"].shape         # (10000, 4), a read-only numpy.memmap
    load("rollouts/cartpole").metadata["counts"]  # {"transitions": 10000, "episodes": ...}
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vecenv.datasets.collection import collect
    from vecenv.datasets.command import main
    from vecenv.datasets.dataset import Dataset, load
    from vecenv.datasets.errors import (
        DatasetClosedError,
        DatasetNotFoundError,
        DatasetWriteError,
        MinariNotInstalledError,
        NoEpisodesError,
        OutputExistsError,
        PolicyError,
        UnsupportedSpaceError,
    )
    from vecenv.datasets.minari import export_minari

__all__ = [
    "Dataset",
    "DatasetClosedError",
    "DatasetNotFoundError",
    "DatasetWriteError",
    "MinariNotInstalledError",
    "NoEpisodesError",
    "OutputExistsError",
    "PolicyError",
    "UnsupportedSpaceError",
    "collect",
    "export_minari",
    "load",
    "main",
]

_ERRORS = tuple(name for name in __all__ if name.endswith("Error"))  # vecenv.datasets.errors's
#: Every name in ``__all__`` -> its module, imported on first use (as ``concurrent.futures``
#: does): ``import vecenv.datasets`` loads neither NumPy nor Gymnasium, so that the command
#: (``python -m vecenv.datasets``, ``vecenv-collect``: ``command.main``) is running, and
#: handles Ctrl+C, before the seconds its modules can take to import.
_LAZY = {
    "Dataset": "vecenv.datasets.dataset",
    "collect": "vecenv.datasets.collection",
    "export_minari": "vecenv.datasets.minari",
    "load": "vecenv.datasets.dataset",
    "main": "vecenv.datasets.command",
    **dict.fromkeys(_ERRORS, "vecenv.datasets.errors"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # found here from now on, without this call
        return value
    raise AttributeError(f"module 'vecenv.datasets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
