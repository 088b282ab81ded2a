"""``collect``: check the request, open the output, run the collection loop, finish the output.

The loop itself is in ``recording.py``; the outputs (*sinks*) are the ``.npy`` dataset writer
(``sinks.DatasetSink`` over ``writer.py``) and a Minari dataset (``minari.py``). Rows go to the
sink in vector-step order (``steps=N`` in our format) or, through an ``EpisodeStager``, one
whole episode at a time in completion order (``episodes=N``, and always for Minari, which
stores whole episodes).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from vecenv.checks import seed_list
from vecenv.datasets.action_checks import RECURRENT_REFUSED, ActionChecker, CheckedPolicy, is_recurrent
from vecenv.datasets.dataset import load
from vecenv.datasets.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    SPILL_DIR,
    Leaf,
    dataset_fields,
    json_default,
    space_leaves,
)
from vecenv.datasets.recording import CollectionRun, CollectionSpec, record_transitions
from vecenv.datasets.sinks import OPEN_EPISODES, DatasetSink
from vecenv.datasets.sources import RolloutSource, StepSource, copy_for_every_env, rollout_length
from vecenv.datasets.staging import EpisodeStager
from vecenv.datasets.writer import CHUNK_BYTES, DatasetWriter, check_out, now, set_aside, settle, versions
from vecenv.errors import ArgumentTypeError, InvalidArgumentError, describe
from vecenv.integrations.sb3.saved_model import SavedModelPolicy
from vecenv.interrupts import HeldInterrupt
from vecenv.policies import FunctionPolicy, PolicyRunner, RandomPolicy, SB3Policy, WorkerPolicy
from vecenv.progress import progress_bar
from vecenv.seeding import seed_policy_of
from vecenv.spaces import describe_space

if TYPE_CHECKING:
    from vecenv.datasets.minari import MinariSink

#: What ``collect`` takes as a policy besides ``"random"``: batched observations to batched actions.
Policy = Callable[[Any], Any]

FORMATS = ("vecenv", "minari")

# Keys that gymnasium.make_vec (and vecenv.make) put in a vector env's spec.kwargs.
_VECTOR_SPEC_KEYS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")
# Arguments of gymnasium.make that make_vec leaves in spec.kwargs: one env's spec has them as
# fields (in its kwargs, the env's constructor would receive them).
_MAKE_SPEC_FIELDS = ("max_episode_steps", "disable_env_checker")


def single_env_spec(envs: VectorEnv) -> Any:
    """The spec of one env of ``envs``: ``envs.spec`` without the vector keys that
    ``make_vec`` adds, or None when there is none or wrappers were applied that a spec
    cannot describe."""
    spec = getattr(envs, "spec", None)
    if spec is None:
        return None
    kwargs = dict(getattr(spec, "kwargs", None) or {})
    if "vectorization_mode" not in kwargs:
        return spec
    if kwargs.get("wrappers"):
        return None
    fields = {key: kwargs.pop(key) for key in _MAKE_SPEC_FIELDS if key in kwargs}
    return dataclasses.replace(spec, kwargs={k: v for k, v in kwargs.items() if k not in _VECTOR_SPEC_KEYS}, **fields)


def autoreset_mode(envs: VectorEnv) -> AutoresetMode:
    """The autoreset mode the vector env declares in ``metadata["autoreset_mode"]``
    (gymnasium's convention; NEXT_STEP, gymnasium's default, when absent)."""
    mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if isinstance(mode, AutoresetMode):
        return mode
    for candidate in AutoresetMode:
        if str(mode) in (candidate.value, candidate.name, candidate.name.lower()):
            return candidate
    expected = [m.name for m in AutoresetMode]
    raise InvalidArgumentError(f"envs.metadata['autoreset_mode']: expected one of {expected}, got {mode!r}")


def policy_name(policy: Any) -> str:
    """How a policy is named in metadata and error messages."""
    if isinstance(policy, str):
        return policy
    name = getattr(policy, "name", None)
    if isinstance(name, str):
        return name
    module = getattr(policy, "__module__", None)
    qualname = getattr(policy, "__qualname__", None) or type(policy).__qualname__
    return f"{module}:{qualname}" if module else qualname


def _positive_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name}: expected a positive int, got {value!r} of type {type(value).__name__}")
    if value <= 0:
        raise InvalidArgumentError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


def collect(
    envs: VectorEnv,
    policy: Policy | str = "random",
    *,
    steps: int | None = None,
    episodes: int | None = None,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    progress: bool | str = True,
    overwrite: bool = False,
    metadata: Mapping[str, Any] | None = None,
    format: str = "vecenv",
    dataset_id: str | None = None,
    open_episodes: str = "truncate",
    minari_metadata: Mapping[str, Any] | None = None,
    rollout_steps: int | None = None,
    minari_storage: str = "hdf5",
) -> Any:
    """Run ``policy`` in ``envs`` and write the transitions to a dataset.

    Args:
        envs: any ``gymnasium.vector.VectorEnv`` (vecenv's, ``SyncVectorEnv``, ...) with
            fixed-shape spaces. Its autoreset mode is read from
            ``envs.metadata["autoreset_mode"]``; under DISABLED the collector resets
            finished envs itself with ``envs.reset(options={"reset_mask": mask})``. The
            envs are reset with ``seed=seed`` first; they are not closed.
        policy: ``"random"`` (each env's actions from its own generator, seeded from
            ``seed`` and the env's index: :class:`vecenv.policies.RandomPolicy`) or a
            callable taking a batch of observations and returning a batch of actions
            (with vecenv's vector envs it runs in every worker, on that worker's rows: see
            ``rollout_steps``). The vector env's rule applies: the right shape, a dtype that
            casts ``same_kind`` to the space's (float64 for a float32 Box is fine), values
            in the space; anything else raises PolicyError.
        steps: write exactly this many transitions, in vector-step order and env index
            order within a step (the last step contributes the lowest env indices needed).
        episodes: instead, write exactly this many complete episodes: the first to finish
            (ties broken by env index), in completion order, and nothing else. Open
            episodes wait in a fixed amount of memory and spill to disk, so an episode
            that never ends costs disk, not memory.
        seed: seeds the environments and the random policy: the same arguments produce
            byte-identical arrays for any vector env that steps like ``SyncVectorEnv``.
        out: our format: the dataset directory (default ``rollouts/<env id>``). Minari: the
            datasets root, as ``out/<dataset_id>`` (default ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``).
        progress: ``True``: a tqdm progress bar on stderr; ``"auto"`` (what ``vecenv-collect``
            shows): the bar when stderr is a terminal, else no bar frames (a log would fill with
            them) but the bar's last state as one line once the collection ends; ``False``: neither.
        overwrite: replace the output if it exists (only if it is empty or a dataset).
        metadata: extra entries for ``metadata.json`` (``env_id``, ``env_kwargs``, ``policy``:
            the name recorded and used in error messages, ...), overriding the inferred ones.
        format: ``"vecenv"`` (the ``.npy`` directory ``load`` reads) or ``"minari"`` (a
            Minari dataset in Minari's HDF5 format; needs ``pip install "vecenv[minari]"``).
        dataset_id: Minari only, required: ``NAMESPACE/NAME-vN`` or ``NAME-vN``.
        open_episodes: Minari with ``steps`` only: the episodes still open after the N-th
            transition are kept with their last step ``truncated`` (``"truncate"``, default:
            exactly N steps) or left out (``"drop"``); the counts are in the ``vecenv`` metadata.
        minari_metadata: Minari only: ``author``, ``code_permalink``, ``description``, ...
        minari_storage: Minari only: its storage backend, ``"hdf5"`` (default) or ``"arrow"``
            (needs pyarrow; each episode is held whole in memory while it is written).
        rollout_steps: with vecenv's own vector envs under NEXT_STEP or SAME_STEP, the
            policy runs in the workers, in rollouts of this many steps (``None``: adapted to
            ~0.2 s each); ``0``, other vector envs and DISABLED step one vector step at a time
            with the policy here. The data is the same either way for a row-wise policy.

    Returns:
        Our format: the written dataset, as ``load(out)`` returns it. Minari: the
        ``minari.MinariDataset``, as ``minari.load_dataset(dataset_id)`` returns it.

    Raises:
        TypeError / ValueError: naming the bad argument, the expected and received value.
        UnsupportedSpaceError: a space without a fixed shape.
        PolicyError: the policy returned actions the vector env does not accept.
        FileExistsError: the output exists and ``overwrite`` is false.
        MinariNotInstalledError: ``format="minari"`` without Minari installed.
        NoEpisodesError: ``format="minari"`` with ``open_episodes="drop"`` and no episode
            finished within ``steps``: nothing is written (an output ``overwrite`` was to
            replace stays).
        KeyboardInterrupt: propagates (as does any error while collecting) after what was
            collected is kept: a valid dataset with ``"complete": false`` (Minari: the finished episodes).
    """
    target = _check_request(envs, policy, steps, episodes, seed)
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise ArgumentTypeError(
            f"out: expected None or a path (str or os.PathLike), got {out!r} of type {type(out).__name__}"
        )
    _check_format_options(format, open_episodes, dataset_id, minari_metadata, minari_storage)
    rollout_steps = _check_rollout_steps(rollout_steps)
    if isinstance(progress, str) and progress != "auto":
        raise InvalidArgumentError(f"progress: expected True, False or 'auto', got {progress!r}")
    if not isinstance(progress, (bool, str)):
        raise ArgumentTypeError(f"progress: expected True, False or 'auto', got {progress!r}")
    if not isinstance(overwrite, bool):
        raise ArgumentTypeError(f"overwrite: expected True or False, got {overwrite!r}")
    plan = _plan(envs, policy, seed, steps, episodes, target, metadata, rollout_steps)
    if format == "minari":
        output = _minari_output(plan, out, overwrite, dataset_id, open_episodes, minari_metadata, minari_storage)
    else:
        output = _dataset_output(plan, out, overwrite)
    return _collect(plan, output, progress)


def _check_request(envs: Any, policy: Any, steps: Any, episodes: Any, seed: Any) -> int:
    """Raise TypeError / ValueError for ``collect``'s envs, count, seed or policy; return the
    count asked for (of steps, or of episodes)."""
    if not isinstance(envs, VectorEnv):
        raise ArgumentTypeError(f"envs: expected a gymnasium.vector.VectorEnv, got {type(envs).__name__}")
    if (steps is None) == (episodes is None):
        raise InvalidArgumentError(
            f"steps, episodes: expected exactly one of them, got steps={steps!r}, episodes={episodes!r}"
        )
    target = _positive_count("steps", steps) if steps is not None else _positive_count("episodes", episodes)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ArgumentTypeError(f"seed: expected a non-negative int, got {seed!r} of type {type(seed).__name__}")
    if seed < 0:
        raise InvalidArgumentError(f"seed: expected a non-negative int, got {seed!r}")
    policy_error = f"policy: expected 'random' or a callable taking the batched observation, got {policy!r}"
    if isinstance(policy, str) and policy != "random":
        raise InvalidArgumentError(policy_error)
    if not isinstance(policy, str) and not callable(policy):
        raise ArgumentTypeError(policy_error)
    if is_recurrent(policy):
        raise InvalidArgumentError(f"policy: {RECURRENT_REFUSED}")
    return target


def _check_rollout_steps(rollout_steps: Any) -> int | None:
    """``rollout_steps`` as an int (NumPy's integers taken, as for ``steps`` and ``seed``)."""
    if rollout_steps is None:
        return None
    if isinstance(rollout_steps, bool) or not isinstance(rollout_steps, (int, np.integer)):
        raise ArgumentTypeError(f"rollout_steps: expected None or a non-negative int, got {rollout_steps!r}")
    if rollout_steps < 0:
        raise InvalidArgumentError(f"rollout_steps: expected None or a non-negative int, got {rollout_steps!r}")
    return int(rollout_steps)


def _check_format_options(
    format: Any, open_episodes: Any, dataset_id: Any, minari_metadata: Mapping[str, Any] | None, storage: Any
) -> None:
    """Raise ValueError for ``collect``'s format and the options that only Minari takes."""
    if format not in FORMATS:
        raise InvalidArgumentError(f"format: expected one of {list(FORMATS)}, got {format!r}")
    if open_episodes not in OPEN_EPISODES:
        raise InvalidArgumentError(f"open_episodes: expected one of {list(OPEN_EPISODES)}, got {open_episodes!r}")
    if format == "vecenv" and (dataset_id is not None or minari_metadata or storage != "hdf5"):
        raise InvalidArgumentError(
            f"dataset_id, minari_metadata, minari_storage: expected their defaults with format='vecenv' (they "
            f"are for format='minari'), got dataset_id={dataset_id!r}, minari_metadata={minari_metadata!r}, "
            f"minari_storage={storage!r}"
        )


@dataclass(frozen=True)
class _Plan:
    """What ``collect`` runs, decided from its checked arguments before any output exists."""

    collection: CollectionSpec
    envs: VectorEnv
    target: int  # the collection's steps, or episodes, as an int
    fields: list[Leaf]
    spec: Any  # the single env's EnvSpec, or None
    metadata: dict[str, Any]  # the dataset's metadata.json (Minari keeps part of it)


def _plan(
    envs: VectorEnv,
    policy: Policy | str,
    seed: int,
    steps: int | None,
    episodes: int | None,
    target: int,
    metadata: Mapping[str, Any] | None,
    rollout_steps: int | None,
) -> _Plan:
    """Decide everything but the output: the autoreset mode, the fields, the policy, the metadata."""
    mode = autoreset_mode(envs)
    fields = dataset_fields(envs.single_observation_space, envs.single_action_space)
    spec = single_env_spec(envs)
    info = _check_metadata(metadata)
    info.setdefault("env_id", getattr(spec, "id", None))
    info.setdefault("env_kwargs", dict(getattr(spec, "kwargs", None) or {}))
    name = str(info.pop("policy", policy_name(policy)))
    first_seeds = seed_list(int(seed), envs.num_envs, seed_policy_of(envs))
    source, how = _source(envs, policy, name, mode, first_seeds, fields, rollout_steps)
    collection = CollectionSpec(source, envs.num_envs, mode, int(seed), steps, episodes, first_seeds)
    info.setdefault("collection", how)
    return _Plan(
        collection, envs, target, fields, spec, _dataset_metadata(collection, envs, target, fields, spec, name, info)
    )


def _source(
    envs: VectorEnv,
    policy: Policy | str,
    name: str,
    mode: AutoresetMode,
    seeds: list[int | None],
    fields: list[Leaf],
    rollout_steps: int | None,
) -> tuple[StepSource | RolloutSource, dict[str, Any]]:
    """Where the steps come from (see ``sources``), and how the dataset records that: rollouts
    in vecenv's workers where the vector env has them (not under DISABLED), else ``step``."""
    how: dict[str, Any] = {
        "random_actions": "each env's own generator, seeded from its env's reset seed" if policy == "random" else None
    }
    from vecenv.parent.vector_env import GroupVectorEnv  # the engine is loaded by then

    act: Any = policy
    skip = None
    # "random" and an SB3 model draw from a stream per env: a copy here follows each env's
    # stream as its worker's copy does, going on where the workers' stopped (built when first
    # used: with rollouts in the workers, stepping here is only the fallback). Any other
    # callable acts here as it is (it need not be picklable then).
    streamed = RandomPolicy() if isinstance(policy, str) else _sb3_policy(policy, name)
    if streamed is not None:
        runners: list[PolicyRunner] = []

        def runner() -> PolicyRunner:
            if not runners:
                runners.append(copy_for_every_env(envs, streamed, seeds))
            return runners[0]

        def skip(steps: int) -> None:
            runner().skip(steps)

        def act(observation: Any) -> Any:
            return runner().act(observation, None)

    checker = ActionChecker(envs.single_action_space, envs.num_envs, name)
    leaves = space_leaves(envs.single_observation_space, "observations")
    stepping = StepSource(envs, act, checker, mode, leaves, skip)
    if isinstance(envs, GroupVectorEnv) and mode is not AutoresetMode.DISABLED and rollout_steps != 0:
        if isinstance(policy, str):
            worker_policy: WorkerPolicy = RandomPolicy()
        else:
            worker_policy = CheckedPolicy(streamed if streamed is not None else _worker_policy(policy, name))
        row_bytes = sum(f.row_bytes for f in fields)
        num_steps = rollout_steps or rollout_length(row_bytes, envs.num_envs, CHUNK_BYTES)
        how.update(method="rollouts in the workers", policy_runs_in="every worker", max_rollout_steps=num_steps)
        return RolloutSource(envs, worker_policy, num_steps, stepping, how, adapt=rollout_steps is None), how
    how.update(method="envs.step", policy_runs_in="the collecting process", max_rollout_steps=None)
    return stepping, how


def _sb3_policy(policy: Policy, name: str) -> SB3Policy | None:
    """A collector policy that is an SB3 model (``sb3:PATH``, or an ``SB3Policy``) as the
    workers run it; ``None`` for any other."""
    if isinstance(policy, SB3Policy):
        return policy
    model = getattr(policy, "model", None)
    if isinstance(policy, SavedModelPolicy) and model is not None:
        return SB3Policy(model, policy.deterministic, name)
    return None


def _worker_policy(policy: Policy, name: str) -> WorkerPolicy:
    """A collector policy other than an SB3 model (:func:`_sb3_policy`) as the workers run it:
    a worker policy as itself, any other callable as a :class:`FunctionPolicy`."""
    return policy if isinstance(policy, WorkerPolicy) else FunctionPolicy(policy, name)


def _check_metadata(metadata: Any) -> dict[str, Any]:
    """The caller's ``metadata`` as a dict, refused before anything is written unless it is a
    mapping of string keys whose values JSON holds (``metadata.json`` is JSON; NumPy scalars and
    arrays are written as numbers and lists)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(key, str) for key in metadata):
        raise ArgumentTypeError(f"metadata: expected None or a mapping with str keys, got {describe(metadata)}")
    try:
        json.dumps(dict(metadata), default=json_default)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(
            f"metadata: expected values JSON can hold (str, int, float, bool, None, NumPy numbers and "
            "arrays, lists and dicts of them), "
            f"got {describe(metadata)} ({exc})"
        ) from None
    return dict(metadata)


def _dataset_metadata(
    collection: CollectionSpec,
    envs: VectorEnv,
    target: int,
    fields: list[Leaf],
    spec: Any,
    policy: str,
    info: dict[str, Any],
) -> dict[str, Any]:
    """The dataset's ``metadata.json`` at the start; ``info`` (the caller's ``metadata``, with
    ``env_id`` and ``env_kwargs``) overrides the inferred entries."""
    single_obs_space, single_act_space = envs.single_observation_space, envs.single_action_space
    dataset_metadata: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "complete": False,
        "env_id": info.pop("env_id"),
        "env_kwargs": info.pop("env_kwargs"),
        "num_envs": envs.num_envs,
        "num_workers": getattr(envs, "num_workers", None),
        "autoreset_mode": collection.mode.name.lower(),
        "seed": collection.seed,
        "seed_policy": seed_policy_of(envs),
        "policy": policy,
        "requested": {"steps": target} if collection.steps is not None else {"episodes": target},
        "observation_space": {"str": str(single_obs_space), "description": describe_space(single_obs_space)},
        "action_space": {"str": str(single_act_space), "description": describe_space(single_act_space)},
        "fields": {f.name: {"dtype": str(f.dtype), "shape": list(f.shape)} for f in fields},
        "episode_id_order": "order of episode start (vector step, then env index)",
        "start_time": now(),
        "end_time": None,
        "versions": versions(),
        "command_line": shlex.join(sys.argv),
    }
    if spec is not None:
        try:
            dataset_metadata["env_spec"] = spec.to_json()
        except Exception:  # kwargs that JSON cannot hold: the spec is not recorded
            pass
    dataset_metadata.update(info)
    return dataset_metadata


@dataclass(frozen=True)
class _Output:
    """Where ``collect`` writes: the sink, and how transitions reach it."""

    sink: DatasetSink | MinariSink
    spill_dir: Path  # where an EpisodeStager spills open episodes (made on first use)
    staged: bool  # whole episodes, through an EpisodeStager, rather than rows as they come
    directory: Path | None  # our format's dataset directory; None for Minari
    target: Path  # the directory the output is written to (either format)
    aside: Path | None  # the output it replaces, kept until the run has written something


def _minari_output(
    plan: _Plan,
    out: str | os.PathLike[str] | None,
    overwrite: bool,
    dataset_id: str | None,
    open_episodes: str,
    minari_metadata: Mapping[str, Any] | None,
    storage: str,
) -> _Output:
    """A new Minari dataset (raises MinariNotInstalledError, ValueError or FileExistsError)."""
    from vecenv.datasets.minari import (
        MinariSink,
        check_minari_seeds,
        check_minari_spaces,
        datasets_root,
        minari_target,
    )

    if dataset_id is None:
        raise InvalidArgumentError("dataset_id: expected 'NAMESPACE/NAME-vN' with format='minari', got None")
    check_minari_spaces(plan.envs.single_observation_space, plan.envs.single_action_space)
    check_minari_seeds(plan.collection.first_seeds, storage, "seed", str(plan.collection.seed))
    target_dir = minari_target(dataset_id, out, overwrite, storage=storage, prepare=False)
    aside = set_aside(target_dir)
    try:
        datasets_root(out).mkdir(parents=True, exist_ok=True)
        sink = MinariSink(
            dataset_id,
            target_dir,
            plan.envs.single_observation_space,
            plan.envs.single_action_space,
            plan.spec,
            plan.metadata,
            dict(minari_metadata or {}),
            open_episodes if plan.collection.steps else None,
            storage,
        )
    except BaseException:
        settle(target_dir, aside, wrote=False)
        raise
    import uuid

    # Open episodes spill next to the datasets (not to /tmp, often in memory).
    return _Output(sink, datasets_root(out) / f".vecenv-spill-{uuid.uuid4().hex}", True, None, target_dir, aside)


def _dataset_output(plan: _Plan, out: str | os.PathLike[str] | None, overwrite: bool) -> _Output:
    """A new dataset directory in our format (raises ValueError or FileExistsError)."""
    if out is None:
        if plan.metadata["env_id"] is None:
            raise InvalidArgumentError(
                "out: expected a directory path (required when envs has no spec and metadata has no 'env_id'), got None"
            )
        out = Path("rollouts") / str(plan.metadata["env_id"]).split(":")[-1]
    directory = Path(out)
    if directory.is_symlink():
        # A link names the folder it leads to: the dataset there is replaced (moved aside beside
        # it, not the link) and a missing one made, so the link leads to the new dataset.
        directory = Path(os.path.realpath(directory))
    check_out(directory, overwrite)
    aside = set_aside(directory)
    try:
        sink = DatasetSink(DatasetWriter(directory, plan.fields, plan.metadata))
    except BaseException:  # a writer cut short as it starts (Ctrl+C) leaves no files without metadata
        settle(directory, aside, wrote=False)
        raise
    return _Output(sink, directory / SPILL_DIR, plan.collection.episodes is not None, directory, directory, aside)


def _collect(plan: _Plan, output: _Output, progress: bool | str) -> Any:
    """Run the collection loop into ``output`` and finish it, also when the loop (or what it
    sets up) raises. A run that ends before it has written anything leaves nothing, and the
    output it was to replace as it was (see :func:`~vecenv.datasets.writer.settle`)."""
    stager: EpisodeStager | None = None
    bar: Any = _NoProgress()
    complete = False
    try:
        if output.staged:
            stager = EpisodeStager(plan.fields, plan.envs.num_envs, output.spill_dir)
        if progress:
            bar = _progress_bar(plan.target, "step" if plan.collection.steps is not None else "episode", progress)
        record_transitions(CollectionRun(plan.collection, output.sink, stager, bar))
        complete = True
    finally:
        try:
            bar.close()
            if stager is not None:
                stager.close()
        finally:
            # Not cut short by a second Ctrl+C or SIGTERM (the first may be why this runs): a
            # dataset left without its last counts and metadata would not say it is incomplete.
            with HeldInterrupt(every=True):
                try:
                    result = output.sink.finalize(complete=complete)
                finally:
                    # A complete run writes something, except a Minari one whose episodes were all
                    # still open at the end and dropped (finalize raises NoEpisodesError), or one
                    # whose first write failed (its rows were only buffered: the files hold none).
                    sink = output.sink
                    wrote = (sink.kept if isinstance(sink, DatasetSink) else sink.episodes) > 0
                    settle(output.target, output.aside, wrote)
    return result if output.directory is None else load(output.directory)


def _progress_bar(total: int, unit: str, progress: bool | str) -> Any:
    """A tqdm bar on stderr; with ``progress="auto"``, only when stderr is a terminal (tqdm's
    ``disable=None``), else a :class:`_SummaryLine`."""
    bar = progress_bar(
        total=total, unit=unit, file=sys.stderr, dynamic_ncols=True, disable=None if progress == "auto" else False
    )
    return _SummaryLine(total, unit) if bar.disable else bar


class _NoProgress:
    """What the collection loop reports progress to when no bar is shown."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


class _SummaryLine(_NoProgress):
    """The bar's stand-in when stderr is not a terminal: it counts as the bar does and writes
    nothing until the collection ends (or stops), then one line: the count, the time taken,
    the rate and the postfix, as the bar's last frame says them."""

    FORMAT = "{percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"

    def __init__(self, total: int, unit: str) -> None:
        self.total, self.unit = total, unit
        self.n = 0
        self.postfix = ""
        self.started = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = text

    def close(self) -> None:
        from tqdm import tqdm

        elapsed = time.monotonic() - self.started
        line = tqdm.format_meter(
            self.n, self.total, elapsed, unit=self.unit, postfix=self.postfix or None, bar_format=self.FORMAT
        )
        print(line, file=sys.stderr, flush=True)
