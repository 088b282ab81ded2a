"""What ``import vecenv`` offers: a small ``__all__``, the other names still reachable (on first
use, importing nothing before), and the deprecated ones warning with their new home."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import vecenv
from vecenv.parent.records import WorkerStatus

REACHABLE = (
    "AutoresetMode",
    "Dataset",
    "DEFAULT_CLOSE_TIMEOUT",
    "InvalidInfoError",
    "InvalidObservationError",
    "PolicyOutputError",
    "RemoteEnvError",
    "Rollout",
    "SpaceMismatchError",
    "State",
    "spawn_seeds",
)


def test_all_is_small_and_every_name_in_it_resolves() -> None:
    assert sorted(vecenv.__all__) == sorted([*vecenv._EXPORTS, "__version__"])
    assert len(vecenv.__all__) <= 12
    for name in vecenv.__all__:
        assert getattr(vecenv, name) is not None, name


@pytest.mark.parametrize("name", REACHABLE)
def test_names_left_out_of_all_stay_reachable_without_a_warning(name: str) -> None:
    assert name not in vecenv.__all__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = getattr(vecenv, name)
    assert value is not None and name in dir(vecenv)


def test_worker_status_at_top_level_is_deprecated_and_points_to_its_module() -> None:
    assert "WorkerStatus" not in vecenv.__all__
    with pytest.warns(
        DeprecationWarning, match=r"vecenv.WorkerStatus .* removed in 0.4; import it from vecenv.parent.records"
    ):
        assert vecenv.WorkerStatus is WorkerStatus


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'vecenv' has no attribute 'nope'"):
        vecenv.nope  # noqa: B018


def test_import_star_and_import_vecenv_load_nothing_heavy() -> None:
    """``from vecenv import *`` imports the engine but neither Ray, torch nor the dataset CLI."""
    code = (
        "import sys; from vecenv import *; "
        "print(sorted(m for m in ('ray', 'torch', 'vecenv.datasets.cli', 'tqdm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
