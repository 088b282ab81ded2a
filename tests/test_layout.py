"""The package layout holds what docs/architecture.md says: the import graph of ``vecenv`` has no
cycle, between modules or between packages (function-level and ``TYPE_CHECKING`` imports
counted); the worker side imports nothing of the parent side or of an integration; ``import
vecenv`` loads no command line, progress bar, Ray or torch, nor does making and stepping a vector
env (nor any other extra's library); the old ``vecenv.rollout`` path is a
deprecated alias of ``vecenv.datasets`` that gives the very same objects."""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import vecenv

ROOT = Path(vecenv.__file__).parent


def _modules() -> dict[str, Path]:
    """Every module of vecenv by dotted name (a package by its ``__init__``)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The vecenv module that ``import name`` loads last (a name inside a module: that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str) -> Iterator[str]:
    """The vecenv modules ``module`` imports anywhere in its source."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = _owner(name) if name.startswith("vecenv") else None
            if target is not None and target != module:
                yield target


# The top-level package re-exports everything lazily (its ``__getattr__``): not an edge of the graph.
GRAPH = {m: {t for t in _imported(m) if t != "vecenv"} for m in MODULES if m != "vecenv"}


def _package(module: str) -> str:
    """A module's package; a package is its own, and a top-level module of vecenv is its own node."""
    if MODULES[module].name == "__init__.py":
        return module
    parent = module.rpartition(".")[0]
    return module if parent == "vecenv" else parent


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_modules() -> None:
    assert _cycles(GRAPH) == []


def test_no_import_cycle_between_packages() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        for target in targets:
            a, b = _package(module), _package(target)
            if a != b:
                packages.setdefault(a, set()).add(b)
    assert _cycles(packages) == []


@pytest.mark.parametrize("side", ["vecenv.worker", "vecenv.wire"])
def test_the_worker_side_imports_neither_the_parent_nor_an_integration(side: str) -> None:
    forbidden = ("vecenv.parent", "vecenv.transports", "vecenv.integrations", "vecenv.multiagent", "vecenv.datasets")
    offending = {
        (module, target)
        for module, targets in GRAPH.items()
        if module.startswith(side)
        for target in targets
        if target.startswith(forbidden) or target in ("vecenv.policies", "vecenv.sb3", "vecenv.supersuit")
    }
    assert offending == set()


SCRIPTS = ROOT.parent / "scripts"
# Private names read from an object of another library whose name a vecenv module also defines.
FOREIGN_PRIVATE = {("transports/fork_server.py", "_lock")}  # multiprocessing's ForkServer lock


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_definitions(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, module globals and the
    attributes its methods set on ``self`` or ``cls``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {name for name in names if _is_private(name)}


def _private_reads(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, name)`` of each private attribute read from something other than ``self`` or
    ``cls``: ``other._name``, or ``getattr(other, "_name")`` and its kin."""
    for node in ast.walk(tree):
        target: ast.expr | None = None
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            target, name = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            target, name = node.args[0], node.args[1].value
        if target is not None and not (isinstance(target, ast.Name) and target.id in ("self", "cls")):
            yield node.lineno, name


def test_no_module_reads_a_private_name_of_another_vecenv_module() -> None:
    """A script or module that needs another's private field asks for a public one instead
    (``envs.worker_pids``, not ``envs._pool``): a private name may change with its module."""
    trees = {path: ast.parse(path.read_text()) for path in [*MODULES.values(), *SCRIPTS.glob("*.py")]}
    defined = {path: _private_definitions(tree) for path, tree in trees.items()}
    library = set().union(*(defined[path] for path in MODULES.values()))
    offending = [
        f"{path.relative_to(ROOT.parent)}:{line}: {name}"
        for path, tree in trees.items()
        for line, name in _private_reads(tree)
        if name in library
        and name not in defined[path]
        and (path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else None, name) not in FOREIGN_PRIVATE
    ]
    assert offending == []


#: numpy names that numpy 1.24 (setup.cfg's floor) lacks and numpy 2 has (``np.bool``, not
#: ``np.bool_``; the array API aliases): CI's venvs have numpy 2, where they work.
NUMPY_2_ONLY = frozenset(
    "bool long ulong dtypes exceptions unstack astype isdtype cumulative_sum cumulative_prod concat "
    "permute_dims matrix_transpose vecdot vecmat matvec trapezoid pow acos acosh asin asinh atan atan2 "
    "atanh bitwise_left_shift bitwise_right_shift bitwise_invert strings unique_all unique_counts "
    "unique_inverse unique_values".split()
)


def _numpy_2_only_uses(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``np.<name>`` of :data:`NUMPY_2_ONLY`, the ``.mT`` attribute and a ``copy=None`` keyword
    (numpy 1.x reads it as ``copy=False``, numpy 2 as "copy only if needed")."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            numpy = isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy")
            if (numpy and node.attr in NUMPY_2_ONLY) or node.attr == "mT":
                yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.keyword) and node.arg == "copy":
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                yield node.value.lineno, "copy=None"


def test_the_library_uses_no_numpy_2_only_name() -> None:
    """setup.cfg allows numpy 1.24; CI tests numpy 2, where these names exist: one of them in
    vecenv would be an AttributeError (or another copy rule) only for users on numpy 1.x."""
    offending = [
        f"{path.relative_to(ROOT.parent)}:{line}: {name}"
        for path in MODULES.values()
        for line, name in _numpy_2_only_uses(ast.parse(path.read_text()))
    ]
    assert offending == []
    planted = ast.parse("import numpy as np\nx = np.bool(1)\ny = np.asarray(x, copy=None).mT\n")
    assert sorted(_numpy_2_only_uses(planted)) == [(2, "np.bool"), (3, "copy=None"), (3, "np.asarray(x, copy=None).mT")]


@pytest.mark.timeout(60)
def test_import_vecenv_loads_no_cli_progress_bar_ray_or_torch() -> None:
    code = (
        "import sys, vecenv\n"
        "heavy = {'argparse', 'tqdm', 'ray', 'torch', 'vecenv.datasets', 'vecenv.bench', 'vecenv.integrations'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.timeout(90)
def test_making_and_stepping_a_vector_env_loads_no_heavy_library() -> None:
    """``vecenv.make`` and a step load, in the user's process, no integration, no command line
    and none of the libraries an extra brings: a plain user pays for none of them."""
    code = (
        "import sys, vecenv\n"
        "if __name__ == '__main__':\n"
        "    envs = vecenv.make('CartPole-v1', 4, 2)\n"
        "    envs.reset(seed=0)\n"
        "    envs.step(envs.action_space.sample())\n"
        "    envs.close()\n"
        "    heavy = {'torch', 'ray', 'pandas', 'scipy', 'matplotlib', 'stable_baselines3', 'pettingzoo',\n"
        "             'supersuit', 'minari', 'h5py', 'pyarrow', 'imageio', 'pygame', 'tqdm', 'argparse',\n"
        "             'vecenv.datasets', 'vecenv.bench', 'vecenv.integrations'}\n"
        "    print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=80, check=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_the_old_dataset_path_is_a_deprecated_alias_of_the_same_objects() -> None:
    import vecenv.datasets
    import vecenv.datasets.cli
    import vecenv.datasets.policy_specs

    for name in [n for n in list(sys.modules) if n == "vecenv.rollout" or n.startswith("vecenv.rollout.")]:
        del sys.modules[name]  # so that importing it warns again
    with pytest.warns(DeprecationWarning, match=r"vecenv\.rollout is deprecated .* vecenv\.datasets"):
        import vecenv.rollout
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the submodules warn no more than once
        import vecenv.rollout.cli
        from vecenv.rollout.policies import load_policy

    assert vecenv.rollout.cli is vecenv.datasets.cli
    assert load_policy is vecenv.datasets.policy_specs.load_policy
    assert vecenv.rollout.collect is vecenv.datasets.collect
    assert vecenv.rollout.PolicyError is vecenv.datasets.PolicyError
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = vecenv.rollout.no_such_name
