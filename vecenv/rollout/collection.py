"""Running a policy in a vector env and recording its real transitions (``collect``).

The loop turns vector steps into transitions (dropping NEXT_STEP reset steps, taking the
final observation from ``infos["final_obs"]`` under SAME_STEP, resetting finished envs itself
under DISABLED) and hands them to a *sink*: the ``.npy`` dataset writer (``writer.py``) or
a Minari dataset (``minari.py``). Rows go to the sink in vector-step order (``steps=N`` in
our format) or, through an ``EpisodeStager``, one whole episode at a time in completion order
(``episodes=N``, and always for Minari, which stores whole episodes).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from tqdm import tqdm

from vecenv.checks import seed_list
from vecenv.rollout.dataset import load
from vecenv.rollout.errors import PolicyError
from vecenv.rollout.format import FORMAT_NAME, FORMAT_VERSION, dataset_fields, describe_space, space_leaves
from vecenv.rollout.staging import EpisodeStager
from vecenv.rollout.writer import DatasetWriter, check_out, now, versions
from vecenv.seeding import seed_policy_of
from vecenv.spaces import build_tree, leaf_values, named_leaves, to_batch

Policy = Callable[[Any], Any]

FORMATS = ("vecenv", "minari")
OPEN_EPISODES = ("truncate", "drop")


class Sink(Protocol):
    """Where ``collect`` puts transitions (see ``_NativeSink`` and ``minari.MinariSink``)."""

    transitions: int
    episodes: int

    def rows(self, columns: Sequence[np.ndarray], returns: np.ndarray, lengths: np.ndarray) -> None: ...

    def episode(
        self,
        pieces: Iterator[list[np.ndarray]],
        episode_return: float,
        length: int,
        episode_id: int,
        seed: int | None,
        truncate_last: bool,
    ) -> None: ...


def with_last(items: Iterator[Any]) -> Iterator[tuple[Any, bool]]:
    """Pairs ``(item, is_last)`` of a non-empty iterator."""
    previous = next(items)
    for item in items:
        yield previous, False
        previous = item
    yield previous, True


class _NativeSink:
    """The ``.npy`` dataset: rows as they come, or whole episodes through ``DatasetWriter``."""

    def __init__(self, writer: DatasetWriter) -> None:
        self.writer = writer

    @property
    def transitions(self) -> int:
        return self.writer.transitions

    @property
    def episodes(self) -> int:
        return self.writer.episodes

    def rows(self, columns: Sequence[np.ndarray], returns: np.ndarray, lengths: np.ndarray) -> None:
        self.writer.append(columns, returns, lengths)

    def episode(
        self,
        pieces: Iterator[list[np.ndarray]],
        episode_return: float,
        length: int,
        episode_id: int,
        seed: int | None,
        truncate_last: bool,
    ) -> None:
        none = np.zeros(0)
        for piece, last in with_last(pieces):
            if last:
                self.writer.append(piece, np.array([episode_return]), np.array([length]))
            else:
                self.writer.append(piece, none, none)


# Keys that gymnasium.make_vec (and vecenv.make) put in a vector env's spec.kwargs.
_VECTOR_SPEC_KEYS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")


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
    return dataclasses.replace(spec, kwargs={k: v for k, v in kwargs.items() if k not in _VECTOR_SPEC_KEYS})


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
    raise ValueError(f"envs.metadata['autoreset_mode']: expected one of {expected}, got {mode!r}")


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


def one_line(value: Any, limit: int = 300) -> str:
    """``repr`` squeezed to one line and cut to ``limit`` characters, for error messages."""
    text = " ".join(repr(value).split())
    if isinstance(value, np.ndarray):
        text += f" (dtype {value.dtype})"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ActionChecker:
    """Accepts exactly the action batches a vector env accepts, and only those in the space.

    A batch must have the right structure and shape and a dtype that casts ``same_kind`` to
    the space's (float64 for a float32 Box, as numpy policies produce, is fine; floats for a
    Discrete space are not), the rule ``vecenv.spaces.to_batch`` applies for the vector env.
    Its values, cast to the space's dtype, must then lie in the space.
    """

    def __init__(self, single: spaces.Space, num_envs: int, policy: str) -> None:
        self.single = single
        self.num_envs = num_envs
        self.policy = policy
        self.batched = batch_space(single, num_envs)
        self.dtypes = [np.dtype(leaf.dtype) for _, leaf in named_leaves(single)]

    def __call__(self, actions: Any) -> list[np.ndarray]:
        """Check ``actions`` and return its leaves cast to the space's dtypes (the rows
        recorded), or raise PolicyError naming the policy and the first bad env."""
        try:
            batch = to_batch(self.single, actions, self.num_envs, "actions")
        except (TypeError, ValueError) as exc:
            raise PolicyError(
                f"policy {self.policy!r} returned actions the vector env does not accept: {exc} "
                f"(expected an element of {self.batched}, got {one_line(actions)})"
            ) from None
        leaves = [
            np.asarray(leaf).astype(dtype, copy=False)
            for leaf, dtype in zip(leaf_values(self.single, batch), self.dtypes)
        ]
        if self.batched.contains(build_tree(self.single, iter(leaves))):
            return leaves
        for index in range(self.num_envs):
            action = build_tree(self.single, iter([leaf[index] for leaf in leaves]))
            if not self.single.contains(action):
                raise PolicyError(
                    f"policy {self.policy!r} returned an action outside the action space: env {index} "
                    f"got {one_line(action)}, expected an element of {self.single} "
                    f"(whole batch: {one_line(actions)})"
                )
        raise PolicyError(
            f"policy {self.policy!r} returned actions outside the action space: expected an "
            f"element of {self.batched}, got {one_line(actions)}"
        )


def _positive_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected a positive int, got {value!r} of type {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


def collect(
    envs: VectorEnv,
    policy: Policy | str = "random",
    *,
    steps: int | None = None,
    episodes: int | None = None,
    seed: int = 0,
    out: str | os.PathLike[str] | None = None,
    progress: bool = True,
    overwrite: bool = False,
    metadata: Mapping[str, Any] | None = None,
    format: str = "vecenv",
    dataset_id: str | None = None,
    open_episodes: str = "truncate",
    minari_metadata: Mapping[str, Any] | None = None,
) -> Any:
    """Run ``policy`` in ``envs`` and write the transitions to a dataset.

    Args:
        envs: any ``gymnasium.vector.VectorEnv`` (vecenv's, ``SyncVectorEnv``, ...) with
            fixed-shape spaces. Its autoreset mode is read from
            ``envs.metadata["autoreset_mode"]``; under DISABLED the collector resets
            finished envs itself with ``envs.reset(options={"reset_mask": mask})``. The
            envs are reset with ``seed=seed`` first; they are not closed.
        policy: ``"random"`` (actions sampled from the batched action space seeded with
            ``seed``) or a callable taking the batched observation and returning a
            batched action. The vector env's rule applies: the right shape, a dtype that
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
        out: our format: the dataset directory (default ``rollouts/<env id>``, the id
            coming from ``metadata["env_id"]`` or ``envs.spec``). Minari: the datasets
            root the dataset goes under, as ``out/<dataset_id>`` (default Minari's own,
            ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``).
        progress: show a tqdm progress bar on stderr.
        overwrite: replace the output if it exists (only if it is empty or a dataset).
        metadata: extra entries for ``metadata.json`` (e.g. ``env_id``, ``env_kwargs``,
            ``num_workers``, ``command_line``, or ``policy``: the name recorded and used in
            error messages), overriding the inferred ones.
        format: ``"vecenv"`` (the ``.npy`` directory ``load`` reads) or ``"minari"`` (a
            Minari dataset written through Minari's API; needs ``pip install "vecenv[minari]"``).
        dataset_id: Minari only, required: ``NAMESPACE/NAME-vN`` or ``NAME-vN``.
        open_episodes: Minari with ``steps`` only: what happens to the episodes still open
            after the N-th transition. ``"truncate"`` (default) keeps them, their last
            step marked ``truncated`` (the collection budget ended them, as a time limit
            would), so the dataset has exactly N steps; ``"drop"`` leaves them out, so it
            has only finished episodes and fewer steps. Either way the counts are recorded
            in the dataset's ``vecenv`` metadata.
        minari_metadata: Minari only: ``author``, ``author_email``, ``code_permalink``,
            ``description`` and ``algorithm_name`` (default: the policy's name).

    Returns:
        Our format: the written dataset, as ``load(out)`` returns it. Minari: the
        ``minari.MinariDataset``, as ``minari.load_dataset(dataset_id)`` returns it.

    Raises:
        TypeError / ValueError: naming the bad argument, the expected and received value.
        UnsupportedSpaceError: a space without a fixed shape.
        PolicyError: the policy returned actions the vector env does not accept.
        FileExistsError: the output exists and ``overwrite`` is false.
        MinariNotInstalledError: ``format="minari"`` without Minari installed.
        KeyboardInterrupt (and anything else raised while collecting) propagates after
        what was collected is kept: our format as a valid dataset with
        ``"complete": false``, Minari as the episodes finished so far.
    """
    if not isinstance(envs, VectorEnv):
        raise TypeError(f"envs: expected a gymnasium.vector.VectorEnv, got {type(envs).__name__}")
    if (steps is None) == (episodes is None):
        raise ValueError(f"steps, episodes: expected exactly one of them, got steps={steps!r}, episodes={episodes!r}")
    target = _positive_count("steps", steps) if steps is not None else _positive_count("episodes", episodes)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected a non-negative int, got {seed!r} of type {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    policy_error = f"policy: expected 'random' or a callable taking the batched observation, got {policy!r}"
    if isinstance(policy, str) and policy != "random":
        raise ValueError(policy_error)
    if not isinstance(policy, str) and not callable(policy):
        raise TypeError(policy_error)
    if format not in FORMATS:
        raise ValueError(f"format: expected one of {list(FORMATS)}, got {format!r}")
    if open_episodes not in OPEN_EPISODES:
        raise ValueError(f"open_episodes: expected one of {list(OPEN_EPISODES)}, got {open_episodes!r}")
    if format == "vecenv" and (dataset_id is not None or minari_metadata):
        raise ValueError(
            f"dataset_id, minari_metadata: expected None with format='vecenv' (they are for "
            f"format='minari'), got dataset_id={dataset_id!r}, minari_metadata={minari_metadata!r}"
        )
    mode = autoreset_mode(envs)
    single_obs_space, single_act_space = envs.single_observation_space, envs.single_action_space
    fields = dataset_fields(single_obs_space, single_act_space)

    info = dict(metadata or {})
    spec = single_env_spec(envs)
    info.setdefault("env_id", getattr(spec, "id", None))
    info.setdefault("env_kwargs", dict(getattr(spec, "kwargs", None) or {}))
    name = str(info.pop("policy", policy_name(policy)))
    batched_act_space = batch_space(single_act_space, envs.num_envs)
    if isinstance(policy, str):  # "random"
        batched_act_space.seed(int(seed))

        def act(_observation: Any) -> Any:
            return batched_act_space.sample()

    else:
        act = policy  # type: ignore[assignment]

    dataset_metadata: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "complete": False,
        "env_id": info.pop("env_id"),
        "env_kwargs": info.pop("env_kwargs"),
        "num_envs": envs.num_envs,
        "num_workers": getattr(envs, "num_workers", None),
        "autoreset_mode": mode.name.lower(),
        "seed": int(seed),
        "seed_policy": seed_policy_of(envs),
        "policy": name,
        "requested": {"steps": target} if steps is not None else {"episodes": target},
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

    if format == "minari":
        from vecenv.rollout.minari import MinariSink, datasets_root, minari_target

        if dataset_id is None:
            raise ValueError("dataset_id: expected 'NAMESPACE/NAME-vN' with format='minari', got None")
        target_dir = minari_target(dataset_id, out, overwrite)
        # Open episodes spill next to the datasets (not to /tmp, often in memory); made on first use.
        spill_dir = datasets_root(out) / f".vecenv-spill-{uuid.uuid4().hex}"
        sink: Any = MinariSink(
            dataset_id,
            target_dir,
            single_obs_space,
            single_act_space,
            spec,
            dataset_metadata,
            dict(minari_metadata or {}),
            open_episodes if steps else None,
        )
        grouped = True
    else:
        if out is None:
            if dataset_metadata["env_id"] is None:
                raise ValueError(
                    "out: expected a directory path (required when envs has no spec and metadata has no "
                    "'env_id'), got None"
                )
            out = Path("rollouts") / str(dataset_metadata["env_id"]).split(":")[-1]
        out = Path(out)
        check_out(out, overwrite)
        if out.exists():
            shutil.rmtree(out)
        sink = _NativeSink(DatasetWriter(out, fields, dataset_metadata))
        spill_dir = out / ".spill"
        grouped = episodes is not None

    stager = EpisodeStager(fields, envs.num_envs, spill_dir) if grouped else None
    bar = tqdm(
        total=target,
        unit="step" if steps is not None else "episode",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    complete = False
    try:
        _collect_into(
            sink,
            stager,
            bar,
            envs,
            act,
            mode,
            ActionChecker(single_act_space, envs.num_envs, name),
            int(seed),
            steps,
            episodes,
            open_episodes,
        )
        complete = True
    finally:
        try:
            bar.close()
            if stager is not None:
                stager.close()
        finally:
            result = sink.finalize(complete=complete) if format == "minari" else sink.writer.finalize(complete)
    if format == "minari":
        return result
    assert out is not None  # our format always has a directory (set above)
    return load(out)


def _collect_into(
    sink: Any,
    stager: EpisodeStager | None,
    bar: tqdm,
    envs: VectorEnv,
    act: Policy,
    mode: AutoresetMode,
    check_actions: ActionChecker,
    seed: int,
    steps: int | None,
    episodes: int | None,
    open_episodes: str,
) -> None:
    """The collection loop of ``collect``: step until the requested count is written."""
    obs_space = envs.single_observation_space
    obs_leaves = space_leaves(obs_space, "observations")
    num_envs = envs.num_envs
    env_ids = np.arange(num_envs, dtype=np.int64)

    def copy_obs(value: Any) -> list[np.ndarray]:
        # Copies: a vector env may reuse its observation buffers on the next step.
        return [np.array(v, dtype=leaf.dtype) for v, leaf in zip(leaf_values(obs_space, value), obs_leaves)]

    first_seeds = seed_list(seed, num_envs, seed_policy_of(envs))

    def seed_of(episode_id: int) -> int | None:
        # The first episode of env i starts from its seed of reset(seed=seed) (seed + i unless the
        # vector env's seed_policy is "spawn"); later ones continue its RNG.
        return first_seeds[episode_id] if episode_id < num_envs else None

    obs, _ = envs.reset(seed=seed)
    obs_columns = copy_obs(obs)
    episode_ids = np.arange(num_envs, dtype=np.int64)
    next_episode_id = num_envs
    episode_return = np.zeros(num_envs, dtype=np.float64)
    episode_length = np.zeros(num_envs, dtype=np.int64)
    resetting = np.zeros(num_envs, dtype=np.bool_)  # NEXT_STEP: this step only resets the env
    taken = 0  # steps=N: transitions taken so far (written, or open in the stager)
    shown_episodes = 0

    while True:
        actions = act(obs)
        action_columns = check_actions(actions)
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        next_columns = copy_obs(next_obs)
        rewards = np.asarray(rewards, dtype=np.float64)
        terminations = np.asarray(terminations, dtype=np.bool_)
        truncations = np.asarray(truncations, dtype=np.bool_)
        valid = ~resetting
        done = (terminations | truncations) & valid

        recorded_next = next_columns
        if mode is AutoresetMode.SAME_STEP and done.any():
            if "final_obs" not in infos:
                raise RuntimeError("SAME_STEP autoreset: an episode ended but infos has no 'final_obs'")
            recorded_next = [column.copy() for column in next_columns]
            for index in np.flatnonzero(done):
                for column, value in zip(recorded_next, leaf_values(obs_space, infos["final_obs"][index])):
                    column[index] = value

        columns = [
            *obs_columns,
            *recorded_next,
            *action_columns,
            rewards,
            terminations,
            truncations,
            env_ids,
            episode_ids.copy(),
        ]
        episode_return[valid] += rewards[valid]
        episode_length[valid] += 1

        rows = np.flatnonzero(valid)
        if steps is not None:
            rows = rows[: steps - taken]
            taken += len(rows)
            bar.update(len(rows))
        if stager is None:
            ended = rows[done[rows]]
            sink.rows([column[rows] for column in columns], episode_return[ended], episode_length[ended])
            finished = sink.transitions == steps
        else:
            stager.add(columns, rows)
            for index in rows[done[rows]].tolist():
                sink.episode(
                    stager.pieces(index),
                    float(episode_return[index]),
                    int(episode_length[index]),
                    int(episode_ids[index]),
                    seed_of(int(episode_ids[index])),
                    truncate_last=False,
                )
                stager.discard(index)
                if episodes is not None:
                    bar.update(1)
                    if sink.episodes == episodes:
                        break
            finished = sink.episodes == episodes if episodes is not None else taken == steps
            if finished and steps is not None:
                open_envs = [i for i in range(num_envs) if stager.length(i)]
                if open_envs and open_episodes == "truncate":
                    for open_env in open_envs:  # by env index
                        sink.episode(
                            stager.pieces(open_env),
                            float(episode_return[open_env]),
                            int(episode_length[open_env]),
                            int(episode_ids[open_env]),
                            seed_of(int(episode_ids[open_env])),
                            truncate_last=True,
                        )
                        stager.discard(open_env)
                else:
                    sink.dropped(len(open_envs), sum(stager.length(i) for i in open_envs))
        if sink.episodes != shown_episodes:
            shown_episodes = sink.episodes
            bar.set_postfix_str(
                f"episodes={shown_episodes}" if steps is not None else f"transitions={sink.transitions}",
                refresh=False,
            )
        if finished:
            return

        episode_return[done] = 0.0
        episode_length[done] = 0
        if mode is AutoresetMode.NEXT_STEP:
            starting, resetting = resetting, done
            obs, obs_columns = next_obs, next_columns
        elif mode is AutoresetMode.SAME_STEP:
            starting = done
            obs, obs_columns = next_obs, next_columns
        else:  # DISABLED: reset finished envs ourselves; their RNG continues from the seeded reset
            starting = done
            if done.any():
                obs, _ = envs.reset(options={"reset_mask": done.copy()})
                obs_columns = copy_obs(obs)
            else:
                obs, obs_columns = next_obs, next_columns
        started = int(starting.sum())
        if started:
            episode_ids[starting] = np.arange(next_episode_id, next_episode_id + started)
            next_episode_id += started
