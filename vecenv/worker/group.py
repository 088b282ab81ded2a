"""The in-process group: a worker's envs, stepped in index order, with Gymnasium's autoreset.

This is the one place where autoreset lives. It runs without any process around it (the unit
tests drive it directly); a worker is this class plus a pipe. Results are written straight into
the group's rows of the :class:`~vecenv.wire.buffers.Buffers`; only non-empty infos are returned,
tagged with the env's index within the group, in the order ``SyncVectorEnv`` adds them.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, iterate

from vecenv.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    InvalidInfoError,
    InvalidObservationError,
    MissingMethodError,
    describe,
)
from vecenv.spaces import batch_of_items, write_batch
from vecenv.wire.buffers import Buffers
from vecenv.wire.protocol import Hello, InfoEntries, MaskedColumn, MaskedKeys

__all__ = [
    "EnvGroup",
    "GroupSource",
    "HostedGroup",
    "VectorGroup",
    "batched_view",
    "captured_final_info",
    "captured_info",
    "close_each",
    "snapshot_info",
]


class HostedGroup(Protocol):
    """What a worker asks of its group: :class:`EnvGroup`, :class:`VectorGroup`, or a group that a
    :class:`GroupSource` made (the copies of a multi-agent env, :mod:`vecenv.multiagent`)."""

    num_envs: int
    #: the local index of the env whose code raised in the last call, or ``None``
    blame: int | None

    def reset(self, seeds: Any, options: Any, mask: Any) -> InfoEntries: ...

    def step(self, actions: Any) -> InfoEntries: ...

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]: ...

    def set_attr(self, name: str, values: Sequence[Any]) -> None: ...

    def render(self, env_ids: Sequence[int] | None = None) -> list[Any]: ...

    def close(self) -> None: ...


@runtime_checkable
class GroupSource(Protocol):
    """What a group builder may return instead of envs: an object that describes its rows itself
    (``hello``) and makes its own group over them (``make_group``). The worker knows no more of
    it, so an integration can host rows of its own (multi-agent copies: one row per agent)
    without the worker importing it."""

    def hello(self) -> Hello: ...

    def make_group(self, buffers: Buffers) -> HostedGroup: ...


class EnvGroup:
    """Several envs that one process steps one after the other.

    Args:
        envs: the envs, in global index order.
        autoreset_mode: Gymnasium's autoreset mode, applied per env exactly as ``SyncVectorEnv``
            applies it.
        buffers: this group's rows of the vector env's arrays.

    Attributes:
        blame: set when a method raises: the local index of the env whose code raised (the
            worker clears it before each command).
    """

    def __init__(self, envs: Sequence[gym.Env], autoreset_mode: AutoresetMode, buffers: Buffers) -> None:
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.autoreset_mode = autoreset_mode
        self.buffers = buffers
        self.blame: int | None = None
        self._write_obs = buffers.observation_writer()
        self._autoreset = [False] * self.num_envs
        self._batched_action_space = batch_space(self.envs[0].action_space, self.num_envs)

    # -- reset and step ----------------------------------------------------------------------

    def reset(self, seeds: Sequence[int | None], options: Any, mask: Sequence[bool] | None) -> InfoEntries:
        """Reset the envs selected by ``mask`` (all when ``None``) with one seed per env;
        ``options`` (``None`` or a mapping) goes to each env as given, as ``SyncVectorEnv`` does."""
        infos: InfoEntries = []
        buffers, write = self.buffers, self._write_obs
        j = 0
        try:
            for j, env in enumerate(self.envs):
                if mask is not None and not mask[j]:
                    continue
                obs, info = _env_result(env.reset(seed=seeds[j], options=options), _RESET_RESULT)
                write(j, obs)
                buffers.rewards[j] = 0.0  # what recv reports for an env just reset, as EnvPool
                buffers.terminations[j] = False
                buffers.truncations[j] = False
                self._autoreset[j] = False
                if info or info.__class__ is not dict:
                    infos.append((j, captured_info(info)))
        except BaseException:
            self.blame = j
            raise
        return infos

    def step(self, actions: Any, active: np.ndarray | None = None) -> InfoEntries:
        """Step every env with its action: ``actions`` is the group's rows of the batch (which
        the group may keep), or a list of one action object per env.

        ``active`` (rollouts under DISABLED): only the envs it marks are stepped; the others
        keep their observation and report reward 0, not terminated, not truncated."""
        # A list holds one action per env, exactly as the caller gave them; else a batch tree.
        action_iter = iter(actions) if isinstance(actions, list) else iterate(self._batched_action_space, actions)
        infos: InfoEntries = []
        write, autoreset = self._write_obs, self._autoreset
        next_step = self.autoreset_mode is AutoresetMode.NEXT_STEP
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        # Rewards and flags are gathered as Python values and written in one go per array: a
        # numpy element assignment per env and per array costs more than the env at CartPole's size.
        rewards: list[Any] = []
        terms: list[Any] = []
        truncs: list[Any] = []
        j = 0
        try:
            for j, (env, action) in enumerate(zip(self.envs, action_iter)):
                reward: Any
                if active is not None and not active[j]:
                    rewards.append(0.0)
                    terms.append(False)
                    truncs.append(False)
                    continue
                if next_step and autoreset[j]:
                    obs, info = _env_result(env.reset(), _RESET_RESULT)
                    reward, terminated, truncated = 0.0, False, False
                else:
                    result: Any = env.step(action)
                    if type(result) is not tuple or len(result) != 5:  # the common case costs one check
                        result = _env_result(result, _STEP_RESULT)
                    obs, reward, terminated, truncated, info = result
                    if same_step and _ended(terminated, truncated):
                        # SyncVectorEnv batches final_info before the reset, which may reuse
                        # and change the dict: take what batching takes, no more.
                        infos.append((j, {"final_obs": obs, "final_info": captured_final_info(info)}))
                        obs, info = _env_result(env.reset(), _RESET_RESULT)
                rewards.append(reward)
                terms.append(terminated)
                truncs.append(truncated)
                write(j, obs)
                if info or info.__class__ is not dict:
                    infos.append((j, captured_info(info)))
        except BaseException:
            self.blame = j
            raise
        self._store(rewards, terms, truncs)
        return infos

    def _store(self, rewards: list[Any], terms: list[Any], truncs: list[Any]) -> None:
        """Write the gathered rewards and flags into the group's rows; the envs that ended
        autoreset next (SyncVectorEnv too updates them only after a step that did not raise).

        A value that cannot be stored is blamed on its env: the rows are then written one by
        one, as SyncVectorEnv writes them, and the first that raises names the env; a note
        on numpy's error (its message names neither) says which value it was."""
        buffers = self.buffers
        n = len(rewards)
        try:
            buffers.rewards[:n] = rewards
            buffers.terminations[:n] = terms
            buffers.truncations[:n] = truncs
        except Exception as first:  # TypeError, ValueError, OverflowError (a reward of 10**400), ...
            columns = (
                ("reward", "a float", buffers.rewards, rewards),
                ("terminated", "a bool", buffers.terminations, terms),
                ("truncated", "a bool", buffers.truncations, truncs),
            )
            for j in range(n):
                for name, expected, column, values in columns:
                    try:
                        column[j] = values[j]
                    except BaseException as exc:
                        self.blame = j
                        if isinstance(exc, Exception):
                            exc.add_note(f"`step` returned the {name} {describe(values[j])}; expected {expected}")
                        raise
            try:
                buffers.rewards[:n] = rewards
                buffers.terminations[:n] = terms
                buffers.truncations[:n] = truncs
            except Exception:
                pass  # the values need their rows written one by one, as they now are
            else:
                # The values fit after all: what raised was no value's but came in between,
                # such as a signal handler's exception in the parent hosting this group.
                raise first
        self._autoreset[:n] = np.logical_or(buffers.terminations[:n], buffers.truncations[:n]).tolist()

    # -- everything else ---------------------------------------------------------------------

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """Call a method (or read an attribute) on every env, as ``SyncVectorEnv.call`` does."""
        results = []
        j = 0
        try:
            for j, env in enumerate(self.envs):  # noqa: B007 - j names the env that raised
                function = env.get_wrapper_attr(name)
                results.append(function(*args, **kwargs) if callable(function) else function)
        except BaseException:
            self.blame = j
            raise
        return results

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set an attribute on every env, one value per env."""
        j = 0
        try:
            for j, (env, value) in enumerate(zip(self.envs, values, strict=True)):  # noqa: B007 - as in call
                env.set_wrapper_attr(name, value)
        except BaseException:
            self.blame = j
            raise

    def render(self, env_ids: Sequence[int] | None = None) -> list[Any]:
        """Render the envs ``env_ids`` (local indices, in that order; ``None``: every env)."""
        if env_ids is None:
            return self.call("render", (), {})
        frames = []
        j = 0
        try:
            for j in env_ids:
                frames.append(self.envs[j].render())
        except BaseException:
            self.blame = j
            raise
        return frames

    def close(self) -> None:
        """Close every env, even when one raises; the first error is re-raised at the end."""
        failed = close_each(self.envs)
        if failed is not None:
            self.blame = failed[0]
            raise failed[1]


@dataclasses.dataclass(frozen=True)
class _EnvResult:
    """What an env method returns: its name and the names of its values, in order."""

    method: str
    values: tuple[str, ...]


_RESET_RESULT = _EnvResult("reset", ("observation", "info"))
_STEP_RESULT = _EnvResult("step", ("observation", "reward", "terminated", "truncated", "info"))


def _env_result(result: Any, form: _EnvResult) -> Sequence[Any]:
    """``result`` (an env's, or a native vector env's) when it holds ``form``'s values (any
    sequence of them, as ``SyncVectorEnv`` unpacks it), else the error naming the method, what
    it must return and what it got.

    Unpacked as it is, a result of another length fails with Python's unpacking error, and an
    observation alone whose array holds two values would pass as ``(observation, info)``,
    failing later as an observation that does not fit; the old Gym API returned both forms.

    Raises:
        ArgumentTypeError: ``result`` is no sequence (an array, ``None``, a string).
        InvalidArgumentError: it holds another number of values.
    """
    n = len(form.values)
    if type(result) is tuple and len(result) == n:
        return result
    sequence = isinstance(result, Sequence) and not isinstance(result, (str, bytes))
    if sequence and len(result) == n:
        return result
    got = f"a {type(result).__name__} of {len(result)} values, {describe(result)}" if sequence else describe(result)
    if sequence and form is _STEP_RESULT and len(result) == 4:
        got += (
            " (the old Gym API's (observation, reward, done, info): return terminated and truncated in place of done)"
        )
    elif not sequence and form is _RESET_RESULT and result is not None:
        got += " (the old Gym API returned the observation alone: return (observation, info))"
    message = f"`{form.method}` must return {n} values ({', '.join(form.values)}), got {got}"
    raise InvalidArgumentError(message) if sequence else ArgumentTypeError(message)


def _ended(terminated: Any, truncated: Any) -> bool:
    """Whether a step under ``SAME_STEP`` ended its episode, as ``SyncVectorEnv`` decides it from
    the flags it stored: flags no bool holds (an array of two) raise numpy's error on storing
    them, with a note naming the flag and its value, rather than Python's on their truth value
    ("The truth value of an array with more than one element is ambiguous")."""
    try:
        return bool(terminated or truncated)
    except ValueError:
        stored = np.zeros(2, dtype=bool)
        for k, (name, value) in enumerate((("terminated", terminated), ("truncated", truncated))):
            try:
                stored[k] = value
            except Exception as exc:
                exc.add_note(f"`step` returned the {name} {describe(value)}; expected a bool")
                raise
        raise


def close_each(envs: Sequence[Any]) -> tuple[int, Exception] | None:
    """Close every env of ``envs``, even when some raise: the first failure, ``(index, error)``."""
    first: tuple[int, Exception] | None = None
    for j, env in enumerate(envs):
        try:
            env.close()
        except Exception as exc:
            first = first or (j, exc)
    return first


class VectorGroup:
    """A native vectorized env (a ``gymnasium.vector.VectorEnv``) serving as one worker's group.

    It steps its whole batch in one call and its results are copied into the group's rows in
    one copy per array. Autoreset is the native env's own, so its mode must equal the vector
    env's (checked in the handshake). Batched infos are split back into per-env entries so the
    parent merges them as it merges any group's.
    """

    def __init__(self, vec: gym.vector.VectorEnv, buffers: Buffers) -> None:
        # Any: call/set_attr are not on the VectorEnv base class, though most subclasses have them.
        self.vec: Any = vec
        self.num_envs = vec.num_envs
        self.buffers = buffers
        self.blame: int | None = None
        #: the info keys that none of the envs carried in the last reset or step (``None``: none)
        self.masked: MaskedKeys | None = None

    def reset(self, seeds: Sequence[int | None], options: Any, mask: Sequence[bool] | None) -> InfoEntries:
        """Reset the native env; consecutive seeds are passed as their first (the int form)."""
        first = seeds[0]
        if all(s is None for s in seeds):
            seed: Any = None
        elif first is not None and list(seeds) == list(range(first, first + len(seeds))):
            seed = first
        else:
            seed = list(seeds)
        if mask is not None:
            options = {**(options or {}), "reset_mask": np.asarray(mask, dtype=np.bool_)}
        obs, info = _env_result(self.vec.reset(seed=seed, options=options), _RESET_RESULT)
        # Every row of the batch is taken, not only the masked ones: a native env that honours
        # the mask returns its other envs' current observations (as SyncVectorEnv does), and one
        # that ignores it (CartPole's) has reset all its envs, which only its batch shows.
        self._store_obs(obs)
        rows = slice(None) if mask is None else np.asarray(mask, dtype=np.bool_)
        self.buffers.rewards[rows] = 0.0
        self.buffers.terminations[rows] = False
        self.buffers.truncations[rows] = False
        entries, self.masked = _split_infos(info, self.num_envs)
        return entries

    def step(self, actions: Any, active: np.ndarray | None = None) -> InfoEntries:
        """Step the whole native batch with the group's rows of ``actions``, or with the batch
        made of a list of one action per env (a native env steps all its envs: ``active`` must
        be ``None``; rollouts under DISABLED are refused for it)."""
        assert active is None, "a native vector env cannot leave some of its envs unstepped"
        if isinstance(actions, list):  # one action per env (they travelled through the pipe)
            actions = batch_of_items(self.vec.single_action_space, actions)
        obs, rewards, terms, truncs, info = _env_result(self.vec.step(actions), _STEP_RESULT)
        b = self.buffers
        rewards, terms, truncs = (
            self._column("rewards", rewards),
            self._column("terminations", terms),
            self._column("truncations", truncs),
        )
        self._store_obs(obs)
        b.rewards[:] = rewards
        b.terminations[:] = terms
        b.truncations[:] = truncs
        entries, self.masked = _split_infos(info, self.num_envs)
        return entries

    def _column(self, name: str, values: Any) -> np.ndarray:
        """The native env's ``rewards``, ``terminations`` or ``truncations`` as an array of one
        number per env, which the group's rows take as a list group's take each env's value
        (rewards as float64, flags as bools). Anything else (a scalar, an array of another
        length or shape, strings, objects, ``None``) raises
        :class:`~vecenv.errors.InvalidArgumentError` instead of being broadcast into the rows."""
        try:
            array = values if isinstance(values, np.ndarray) else np.asarray(values)
        except Exception:  # an object NumPy cannot read: named below as it is
            array = None
        n = self.num_envs
        if array is None or array.shape != (n,) or array.dtype.kind not in "biuf":
            got = (
                describe(values) if array is None else f"{describe(values)} of shape {array.shape}, dtype {array.dtype}"
            )
            raise InvalidArgumentError(
                f"{type(self.vec).__name__}, a native vector env of {n} envs, returned {name} {got}: expected "
                f"an array of {n} numbers of shape ({n},), one per env, as Gymnasium's vector envs return them"
            )
        return array

    def _store_obs(self, obs: Any) -> None:
        """Store the native env's whole batch of observations in the group's rows."""
        b = self.buffers
        if b.fixed_observations:
            write_batch(self.vec.single_observation_space, b.observations, obs, slice(None))
        else:
            try:
                items = list(iterate(self.vec.observation_space, obs))
            except (ValueError, TypeError, KeyError, IndexError) as exc:
                raise InvalidObservationError(
                    f"the batch of observations does not fit {self.vec.observation_space}: {exc}"
                ) from exc
            if len(items) != self.num_envs:
                raise InvalidObservationError(
                    f"the batch of observations does not fit {self.vec.observation_space}: "
                    f"it holds {len(items)} observations for {self.num_envs} envs"
                )
            for j, item in enumerate(items):
                b.observations[j] = item

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The native env's ``call``: one result per env."""
        return self._per_env(f"call({name!r})", self._method("call", name)(name, *args, **kwargs))

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """The native env's ``set_attr``, one value per env."""
        self._method("set_attr", name)(name, list(values))

    def _method(self, method: str, name: str) -> Callable[..., Any]:
        """The native env's ``call`` or ``set_attr``, which ``VectorEnv`` itself does not define
        (``SyncVectorEnv`` does; a native env such as CartPole's may not)."""
        found = getattr(self.vec, method, None)
        if not callable(found):
            raise MissingMethodError(
                f"{type(self.vec).__name__}, a native vector env, has no `{method}` method, so its envs' "
                f"attribute {name!r} cannot be reached ({method} of one value per env)"
            )
        return found

    def render(self, env_ids: Sequence[int] | None = None) -> list[Any]:
        """The native env's frames, one per env (``env_ids``: those envs' frames, in that order;
        the native env renders all of them, as its API has no choice)."""
        frames = self.vec.render()
        every = self._per_env("render()", frames) if frames is not None else [None] * self.num_envs
        return every if env_ids is None else [every[j] for j in env_ids]

    def _per_env(self, what: str, results: Any) -> list[Any]:
        """What the native env's ``what`` returned, as the list of one result per env that the
        parent joins with the other groups' by env. Anything else (a single value, a string, a
        frame, a tuple of another length) raises :class:`~vecenv.errors.InvalidArgumentError`
        instead of being split into items that would be taken for other envs' results."""
        items = None if isinstance(results, (str, bytes, dict)) or not hasattr(results, "__iter__") else list(results)
        if items is None or len(items) != self.num_envs:
            count = "" if items is None else f" ({len(items)} items)"
            raise InvalidArgumentError(
                f"{type(self.vec).__name__}, a native vector env of {self.num_envs} envs, returned "
                f"{describe(results)}{count} from {what}: expected one result per env, {self.num_envs} in a tuple "
                "or list, as Gymnasium's vector envs return them"
            )
        return items

    def close(self) -> None:
        """Close the native env."""
        self.vec.close()


def captured_info(info: Any) -> dict[str, Any]:
    """What ``SyncVectorEnv`` keeps of the info an env just returned: :func:`batched_view`,
    taken at once. The group batches its envs' infos only after the last env has stepped, and
    an env may hand out the same dict at every call (or share one with the other envs): each
    env's values must be those of its own call.

    ``SyncVectorEnv`` batches any info's ``items()``, so a mapping that is not a dict (a
    ``UserDict``, a ``MappingProxyType``) is taken as the dict of its items. An info without
    ``items()`` (``None``, a list) raises :class:`~vecenv.errors.InvalidInfoError`
    (``SyncVectorEnv`` fails on it too)."""
    if isinstance(info, dict):
        return batched_view(info)
    items = getattr(info, "items", None)
    if not callable(items):
        raise InvalidInfoError(f"an env's info must be a dict or another mapping, got {describe(info)}")
    return batched_view(dict(items()))


def captured_final_info(info: Any) -> Any:
    """What ``SyncVectorEnv`` keeps of the info of a step that ended an episode, under
    ``SAME_STEP``, as ``final_info``: a dict is batched key by key (:func:`batched_view`); any
    other value (a ``UserDict``, even ``None``) is kept as it is, as ``SyncVectorEnv`` puts it
    in an object array, and the info the reset returns is the env's info of that step."""
    return batched_view(info) if isinstance(info, dict) else info


def batched_view(info: dict[str, Any]) -> dict[str, Any]:
    """What ``VectorEnv._add_info`` captures of ``info`` when it batches it: nested dicts and
    arrays copied, every other value by reference (deep-copying could fail on locks or handles,
    and Sync shares those objects too)."""
    return {
        key: batched_view(value)
        if isinstance(value, dict)
        else value.copy()
        if isinstance(value, np.ndarray)
        else value
        for key, value in info.items()
    }


#: Values a snapshot keeps as they are: nothing can change them later (a NumPy scalar but
#: ``np.void``, which may be a view of a structured array).
_IMMUTABLE = (int, float, complex, bool, str, bytes, type(None))


def snapshot_info(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` as it is now, for a record kept past later steps (a rollout's infos, pickled
    only after its last step): :func:`batched_view`, and where it holds a list, an object or
    another value the env may change in place at its next step, a pickled copy of it (what
    ``step`` with workers gives: its infos are pickled at once). One that cannot be pickled is
    kept as it is (pickling it with the rollout's reply says why)."""
    view = batched_view(info)
    if _settled(view):
        return view
    try:
        copied: dict[str, Any] = pickle.loads(pickle.dumps(view, pickle.HIGHEST_PROTOCOL))
    except Exception:
        return _snapshot_each(view)  # one value cannot be pickled: copy the others one by one
    return copied


def _snapshot_each(view: dict[str, Any]) -> dict[str, Any]:
    """:func:`snapshot_info` value by value, keeping as it is each one that cannot be pickled."""
    out: dict[str, Any] = {}
    for key, value in view.items():
        if isinstance(value, dict):
            out[key] = _snapshot_each(value)
        elif _settled(value):
            out[key] = value
        else:
            try:
                out[key] = pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
            except Exception:
                out[key] = value
    return out


def _settled(value: Any) -> bool:
    """Whether nothing in ``value`` (from a :func:`batched_view`, its arrays its own) can
    change later: an array of numbers (not of objects, which may be lists the env changes),
    an immutable scalar, or a dict of those."""
    if isinstance(value, dict):
        return all(_settled(item) for item in value.values())
    if isinstance(value, np.ndarray):
        return not value.dtype.hasobject
    return isinstance(value, _IMMUTABLE) or (isinstance(value, np.generic) and not isinstance(value, np.void))


def _split_infos(info: Any, n: int) -> tuple[InfoEntries, MaskedKeys | None]:
    """A native vector env's batched infos (Gymnasium's ``key``/``_key`` layout) back to
    per-env info dicts, which the parent joins with the other groups' as it joins any group's,
    and the keys that no env carries (an all-False mask), which per-env dicts have no place
    for: the parent adds them with their masks (``None`` when there are none).

    Each value must hold one entry per env (an array with ``n`` rows, or a list or tuple of
    ``n``); ``_key`` is the mask of ``key`` when it is ``n`` bools. A value of any other form
    (a scalar, a string, an array of another length) has no place among the envs' rows, so it
    raises :class:`~vecenv.errors.InvalidInfoError` naming the key, instead of being cut to the
    group's envs or split character by character.
    """
    if not isinstance(info, dict):
        raise InvalidInfoError(f"a native vector env's info must be a dict, got {describe(info)}")
    if not info:
        return [], None
    per_env: list[dict[str, Any]] = [{} for _ in range(n)]
    masked = _scatter(info, per_env, "")
    return [(j, d) for j, d in enumerate(per_env) if d], masked


def _per_env(value: Any, n: int) -> bool:
    """Whether ``value`` holds one entry per env: ``n`` rows of an array (NumPy's or another
    library's, a torch tensor say), or a list or tuple of ``n``; never a string or a mapping."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__getitem__"):
        return False
    try:
        return len(value) == n
    except TypeError:  # a 0-d array
        return False


def _env_mask(value: Any, n: int) -> np.ndarray | None:
    """``value`` as the mask of a key (``n`` bools, in an array or a list), else ``None``."""
    if value is None or not _per_env(value, n):
        return None
    try:
        mask = np.asarray(value)
    except Exception:  # an array NumPy cannot read (on a GPU): not a mask, so data
        return None
    return mask if mask.dtype == np.bool_ and mask.shape == (n,) else None


def _is_mask(info: dict[Any, Any], key: Any, value: Any, n: int) -> bool:
    """Whether ``info[key]`` (``value``) is the mask of another key of ``info``."""
    return isinstance(key, str) and key.startswith("_") and key[1:] in info and _env_mask(value, n) is not None


def _rows(value: Any, n: int, key: Any, path: str) -> Any:
    """A value of a native env's info (no dict) as one item per env, each what the env's own
    info would hold; one that is not one value per env raises."""
    if isinstance(value, np.ndarray) and value.dtype == np.bool_ and value.shape == (n,):
        # Gymnasium batches only Python bools into a bool array (np.bool_ goes to an object
        # array), so these were Python bools: give them back as such, or the merge in the
        # parent would batch them as objects.
        return value.tolist()
    if _per_env(value, n):
        return value
    raise InvalidInfoError(
        f"a native vector env's info {path + str(key)!r} is {describe(value)}, not one value per env: "
        f"each group's infos are joined by env, so every value must be an array of {n} rows or a "
        f"list of {n} values (with an optional `_{key}` mask of {n} bools), as Gymnasium batches infos"
    )


def _scatter(info: dict[Any, Any], per_env: list[dict[Any, Any]], path: str) -> MaskedKeys | None:
    """``info``'s values into the envs' dicts ``per_env``, each where its mask (if any) holds
    True; returns the keys that no env carries, with what builds their columns (``None``: none)."""
    n = len(per_env)
    masked: MaskedKeys | None = None
    for key, value in info.items():
        if _is_mask(info, key, value, n):
            continue
        mask = _env_mask(info.get(f"_{key}"), n)
        inner: MaskedKeys | MaskedColumn | None = None
        if isinstance(value, dict):
            values: Any = [{} for _ in per_env]
            inner = _scatter(value, values, f"{path}{key}.")
        else:
            values = _rows(value, n, key, path)
        if mask is None:
            for j, target in enumerate(per_env):
                target[key] = values[j]
        else:
            carried = np.flatnonzero(mask).tolist()
            for j in carried:
                per_env[j][key] = values[j]
            if not carried:  # a whole dict masked out needs every key within it
                inner = _masked_dict(value, n) if isinstance(value, dict) else _masked_column(key, values[0])
        if inner is not None:
            if masked is None:
                masked = {}
            masked[key] = inner
    return masked


def _masked_dict(info: dict[Any, Any], n: int) -> MaskedKeys:
    """Every key of a dict that no env carries, each as :func:`_masked_column` (nested dicts
    too; their values were checked as they were scattered)."""
    return {
        key: _masked_dict(value, n) if isinstance(value, dict) else _masked_column(key, _rows(value, n, key, "")[0])
        for key, value in info.items()
        if not _is_mask(info, key, value, n)
    }


def _masked_column(key: Any, item: Any) -> MaskedColumn:
    """The column ``VectorEnv._add_info`` starts for ``key`` from an env's value ``item``: zeros
    of the type of a Python or NumPy number, zeros of an array's dtype in rows of its shape, and
    for ``final_obs`` and any other object an object column of ``None``."""
    kind = type(item)
    if key == "final_obs":
        return MaskedColumn(None)
    if kind in (int, float, bool) or issubclass(kind, np.number):
        return MaskedColumn(np.dtype(kind))
    if isinstance(item, np.ndarray):
        return MaskedColumn(item.dtype, item.shape)
    return MaskedColumn(None)
