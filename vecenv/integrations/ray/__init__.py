"""Ray: :class:`~vecenv.RayVectorEnv` (:mod:`.vector_env`) over Ray actors that host the same
worker groups (:mod:`.transport`). Ray is imported only when one of them is used."""

from vecenv.errors import MissingDependencyError

try:
    import ray  # noqa: F401
except ImportError as exc:
    raise MissingDependencyError(
        f"vecenv.RayVectorEnv (backend='ray') needs Ray: pip install 'vecenv[ray]' (import failed: {exc})"
    ) from exc
