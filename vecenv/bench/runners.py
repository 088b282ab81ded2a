"""The benchmark's runners: named objects that say how a row's envs are built and stepped.

A runner's name is only its label; everything the benchmark does with it (build its vector env,
step it, plan its cells, colour its bar) reads the runner's fields. The registries below are
built from data, and :func:`runner_named` finds any runner a plan can hold, in the measuring
process too.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib.util
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from vecenv.bench.vectors import EnvFn, VectorKind, make_vector
from vecenv.errors import InvalidArgumentError, InvalidStateError

VECENV_WORKERS = (0, 1, 2, 4)  # 0: every env in the measuring process
NATIVE_N = 2048  # envs of the native-group rows: 2 groups of 1024
MODE = AutoresetMode.NEXT_STEP


class Drive(enum.Enum):
    """How a runner's envs are stepped while it is measured."""

    SINGLE = "single"  # one env in a Python loop; N is reported as 1
    STEP = "step"  # a vector env, step() with a row of actions
    NATIVE = "native"  # a vector env of native vectorized groups, step(); its size is checked
    RECV_SEND = "recv-send"  # batch_size, async_reset/recv/send: each recv takes the first groups done


@dataclasses.dataclass(frozen=True)
class Requirement:
    """What the runners of a library need: its modules (every one importable, or they are
    skipped), and what installs them, which the note that says they were skipped names."""

    name: str  # the library, as the note names it
    modules: tuple[str, ...]  # the library's, and any it imports without declaring them
    install: str  # what follows ``pip install`` to bring every module

    def absent(self) -> list[str]:
        """Its modules that are not importable here."""
        return [m for m in self.modules if importlib.util.find_spec(m) is None]

    def missing(self) -> bool:
        """Whether any of its modules is not importable here."""
        return bool(self.absent())

    @property
    def note(self) -> str:
        """The note of a run that skipped its runners: which module is missing, what installs it."""
        absent = ", ".join(m for m in self.absent() if m != self.name)
        what = (
            f"{self.name}: not importable"
            if self.name in self.absent() or not absent
            else f"{self.name}: needs {absent}"
        )
        return f"{what}, skipped (pip install {self.install} to include it)"


#: (runner, env constructors, workload) -> its vector env
Builder = Callable[["Runner", Sequence[EnvFn], str], Any]


@dataclasses.dataclass(frozen=True)
class Runner:
    """One kind of row: how its envs are built (``build``) and stepped (``drive``)."""

    name: str
    drive: Drive = Drive.STEP
    build: Builder | None = None  # None for Drive.SINGLE
    vector: VectorKind | None = None  # the make_vector kind, where it builds one
    workers: int | Literal["auto"] | None = None  # None: names no worker count
    half_batch: bool = False  # batch_size N/2
    batch_size: int | None = None  # a fixed batch_size (the async-batch rows)
    inline_group: bool = False  # one group stepped by the parent (native-group, vecenv-2w-inline)
    default_plan: bool = False  # vecenv's own choice for num_workers=None (what vecenv.make does)
    parallel: bool = False  # single-par: `single` in one process per core at once, rates summed
    infer: bool = False  # ~0.5 ms of numpy "inference" per step or batch, as a learner would
    opt_in: bool = False  # measured only when named in --runners
    spin: bool = True  # False: nobody spins on the step's shared words; every wait sleeps at once
    needs: Requirement | None = None
    #: the workloads it can step (``None``: every one); envpool steps only its own C++ CartPole
    workloads: frozenset[str] | None = None

    def steps(self, workload: str) -> bool:
        """Whether it can step ``workload``."""
        return self.workloads is None or workload in self.workloads

    @property
    def ours(self) -> bool:
        """Whether it steps vecenv's SubprocVectorEnv (highlighted in the chart)."""
        return self.vector is VectorKind.VECENV

    def fixed_workers(self) -> int:
        """The worker count it names; ``ValueError`` for one that has none (or picks it when built)."""
        if isinstance(self.workers, int):
            return self.workers
        why = "chooses its worker count when built" if self.workers == "auto" else "does not name a worker count"
        raise InvalidArgumentError(f"runner {self.name!r} {why}")

    def fits(self, n: int) -> bool:
        """Whether it can step ``n`` envs: no more workers than envs (``auto`` picks at most N),
        and with a half batch, N/2 whole groups."""
        if isinstance(self.workers, int) and self.workers > n:
            return False
        return not (self.half_batch and n % (2 * self.fixed_workers()))

    def batch_at(self, n: int) -> int | None:
        """The ``batch_size`` it steps ``n`` envs with; ``None`` without one."""
        return n // 2 if self.half_batch else self.batch_size


# -- builders ----------------------------------------------------------------------------------


def _vector(runner: Runner, fns: Sequence[EnvFn], workload: str) -> Any:
    if runner.vector is None:
        raise InvalidArgumentError(f"runner {runner.name!r} names no vector kind")
    workers = None if runner.default_plan else "auto" if runner.workers is None else runner.workers
    return make_vector(
        runner.vector,
        fns,
        autoreset_mode=MODE,
        num_workers=workers,
        batch_size=runner.batch_at(len(fns)),
        inline_group=runner.inline_group,
        spin=runner.spin,
    )


def _make_vec(runner: Runner, fns: Sequence[EnvFn], workload: str) -> Any:
    return gym.make_vec("CartPole-v1", len(fns), vectorization_mode="vector_entry_point")


def _vecenv_groups(runner: Runner, fns: Sequence[EnvFn], workload: str) -> Any:
    import vecenv

    group = functools.partial(gym.make_vec, "CartPole-v1", len(fns) // 2, vectorization_mode="vector_entry_point")
    return vecenv.SubprocVectorEnv.from_groups([group, group], autoreset_mode=MODE, inline_group=runner.inline_group)


def _envpool(runner: Runner, fns: Sequence[EnvFn], workload: str) -> Any:
    import envpool

    if workload != "cartpole":
        raise InvalidStateError("envpool runs only its own C++ envs (CartPole here)")
    return envpool.make_gymnasium("CartPole-v1", num_envs=len(fns))


def _pufferlib(runner: Runner, fns: Sequence[EnvFn], workload: str) -> Any:
    """Best effort: the API moves between releases."""
    import pufferlib.emulation
    import pufferlib.vector

    creators = [functools.partial(pufferlib.emulation.GymnasiumPufferEnv, env_creator=fn) for fn in fns]
    return pufferlib.vector.make(
        creators, num_envs=len(fns), num_workers=min(2, len(fns)), backend=pufferlib.vector.Multiprocessing
    )


def _supersuit(runner: Runner, fns: Sequence[EnvFn], workload: str) -> Any:
    """SuperSuit's processes (``concat_vec_envs_v1``, 2 CPUs) over copies of one env, each held
    as SuperSuit holds a single Gymnasium env (:class:`_SuperSuitSingle`)."""
    import supersuit

    envs = supersuit.concat_vec_envs_v1(_SuperSuitSingle(fns[0]()), len(fns), num_cpus=2, base_class="gymnasium")
    # SuperSuit's spaces are the single env's, under Gymnasium 0.x's names.
    envs.single_observation_space, envs.single_action_space = envs.observation_space, envs.action_space
    return envs


class _SuperSuitSingle:
    """One Gymnasium env as a SuperSuit vector env of one (its ``SingleVecEnv``: reset at an
    episode's end, float32 rewards, uint8 flags, a list of infos). SuperSuit's own
    ``SingleVecEnv`` still takes ``reset()`` for the observation alone, so
    ``concat_vec_envs_v1`` of a Gymnasium env fails with Gymnasium 1.x; this is it with the
    ``(obs, info)`` pair. SuperSuit copies it (cloudpickle) once per env."""

    num_envs = 1

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.observation_space, self.action_space = env.observation_space, env.action_space
        self.metadata, self.render_mode = env.metadata, env.render_mode

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        return np.expand_dims(obs, 0), [info]

    def step(self, actions: Any) -> tuple[Any, ...]:
        obs, reward, term, trunc, info = self.env.step(actions[0])
        if term or trunc:
            obs, _ = self.env.reset()
        flags = (np.array([term], np.uint8), np.array([trunc], np.uint8))
        return np.expand_dims(obs, 0), np.array([reward], np.float32), *flags, [info]

    def close(self) -> None:
        self.env.close()


# -- the registries ----------------------------------------------------------------------------


ANCHORS = '-e ".[anchors]"'  # brings SuperSuit, the PettingZoo it imports without declaring it, and EnvPool
SUPERSUIT = Requirement("supersuit", ("supersuit", "pettingzoo"), ANCHORS)
PUFFERLIB = Requirement("pufferlib", ("pufferlib",), "pufferlib")
ENVPOOL = Requirement("envpool", ("envpool",), ANCHORS)
RAY = Requirement("ray", ("ray",), '-e ".[ray]"')
#: Every module a runner may need, in the order of their notes.
REQUIREMENTS = (SUPERSUIT, PUFFERLIB, ENVPOOL, RAY)


def _selectable() -> Iterable[Runner]:
    """The runners of --runners, in the order of its choices."""
    yield Runner("single", Drive.SINGLE)
    yield Runner("single-par", Drive.SINGLE, parallel=True)
    yield Runner("sync", build=_vector, vector=VectorKind.SYNC)
    yield Runner("async", build=_vector, vector=VectorKind.ASYNC)
    for k in VECENV_WORKERS:
        yield Runner(f"vecenv-{k}w", build=_vector, vector=VectorKind.VECENV, workers=k)
    yield Runner("vecenv-auto", build=_vector, vector=VectorKind.VECENV, workers="auto")
    yield Runner("vecenv-default", build=_vector, vector=VectorKind.VECENV, default_plan=True, opt_in=True)
    yield Runner("vecenv-2w-inline", build=_vector, vector=VectorKind.VECENV, workers=2, inline_group=True, opt_in=True)
    half = Runner(
        "vecenv-2w-half", Drive.RECV_SEND, _vector, VectorKind.VECENV, workers=2, half_batch=True, opt_in=True
    )
    yield half
    for k in (2, 4):
        yield Runner(f"ray-{k}w", build=_vector, vector=VectorKind.RAY, workers=k, opt_in=True, needs=RAY)
    yield dataclasses.replace(half, name="ray-2w-half", vector=VectorKind.RAY, needs=RAY)
    yield Runner("supersuit", build=_supersuit, needs=SUPERSUIT)
    yield Runner("pufferlib", build=_pufferlib, needs=PUFFERLIB)
    yield Runner("envpool", build=_envpool, needs=ENVPOOL, workloads=frozenset({"cartpole"}))


#: The runners of --runners (standard workloads), by name.
RUNNERS: dict[str, Runner] = {r.name: r for r in _selectable()}
#: The native-group rows: make_vec with 2048 envs against 2 native groups of 1024 in vecenv.
NATIVE: dict[str, Runner] = {
    r.name: r
    for r in (
        Runner("gym-make_vec", Drive.NATIVE, build=_make_vec),
        Runner("vecenv-2w-native", Drive.NATIVE, build=_vecenv_groups, vector=VectorKind.VECENV),
        Runner(
            "vecenv-2w-native-inline", Drive.NATIVE, build=_vecenv_groups, vector=VectorKind.VECENV, inline_group=True
        ),
    )
}


def async_batch_runners(
    n: int, workers: Sequence[int] = (2, 4), groups: Sequence[int] = (1, 2)
) -> list[tuple[Runner, list[Runner]]]:
    """The async-batch rows at ``n`` envs: for each worker count K with at least 2 envs per
    worker, synchronous stepping (the baseline) and batches of ``g`` groups, ``g`` in ``groups``;
    all with the learner's inference."""
    rows = []
    for k in workers:
        if n < 2 * k:
            continue
        base = Runner(f"vecenv-{k}w-sync", build=_vector, vector=VectorKind.VECENV, workers=k, infer=True)
        batches = [
            dataclasses.replace(base, name=f"vecenv-{k}w-batch{b}", drive=Drive.RECV_SEND, batch_size=b)
            for b in (g * (n // k) for g in groups)
        ]
        rows.append((base, batches))
    return rows


#: The worker-count curve's rows: ``vecenv-16w``, or ``vecenv-16w-sleep`` with nobody spinning.
_CURVE_NAME = re.compile(r"vecenv-([1-9][0-9]*)w(-sleep)?")


def curve_runner(workers: int, spin: bool = True) -> Runner:
    """vecenv with ``workers`` worker processes (any count), spinning on the step's shared words
    as by default or, with ``spin=False``, sleeping on the pipes at every wait."""
    name = f"vecenv-{workers}w" + ("" if spin else "-sleep")
    return Runner(name, build=_vector, vector=VectorKind.VECENV, workers=workers, spin=spin)


def runner_named(name: str, n: int) -> Runner:
    """The runner of a planned cell of ``n`` envs named ``name``; ``ValueError`` for no runner."""
    if name in RUNNERS:
        return RUNNERS[name]
    curve = _CURVE_NAME.fullmatch(name)
    if curve:
        return curve_runner(int(curve.group(1)), spin=curve.group(2) is None)
    if name in NATIVE:
        return NATIVE[name]
    for base, batches in async_batch_runners(n):
        for runner in (base, *batches):
            if runner.name == name:
                return runner
    raise InvalidArgumentError(f"unknown runner {name!r} (at N={n})")
