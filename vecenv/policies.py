"""Policies that run inside the workers, for :meth:`~vecenv.GroupVectorEnv.rollout`.

A :class:`WorkerPolicy` is a picklable recipe. Each worker receives it once, builds its own
:class:`PolicyRunner` for its group of envs, and calls it on the group's observation rows at
every step of a rollout; new weights (:meth:`~vecenv.GroupVectorEnv.update_policy_weights`)
reach every copy before the next rollout. The kinds:

* :class:`RandomPolicy` (``"random"``): uniform actions, each env from a generator of its own,
  seeded from the seed its env was last reset with (``reset(seed=s)`` gives env ``i`` seed
  ``s + i``). The data is the same for any number of workers and any rollout length.
* :class:`FunctionPolicy`: any picklable callable ``policy(observations) -> actions`` on a
  batch of rows. Exact whatever the group sizes when it is row-wise (each row's action
  depends only on that row) and deterministic.
* :class:`TorchPolicy`: a CPU ``torch.nn.Module`` whose forward maps a batch of observations to
  a batch of actions; its ``state_dict`` is the weights.
* :class:`SB3Policy`: a Stable-Baselines3 model, acting through its ``predict``; its policy
  network's ``state_dict`` is the weights. It imports nothing of Stable-Baselines3: it uses
  the model it is given (the rest of vecenv's SB3 code is :mod:`vecenv.integrations.sb3`).  Actor-critic models (PPO,
  A2C) also give the ``log_prob`` of each action and the critic's ``value``, and on a Box space
  the ``unclipped_actions`` that log-prob is of.

Callables and modules may return ``(actions, extras)`` (a dict of named per-row arrays, such
as log-probabilities and values), and may be recurrent: one with an ``initial_state(num_envs)``
method is called as ``policy(observations, state) -> (actions, extras, state)`` and the worker
carries each env's state (see :mod:`vecenv.policy_outputs`).

A batched forward is row-wise in exact arithmetic but not always in floating point: matrix
products may take another kernel, with another summation order, for another batch size, so
the last bits of a row's output can depend on how many rows share the call (measured in
``vecenv-bench --suite rollouts``). Stochastic sampling inside a module or a callable draws from
that worker's torch generator, so it depends on how the envs are grouped; sample in your own
row-wise code for data that does not (an SB3 model's copies do: each env samples from its own
stream, :mod:`vecenv.policy_sampling`). A worker
process seeds its global generators (numpy's, ``random``'s, torch's) from its group's first
env's seed for a callable or a module
(:func:`~vecenv.worker.policy.seed_process_generators`), so workers never draw the same numbers.

:func:`as_worker_policy` turns what a caller passes (``"random"``, a module, a model, a
callable) into one of these. Torch and Stable-Baselines3 are imported only when used.
"""

from __future__ import annotations

import dataclasses
import io
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle
import numpy as np
from gymnasium import Space
from gymnasium.spaces import Box, Dict, Tuple
from gymnasium.vector.utils import batch_space

from vecenv.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    MissingDependencyError,
    PolicyOutputError,
    WeightsMismatchError,
    describe,
)
from vecenv.policy_outputs import PolicyOutputs, process_generators_kept, same_sequence
from vecenv.policy_sampling import EnvStreams, reroute_sampling
from vecenv.spaces import build_tree, leaf_layout, tree_leaves
from vecenv.worker.policy import PolicyContext, PolicyRunner, WorkerPolicy, policy_seed

__all__ = [
    "PolicyContext",
    "PolicyRunner",
    "WorkerPolicy",
    "RandomPolicy",
    "RandomActions",
    "FunctionPolicy",
    "TorchPolicy",
    "SB3Policy",
    "as_worker_policy",
    "check_state_dict",
    "policy_seed",
    "sb3_is_recurrent",
    "sb3_spaces_mismatch",
]

# -- random --------------------------------------------------------------------------------

#: At most this many bytes of actions are drawn at once by each env's generator.
_BLOCK_BYTES = 64 * 1024


def _block_steps(space: Space) -> int:
    """Actions each env's generator draws at once: a function of the action space only, so an
    env's stream of actions is one sequence of equal blocks, whatever the rollout length and
    the group it is in. Large blocks keep a big group's refills (a Python call per env) rare."""
    row = sum(int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize for shape, dtype in leaf_layout(space, 1))
    return max(16, min(1024, _BLOCK_BYTES // max(1, row)))


class RandomPolicy(WorkerPolicy):
    """Uniform random actions from every env's own generator (see the module docstring)."""

    name = "random"

    def build(self, context: PolicyContext) -> RandomActions:
        return RandomActions(context)

    def check_weights(self, weights: Any) -> Any:
        return self.weights()  # none: TypeError

    def outputs(self, context: PolicyContext, observations: Any) -> PolicyOutputs:
        return PolicyOutputs()  # actions only, no state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RandomPolicy)

    def __hash__(self) -> int:
        return hash(RandomPolicy)


class RandomActions(PolicyRunner):
    """Per env: the action space batched :func:`_block_steps` times, seeded, sampled a block at
    a time."""

    def __init__(self, context: PolicyContext) -> None:
        n = len(context.env_ids)
        self.space = context.action_space
        self.block_steps = block = _block_steps(context.action_space)
        self.spaces = [batch_space(context.action_space, block) for _ in range(n)]
        for space, seed in zip(self.spaces, context.seeds, strict=True):
            space.seed(policy_seed(seed))
        # One (block, n, ...) array per leaf: column j is env j's block (so that a step's row
        # of actions is contiguous), and how much of each is used.
        layout = leaf_layout(context.action_space, block)
        self.blocks = [np.zeros((block, n, *shape[1:]), dtype) for shape, dtype in layout]
        self.used = np.full(n, block, np.int64)
        self.rows = np.arange(n)
        self.until_refill = 0  # steps before some env's block is used up
        self.aligned = True  # every env at the same place in its block (the common case)

    def reseed(self, local: int, seed: int | None) -> None:
        self.spaces[local].seed(policy_seed(seed))
        self.used[local] = self.block_steps
        self.until_refill = 0

    def skip(self, steps: int) -> None:
        """Draw ``steps`` steps of actions for every env and drop them (as ``act`` would, a
        block at a time): where a copy that took over from another goes on."""
        while steps > 0:
            if self.until_refill == 0 or not self.aligned:
                self.act(None, None)
                steps -= 1
                continue
            taken = min(steps, self.until_refill)
            self.used += taken
            self.until_refill -= taken
            steps -= taken

    def act(self, observations: Any, active: np.ndarray | None) -> Any:
        used, block_steps = self.used, self.block_steps
        if self.until_refill == 0 or active is not None:
            for j in np.flatnonzero(used == block_steps).tolist():
                if active is None or active[j]:
                    for block, leaf in zip(self.blocks, tree_leaves(self.spaces[j].sample()), strict=True):
                        block[:, j] = leaf
                    used[j] = 0
            self.aligned = bool((used == used[0]).all())
            self.until_refill = block_steps - int(used.max())
        if self.aligned:
            k = int(used[0])
            leaves = [block[k] for block in self.blocks]
        else:
            # An env left out (not active) with its block used up gives some row: it is ignored.
            taken = np.where(used < block_steps, used, 0)
            leaves = [block[taken, self.rows] for block in self.blocks]
        if active is None:
            used += 1
            self.until_refill -= 1
        else:
            used += active
            self.aligned = self.aligned and bool(active.all())
        return (
            leaves[0]
            if len(leaves) == 1 and not isinstance(self.space, (Tuple, Dict))
            else build_tree(self.space, iter(leaves))
        )


# -- any callable --------------------------------------------------------------------------


class FunctionPolicy(WorkerPolicy):
    """A picklable callable ``policy(observations) -> actions`` on a batch of rows, or
    ``-> (actions, extras)`` with ``extras`` a dict of named per-row arrays.

    Recurrent when given ``initial_state`` (``initial_state(num_envs) -> state``), or when the
    callable has an ``initial_state`` method: it is then called as ``policy(observations,
    state) -> (actions, extras, state)`` (``extras`` may be ``{}``), the state a tree of arrays
    with one row per env, carried by the worker and reset at episode starts.

    It is sent with cloudpickle, so lambdas and functions defined in ``__main__`` work. Each
    worker gets its own copy: state it keeps (a counter, a generator) is per worker, and so are
    the global generators it may sample from (seeded in each worker process from its group's
    first env's seed).
    """

    def __init__(
        self,
        function: Callable[..., Any],
        name: str | None = None,
        initial_state: Callable[[int], Any] | None = None,
    ) -> None:
        if not callable(function):
            raise ArgumentTypeError(f"`function` must be callable, got {describe(function)}")
        if initial_state is None:
            initial_state = getattr(function, "initial_state", None)
        if initial_state is not None and not callable(initial_state):
            raise ArgumentTypeError(
                f"`initial_state` must be callable (num_envs -> state), got {describe(initial_state)}"
            )
        self.name = name or _qualified_name(function)
        self._function = _pickled((function, initial_state), self.name)

    def build(self, context: PolicyContext) -> PolicyRunner:
        return _Calls(*cloudpickle.loads(self._function))

    def check_weights(self, weights: Any) -> Any:
        return self.weights()  # none: TypeError


class _Calls(PolicyRunner):
    uses_process_generators = True

    def __init__(self, function: Callable[..., Any], initial_state: Callable[[int], Any] | None = None) -> None:
        self.function = function
        self._initial_state = initial_state
        self.recurrent = initial_state is not None

    def act(self, observations: Any, active: np.ndarray | None) -> Any:
        return self.function(observations)

    def initial_state(self, num_envs: int) -> Any:
        assert self._initial_state is not None
        return self._initial_state(num_envs)

    def act_with_state(self, observations: Any, state: Any, active: np.ndarray | None) -> tuple[Any, Any, Any]:
        return recurrent_triple(self.function(observations, state))


def recurrent_triple(output: Any) -> tuple[Any, Any, Any]:
    """A recurrent policy's ``(actions, extras, state)``, checked to be that triple (a tuple, or
    a list as for the pair ``[actions, extras]``)."""
    if not (isinstance(output, (tuple, list)) and len(output) == 3):
        raise PolicyOutputError(
            "a recurrent policy (one with initial_state) returns (actions, extras, state): expected a tuple "
            f"(or list) of 3, received {describe(output)}"
        )
    actions, extras, state = output
    return actions, extras, state


def _qualified_name(value: Any) -> str:
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}:{qualname}" if module else qualname


# -- torch ---------------------------------------------------------------------------------


class TorchPolicy(WorkerPolicy):
    """A CPU ``torch.nn.Module``: ``module(observations)`` maps a batch of observations (a
    tensor, or a dict/tuple of tensors for Dict/Tuple spaces) to a batch of actions, or to
    ``(actions, extras)`` with ``extras`` a dict of per-row tensors. Float observations reach it
    in the dtype of its floating parameters (float64 ones as float32 for a float32 module, as
    CleanRL's ``torch.Tensor(obs)`` and SB3 give them); others as they are. A module with an
    ``initial_state(num_envs)`` method is recurrent: ``module(observations, state)`` returns
    ``(actions, extras, state)``, the state a tree of tensors with one row per env.

    Each worker runs its copy under ``torch.no_grad()``. The module is copied as it is when
    this object is made; :meth:`weights` reads the original's ``state_dict`` again, so training
    the original and calling ``update_policy_weights()`` keeps the copies current.
    """

    def __init__(self, module: Any, name: str | None = None) -> None:
        torch = _import("torch", "TorchPolicy")
        if not isinstance(module, torch.nn.Module):
            raise ArgumentTypeError(f"`module` must be a torch.nn.Module, got {describe(module)}")
        self.name = name or f"torch:{type(module).__qualname__}"
        self._module = module
        self._copy = _pickled(module, self.name)
        self._layout = state_layout(module.state_dict())  # what the copies' modules hold

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "_copy": self._copy}  # the original stays with the caller

    def build(self, context: PolicyContext) -> PolicyRunner:
        return _TorchForward(cloudpickle.loads(self._copy))

    def check_weights(self, weights: Any) -> Any:
        return check_state_dict(weights, getattr(self, "_layout", None), self.name)

    def weights(self) -> Any:
        """The original module's ``state_dict`` as it is now, checked as given weights are (the
        module may have been changed, or moved to a GPU, since its copies were made): on the CPU."""
        original = getattr(self, "_module", None)
        if original is None:
            raise ArgumentTypeError(_copy_has_no_weights(self, "module"))
        return _checked_original(original.state_dict(), self._layout, self, "module", "module")


def _checked_original(
    state: Any, layout: dict[str, tuple[tuple[int, ...], Any]], policy: WorkerPolicy, original: str, passed: str
) -> Any:
    """:func:`check_state_dict` of the original's own ``state_dict``, the error saying where the
    weights came from (``update_policy_weights()`` was given none) and how to send a new copy:
    pass the ``passed`` object to ``rollout`` again (a policy object made before the change
    holds the old copy)."""
    try:
        return check_state_dict(state, layout, policy.name)
    except WeightsMismatchError as exc:
        exc.add_note(
            f"`weights` here are the original {original}'s state_dict() as it is now, which no longer fits the "
            f"copies made from it: pass the {passed} to `rollout` again to send a new copy (a "
            f"{type(policy).__name__} made before the change holds the old copy: make a new one)"
        )
        raise


def _copy_has_no_weights(policy: WorkerPolicy, original: str) -> str:
    """Why ``weights()`` of a copy of ``policy`` (pickled to a worker, or copied) gives nothing:
    only the policy made from the ``original`` module or model holds it."""
    return (
        f"`{type(policy).__name__}.weights()` was called on a copy of policy {policy.name} (a worker's, or one "
        f"made by pickling or copying it), which holds no {original}: the weights are read from the original "
        f"{original}, so call it on the policy made from it, in the process that made it"
    )


def state_layout(state: Any) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Each entry of a torch ``state_dict``: its shape and dtype (``None`` for a non-tensor)."""
    return {
        key: (tuple(value.shape), value.dtype) if hasattr(value, "shape") and hasattr(value, "dtype") else ((), None)
        for key, value in state.items()
    }


def check_state_dict(weights: Any, layout: dict[str, tuple[tuple[int, ...], Any]] | None, name: str) -> Any:
    """``weights`` checked against ``layout`` (:func:`state_layout` of the copies' module): the
    same keys, and for each tensor the same shape and dtype. Returns them detached and on the CPU
    (the copies are CPU modules; a state dict of a module trained on a GPU is moved here).

    Raises:
        WeightsMismatchError: naming every missing and unexpected key (a few of each) or the
            first entry whose shape or dtype differs, with what was expected and received.
    """
    if layout is None:
        raise ArgumentTypeError("the weights are checked against the original, in the process that made this policy")
    if not isinstance(weights, Mapping):
        raise WeightsMismatchError(
            f"`weights` for policy {name} must be a state dict (a mapping of names to tensors), got {describe(weights)}"
        )
    keys = list(weights.keys())
    missing = [k for k in layout if k not in weights]
    unexpected = [k for k in keys if k not in layout]
    if missing or unexpected:

        def few(items: list[Any]) -> str:
            shown = ", ".join(repr(k) for k in items[:5])
            return shown + (f" and {len(items) - 5} more" if len(items) > 5 else "")

        parts = []
        if missing:
            parts.append(f"missing {few(missing)}")
        if unexpected:
            parts.append(f"unexpected {few(unexpected)}")
        raise WeightsMismatchError(
            f"`weights` do not fit policy {name}: {'; '.join(parts)} (it holds {len(layout)} entries: "
            f"{few(list(layout))}). Nothing was sent; the copies keep their weights"
        )
    torch = sys.modules.get("torch")
    checked = {}
    for key, (shape, dtype) in layout.items():
        value = weights[key]
        if dtype is None:  # an entry that is not a tensor (extra state): passed as it is
            checked[key] = value
            continue
        if torch is None or not isinstance(value, torch.Tensor):
            raise WeightsMismatchError(
                f"`weights[{key!r}]` for policy {name} must be a torch.Tensor of shape {shape} and dtype {dtype}, "
                f"got {describe(value)}. Nothing was sent; the copies keep their weights"
            )
        if tuple(value.shape) != shape or value.dtype != dtype:
            raise WeightsMismatchError(
                f"`weights[{key!r}]` for policy {name} must have shape {shape} and dtype {dtype}, got shape "
                f"{tuple(value.shape)} and dtype {value.dtype}. Nothing was sent; the copies keep their weights"
            )
        checked[key] = value.detach().to("cpu", copy=True)  # as they are now, whatever trains on
    return checked


class _TorchForward(PolicyRunner):
    uses_process_generators = True

    def __init__(self, module: Any) -> None:
        import torch

        self.torch = torch
        self.module = module
        self.recurrent = callable(getattr(module, "initial_state", None))
        #: The dtype of the module's floating parameters: float observations (float64 ones, as
        #: MuJoCo's) reach it in that dtype, as CleanRL's ``torch.Tensor(obs)`` and SB3 give them.
        self.float_dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), None)

    def act(self, observations: Any, active: np.ndarray | None) -> Any:
        torch = self.torch
        with torch.no_grad():
            return _to_numpy(self.module(_to_tensor(torch, observations, self.float_dtype)))

    def initial_state(self, num_envs: int) -> Any:
        with self.torch.no_grad():
            return _to_numpy(self.module.initial_state(num_envs))

    def act_with_state(self, observations: Any, state: Any, active: np.ndarray | None) -> tuple[Any, Any, Any]:
        torch = self.torch
        with torch.no_grad():
            output = self.module(_to_tensor(torch, observations, self.float_dtype), _to_tensor(torch, state))
        return _to_numpy(recurrent_triple(output))

    def load_weights(self, weights: Any) -> None:
        self.module.load_state_dict(weights)


def _to_tensor(torch: Any, value: Any, float_dtype: Any = None) -> Any:
    """``value``'s arrays as tensors, in the same tuples (named ones too), lists and dicts (a recurrent module gets
    its state back in the structure it gave it); floating ones in ``float_dtype`` when given."""
    if isinstance(value, dict):
        return {k: _to_tensor(torch, v, float_dtype) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return same_sequence(value, [_to_tensor(torch, v, float_dtype) for v in value])
    tensor = torch.as_tensor(value)
    if float_dtype is not None and tensor.is_floating_point() and tensor.dtype != float_dtype:
        return tensor.to(float_dtype)
    return tensor


def _to_numpy(value: Any) -> Any:
    """``value``'s tensors as numpy arrays, in the same tuples, lists and dicts. A tensor that
    ``numpy()`` refuses (a bfloat16 one, say) is left as it is, for the checks of what it is
    (an extra, the state, the actions) to refuse by name or to convert."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: _to_numpy(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return same_sequence(value, [_to_numpy(v) for v in value])
    if not hasattr(value, "numpy"):
        return value
    try:
        return value.numpy()
    except (TypeError, RuntimeError):
        return value


# -- Stable-Baselines3 ---------------------------------------------------------------------


class SB3Policy(WorkerPolicy):
    """A Stable-Baselines3 model (PPO, A2C, DQN, SAC, TD3, ...), acting through its ``predict``.

    The model travels as the bytes of its ``save`` (the format SB3 itself loads, on the CPU),
    so it needs no env and no pickling of its internals. :meth:`weights` is the state dict of
    the original's policy network, with its ``exploration_rate`` (DQN's) where it has one.

    With ``deterministic=False`` (SB3's default) each env's actions are sampled from a stream
    of its own (DQN's exploration and gSDE's noise matrices too), seeded from the seed its env
    was last reset with, so an env's actions do not depend on the number of workers
    (:mod:`vecenv.policy_sampling`; a distribution of a kind it does not know samples from
    generators of the copy's own: reproducible for one layout of the envs only). Loading a
    copy leaves the process's generators as they were.

    An actor-critic model gives ``log_prob`` and ``value`` beside its actions, and on a Box
    action space ``unclipped_actions``: the sampled action before it is clipped into the Box,
    which ``log_prob`` is of and ``evaluate_actions`` takes back (the actions stay those the
    envs receive).

    ``predict`` is all the copies run, so models it does not act for as they were trained are
    refused: one made for other spaces than the envs' (at the first rollout, :meth:`outputs`),
    one whose env normalises observations with ``VecNormalize`` and a recurrent one (here).

    Raises:
        InvalidArgumentError: a model whose env normalises observations, or a recurrent one.
    """

    def __init__(self, model: Any, deterministic: bool = False, name: str | None = None) -> None:
        if not (hasattr(model, "predict") and hasattr(model, "save") and hasattr(model, "policy")):
            raise ArgumentTypeError(
                f"`model` must be a Stable-Baselines3 model (with predict, save, policy), got {describe(model)}"
            )
        self.deterministic = bool(deterministic)
        kind = type(model).__name__
        self.name = name or f"sb3:{kind}{' (deterministic)' if self.deterministic else ''}"
        if sb3_is_recurrent(model):
            raise InvalidArgumentError(
                f"`model` for SB3Policy: expected a model whose policy acts on observations alone, got a {kind} with "
                f"the recurrent policy {type(model.policy).__name__}, whose predict needs LSTM states and episode "
                "starts, which SB3Policy does not carry. Wrap it in a recurrent policy instead (a callable with "
                "`initial_state`, see vecenv.policies.FunctionPolicy)"
            )
        normalizer = model.get_vec_normalize_env() if callable(getattr(model, "get_vec_normalize_env", None)) else None
        if normalizer is not None and getattr(normalizer, "norm_obs", False):
            # predict does not normalise: the copies would act on observations the model never saw.
            raise InvalidArgumentError(
                f"`model` for SB3Policy: this {kind} was trained on observations normalised by its VecNormalize "
                "(norm_obs=True), which `predict` does not apply, so its copies would act on the envs' raw "
                "observations; expected a model whose env does not normalise observations. Normalise them in the "
                "policy instead (a callable that applies `VecNormalize.normalize_obs` and then `predict`)"
            )
        self._model = model
        self._observation_space: Space = model.observation_space
        self._action_space: Space = model.action_space
        self._class = cloudpickle.dumps(type(model))
        data = io.BytesIO()
        model.save(data)
        self._saved = data.getvalue()
        self._layout = state_layout(model.policy.state_dict())

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_model", None)
        state.pop("_layout", None)  # checked in the parent only
        return state

    def check_weights(self, weights: Any) -> Any:
        return check_state_dict(weights, getattr(self, "_layout", None), self.name)

    def build(self, context: PolicyContext) -> PolicyRunner:
        _import("torch", "SB3Policy")
        with process_generators_kept():  # load seeds them with the model's seed
            model = cloudpickle.loads(self._class).load(io.BytesIO(self._saved), device="cpu")
        return _Predicts(model, self.deterministic, [policy_seed(seed) for seed in context.seeds])

    def outputs(self, context: PolicyContext, observations: Any) -> PolicyOutputs:
        """The model's spaces checked against the envs' first (in the parent, before anything is
        sent), then what it gives beyond actions."""
        mismatch = sb3_spaces_mismatch(
            self._observation_space, self._action_space, context.observation_space, context.action_space
        )
        if mismatch is not None:
            what, theirs, ours = mismatch
            raise InvalidArgumentError(
                f"`rollout`: policy {self.name} was made for the {what} space {theirs}, the envs' {what} space is "
                f"{ours}: expected a model trained on the envs' spaces. Nothing was sent"
            )
        return super().outputs(context, observations)

    def weights(self) -> Any:
        """The original's policy network's state dict, and its DQN-style ``exploration_rate``
        where it has one (``predict`` explores with it, and training changes it)."""
        original = getattr(self, "_model", None)
        if original is None:
            raise ArgumentTypeError(_copy_has_no_weights(self, "model"))
        # Checked and on the CPU, as given weights are: SB3 trains on a GPU where it finds one.
        state = _checked_original(original.policy.state_dict(), self._layout, self, "model's policy network", "model")
        rate = getattr(original, "exploration_rate", None)
        return _ModelWeights(state, None if rate is None else float(rate))


@dataclasses.dataclass(frozen=True)
class _ModelWeights:
    """What :meth:`SB3Policy.weights` sends: the policy network's state dict and the model's
    ``exploration_rate`` (``None``: it has none), so that a copy explores as the trained model does."""

    state_dict: dict[str, Any]
    exploration_rate: float | None


def sb3_is_recurrent(model: Any) -> bool:
    """Whether a Stable-Baselines3 model's policy is recurrent (sb3-contrib's RecurrentPPO):
    its ``predict`` and ``forward`` need the LSTM states and the episode starts, not only the
    observations."""
    return hasattr(getattr(model, "policy", None), "lstm_hidden_state_shape")


def sb3_spaces_mismatch(
    model_observation_space: Space, model_action_space: Space, observation_space: Space, action_space: Space
) -> tuple[str, Space, Space] | None:
    """The first of a model's spaces its ``predict`` cannot act on the envs' with, as
    ``("observation" or "action", the model's, the envs')``; ``None`` when both fit (see
    :func:`_sb3_space_fits`). Both :class:`SB3Policy` and ``vecenv-collect``'s ``sb3:`` policies
    check with it."""
    for what, theirs, ours in (
        ("observation", model_observation_space, observation_space),
        ("action", model_action_space, action_space),
    ):
        if not _sb3_space_fits(theirs, ours, what == "observation"):
            return what, theirs, ours
    return None


def _sb3_space_fits(model: Space, envs: Space, observation: bool) -> bool:
    """Whether a model made for space ``model`` acts on ``envs``' values as it was trained to:
    the same space, Box bounds aside for observations; a channel-last uint8 image is also fit
    for its channel-first transpose, the space SB3 gives a model of such an env (its
    ``VecTransposeImage``; ``predict`` transposes the observations back)."""
    if not observation:
        return bool(model == envs)
    if isinstance(model, Dict):
        return (
            isinstance(envs, Dict)
            and model.keys() == envs.keys()
            and all(_sb3_space_fits(model[key], envs[key], True) for key in model.keys())
        )
    if isinstance(model, Box):
        if not isinstance(envs, Box):
            return False
        if model.shape == envs.shape:
            return True
        channel_first = (envs.shape[-1], *envs.shape[:-1])
        return envs.dtype == np.uint8 and len(envs.shape) == 3 and model.shape == channel_first
    return bool(model == envs)


class _Predicts(PolicyRunner):
    """``model.predict``; stochastic actions come from each env's own stream
    (:mod:`vecenv.policy_sampling`), seeded from the seed its env was last reset with, so that an
    env's actions do not depend on which envs share its batch. A model whose sampling that module
    does not know samples from generator states of this copy's own, swapped in around each call,
    seeded from its group's first env (reproducible for one grouping of the envs only). Either
    way the process's generators (the parent's, for the group it hosts) are left as they were.

    A gSDE model (``use_sde=True``) explores with a noise matrix per env, which SB3 samples
    again at every rollout of its own training; a copy draws each env's from that env's stream
    when it is seeded and when new weights arrive (their ``log_std`` scales it), so that the
    noise follows the seeds and the weights."""

    def __init__(self, model: Any, deterministic: bool, seeds: Sequence[int | None]) -> None:
        import torch

        self.torch = torch
        self.model = model
        self.deterministic = deterministic
        self.streams = EnvStreams(seeds)
        self.sampling = None if deterministic else reroute_sampling(model, self.streams, model.action_space)
        self._seed(seeds[0] if seeds else None)
        self._redraw_noise(None)

    def _seed(self, seed: int | None) -> None:
        """The copy's own generators, for the sampling the per-env streams do not cover."""
        generator = self.torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed % 2**63)
        self.torch_state = generator.get_state()
        self.numpy_state = np.random.RandomState(None if seed is None else seed % 2**32).get_state()
        if hasattr(self.model, "action_space"):
            self.model.action_space.seed(seed)

    def _redraw_noise(self, rows: Sequence[int] | None) -> None:
        """A gSDE model's exploration noise for env ``rows`` (all: ``None``), from their streams."""
        if self.sampling is not None and self.sampling.redraw_noise is not None:
            self.sampling.redraw_noise(rows)

    def _on_own_generators(self, call: Callable[[], Any]) -> Any:
        """``call()`` drawing from this copy's torch and numpy generators; the process's are left
        as they were."""
        torch = self.torch
        torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
        torch.set_rng_state(self.torch_state)
        np.random.set_state(self.numpy_state)
        try:
            return call()
        finally:
            self.torch_state, self.numpy_state = torch.get_rng_state(), np.random.get_state()
            torch.set_rng_state(torch_state)
            np.random.set_state(numpy_state)

    def reseed(self, local: int, seed: int | None) -> None:
        seed = policy_seed(seed)
        self.streams.reseed(local, seed)
        self._redraw_noise([local])
        if local == 0:  # the group's first env seeds this copy's own generators
            self._seed(seed)

    def skip(self, steps: int) -> None:
        """Draw ``steps`` steps of every env's numbers and drop them: where a copy that takes
        over from another (in the collecting process, after rollouts in the workers) goes on."""
        if self.sampling is not None:
            self.sampling.skip(steps)

    def act(self, observations: Any, active: np.ndarray | None) -> Any:
        self.streams.active = active
        if self.deterministic or self.sampling is not None:  # draws nothing from the process's generators
            return self._predict(observations)
        return self._on_own_generators(lambda: self._predict(observations))

    def _predict(self, observations: Any) -> Any:
        """``predict``'s actions; for an actor-critic policy also ``{"log_prob", "value"}`` of
        the same forward (as SB3's own rollouts record them: the log-probability of the action
        before it is clipped into a Box space), and on a Box space that action itself,
        ``"unclipped_actions"``, which a learner's ``evaluate_actions`` takes back."""
        policy = self.model.policy
        if not hasattr(policy, "evaluate_actions"):  # not an ActorCriticPolicy: actions only
            explore = None if self.sampling is None else self.sampling.explore
            if explore is not None:  # epsilon-greedy, each env deciding from its own stream
                return explore(self.model.predict(observations, deterministic=True)[0], self.model.exploration_rate)
            return self.model.predict(observations, deterministic=self.deterministic)[0]
        policy.set_training_mode(False)
        with self.torch.no_grad():
            obs_tensor, _ = policy.obs_to_tensor(observations)
            actions, values, log_prob = policy(obs_tensor, deterministic=self.deterministic)
        space = policy.action_space
        chosen = actions.cpu().numpy().reshape((-1, *space.shape))
        extras = {
            "log_prob": log_prob.cpu().numpy().astype(np.float32, copy=False),
            "value": values.cpu().numpy().reshape(-1).astype(np.float32, copy=False),
        }
        if isinstance(space, Box):  # as predict: unscale a squashed output, else clip
            # SB3's PPO stores this one in its buffer and steps the envs with the clipped one.
            extras["unclipped_actions"] = chosen.astype(np.float32)
            chosen = policy.unscale_action(chosen) if policy.squash_output else np.clip(chosen, space.low, space.high)
        return chosen, extras

    def load_weights(self, weights: Any) -> None:
        if isinstance(weights, _ModelWeights):
            self.model.policy.load_state_dict(weights.state_dict)
            if weights.exploration_rate is not None:
                self.model.exploration_rate = weights.exploration_rate
        else:  # a state dict given to update_policy_weights
            self.model.policy.load_state_dict(weights)
        self._redraw_noise(None)  # scaled by the new log_std


def _pickled(policy: Any, name: str) -> bytes:
    """``policy`` pickled with cloudpickle for the workers' copies. What it cannot pickle (an
    object it captured or a global it uses: a lock, an open file, a CUDA stream) raises
    pickling's own error, with a note naming the policy: the error alone names only the object."""
    try:
        return cloudpickle.dumps(policy)
    except Exception as exc:
        exc.add_note(
            f"raised while pickling the policy {name!r} for the workers: each worker runs a copy of it, so the "
            "policy and everything it refers to (objects it captured, globals it uses) must be picklable"
        )
        raise


# -- what callers pass ---------------------------------------------------------------------


def _import(module: str, what: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise MissingDependencyError(f"{what} needs {module}, which is not installed") from None


def as_worker_policy(policy: Any) -> WorkerPolicy:
    """The :class:`WorkerPolicy` for what a caller passes: a ``WorkerPolicy`` as it is,
    ``"random"``, a ``torch.nn.Module``, a Stable-Baselines3 model, or any other callable.

    Raises:
        TypeError, ValueError: anything else, named.
    """
    if isinstance(policy, WorkerPolicy):
        return policy
    if isinstance(policy, type):
        # A class is callable: it was taken for a function of the observations, and each worker
        # made an instance from its rows (`Agent.__init__() takes 1 positional argument but 2 were given`).
        raise ArgumentTypeError(
            "`policy` must be 'random', a WorkerPolicy, a torch module, an SB3 model or a callable, got the class "
            f"{policy.__qualname__}: pass an instance of it ({policy.__name__}(...))"
        )
    if isinstance(policy, str):
        if policy == "random":
            return RandomPolicy()
        raise InvalidArgumentError(
            f"`policy` must be 'random', a WorkerPolicy, a torch module, an SB3 model or a callable, got {policy!r}"
        )
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(policy, torch.nn.Module):
        return TorchPolicy(policy)
    sb3 = sys.modules.get("stable_baselines3.common.base_class")
    if sb3 is not None and isinstance(policy, sb3.BaseAlgorithm):
        return SB3Policy(policy)
    if callable(policy):
        return FunctionPolicy(policy)
    raise ArgumentTypeError(
        f"`policy` must be 'random', a WorkerPolicy, a torch module, an SB3 model or a callable, got {describe(policy)}"
    )
