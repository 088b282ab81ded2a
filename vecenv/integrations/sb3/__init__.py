"""Stable-Baselines3: the ``SubprocVecEnv`` drop-in (:mod:`.vec_env`), the env adapter its
workers run (:mod:`.env_adapter`) and saved models as dataset policies (:mod:`.saved_model`).
Each imports SB3 only when used. (An SB3 model acting in the workers is
:class:`vecenv.policies.SB3Policy`, beside the other worker policies.)"""
