"""Input checks as pure functions: every public call runs them before it changes any state.

Each returns the normalised value or raises ``TypeError``/``ValueError`` naming the argument, the
expected and the received value. None of them touches a process, so they are tested directly.
(What the machine and this process allow, the cores and the default start method, is
:mod:`vecenv.machine`.)
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from gymnasium import Space
from gymnasium.vector import AutoresetMode

from vecenv.errors import ArgumentTypeError, InvalidArgumentError, InvalidSeedError, SeedTypeError, describe
from vecenv.machine import available_cpus, default_start_method
from vecenv.seeding import SEED_POLICIES, SeedPolicy, spawn_seeds
from vecenv.wire.protocol import ObservationMode, SpaceRule

__all__ = [
    "check_env_fns",
    "check_group_fns",
    "check_flag",
    "check_num_workers",
    "check_autoreset_mode",
    "check_display_name",
    "check_context",
    "check_observation_mode",
    "check_timeout",
    "check_restarts",
    "RestartBudget",
    "check_threads",
    "check_worker_nice",
    "check_options",
    "check_batch_size",
    "check_env_ids",
    "check_seed_policy",
    "seed_list",
    "check_reset_mask",
    "check_num_steps",
    "check_count",
]


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _refusal(right_type: bool, message: str) -> InvalidArgumentError:
    """The error for an argument a check refused: :class:`ArgumentTypeError` (a ``TypeError``
    too) when it is of the wrong type, :class:`InvalidArgumentError` when only its value is."""
    return InvalidArgumentError(message) if right_type else ArgumentTypeError(message)


def check_env_fns(env_fns: Any, name: str = "env_fns") -> list[Callable[[], Any]]:
    """A non-empty list of callables (any iterable is accepted, as ``SyncVectorEnv`` does)."""
    if isinstance(env_fns, (str, bytes)) or not isinstance(env_fns, Iterable):
        raise ArgumentTypeError(f"`{name}` must be an iterable of env constructors, got {describe(env_fns)}")
    fns = list(env_fns)
    if not fns:
        raise InvalidArgumentError(f"`{name}` must hold at least one env constructor, got an empty sequence")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise ArgumentTypeError(f"`{name}[{i}]` must be callable (returning a gymnasium.Env), got {describe(fn)}")
    return fns


def check_group_fns(group_fns: Any) -> list[Callable[[], Any]]:
    """A non-empty sequence of callables, each building one worker's envs (``from_groups``)."""
    if isinstance(group_fns, (str, bytes)) or not isinstance(group_fns, Sequence) or not group_fns:
        right_type = isinstance(group_fns, Sequence) and not isinstance(group_fns, (str, bytes))
        raise _refusal(right_type, f"`group_fns` must be a non-empty sequence of callables, got {describe(group_fns)}")
    for i, fn in enumerate(group_fns):
        if not callable(fn):
            raise ArgumentTypeError(f"`group_fns[{i}]` must be callable (returning a list of envs), got {describe(fn)}")
    return list(group_fns)


def check_flag(value: Any, name: str) -> bool:
    """A bool (not merely truthy: ``0`` or ``"no"`` for a switch is a mistake worth naming)."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"`{name}` must be a bool, got {describe(value)}")
    return value


def check_num_workers(num_workers: Any, num_envs: int, *, in_process: bool = True, auto: bool = True) -> int:
    """``None`` gives ``min(num_envs, available_cpus())``; else an int in ``[0, num_envs]``
    (0: every env in the parent process). ``in_process=False`` is for a backend whose envs always
    run in workers (Ray's actors): neither 0 nor ``"auto"`` is on offer, and the range is
    ``[1, num_envs]``. ``auto=False``: the caller has no ``"auto"`` to offer (``"auto"`` itself
    is then refused here, so the caller resolves it before)."""
    if num_workers is None:
        return min(num_envs, available_cpus())
    low = 0 if in_process else 1
    offer = "None, 'auto' or" if in_process and auto else "None or"
    if not _is_int(num_workers) or not low <= num_workers <= num_envs:
        raise _refusal(
            _is_int(num_workers) or (isinstance(num_workers, str) and num_workers == "auto"),
            f"`num_workers` must be {offer} an int in [{low}, {num_envs}] ({low} to len(env_fns)), "
            f"got {describe(num_workers)}",
        )
    return int(num_workers)


def check_autoreset_mode(mode: Any, what: str = "`autoreset_mode`") -> AutoresetMode:
    """``mode`` as an ``AutoresetMode`` (one, or its value); else ``InvalidArgumentError``
    saying that ``what`` (the argument, or where the mode was read) must be one."""
    try:
        return AutoresetMode(mode)
    except ValueError:
        raise _refusal(
            isinstance(mode, str),
            f"{what} must be one of {[m.value for m in AutoresetMode]} or an AutoresetMode, got {describe(mode)}",
        ) from None


def check_context(context: Any) -> multiprocessing.context.BaseContext:
    """The multiprocessing context for ``context`` (``None``: :func:`default_start_method`)."""
    try:
        return multiprocessing.get_context(default_start_method() if context is None else context)
    except ValueError:
        raise _refusal(
            isinstance(context, str),
            f"`context` must be None or one of {multiprocessing.get_all_start_methods()}, got {describe(context)}",
        ) from None


def check_observation_mode(mode: Any) -> ObservationMode:
    """``"same"``, ``"different"``, or ``(batched space, single space)``, as Gymnasium takes it
    (or a :class:`~vecenv.wire.protocol.SpaceRule`, as the SB3 drop-in gives ``AS_ENV_0``); the
    strings become their :class:`~vecenv.wire.protocol.SpaceRule`."""
    if isinstance(mode, SpaceRule):
        return mode
    if isinstance(mode, tuple) and len(mode) == 2:
        if not isinstance(mode[0], Space) or not isinstance(mode[1], Space):
            raise ArgumentTypeError(
                f"Expected both elements of observation_mode to be Spaces, got {type(mode[0])} and {type(mode[1])}"
            )
        return mode
    if isinstance(mode, str) and mode in ("same", "different"):
        return SpaceRule(mode)
    raise _refusal(
        isinstance(mode, (str, tuple)),
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
        f"observation space, actual got {mode}",
    )


def check_timeout(timeout: Any, name: str = "timeout") -> float | None:
    """``None`` (no limit) or a non-negative number of seconds."""
    if timeout is None:
        return None
    if not _is_number(timeout) or not math.isfinite(timeout) or timeout < 0:
        raise _refusal(
            _is_number(timeout), f"`{name}` must be None or a non-negative number of seconds, got {describe(timeout)}"
        )
    return float(timeout)


def check_options(options: Any) -> Mapping[str, Any] | None:
    """``reset``'s ``options``: ``None`` or a mapping (a dict, or any ``Mapping``, which
    ``SyncVectorEnv`` hands to the envs as it is), sent to each worker as a copy."""
    if options is not None and not isinstance(options, Mapping):
        raise ArgumentTypeError(f"`options` must be a dict (a mapping) or None, got {describe(options)}")
    return options


def check_seed_policy(policy: Any) -> SeedPolicy:
    """``seed_policy``: one of :data:`vecenv.seeding.SEED_POLICIES` (or a :class:`SeedPolicy`)."""
    if policy not in SEED_POLICIES:
        raise _refusal(
            isinstance(policy, str),
            f"`seed_policy` must be one of {', '.join(map(repr, SEED_POLICIES))}, got {describe(policy)}",
        )
    return SeedPolicy(policy)


def check_display_name(name: Any) -> str | None:
    """``display_name``: ``None`` (messages name the vector env's own class) or a non-empty
    str, the class a wrapping layer's caller built, so that errors name what the caller knows."""
    if name is not None and not (isinstance(name, str) and name):
        raise _refusal(isinstance(name, str), f"`display_name` must be None or a non-empty str, got {describe(name)}")
    return name


def seed_list(
    seed: Any, n: int, policy: SeedPolicy = SeedPolicy.SEQUENTIAL, count: str = "num_envs"
) -> list[int | None]:
    """One seed (or ``None``) per env: ``None``, an int (env ``i`` gets ``seed + i``, or under
    ``policy="spawn"`` its :func:`~vecenv.seeding.spawn_seeds` seed; a NumPy integer, or a 0-d
    array of one, counts as its int), or a list (used as given).
    ``count`` names ``n`` in the messages (``num_copies`` for the multi-agent copies)."""
    if seed is None:
        return [None] * n
    if isinstance(seed, np.ndarray) and seed.ndim == 0:  # np.array(7): that int, as SuperSuit reads it
        if seed.dtype.kind not in "iu":
            raise SeedTypeError(f"`seed` must be an int, a list of {n} seeds or None, got {describe(seed)}")
        seed = seed.item()
    if _is_int(seed):
        if seed < 0:
            raise InvalidSeedError(f"`seed` must be a non-negative int, a list of {n} seeds or None, got {seed}")
        return [*(spawn_seeds(int(seed), n) if policy == SeedPolicy.SPAWN else range(int(seed), int(seed) + n))]
    if isinstance(seed, (str, bytes)) or not isinstance(seed, (Sequence, np.ndarray)):
        raise SeedTypeError(f"`seed` must be an int, a list of {n} seeds or None, got {describe(seed)}")
    if len(seed) != n:  # Gymnasium's words, and a seed error as the others are
        raise InvalidSeedError(
            f"If seeds are passed as a list the length must match {count}={n} but got length={len(seed)}."
        )
    seeds: list[int | None] = []
    for i, s in enumerate(seed):
        if s is None:
            seeds.append(None)
        elif _is_int(s):
            if s < 0:
                raise InvalidSeedError(f"`seed[{i}]` must be a non-negative int or None, got {s}")
            seeds.append(int(s))
        else:
            raise SeedTypeError(f"`seed[{i}]` must be an int or None, got {describe(s)}")
    return seeds


def check_reset_mask(reset_mask: Any, n: int) -> np.ndarray:
    """A copy of a valid ``options["reset_mask"]``; Gymnasium's own checks and messages."""
    if not isinstance(reset_mask, np.ndarray):
        raise ArgumentTypeError(f"`options['reset_mask']` must be a numpy array, got {type(reset_mask)}")
    if reset_mask.shape != (n,):
        raise InvalidArgumentError(f"`options['reset_mask']` must have shape `({n},)`, got {reset_mask.shape}")
    if reset_mask.dtype != np.bool_:
        raise ArgumentTypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {reset_mask.dtype}")
    if not np.any(reset_mask):
        raise InvalidArgumentError(
            "`options['reset_mask']` must contain a boolean array with at least one True value, "
            f"got reset_mask={reset_mask}"
        )
    return reset_mask.copy()


def check_batch_size(batch_size: Any, group_sizes: Sequence[int]) -> int:
    """The envs each ``recv`` returns: ``None`` means all; otherwise whole groups must add up to
    it whatever order they finish in, so it is ``num_envs`` or, when every group has the same
    size, a multiple of that size."""
    n = sum(group_sizes)
    if batch_size is None:
        return n
    sizes = sorted(set(group_sizes))
    if not _is_int(batch_size) or not 0 < batch_size <= n:
        raise _refusal(
            _is_int(batch_size), f"`batch_size` must be an int in [1, num_envs={n}], got {describe(batch_size)}"
        )
    if batch_size != n and (len(sizes) > 1 or batch_size % sizes[0]):
        rule = (
            f"a multiple of the group size {sizes[0]}"
            if len(sizes) == 1
            else "num_envs, since the groups differ in size"
        )
        raise InvalidArgumentError(
            f"`batch_size` must be {rule} (whole groups must add up to it whatever order they "
            f"finish in), got batch_size={batch_size} for group sizes {list(group_sizes)}"
        )
    return int(batch_size)


def check_env_ids(env_ids: Any, n: int) -> np.ndarray:
    """A non-empty 1-d int array of distinct env indices in ``[0, n)``."""
    ids = np.asarray(env_ids)
    if ids.ndim != 1 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ArgumentTypeError(f"`env_ids` must be a non-empty 1-d array of int env indices, got {describe(env_ids)}")
    unknown = ids[(ids < 0) | (ids >= n)]
    if unknown.size:
        raise InvalidArgumentError(f"`env_ids` must lie in [0, {n}), got unknown ids {unknown.tolist()}")
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise InvalidArgumentError(f"`env_ids` must not repeat an env, got duplicated ids {uniq[counts > 1].tolist()}")
    return ids


class RestartBudget(NamedTuple):
    """``on_worker_death="restart"``: at most ``max_restarts`` restarts within ``window`` seconds."""

    max_restarts: int
    window: float


def check_restarts(on_worker_death: Any, max_restarts: Any, restart_window: Any) -> RestartBudget | None:
    """``None`` for ``on_worker_death="raise"``; the :class:`RestartBudget` for ``"restart"``."""
    if on_worker_death not in ("raise", "restart"):
        raise _refusal(
            isinstance(on_worker_death, str),
            f"`on_worker_death` must be 'raise' or 'restart', got {describe(on_worker_death)}",
        )
    if not _is_int(max_restarts) or max_restarts < 1:
        raise _refusal(_is_int(max_restarts), f"`max_restarts` must be a positive int, got {describe(max_restarts)}")
    if not _is_number(restart_window) or not math.isfinite(restart_window) or restart_window <= 0:
        raise _refusal(
            _is_number(restart_window),
            f"`restart_window` must be a positive number of seconds, got {describe(restart_window)}",
        )
    return None if on_worker_death == "raise" else RestartBudget(int(max_restarts), float(restart_window))


def check_threads(threads: Any) -> int | None:
    """``threads_per_worker``: ``None`` or a positive int."""
    if threads is not None and (not _is_int(threads) or threads < 1):
        raise _refusal(
            _is_int(threads), f"`threads_per_worker` must be None or a positive int, got {describe(threads)}"
        )
    return None if threads is None else int(threads)


def check_worker_nice(nice: Any) -> int:
    """``worker_nice``: an int in ``[0, 19]`` (how far below this process's priority the workers
    run; raising a priority needs privileges, so no negative value)."""
    if not _is_int(nice) or not 0 <= nice <= 19:
        raise _refusal(
            _is_int(nice),
            f"`worker_nice` must be an int in [0, 19] (added to the workers' nice value), got {describe(nice)}",
        )
    return int(nice)


def check_num_steps(num_steps: Any) -> int:
    """A rollout's length: a positive int."""
    if not _is_int(num_steps) or num_steps < 1:
        raise _refusal(
            _is_int(num_steps),
            f"`num_steps` must be a positive int (steps per env in the rollout), got {describe(num_steps)}",
        )
    return int(num_steps)


def check_count(value: Any, name: str, low: int = 1) -> int:
    """A count the caller gives (``num_envs``, copies, an every-``k`` trigger): an int ``>= low``
    (a positive int by default), a NumPy one too (as ``gymnasium.make_vec`` takes ``num_envs``),
    returned as an int."""
    if not _is_int(value) or value < low:
        expected = "a positive int" if low == 1 else f"an int >= {low}"
        raise _refusal(_is_int(value), f"`{name}` must be {expected}, got {describe(value)}")
    return int(value)
