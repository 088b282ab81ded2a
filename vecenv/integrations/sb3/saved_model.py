"""A saved Stable-Baselines3 model as a dataset policy: ``vecenv-collect --policy sb3:PATH.zip``.

The model is loaded on the CPU and acts through its ``predict``; the collector hands it to the
workers as an :class:`~vecenv.policies.SB3Policy` when rollouts run there.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from gymnasium import spaces

from vecenv.errors import PolicySpecError
from vecenv.policies import sb3_is_recurrent, sb3_spaces_mismatch

__all__ = ["SB3_INSTALL_HINT", "SavedModelPolicy", "load_sb3"]

#: Stable-Baselines3 algorithms known by the module of the policy class they save.
_SB3_BY_POLICY_MODULE = {
    "stable_baselines3.dqn.policies": "DQN",
    "stable_baselines3.sac.policies": "SAC",
    "stable_baselines3.td3.policies": "TD3",
}
SB3_INSTALL_HINT = 'pip install stable-baselines3 (or "vecenv[sb3]")'


class SavedModelPolicy:
    """A saved Stable-Baselines3 model as a batched policy: ``predict(obs, deterministic)``.

    SB3's ``predict`` takes a batch of observations and returns actions in the env's action
    space (continuous actions rescaled and clipped), so it plugs straight into ``collect``.

    A recurrent model (sb3-contrib's RecurrentPPO) is refused: its ``predict`` needs the LSTM
    states and episode starts, which a policy called on observations alone does not have, so it
    would act from a fresh LSTM state at every step.

    Raises:
        PolicySpecError: a recurrent model.
    """

    def __init__(self, model: Any, path: str, algorithm: str, deterministic: bool) -> None:
        self.model = model
        self.deterministic = deterministic
        self.name = f"sb3:{path} ({algorithm}{', deterministic' if deterministic else ''})"
        if sb3_is_recurrent(model):
            raise PolicySpecError(
                f"--policy {self.name}: expected a model whose policy acts on observations alone, got a recurrent "
                f"{type(model.policy).__name__}, whose predict needs the LSTM states and episode starts, which "
                "vecenv-collect does not carry (it would act from a fresh LSTM state at every step)"
            )

    def __call__(self, observation: Any) -> Any:
        actions, _ = self.model.predict(observation, deterministic=self.deterministic)
        return actions

    def check_spaces(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        """Raise PolicySpecError if the model's ``predict`` cannot act on the envs' spaces, by the
        rule :class:`~vecenv.policies.SB3Policy` checks them with (the same action space; an
        observation space of the same kind and shape)."""
        mismatch = sb3_spaces_mismatch(
            self.model.observation_space, self.model.action_space, observation_space, action_space
        )
        if mismatch is not None:
            what, theirs, ours = mismatch
            raise PolicySpecError(
                f"--policy {self.name}: the model's {what} space is {theirs}, the environment's is {ours}"
            )


def _sb3_algorithm(path: Path) -> str:
    """The algorithm class name of a saved SB3 model, read from the zip's ``data`` entry."""
    import zipfile  # only sb3: policies read a zip

    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise PolicySpecError(
            f"--policy sb3:{path}: expected a model saved by Stable-Baselines3 (a zip with a 'data' "
            f"entry), got {type(exc).__name__}: {exc}"
        ) from None
    module = str(data.get("policy_class", {}).get("__module__", ""))
    if module in _SB3_BY_POLICY_MODULE:
        return _SB3_BY_POLICY_MODULE[module]
    if module == "stable_baselines3.common.policies":  # the actor-critic family
        return "PPO" if "clip_range" in data else "A2C"
    raise PolicySpecError(
        f"--policy sb3:{path}: cannot tell the algorithm from its policy class {module!r}; "
        "name it: sb3:ALGO:PATH.zip (e.g. sb3:QRDQN:model.zip, from stable_baselines3 or sb3_contrib)"
    )


def _sb3_class(algorithm: str, spec: str) -> Any:
    for package in ("stable_baselines3", "sb3_contrib"):
        try:
            module = importlib.import_module(package)
        except ImportError:
            if package == "stable_baselines3":
                raise PolicySpecError(
                    f"--policy {spec!r}: Stable-Baselines3 is not installed: {SB3_INSTALL_HINT}"
                ) from None
            continue
        if hasattr(module, algorithm):
            return getattr(module, algorithm)
    raise PolicySpecError(f"--policy {spec!r}: no algorithm {algorithm!r} in stable_baselines3 or sb3_contrib")


def load_sb3(spec: str, deterministic: bool = False) -> SavedModelPolicy:
    """Load ``sb3:PATH.zip`` or ``sb3:ALGO:PATH.zip`` on the CPU."""
    rest = spec[len("sb3:") :]
    algorithm, _, maybe_path = rest.partition(":")
    if maybe_path and algorithm.isidentifier() and not Path(rest).exists():
        path = Path(maybe_path)
    else:
        algorithm, path = "", Path(rest)
    if not rest or not path.is_file():
        raise PolicySpecError(
            f"--policy {spec!r}: expected sb3:PATH.zip naming a saved model file, got {str(path)!r}, "
            "which is not a file"
        )
    if importlib.util.find_spec("stable_baselines3") is None:
        raise PolicySpecError(f"--policy {spec!r}: Stable-Baselines3 is not installed: {SB3_INSTALL_HINT}")
    algorithm = algorithm or _sb3_algorithm(path)
    cls = _sb3_class(algorithm, spec)
    try:
        model = cls.load(path, device="cpu")
    except Exception as exc:
        raise PolicySpecError(f"--policy {spec!r}: {algorithm}.load failed: {type(exc).__name__}: {exc}") from None
    return SavedModelPolicy(model, str(path), algorithm, deterministic)
