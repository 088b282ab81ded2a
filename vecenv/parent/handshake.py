"""The parent's half of the handshake: every worker's ``Hello`` checked, the vector env's
spaces and metadata decided.

Each worker reports what it built (env count, spaces, metadata); :func:`configure` checks that
the groups fit together (the same errors and messages as Gymnasium's vector envs) and returns a
:class:`VectorSpaces`. The pool then assigns each worker its starting index.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from vecenv.errors import ArgumentTypeError, InvalidArgumentError, SpaceMismatchError, describe
from vecenv.spaces import is_fixed, leaf_layout
from vecenv.wire.buffers import BufferSpec, layout_nbytes
from vecenv.wire.memory import check_block
from vecenv.wire.protocol import Hello, ObservationMode, SpaceKind, SpaceMismatch, SpaceRule, space_fits

__all__ = ["VectorSpaces", "configure", "loose_mismatch_message"]


@dataclasses.dataclass(frozen=True)
class VectorSpaces:
    """What the handshake decided: the vector env's size, spaces and metadata."""

    num_envs: int
    observation_space: gym.Space
    single_observation_space: gym.Space
    action_space: gym.Space
    single_action_space: gym.Space
    metadata: dict[str, Any]
    render_mode: str | None
    env_spec: Any


def configure(
    hellos: Sequence[Hello],
    observation_mode: ObservationMode,
    autoreset_mode: AutoresetMode,
    class_name: str,
    shared_memory: bool = False,
) -> VectorSpaces:
    """Check every worker's spaces against the first env's and batch them.

    Before the spaces are batched, what batching them allocates (Gymnasium's ``batch_space``:
    a ``Box``'s bounds) and, with ``shared_memory``, the shared block of the step buffers are
    checked against the memory the machine can give them, so a size too large is a
    ``MemoryLimitError``, not numpy's failure (or the OOM killer) half-way.

    Raises:
        ValueError: a native vector env group's autoreset mode differs from ``autoreset_mode``.
        SpaceMismatchError: two envs' spaces do not fit together (the first such env is named,
            its observation space before its action space).
        MemoryLimitError: the step buffers or batching the spaces need more memory than the
            machine can give.
    """
    first = hellos[0]
    _check_spaces_of_env_0(first, observation_mode)
    start = 0
    for index, hello in enumerate(hellos):
        if hello.native_autoreset is not None and AutoresetMode(hello.native_autoreset) is not autoreset_mode:
            raise InvalidArgumentError(
                f"worker {index} hosts a native vector env with autoreset mode "
                f"{AutoresetMode(hello.native_autoreset)}, but `autoreset_mode` is {autoreset_mode}; "
                "they must match"
            )
        mismatch = _first_mismatch(first, hello, observation_mode, start)
        if mismatch is not None:
            error = _mismatch_error(mismatch, observation_mode, class_name)
            error.mismatch = mismatch
            error.worker, error.worker_row = index, mismatch.local_index - start
            raise error
        start += hello.num_envs
    _check_memory(start, first, observation_mode, shared_memory)
    if isinstance(observation_mode, tuple):
        observation_space, single_observation_space = observation_mode
    elif observation_mode is SpaceRule.DIFFERENT:
        single_observation_space = first.observation_space
        spaces = [s for h in hellos for s in (h.observation_spaces or [h.observation_space] * h.num_envs)]
        observation_space = batch_differing_spaces(spaces)
    else:
        single_observation_space = first.observation_space
        observation_space = batch_space(single_observation_space, start)
    metadata = dict(first.metadata)
    metadata["autoreset_mode"] = autoreset_mode
    return VectorSpaces(
        num_envs=start,
        observation_space=observation_space,
        single_observation_space=single_observation_space,
        action_space=batch_space(first.action_space, start),
        single_action_space=first.action_space,
        metadata=metadata,
        render_mode=first.render_mode,
        env_spec=first.spec,
    )


def _check_spaces_of_env_0(first: Hello, observation_mode: ObservationMode) -> None:
    """Env 0's spaces, which the vector env batches, must be spaces: ``SyncVectorEnv`` raises
    ``TypeError`` batching one that is not (``None``); compared with it, every other env's
    would be a mismatch of that env's. Its action space first, as ``SyncVectorEnv`` batches it
    first; an observation space is not read when the caller gave the vector env's."""
    kinds = [SpaceKind.ACTION] if isinstance(observation_mode, tuple) else [SpaceKind.ACTION, SpaceKind.OBSERVATION]
    for kind in kinds:
        space = first.action_space if kind is SpaceKind.ACTION else first.observation_space
        if not isinstance(space, gym.spaces.Space):
            raise ArgumentTypeError(f"env 0's `{kind.value}` must be a gymnasium.spaces.Space, got {describe(space)}")


def _check_memory(num_envs: int, first: Hello, observation_mode: ObservationMode, shared_memory: bool) -> None:
    """Refuse (``MemoryLimitError``) spaces whose batching or step buffers need more memory
    than the machine can give, before either is made: Gymnasium's ``batch_space`` allocates a
    batched ``Box``'s bounds and, while it checks them, temporaries of their size (measured at
    up to ~4 values and 4 bytes per element), the step buffers one value per element, and
    ``reset``/``step`` return a copy of the observations. Each alone, and all of them together
    (they are alive at once), must fit."""
    spaces = [first.action_space]
    if not isinstance(observation_mode, tuple):  # (a batched space given by the caller is made)
        spaces.append(first.observation_space)
    batching = sum(
        math.prod(shape) * (4 * dtype.itemsize + 4)
        for space in spaces
        if is_fixed(space)
        for shape, dtype in leaf_layout(space, num_envs)
    )
    spec = BufferSpec.plan(num_envs, first.observation_space, first.action_space, True)
    buffers = layout_nbytes(spec.layout())
    if shared_memory:
        check_block(buffers, f"the step buffers of {num_envs} envs", shared=True, named=spec.shm_name is not None)
    check_block(batching, f"batching the spaces of {num_envs} envs", shared=False)
    copy = (
        sum(math.prod(shape) * dtype.itemsize for shape, dtype in leaf_layout(first.observation_space, num_envs))
        if is_fixed(first.observation_space)
        else 0
    )
    what = f"the step buffers, batching the spaces and a copy of the observations of {num_envs} envs together"
    check_block(buffers + batching + copy, what, shared=False)


def _first_mismatch(first: Hello, hello: Hello, observation_mode: ObservationMode, start: int) -> SpaceMismatch | None:
    """The group's first env against env 0, then the group's own check; indices global.

    Each env's observation space is checked before its action space: ``SyncVectorEnv``'s order,
    and the worker's own (its Hello names its group's first such env the same way), so the env
    and the space named do not depend on how the envs are split into workers."""
    own = hello.mismatch
    if not isinstance(observation_mode, tuple) and not space_fits(
        observation_mode, SpaceKind.OBSERVATION, first.observation_space, hello.observation_space
    ):
        return SpaceMismatch(start, SpaceKind.OBSERVATION, first.observation_space, hello.observation_space)
    if own is not None and own.local_index == 0:
        # Only the group's check sees the first env's observation space against a given space.
        return SpaceMismatch(start, own.which, own.expected, own.received)
    if not space_fits(observation_mode, SpaceKind.ACTION, first.action_space, hello.action_space):
        return SpaceMismatch(start, SpaceKind.ACTION, first.action_space, hello.action_space)
    if own is not None:
        return SpaceMismatch(start + own.local_index, own.which, own.expected, own.received)
    return None


def loose_mismatch_message(m: SpaceMismatch, class_name: str) -> str:
    """What :attr:`~vecenv.wire.protocol.SpaceRule.AS_ENV_0` refuses, said for ``class_name``."""
    return (
        f"{class_name} needs every env's {m.which.label} of the shape and dtype of env 0's ({m.expected}), "
        f"as each is stored in a shared array: env {m.local_index} has {m.received}"
    )


def _mismatch_error(m: SpaceMismatch, observation_mode: ObservationMode, class_name: str) -> SpaceMismatchError:
    if observation_mode is SpaceRule.AS_ENV_0:
        return SpaceMismatchError(loose_mismatch_message(m, class_name))
    if m.which is SpaceKind.ACTION:
        return SpaceMismatchError(
            f"Some environments have an action space different from `{m.expected}`. In order to batch "
            "actions, the action spaces from all environments must be equal: "
            f"env {m.local_index} has action_space {m.received}."
        )
    if observation_mode is SpaceRule.SAME:
        return SpaceMismatchError(
            f"{class_name}(..., observation_mode='same') however some of the sub-environments "
            f"observation spaces are not equivalent: env {m.local_index} has observation_space {m.received}, "
            f"expected {m.expected}. "
            "If this is intentional, use `observation_mode='different'` instead."
        )
    mode_name = observation_mode.value if isinstance(observation_mode, SpaceRule) else "custom space"
    return SpaceMismatchError(
        f"{class_name}(..., observation_mode='{mode_name}') however the sub-environment's "
        "observation spaces do not share a common shape and dtype: "
        f"env {m.local_index} has observation_space {m.received}, "
        f"expected the shape and dtype of {m.expected}."
    )
