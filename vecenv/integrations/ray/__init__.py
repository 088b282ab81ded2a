"""Ray: :class:`~vecenv.RayVectorEnv` (:mod:`.vector_env`) over Ray actors that host the same
worker groups (:mod:`.transport`). Ray is imported only when one of them is used."""
