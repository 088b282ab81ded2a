"""vecenv: many Gymnasium envs stepped in a few worker processes, identical to SyncVectorEnv."""

from gymnasium.vector import AutoresetMode

from vecenv.coordinator import DEFAULT_CLOSE_TIMEOUT, State, SubprocVectorEnv
from vecenv.errors import (
    NeedsResetError,
    RemoteEnvError,
    SpaceMismatchError,
    VecEnvError,
    VecEnvTimeoutError,
    WorkerDiedError,
)
from vecenv.factory import make
from vecenv.rollout import Dataset, collect, load

__version__ = "0.1.0"

__all__ = [
    "AutoresetMode",
    "Dataset",
    "DEFAULT_CLOSE_TIMEOUT",
    "NeedsResetError",
    "RemoteEnvError",
    "SpaceMismatchError",
    "State",
    "SubprocVectorEnv",
    "VecEnvError",
    "VecEnvTimeoutError",
    "WorkerDiedError",
    "collect",
    "load",
    "make",
    "__version__",
]
