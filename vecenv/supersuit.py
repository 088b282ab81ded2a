"""SuperSuit drop-in, the public path: ``import vecenv.supersuit as ss`` in place of ``import supersuit as ss``.

The vectorizers (``pettingzoo_env_to_vec_env_v1``, ``concat_vec_envs_v1``) and everything they
run live in :mod:`vecenv.integrations.supersuit`; every other name (SuperSuit's wrappers) is
SuperSuit's own, looked up in ``supersuit`` on first use.
"""

from vecenv.integrations.supersuit.vec_env import (
    BASE_CLASSES,
    ConcatVecEnv,
    ParallelVecEnv,
    concat_vec_envs_v1,
    pettingzoo_env_to_vec_env_v1,
)
from vecenv.integrations.supersuit.vec_env import (
    __getattr__ as __getattr__,  # SuperSuit's other names, from ``supersuit`` itself
)

__all__ = ["pettingzoo_env_to_vec_env_v1", "concat_vec_envs_v1", "ParallelVecEnv", "ConcatVecEnv", "BASE_CLASSES"]
