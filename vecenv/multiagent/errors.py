"""The errors of multi-agent vector envs.

Both are also ``AssertionError``: SuperSuit raises ``AssertionError`` for the same two cases, so
code (and tests) written against SuperSuit's vectorizers catch them unchanged.
"""

from __future__ import annotations

from vecenv.errors import SpaceMismatchError, VecEnvError

__all__ = ["AgentSpaceMismatchError", "AgentDeathError"]


class AgentSpaceMismatchError(SpaceMismatchError, AssertionError):
    """The agents of a parallel env (or two copies of it) do not share one observation or one
    action space, or two copies have different agents.

    Every (copy, agent) pair is one row of one batch, so every agent needs the same spaces; the
    message names the agent and both spaces.
    """


class AgentDeathError(VecEnvError, AssertionError):
    """The SuperSuit drop-in met an agent that left its env before the episode ended.

    SuperSuit's ``pettingzoo_env_to_vec_env_v1`` does not allow that and neither does the drop-in
    (it gives SuperSuit's results). Wrap the env in SuperSuit's ``black_death_v3``, or use
    :class:`vecenv.MultiAgentVectorEnv`, which handles agent death itself.
    """
