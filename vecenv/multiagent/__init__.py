"""Multi-agent vector envs: copies of a PettingZoo ``ParallelEnv``, one row per (copy, agent).

Public names (also on ``vecenv`` itself): :class:`MultiAgentVectorEnv` and :func:`make_parallel`.
They are loaded on first use: the engine's workers import :mod:`vecenv.multiagent.copies` to
recognise multi-agent groups, and that must not load the parent-side API.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MultiAgentVectorEnv", "make_parallel", "AgentSpaceMismatchError", "AgentDeathError"]


def __getattr__(name: str) -> Any:
    if name in ("MultiAgentVectorEnv", "make_parallel"):
        from vecenv.multiagent import vector_env

        return getattr(vector_env, name)
    if name in ("AgentSpaceMismatchError", "AgentDeathError"):
        from vecenv.multiagent import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'vecenv.multiagent' has no attribute {name!r}")
