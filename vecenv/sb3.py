"""Stable-Baselines3 drop-in, the public path: ``from vecenv.sb3 import SubprocVecEnv``.

The drop-in lives in :mod:`vecenv.integrations.sb3`, with the env adapter its workers run
and saved models as dataset policies.
Importing this module imports Stable-Baselines3 (and so torch); ``import vecenv`` does not.
"""

from vecenv.integrations.sb3.vec_env import SubprocVecEnv

__all__ = ["SubprocVecEnv"]
