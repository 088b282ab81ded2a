"""Where vecenv meets other libraries: one home per integration.

* :mod:`vecenv.integrations.sb3`: Stable-Baselines3 (the ``SubprocVecEnv`` drop-in, its env
  adapter, saved models as dataset policies).
* :mod:`vecenv.integrations.supersuit`: the SuperSuit drop-in for PettingZoo envs.
* :mod:`vecenv.integrations.ray`: :class:`~vecenv.RayVectorEnv` and its Ray actor transport.
* :mod:`vecenv.integrations.video`: ``RecordVideo``, mp4 videos of chosen envs.
* :mod:`vecenv.integrations.rllib`: vecenv's workers inside RLlib's EnvRunners.

PettingZoo's home is :mod:`vecenv.multiagent`, Minari's :mod:`vecenv.datasets.minari`. Nothing
here is imported by ``import vecenv``, and the worker side (:mod:`vecenv.worker`) imports none of
it: a worker meets an integration only as an object it was sent.
"""
