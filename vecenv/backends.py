"""The backends a vector env's groups run on, by the names ``backend=`` takes (in
:func:`vecenv.make` and :class:`vecenv.MultiAgentVectorEnv`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vecenv.errors import InvalidArgumentError, describe

if TYPE_CHECKING:
    from vecenv.integrations.ray.vector_env import RayVectorEnv
    from vecenv.parent.subproc import SubprocVectorEnv

__all__ = ["BACKENDS", "vector_class"]

BACKENDS = ("process", "ray")
"""Worker processes (:class:`vecenv.SubprocVectorEnv`) or Ray actors (:class:`vecenv.RayVectorEnv`,
imported only when asked for)."""


def vector_class(backend: str) -> type[SubprocVectorEnv] | type[RayVectorEnv]:
    """The vector env class of ``backend``; raises ``ValueError`` for another name."""
    if backend == "process":
        from vecenv.parent.subproc import SubprocVectorEnv

        return SubprocVectorEnv
    if backend == "ray":
        from vecenv.integrations.ray.vector_env import RayVectorEnv  # imports Ray: only when asked for

        return RayVectorEnv
    raise InvalidArgumentError(f"`backend` must be one of {', '.join(map(repr, BACKENDS))}, got {describe(backend)}")
