"""What a multi-agent group builder returns, and what both sides agree on about it.

A worker hosts several *copies* of a PettingZoo ``ParallelEnv``. Each (copy, agent) pair is one
row of the vector env's arrays: row ``copy * num_agents + agent``, agents in ``possible_agents``
order, so the shared buffers, the handshake, the pool and the transports are the single-agent
engine's, unchanged. The engine's worker recognises a group builder that returns an
:class:`AgentCopies` (instead of a list of envs) and asks it for its ``Hello`` and its group.

Nothing here imports PettingZoo: a parallel env is used through its documented attributes only
(``possible_agents``, ``agents``, ``observation_space(agent)``, ``action_space(agent)``,
``reset``, ``step``, ``render``, ``close``).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from gymnasium import Space

from vecenv.errors import ArgumentTypeError, InvalidArgumentError, describe
from vecenv.multiagent.errors import AgentSpaceMismatchError
from vecenv.wire.protocol import Hello
from vecenv.worker.builders import call_each

if TYPE_CHECKING:
    from vecenv.wire.buffers import Buffers

__all__ = [
    "per_row",
    "AgentCopies",
    "CopyCall",
    "CopyOp",
    "COPY_CALL",
    "INACTIVE_KEY",
    "COPY_INFO_KEY",
    "RESERVED_INFO_KEYS",
    "RowInfo",
    "agent_spaces",
    "build_copies",
]

#: The info key of a row whose agent is not in its env this call (the parent turns these into
#: the ``active`` mask; nothing is sent for active rows).
INACTIVE_KEY = "vecenv_inactive"
#: The info key under which a copy's own infos (keys that name no agent) reach each of its rows.
COPY_INFO_KEY = "copy_info"
#: The info keys the native API sets itself (with the masks Gymnasium's batching gives them): an
#: agent's info holding one is refused, since the vector env's value would silently replace it.
RESERVED_INFO_KEYS = ("active", "_active", COPY_INFO_KEY, f"_{COPY_INFO_KEY}", INACTIVE_KEY, f"_{INACTIVE_KEY}")
#: The name passed to the engine's ``call`` for the per-copy operations of :class:`CopyCall`.
COPY_CALL = "_vecenv_copy_call"


class CopyOp(enum.Enum):
    """The per-copy operations a multi-agent group answers through the engine's ``call``."""

    DESCRIBE = "describe"  # each row: the agent names of its copy
    IS_WRAPPED = "is_wrapped"  # each row: whether its env is wrapped in a given class
    NP_RANDOM_SEED = "np_random_seed"  # each row: the seed of its copy's random generator


@dataclasses.dataclass(frozen=True)
class CopyCall:
    """One per-copy operation, answered for every row (``argument``: the operation's own)."""

    op: CopyOp
    argument: Any = None


class RowInfo:
    """One row's info dict, kept opaque so that Gymnasium's info batching passes it unchanged
    (the SuperSuit drop-in returns list infos exactly as the env made them)."""

    __slots__ = ("info",)

    def __init__(self, info: dict[str, Any]) -> None:
        self.info = info

    def __repr__(self) -> str:
        return f"RowInfo({self.info!r})"


def agent_spaces(env: Any) -> tuple[tuple[str, ...], Space, Space]:
    """A parallel env's agents and the one observation and action space they all share.

    Raises:
        AgentSpaceMismatchError: an agent's space differs from the first agent's; the message
            names the agent, both spaces, and SuperSuit's padding wrappers.
    """
    if callable(getattr(env, "last", None)) and callable(getattr(env, "observe", None)):
        # An AEC env has possible_agents and per-agent spaces too, but its reset returns None
        # and its step takes one agent's action: it would fail at the first reset, naming nothing.
        raise ArgumentTypeError(
            f"vecenv steps PettingZoo ParallelEnvs, got an AEC env {describe(env)} (it has last() and observe()): "
            "build the parallel one (e.g. pistonball_v6.parallel_env(), not pistonball_v6.env()), or convert "
            "it with pettingzoo.utils.conversions.aec_to_parallel(env)"
        )
    if not (hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))):
        raise ArgumentTypeError(
            "a multi-agent env constructor must return a PettingZoo ParallelEnv (e.g. "
            f"pistonball_v6.parallel_env()), got {describe(env)}; for single-agent envs use vecenv.make "
            "or SubprocVectorEnv"
        )
    agents = tuple(env.possible_agents)
    if not agents:
        raise InvalidArgumentError(
            f"the parallel env {env} has no `possible_agents`; a vector env needs one agent or more"
        )
    first = agents[0]
    obs_space, act_space = env.observation_space(first), env.action_space(first)
    for agent in agents[1:]:
        for which, reference, space, pad in (
            ("observation", obs_space, env.observation_space(agent), "pad_observations_v0"),
            ("action", act_space, env.action_space(agent), "pad_action_space_v0"),
        ):
            if space != reference:
                raise AgentSpaceMismatchError(
                    f"agent {agent!r} has {which} space {space}, but agent {first!r} has {reference}: every "
                    f"agent of a multi-agent vector env must share one {which} space (each agent is one row "
                    f"of one batch). Pad the spaces to one first, e.g. with SuperSuit's {pad}"
                )
    return agents, obs_space, act_space


def build_copies(env_fns: Sequence[Callable[[], Any]], first: int) -> list[Any]:
    """Call each copy's constructor, in order; an error names the copy."""
    return call_each(env_fns, first, "copy")


class AgentCopies(abc.ABC):
    """The copies one worker hosts, as its group builder returns them: a worker-side ``GroupSource``.

    Checks at construction that every copy has the same agents and that they all share the
    first agent's spaces.

    Args:
        envs: the copies, in global copy order.
        first: the global index of the first copy (for messages).
    """

    def __init__(self, envs: Sequence[Any], first: int = 0) -> None:
        self.envs = list(envs)
        if not self.envs:
            raise InvalidArgumentError("a multi-agent env group is empty; each needs one copy or more")
        self.agents, self.observation_space, self.action_space = agent_spaces(self.envs[0])
        for c, env in enumerate(self.envs[1:], start=first + 1):
            agents, obs_space, act_space = agent_spaces(env)
            if agents != self.agents:
                raise AgentSpaceMismatchError(
                    f"copy {c} has agents {list(agents)}, but copy {first} has {list(self.agents)}: every copy "
                    "must have the same possible_agents"
                )
            if (obs_space, act_space) != (self.observation_space, self.action_space):
                raise AgentSpaceMismatchError(
                    f"copy {c} has observation space {obs_space} and action space {act_space}, but copy "
                    f"{first} has {self.observation_space} and {self.action_space}: every copy must share them"
                )

    @property
    def num_rows(self) -> int:
        return len(self.envs) * len(self.agents)

    def hello(self) -> Hello:
        """The worker's handshake message: one env per row, the agents' shared spaces."""
        env = self.envs[0]
        return Hello(
            num_envs=self.num_rows,
            observation_space=self.observation_space,
            action_space=self.action_space,
            metadata=dict(getattr(env, "metadata", {}) or {}),
            render_mode=getattr(env, "render_mode", None),
            spec=None,
            mismatch=None,
            native_autoreset=None,
        )

    @abc.abstractmethod
    def make_group(self, buffers: Buffers) -> Any:
        """The in-process group that steps these copies on ``buffers`` (this worker's rows)."""


def per_row(per_copy: Iterable[Any], num_agents: int) -> list[Any]:
    """One value per row from one per copy: each copy's value for each of its agents' rows."""
    return [value for value in per_copy for _ in range(num_agents)]
