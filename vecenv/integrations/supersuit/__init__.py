"""The SuperSuit drop-in: the vectorizers (:mod:`.vec_env`), the copies a worker hosts
(:mod:`.markov`) and the Stable-Baselines3 wrapper of ``base_class="stable_baselines3"``
(:mod:`.sb3_wrapper`). The public path is :mod:`vecenv.supersuit`."""
