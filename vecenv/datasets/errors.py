"""Exceptions of the dataset collector, shared by every module of the package, and how their
messages name the options that fix them (``OptionNames``)."""

from __future__ import annotations

from dataclasses import dataclass

from vecenv.errors import MissingDependencyError, VecEnvError


class PolicyError(VecEnvError, ValueError):
    """The policy returned actions that are not in the environments' action space."""


class UnsupportedSpaceError(VecEnvError, TypeError):
    """A space cannot be stored as fixed-shape arrays (only Box, Discrete, MultiDiscrete,
    MultiBinary and Dict/Tuple of them can)."""


class MinariNotInstalledError(MissingDependencyError):
    """``format="minari"`` or a Minari export was asked for but Minari (with its HDF5
    backend) is not installed."""


class DatasetWriteError(VecEnvError, OSError):
    """A dataset file could not be written (a full disk, a read-only or vanished directory, a
    quota, a file size limit). Its message names the path and the cause; ``errno`` and
    ``filename`` are the underlying ``OSError``'s. What was committed before it stays a valid
    dataset marked ``"complete": false``."""


def write_error(exc: OSError, path: object) -> DatasetWriteError:
    """The :class:`DatasetWriteError` for an ``OSError`` of writing ``path`` (the dataset's
    file or directory): its message names the path and the cause, its ``errno`` and
    ``filename`` are the ``OSError``'s (the file the system named, else ``path``)."""
    cause = exc.strerror or str(exc)
    error = DatasetWriteError(exc.errno, f"cannot write {path}: {cause}")
    error.filename = str(exc.filename if exc.filename is not None else path)
    return error


class NoEpisodesError(VecEnvError, ValueError):
    """A Minari collection with ``open_episodes="drop"`` saw no episode finish within
    ``steps``: every episode was still open at the end and left out, and Minari cannot use a
    dataset without episodes (it cannot sample one), so nothing is written and a dataset that
    ``overwrite`` was to replace stays. ``steps`` is the budget (every one of its transitions
    was in an open episode), ``dropped_episodes`` the open episodes left out;
    ``open_episodes="truncate"`` keeps them."""

    steps: int = 0
    dropped_episodes: int = 0

    def what_was_dropped(self) -> str:
        """The open episodes left out, in words (the library's and the command's messages share it)."""
        return f"the {self.dropped_episodes} open ones ({self.steps} transitions) were dropped"


def no_episodes_error(steps: int, dropped_episodes: int) -> NoEpisodesError:
    """The :class:`NoEpisodesError` of a ``steps`` budget whose ``dropped_episodes`` open
    episodes held every transition; its message names ``open_episodes`` and what keeps them."""
    error = NoEpisodesError()
    error.steps, error.dropped_episodes = steps, dropped_episodes
    error.args = (
        f"open_episodes: expected an episode to finish within steps={steps} with open_episodes='drop' "
        f"(Minari cannot use a dataset without episodes), got none: {error.what_was_dropped()}; "
        "open_episodes='truncate' keeps them; nothing was written",
    )
    return error


class DatasetClosedError(VecEnvError, ValueError):
    """A dataset was used after ``Dataset.close()`` (or after its ``with`` block ended)."""


class OutputExistsError(VecEnvError, FileExistsError):
    """The output path is taken: an existing file, or a directory that is not to be replaced
    (``overwrite`` not given) or is not a dataset, so replacing it could destroy other data."""


class DatasetNotFoundError(VecEnvError, FileNotFoundError):
    """The path given to ``load`` is not a rollout dataset directory (no ``metadata.json``)."""


@dataclass(frozen=True)
class OptionNames:
    """How an error message names the options its caller can change, so that the library and
    the ``vecenv-collect`` command each get messages in their own terms."""

    out: str  # the output path
    overwrite: str  # how to allow replacing an existing output
    dataset_id: str  # the Minari dataset id
    storage: str  # Minari's storage backend


#: Messages for ``collect`` and ``export_minari`` callers (the default).
KEYWORDS = OptionNames(
    out="out", overwrite="overwrite=True / --overwrite", dataset_id="dataset_id", storage="minari_storage"
)
#: Messages for the ``vecenv-collect`` command line.
FLAGS = OptionNames(out="--out", overwrite="--overwrite", dataset_id="--dataset-id", storage="--minari-storage")
