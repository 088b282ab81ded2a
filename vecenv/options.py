"""The keywords every vector env class shares, their defaults written once, checked once.

:data:`DEFAULTS` holds each shared keyword's default; the public signatures
(:class:`~vecenv.SubprocVectorEnv`, :class:`~vecenv.RayVectorEnv` and their ``from_groups``)
name their defaults from it, so ``restart_window`` is 60 s in exactly one place.
:meth:`VectorOptions.check` turns the values a caller gave into one checked value that the
start-up path carries, instead of a dozen positional parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gymnasium import Space
from gymnasium.vector import AutoresetMode

from vecenv.checks import (
    RestartBudget,
    check_autoreset_mode,
    check_display_name,
    check_flag,
    check_observation_mode,
    check_restarts,
    check_seed_policy,
    check_threads,
    check_timeout,
)
from vecenv.seeding import SeedPolicy
from vecenv.wire.protocol import ObservationMode, SpaceRule

__all__ = ["Keywords", "DEFAULTS", "VectorOptions"]


@dataclasses.dataclass(frozen=True)
class Keywords:
    """The shared keywords as a caller gives them (unchecked); the field defaults are the
    library's defaults."""

    autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP
    copy: bool = True
    observation_mode: str | tuple[Space, Space] = "same"
    batch_size: int | None = None
    start_timeout: float | None = None
    on_worker_death: str = "raise"
    max_restarts: int = 3
    restart_window: float = 60.0
    threads_per_worker: int | None = 1
    seed_policy: SeedPolicy = SeedPolicy.SEQUENTIAL
    display_name: str | None = None
    # The process backend's own.
    context: str | None = None
    daemon: bool = True
    shared_memory: bool = True
    pin_cpus: bool = False
    inline_group: bool = False
    worker_nice: int = 0


#: The default of every shared keyword.
DEFAULTS = Keywords()

# The keywords VectorOptions.check takes (the backend-specific ones are checked by their backend).
_CHECKED = (
    "autoreset_mode",
    "copy",
    "observation_mode",
    "batch_size",
    "start_timeout",
    "on_worker_death",
    "max_restarts",
    "restart_window",
    "threads_per_worker",
    "seed_policy",
    "display_name",
)


@dataclasses.dataclass(frozen=True)
class VectorOptions:
    """The shared keywords, checked and normalised.

    Attributes:
        restarts: the :class:`~vecenv.checks.RestartBudget` with ``on_worker_death="restart"``, else ``None``.
        threads: ``threads_per_worker``.
        seed_policy: how an int ``reset`` seed becomes per-env seeds (:mod:`vecenv.seeding`).
        batch_size: as given; it is checked against the group sizes once they are known.
        display_name: the class name messages give (``None``: the vector env's own).
    """

    autoreset_mode: AutoresetMode
    copy: bool
    observation_mode: ObservationMode
    batch_size: int | None
    start_timeout: float | None
    restarts: RestartBudget | None
    threads: int | None
    seed_policy: SeedPolicy = DEFAULTS.seed_policy
    display_name: str | None = DEFAULTS.display_name

    @classmethod
    def check(
        cls,
        *,
        autoreset_mode: Any = DEFAULTS.autoreset_mode,
        copy: Any = DEFAULTS.copy,
        observation_mode: Any = DEFAULTS.observation_mode,
        batch_size: Any = DEFAULTS.batch_size,
        start_timeout: Any = DEFAULTS.start_timeout,
        on_worker_death: Any = DEFAULTS.on_worker_death,
        max_restarts: Any = DEFAULTS.max_restarts,
        restart_window: Any = DEFAULTS.restart_window,
        threads_per_worker: Any = DEFAULTS.threads_per_worker,
        seed_policy: Any = DEFAULTS.seed_policy,
        display_name: Any = DEFAULTS.display_name,
    ) -> VectorOptions:
        """Check every shared keyword (each error names its argument) before anything starts."""
        return cls(
            autoreset_mode=check_autoreset_mode(autoreset_mode),
            copy=check_flag(copy, "copy"),
            observation_mode=check_observation_mode(observation_mode),
            batch_size=batch_size,
            start_timeout=check_timeout(start_timeout, "start_timeout"),
            restarts=check_restarts(on_worker_death, max_restarts, restart_window),
            threads=check_threads(threads_per_worker),
            seed_policy=check_seed_policy(seed_policy),
            display_name=check_display_name(display_name),
        )

    @classmethod
    def pick(cls, values: Mapping[str, Any]) -> VectorOptions:
        """:meth:`check` the shared keywords found in ``values`` (a constructor's ``locals()``),
        so that each public signature lists its keywords once and passes them on in one line."""
        return cls.check(**{name: values[name] for name in _CHECKED if name in values})

    @property
    def worker_observation_mode(self) -> SpaceRule | Space:
        """What a worker checks its envs' observation spaces against (see ``WorkerOptions``)."""
        mode = self.observation_mode
        return mode[1] if isinstance(mode, tuple) else mode
