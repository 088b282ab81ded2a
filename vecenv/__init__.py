"""vecenv: many Gymnasium envs stepped in a few worker processes, identical to SyncVectorEnv."""

from gymnasium.vector import AutoresetMode

from vecenv.coordinator import DEFAULT_CLOSE_TIMEOUT, GroupVectorEnv, State, SubprocVectorEnv
from vecenv.errors import (
    InvalidObservationError,
    NeedsResetError,
    RemoteEnvError,
    SpaceMismatchError,
    VecEnvError,
    VecEnvTimeoutError,
    WorkerDiedError,
)
from vecenv.factory import make
from vecenv.pool import WorkerStatus
from vecenv.rollout import Dataset, collect, load

__version__ = "0.2.0"

__all__ = [
    "AutoresetMode",
    "Dataset",
    "DEFAULT_CLOSE_TIMEOUT",
    "GroupVectorEnv",
    "InvalidObservationError",
    "MultiAgentVectorEnv",
    "NeedsResetError",
    "RemoteEnvError",
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
    "__version__",
]


def __getattr__(name: str):
    """``vecenv.RayVectorEnv`` imports Ray on first use: ``import vecenv`` never does.

    (It is left out of ``__all__`` so that ``from vecenv import *`` does not import Ray either.)
    The multi-agent API loads on first use too: workers never need it.
    """
    if name in ("MultiAgentVectorEnv", "make_parallel"):
        from vecenv.multiagent import vector_env

        return getattr(vector_env, name)
    if name == "RayVectorEnv":
        from vecenv.ray_transport import RayVectorEnv

        return RayVectorEnv
    raise AttributeError(f"module 'vecenv' has no attribute {name!r}")
