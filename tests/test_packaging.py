"""What ``pip install`` gives, and what the sdist holds.

Each extra of setup.cfg installs what its feature imports, checked in the one venv the tests run
in: a fresh interpreter may import only the distributions that the core install and that extra
bring (their declared dependencies, followed through the installed metadata), the modules of
every other installed distribution are missing there, and the extra's feature runs. A module
that an extra's feature needs but that comes only with another extra is always there in a venv
of ``.[test]``, so nothing else would see it; a user of that extra alone gets a
``ModuleNotFoundError`` from deep inside a library.

A feature whose distributions are not installed here (``.[docs]``, ``.[rllib]`` in the main
venv) is not checked: what is not installed cannot be told apart from what an extra forgot.

The sdist holds every file git tracks (MANIFEST.in), so that the tests run from it.
"""

from __future__ import annotations

import configparser
import functools
import importlib.metadata
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent

# What a fresh ``python -m venv`` holds before any install, so never missing.
IN_EVERY_VENV = ("pip", "setuptools", "vecenv")

# The feature each extra is for, as a user of that extra alone runs it (the extra's docs page).
FEATURES = {
    "ray": "import vecenv.integrations.ray.vector_env",
    "rllib": "import vecenv.integrations.rllib\nimport ray.rllib.algorithms.ppo",
    "sb3": "import vecenv.sb3",
    "minari": """
        import tempfile
        import vecenv
        with tempfile.TemporaryDirectory() as root, vecenv.make("CartPole-v1", 2, 1) as envs:
            vecenv.collect(envs, steps=20, out=root + "/d", format="minari", dataset_id="cartpole/random-v0",
                           progress=False)
    """,
    "pettingzoo": "from pettingzoo.utils.env import ParallelEnv\nimport vecenv.multiagent",
    "torchrl": "from torchrl.envs import GymWrapper",
    "train": "import torch\nimport matplotlib.pyplot",
    "bench": "import matplotlib.pyplot\nimport cv2\nimport ale_py",
    # docs/video.md's example: CartPole's frames (pygame) into an mp4 (imageio, ffmpeg).
    "video": """
        import os, tempfile
        import gymnasium as gym
        from vecenv.video import imageio_writer
        env = gym.make("CartPole-v1", render_mode="rgb_array")
        env.reset(seed=0)
        with tempfile.TemporaryDirectory() as root:
            writer = imageio_writer(os.path.join(root, "v.mp4"), 30)
            writer.append(env.render())
            writer.close()
            assert os.path.getsize(os.path.join(root, "v.mp4")) > 0
    """,
    # The step benchmark's supersuit row: SuperSuit's vectorizer over a Gymnasium env.
    "anchors": "from supersuit import concat_vec_envs_v1",
    "docs": "import mkdocs\nimport material\nimport mkdocstrings_handlers.python",
    "test-core": "import pytest\nimport pytest_timeout\nimport xdist",
    "test-rllib": "import ray.rllib.algorithms.ppo\nimport torch\nimport pytest_timeout\nimport xdist",
    "test": "import pytest_timeout\nimport xdist\nimport stable_baselines3\nimport minari\nimport ray\nimport torchrl",
}

# The child: the missing modules' finder first, then the feature. A module missing because it is
# not installed here at all (not one the finder hides) skips instead of failing.
CHILD = """
import importlib.abc, importlib.machinery, importlib.util, os, site, sys
HIDDEN = frozenset({hidden!r})
SITE = frozenset(os.path.realpath(p) for p in site.getsitepackages())

def installed_apart(top):
    # Where the path finder finds it is a site-packages folder itself: the hidden distribution's
    # copy, not one vendored inside a package of this extra (Ray's colorama, in ray/thirdparty_files).
    spec = importlib.machinery.PathFinder.find_spec(top)
    if spec is None or not spec.origin or not os.path.isabs(spec.origin):
        return True
    base = os.path.dirname(spec.origin)
    if spec.submodule_search_locations:
        base = os.path.dirname(base)
    return os.path.realpath(base) in SITE

class NotInThisExtra(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in HIDDEN and installed_apart(top):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInThisExtra())
find_spec = importlib.util.find_spec  # asked of a missing module, it answers None

def find_spec_of_this_extra(name, package=None):
    top = name.partition(".")[0]
    return None if top in HIDDEN and installed_apart(top) else find_spec(name, package)

importlib.util.find_spec = find_spec_of_this_extra
try:
{feature}
except ImportError as exc:  # vecenv's MissingDependencyError too: the missing module is its cause
    missing = exc
    while missing is not None and not isinstance(missing, ModuleNotFoundError):
        missing = missing.__cause__ or missing.__context__
    if missing is None or (missing.name or "").partition(".")[0] in HIDDEN:
        raise
    print("not installed here:", missing.name)
"""


def _extras() -> tuple[list[str], dict[str, list[str]]]:
    """setup.cfg's install_requires and each extra's requirements, one string each."""
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")

    def lines(value: str) -> list[str]:
        return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]

    core = lines(config["options"]["install_requires"])
    return core, {name: lines(value) for name, value in config["options.extras_require"].items()}


CORE, EXTRAS = _extras()


def _walk(requirements: list[str]) -> tuple[set[str], set[str]]:
    """What ``pip install`` of ``requirements`` brings, as ``(installed here, missing here)``
    distribution names: each requirement whose marker holds here, then the requirements it
    declares, for the extras named."""
    environment = default_environment()
    brought: set[tuple[str, str]] = set()
    missing: set[str] = set()
    todo = [(Requirement(line), "") for line in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({**environment, "extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        try:
            declared = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            missing.add(name)  # not installed here, so not importable here either
            continue
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) not in brought:
                brought.add((name, wanted))
                todo.extend((Requirement(line), wanted) for line in declared)
    return {name for name, _ in brought}, missing


def _installed_closure(requirements: list[str]) -> set[str]:
    """The installed distributions that ``pip install`` of ``requirements`` brings."""
    return _walk(requirements)[0]


@functools.cache
def _top_level_modules() -> dict[str, list[str]]:
    """Top-level module -> the distributions that install it, as a fresh interpreter sees them:
    ``import ray`` puts Ray's vendored packages (psutil) on this process's ``sys.path``."""
    code = "import importlib.metadata, json; print(json.dumps(importlib.metadata.packages_distributions()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO, check=True)
    modules: dict[str, list[str]] = json.loads(out.stdout)
    return modules


def _hidden_modules(allowed: set[str]) -> set[str]:
    """The top-level modules of the installed distributions outside ``allowed``."""
    allowed = allowed | {canonicalize_name(name) for name in IN_EVERY_VENV}
    return {
        module
        for module, distributions in _top_level_modules().items()
        if not any(canonicalize_name(d) in allowed for d in distributions)
    }


def test_every_extra_has_a_feature_here() -> None:
    assert sorted(FEATURES) == sorted(EXTRAS)


def test_the_closure_follows_declared_dependencies_and_their_extras() -> None:
    """The walk the test below relies on: minari[hdf5] brings h5py, minari alone does not."""
    if "minari" not in _installed_closure(["minari"]):
        pytest.skip("minari is not installed here")
    assert "h5py" not in _installed_closure(["minari"])
    assert {"minari", "h5py", "numpy"} <= _installed_closure(["minari[hdf5]"])


def _installed_here(extra: str) -> bool:
    """Whether every distribution ``pip install`` of ``extra`` brings is installed in this venv."""
    return not _walk(EXTRAS[extra])[1]


# The extras this venv has whole (a venv of .[test] has all but .[docs] and .[rllib], which CI
# checks in venvs of their own): in part, a missing module could not be told from one forgotten.
INSTALLED_HERE = [extra for extra in sorted(FEATURES) if _installed_here(extra)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("extra", INSTALLED_HERE)
def test_an_extra_alone_runs_its_feature(extra: str) -> None:
    # An extra installed in part runs, and skips in the child only if its feature needs a
    # module that is not installed at all.
    hidden = _hidden_modules(_installed_closure(CORE + EXTRAS[extra]))
    feature = textwrap.indent(textwrap.dedent(FEATURES[extra]).strip(), "    ")
    child = CHILD.format(hidden=sorted(hidden), feature=feature)
    out = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=200, cwd=REPO, check=False
    )
    assert out.returncode == 0, f"the {extra!r} extra alone: {out.stderr[-3000:]}"
    if out.stdout.startswith("not installed here:"):
        pytest.skip(f"{extra}: {out.stdout.strip()}")


@pytest.mark.timeout(120)
def test_the_sdist_holds_every_file_git_tracks(tmp_path: Path) -> None:
    """setuptools lists the sdist's files in SOURCES.txt (``egg_info``, as ``sdist`` runs it)."""
    try:
        tracked = subprocess.run(
            ["git", "ls-files"], capture_output=True, text=True, timeout=60, cwd=REPO, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an unpacked sdist, say)")
    subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)],
        capture_output=True,
        timeout=100,
        cwd=REPO,
        check=True,
    )
    in_sdist = set((tmp_path / "vecenv.egg-info" / "SOURCES.txt").read_text().split())
    assert sorted(name for name in tracked if (REPO / name).exists() and name not in in_sdist) == []


def test_the_version_is_the_changelogs_newest_release_or_a_dev_release_before_it() -> None:
    """Datasets record ``vecenv.__version__``: while CHANGELOG's newest section is unreleased,
    the version says so (``X.Y.Z.devN``), not the release before it, whose results differ."""
    import vecenv

    newest = re.search(r"^## \[([^\]]+)\] - (.+)$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert newest is not None, "CHANGELOG.md has no release section"
    release, date = newest.groups()
    if date.strip() == "Unreleased":
        assert re.fullmatch(rf"{re.escape(release)}\.dev\d+", vecenv.__version__), (vecenv.__version__, release)
    else:
        assert vecenv.__version__ == release, (vecenv.__version__, release)
