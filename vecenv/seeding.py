"""Seed policies: how ``reset(seed=s)`` (an int) becomes one seed per env.

``"sequential"`` (the default) gives env ``i`` the seed ``s + i``, exactly as Gymnasium's
``SyncVectorEnv`` does, so a vecenv run and a Sync run with the same seed are the same. Its
drawback shows in a sweep: runs seeded 0, 1, 2... with 4 envs each share most of their env seeds
(run 0's env 1 is run 1's env 0).

``"spawn"`` derives each env's seed from NumPy's ``SeedSequence`` instead, so runs with different
seeds share no env seed (but with odds of about ``k**2 / 2**64`` for ``k`` seeds in all)::

    env i's seed = int(SeedSequence(s).spawn(num_envs)[i].generate_state(1, numpy.uint64)[0]) >> 1

the child's first 64-bit word without its lowest bit: an int in ``[0, 2**63)``, so that an
``int64`` holds it (Gymnasium batches an info value such as a seed into an ``int64`` array).
``SeedSequence(s).spawn(n)[i]`` is ``SeedSequence(s, spawn_key=(i,))``, so
env ``i``'s seed depends only on ``s`` and ``i``: the same whatever the backend, the worker count or
``num_envs``. :func:`spawn_seeds` gives them, for instance to seed a ``SyncVectorEnv`` with the
same seeds (``sync.reset(seed=spawn_seeds(s, n))``). A list of seeds given to ``reset`` is used as
given under either policy; ``None`` leaves every env unseeded.

A worker restarted under ``on_worker_death="restart"`` resets its envs with seeds derived from
each env's last seed ``s`` and the vector env's restart count ``r`` (1 for the first restart):
``s + r * num_envs`` under ``"sequential"``, and under ``"spawn"``::

    int(SeedSequence(s, spawn_key=(r,)).generate_state(1, numpy.uint64)[0]) >> 1

so a rerun with the same crash reproduces, and a restarted env does not replay its old stream.

(A seed at or above ``2**32`` is fine for ``Env.reset``, ``numpy.random.default_rng`` and
``torch.manual_seed``; code that hands it to the legacy ``numpy.random.seed`` must reduce it
first, e.g. ``seed % 2**32``.)
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from vecenv.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["SeedPolicy", "SEED_POLICIES", "spawn_seeds", "derive_seed", "restart_seed", "seed_policy_of"]

#: What one seed of :func:`spawn_seeds` takes in memory (a 63-bit int and its place in the list),
#: and the count from which the list is checked against the memory the machine can give.
_SEED_BYTES, _CHECKED_FROM = 48, 1 << 20


class SeedPolicy(enum.StrEnum):
    """How ``reset(seed=int)`` seeds the envs (the module docstring says each in full). A str, so
    ``seed_policy="spawn"`` and ``envs.seed_policy == "spawn"`` work as they read."""

    #: Env ``i`` gets ``seed + i``, as ``SyncVectorEnv``.
    SEQUENTIAL = "sequential"
    #: Env ``i`` gets :func:`derive_seed` ``(seed, i)``: runs with different seeds share no env seed.
    SPAWN = "spawn"


#: The names ``seed_policy`` takes.
SEED_POLICIES = tuple(policy.value for policy in SeedPolicy)


def derive_seed(seed: int, key: int) -> int:
    """The first 64-bit word of ``SeedSequence(seed, spawn_key=(key,))``'s state, shifted right
    by one bit: an int in ``[0, 2**63)``."""
    return int(np.random.SeedSequence(seed, spawn_key=(key,)).generate_state(1, np.uint64)[0]) >> 1


def spawn_seeds(seed: int, num_envs: int) -> list[int]:
    """The per-env seeds of ``reset(seed=seed)`` under ``seed_policy="spawn"``: env ``i`` gets
    :func:`derive_seed` ``(seed, i)``, the first word of ``SeedSequence(seed).spawn(num_envs)[i]``.

    Raises:
        TypeError, ValueError: ``seed`` or ``num_envs`` is not a non-negative int.
        MemoryLimitError: the list of ``num_envs`` seeds would not fit in memory.
    """
    for name, value in (("seed", seed), ("num_envs", num_envs)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ArgumentTypeError(
                f"`{name}` must be a non-negative int, got {value!r} of type {type(value).__name__}"
            )
        if value < 0:
            raise InvalidArgumentError(f"`{name}` must be a non-negative int, got {value!r}")
    if num_envs >= _CHECKED_FROM:  # a list too long for memory would fill it slowly, then fail
        from vecenv.wire.memory import check_block

        check_block(int(num_envs) * _SEED_BYTES, f"a list of {num_envs} seeds (spawn_seeds)", shared=False)
    return [derive_seed(seed, i) for i in range(num_envs)]


def restart_seed(policy: SeedPolicy, seed: int, restart: int, num_envs: int) -> int:
    """The seed of an env last reset with ``seed``, rebuilt at the vector env's ``restart``-th restart."""
    return derive_seed(seed, restart) if policy == SeedPolicy.SPAWN else seed + restart * num_envs


def seed_policy_of(envs: Any) -> SeedPolicy:
    """How ``envs.reset(seed=int)`` seeds its envs: a vecenv vector env's ``seed_policy`` (also
    under vector wrappers), else ``"sequential"``, as every Gymnasium vector env seeds them."""
    return SeedPolicy(getattr(envs.unwrapped, "seed_policy", SeedPolicy.SEQUENTIAL))
