"""The backends a vector env's groups run on, by the names ``backend=`` takes (in
:func:`vecenv.make` and :class:`vecenv.MultiAgentVectorEnv`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from vecenv.errors import InvalidArgumentError, describe

if TYPE_CHECKING:
    from vecenv.integrations.ray.vector_env import RayVectorEnv
    from vecenv.parent.subproc import SubprocVectorEnv

__all__ = ["BACKENDS", "OWN_KEYWORDS", "other_backends_keyword", "vector_class"]

BACKENDS = ("process", "ray")
"""Worker processes (:class:`vecenv.SubprocVectorEnv`) or Ray actors (:class:`vecenv.RayVectorEnv`,
imported only when asked for)."""


#: The keywords of each backend's vector env that the other's lacks (the test of this module
#: checks them against both signatures): ``make`` refuses one given to the other backend
#: instead of passing it to the envs, without importing Ray to find out.
OWN_KEYWORDS: dict[str, frozenset[str]] = {
    "process": frozenset({"context", "daemon", "shared_memory", "pin_cpus", "inline_group", "worker_nice"}),
    "ray": frozenset({"address", "actor_options"}),
}


def other_backends_keyword(backend: str, keywords: Iterable[str]) -> tuple[str, str] | None:
    """The first of ``keywords`` (by name) that belongs to another backend's vector env than
    ``backend``'s, and that backend; ``None`` when there is none (or ``backend`` is unknown,
    which :func:`vector_class` names)."""
    if backend not in OWN_KEYWORDS:
        return None
    given = set(keywords)
    for other, names in OWN_KEYWORDS.items():
        if other != backend and names & given:
            return min(names & given), other
    return None


def vector_class(backend: str) -> type[SubprocVectorEnv] | type[RayVectorEnv]:
    """The vector env class of ``backend``; raises ``ValueError`` for another name."""
    if backend == "process":
        from vecenv.parent.subproc import SubprocVectorEnv

        return SubprocVectorEnv
    if backend == "ray":
        from vecenv.integrations.ray.vector_env import RayVectorEnv  # imports Ray: only when asked for

        return RayVectorEnv
    raise InvalidArgumentError(f"`backend` must be one of {', '.join(map(repr, BACKENDS))}, got {describe(backend)}")
