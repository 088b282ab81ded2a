"""A vector env of a named kind (vecenv, Gymnasium's Sync or Async, vecenv on Ray) over the same
env constructors: what the benchmark's runners and ``scripts/train_ppo.py`` compare."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from vecenv.errors import InvalidArgumentError
from vecenv.machine import available_cpus

EnvFn = Callable[[], gym.Env]


class VectorKind(enum.Enum):
    """The vector envs that :func:`make_vector` builds; the value is the name users type."""

    VECENV = "vecenv"  # vecenv.SubprocVectorEnv
    SYNC = "sync"  # gymnasium SyncVectorEnv
    ASYNC = "async"  # gymnasium AsyncVectorEnv(shared_memory=True)
    RAY = "ray"  # vecenv.RayVectorEnv on a local Ray that it starts itself


def make_vector(
    kind: VectorKind,
    env_fns: Sequence[EnvFn],
    *,
    autoreset_mode: AutoresetMode,
    num_workers: int | str | None = "auto",
    batch_size: int | None = None,
    inline_group: bool = False,
    spin: bool = True,
) -> Any:
    """The vector env ``kind`` over ``env_fns``. ``num_workers`` and ``batch_size`` are vecenv's
    and Ray's (``batch_size``: the EnvPool-style ``async_reset``/``recv``/``send`` API); the
    Gymnasium kinds take neither; ``num_workers=None`` is vecenv's default plan, and
    ``inline_group`` has the parent step vecenv's first group). ``spin=False`` (vecenv only)
    turns the spin on the step's shared words off for every vector env this process makes from
    then on (:data:`vecenv.wire.fastpath.SPIN_LIMIT` 0): each wait sleeps on its pipe at once,
    so the benchmark can say what spinning gives; each measurement runs in a fresh process."""
    fns = list(env_fns)
    if not spin and kind is not VectorKind.VECENV:
        raise InvalidArgumentError(f"make_vector: spin=False is vecenv's alone, not {kind.value}'s")
    if kind is VectorKind.SYNC:
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=autoreset_mode)
    if kind is VectorKind.ASYNC:
        return gym.vector.AsyncVectorEnv(fns, shared_memory=True, autoreset_mode=autoreset_mode)
    batch: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
    if kind is VectorKind.VECENV:
        import vecenv

        if not spin:
            from vecenv.wire import fastpath

            fastpath.SPIN_LIMIT = 0.0

        return vecenv.SubprocVectorEnv(
            fns, num_workers, autoreset_mode=autoreset_mode, inline_group=inline_group, **batch
        )
    if kind is VectorKind.RAY:
        return _ray_vector(fns, num_workers, autoreset_mode, batch)
    raise InvalidArgumentError(
        f"make_vector: unknown kind {kind!r}; choose from {', '.join(k.value for k in VectorKind)}"
    )


def _ray_vector(
    fns: list[EnvFn], num_workers: int | str | None, autoreset_mode: AutoresetMode, batch: dict[str, Any]
) -> Any:
    """A RayVectorEnv on a local Ray it starts itself, its actors sharing this machine's cores."""
    if not isinstance(num_workers, int):
        raise InvalidArgumentError(f"make_vector: Ray needs a number of actors as num_workers, got {num_workers!r}")
    import vecenv

    cores = available_cpus()
    return vecenv.RayVectorEnv(
        fns,
        num_workers,
        actor_options={"num_cpus": min(1.0, cores / num_workers)},
        autoreset_mode=autoreset_mode,
        **batch,
    )
