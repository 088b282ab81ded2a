"""The Python examples of README.md and of every page under docs/ run as written.

Every fenced ```python block runs as a script of its own, in a fresh interpreter (so an example
that is safe under ``spawn`` and ``forkserver`` stays so), in a temporary directory, with a
timeout. It fails the test if it exits non-zero, times out or prints a traceback.

A block that cannot run here is marked by an HTML comment (Markdown shows nothing of it) on the
line just before its fence:

    <!-- docs-test: skip REASON -->              never run here; the reason says why (a cluster,
                                                 a GPU, a service)
    <!-- docs-test: tested-by tests/FILE.py -->  run by that test instead, at a size that fits
                                                 CI or with checks of its output; FILE must name
                                                 the page it reads

Any other ``docs-test:`` comment, or one that does not sit just before a python fence, fails
``test_markers_are_well_formed``, so a typo cannot skip a block unnoticed.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<kind>\S+)\s*(?P<arg>.*?)\s*-->\s*$")
ANY_MARKER = re.compile(r"docs-test:")
KINDS = ("skip", "tested-by")
EXAMPLE_TIMEOUT_S = 240  # generous: only a hang should reach it, also on a loaded 2-core host


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced python block: where it is, its code, and the marker just before it."""

    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    marker: tuple[str, str] | None  # (kind, argument)

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def python_blocks(page: Path) -> list[Block]:
    """The page's ```python blocks, each with the docs-test marker on the line above, if any."""
    lines = page.read_text().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, f"{page.relative_to(REPO)}:{i + 1}: a python block is never closed"
            match = MARKER.match(lines[start - 1]) if start > 0 else None
            marker = (match["kind"], match["arg"]) if match else None
            blocks.append(Block(page, start + 1, "\n".join(lines[start + 1 : end]) + "\n", marker))
            i = end
        i += 1
    return blocks


BLOCKS = [block for page in PAGES for block in python_blocks(page)]
RUNNABLE = [block for block in BLOCKS if block.marker is None]


def test_the_examples_are_found() -> None:
    """The parser sees the examples (so a change to it cannot pass by running none)."""
    readme = [b for b in RUNNABLE if b.page.name == "README.md"]
    assert len(readme) >= 2, "README's quick start examples are not found"
    assert len(RUNNABLE) >= 10, [b.name for b in RUNNABLE]
    assert all(b.code.strip() for b in BLOCKS), [b.name for b in BLOCKS if not b.code.strip()]


FENCE = re.compile(r"^\s*(?P<fence>```+|~~~+)\s*(?P<info>.*?)\s*$")
CHECKED_LANGUAGES = ("python", "sh", "bash", "text")  # run; commands parsed (two); only shown


def test_fences_name_a_checked_language() -> None:
    """Every fenced block opens with ```python, ```sh, ```bash or ```text, exactly (at the start
    of its line, nothing after it), as the parsers above look for them: an example opened as
    ```py, ```python3, ```pycon or ```console, indented, or with no language, would be neither
    run nor parsed, and its breakage would go unnoticed."""
    problems = []
    for page in PAGES:
        opened = None  # the fence that opened the block we are in, if any
        for number, line in enumerate(page.read_text().splitlines(), 1):
            match = FENCE.match(line)
            if match is None:
                continue
            if opened is None:
                opened = match["fence"]
                if line not in [f"```{language}" for language in CHECKED_LANGUAGES]:
                    where = f"{page.relative_to(REPO)}:{number}"
                    problems.append(f"{where}: expected a fence of {CHECKED_LANGUAGES}, got {line!r}")
            elif match["fence"] == opened and not match["info"]:
                opened = None
        if opened is not None:
            problems.append(f"{page.relative_to(REPO)}: a fenced block is never closed")
    assert not problems, "\n".join(problems)


def test_markers_are_well_formed() -> None:
    """Every docs-test comment sits just before a python fence, with a known kind and its
    argument: a reason to skip, or a test file that exists and names the page."""
    problems = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if not ANY_MARKER.search(line):
                continue
            where = f"{page.relative_to(REPO)}:{number}"
            match = MARKER.match(line)
            if match is None or match["kind"] not in KINDS:
                problems.append(f"{where}: expected '<!-- docs-test: skip|tested-by ... -->', got {line!r}")
                continue
            if number == len(lines) or lines[number].strip() != "```python":
                problems.append(f"{where}: a docs-test marker must be the line just before a ```python fence")
            if not match["arg"]:
                needs = "a reason" if match["kind"] == "skip" else "a test file"
                problems.append(f"{where}: {match['kind']} needs {needs}")
            elif match["kind"] == "tested-by":
                test_file = REPO / match["arg"]
                if not test_file.is_file():
                    problems.append(f"{where}: tested-by {match['arg']}: no such file")
                elif page.name not in test_file.read_text():
                    problems.append(f"{where}: tested-by {match['arg']}, which never names {page.name}")
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(EXAMPLE_TIMEOUT_S + 20)
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_example_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block.code)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "MINARI_DATASETS_PATH": str(tmp_path / "minari"),  # never the user's ~/.minari
        "MPLBACKEND": "Agg",
    }
    proc = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, f"{block.name} exited with {proc.returncode}:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, f"{block.name} printed a traceback:\n{proc.stderr}"


WORK_ITEM = re.compile(r"\b(issues?|work items?|tickets?|tasks?)\s+#?\d+", re.I)


def test_no_work_item_numbers() -> None:
    """User-facing text names what a thing is, never the tracker entry that asked for it."""
    found = [
        f"{page.relative_to(REPO)}:{number}: {line.strip()}"
        for page in PAGES
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if WORK_ITEM.search(line)
    ]
    assert not found, found


# The commands of the pages: what a reader copies into a shell. Not run here (they take minutes);
# what they name must exist: the scripts, and every option in the --help of its command.

PROGRAMS = re.compile(r"^(vecenv-bench|vecenv-collect|scripts/[\w-]+\.(?:py|sh))$")
FORMER = "former command"  # a record names the script a suite replaced: "the suite's former command"


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of a page: its program, its arguments, where it is and its paragraph."""

    page: Path
    line: int
    program: str
    args: tuple[str, ...]
    paragraph: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}: {' '.join([self.program, *self.args])}"


def _commands_in(page: Path, text: str, line: int, paragraph: str) -> list[Command]:
    found = []
    for part in re.split(r"&&|;|\|", text):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:  # prose in backticks, not a command
            continue
        for i, word in enumerate(words):
            if PROGRAMS.match(word):
                found.append(Command(page, line, word, tuple(words[i + 1 :]), paragraph))
                break
    return found


def page_commands(page: Path) -> list[Command]:
    """The commands of ``page``: each line of a ```sh block (``\\`` continuations joined), each
    line indented as code, and each inline code span (across line breaks); split at ``&&``, ``;``
    and ``|``."""
    text = page.read_text()
    commands = []
    for fence in re.finditer(r"^```(?:sh|bash)\n(.*?)^```", text, re.S | re.M):
        first = text[: fence.start()].count("\n") + 2
        joined = ""  # a command continued over lines ending in a backslash
        for number, line in enumerate(fence.group(1).splitlines()):
            joined += line.removesuffix("\\") + " "
            if not line.endswith("\\"):
                commands += _commands_in(page, joined, first + number, "")
                joined = ""
    prose = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    for number, line in enumerate(prose.splitlines(), 1):
        if line.startswith("    "):
            commands += _commands_in(page, line, number, "")
    for span in re.finditer(r"`([^`]+)`", prose):
        start = prose.rfind("\n\n", 0, span.start())
        end = prose.find("\n\n", span.end())
        paragraph = " ".join(prose[start : end if end >= 0 else None].split())
        number = prose[: span.start()].count("\n") + 1
        commands += _commands_in(page, " ".join(span.group(1).split()), number, paragraph)
    return commands


COMMANDS = [command for page in PAGES for command in page_commands(page)]


def _named(option: str, help_text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text) is not None


def _unknown_options(command: Command, help_text: str) -> list[str]:
    options = [arg.split("=", 1)[0] for arg in command.args if arg.startswith("--")]
    return [f"{command.name}: {option} is not in its --help" for option in options if not _named(option, help_text)]


def test_the_commands_are_found() -> None:
    """The parser sees the commands of README and of the benchmarks page."""
    programs = {c.program for c in COMMANDS}
    assert {"vecenv-bench", "vecenv-collect", "scripts/train_ppo.py"} <= programs, programs
    assert len(COMMANDS) >= 40, [c.name for c in COMMANDS]


def test_the_scripts_named_exist() -> None:
    """Every ``scripts/...`` a command names is in the repository, unless the paragraph records a
    run made with a script that a suite has since replaced (it says "former command")."""
    missing = [
        c.name
        for c in COMMANDS
        if c.program.startswith("scripts/") and not (REPO / c.program).is_file() and FORMER not in c.paragraph
    ]
    assert not missing, "\n".join(missing)


def test_vecenv_bench_commands_parse() -> None:
    """Every ``vecenv-bench`` command of the pages parses, its options are in its suite's --help,
    and the workloads, runners and rows it names are among those that --help lists."""
    from vecenv.bench import cli

    problems = []
    for command in (c for c in COMMANDS if c.program == "vecenv-bench"):
        args = [a for a in command.args if a != "--help"]
        if "NAME" in args:  # `vecenv-bench --suite NAME --help`: the placeholder of any suite
            continue
        try:
            parsed = cli.parse_args(args)
        except SystemExit:
            problems.append(f"{command.name}: does not parse (see its error above)")
            continue
        help_text = cli.build_parser(parsed.suite).format_help()
        problems += _unknown_options(command, help_text)
        for option in ("workloads", "runners", "rows"):
            values = getattr(parsed, option, None) or []  # parsed into a list, or the text as given
            for value in values.split(",") if isinstance(values, str) else values:
                if value and not _named(str(value), help_text):
                    problems.append(f"{command.name}: --{option} {value} is not in its --help")
    assert not problems, "\n".join(problems)


def test_vecenv_collect_commands_parse() -> None:
    """Every ``vecenv-collect`` (and ``vecenv-collect export``) command of the pages parses, with
    options its --help lists."""
    from vecenv.datasets.cli_arguments import build_export_parser, build_parser

    problems = []
    for command in (c for c in COMMANDS if c.program == "vecenv-collect"):
        exporting = command.args[:1] == ("export",)
        parser = build_export_parser() if exporting else build_parser()
        try:
            parser.parse_args(list(command.args[1:] if exporting else command.args))
        except SystemExit:
            problems.append(f"{command.name}: does not parse (see its error above)")
            continue
        problems += _unknown_options(command, parser.format_help())
    assert not problems, "\n".join(problems)


SCRIPT_COMMANDS = sorted({c.program for c in COMMANDS if c.program.endswith(".py") and (REPO / c.program).is_file()})


@pytest.mark.timeout(150)
@pytest.mark.parametrize("script", SCRIPT_COMMANDS)
def test_script_options_exist(script: str, tmp_path: Path) -> None:
    """Every option the pages give ``scripts/NAME.py`` is one its --help lists."""
    proc = subprocess.run(
        [sys.executable, str(REPO / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"},
    )
    assert proc.returncode == 0, proc.stderr
    problems = [p for c in COMMANDS if c.program == script for p in _unknown_options(c, proc.stdout)]
    assert not problems, "\n".join(problems)


NAMES = re.compile(r"(?<![\w./-])vecenv(?:\.\w+)+")
RESOLVE = """
import importlib, sys
missing = []
for name in sys.argv[1:]:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):  # the longest module prefix, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ModuleNotFoundError:
            continue
    try:
        for attr in parts[i:]:
            obj = getattr(obj, attr)
    except AttributeError:
        missing.append(name)
print("\\n".join(missing))
"""


@pytest.mark.timeout(200)
def test_the_vecenv_names_in_prose_exist(tmp_path: Path) -> None:
    """Every ``vecenv.<name>`` the pages' prose puts in code (a module, a class, a function, an
    error) imports or is an attribute of what does."""
    names = {}
    for page in PAGES:
        prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
        for span in re.findall(r"`[^`]+`", prose):
            for name in NAMES.findall(span):
                names.setdefault(name, page.relative_to(REPO))
    assert len(names) >= 20, names
    missing = [f"{names[name]}: {name}" for name in _unresolved(names, tmp_path, timeout=180)]
    assert not missing, "\n".join(missing)


def _unresolved(names: Iterable[str], cwd: Path, timeout: float) -> list[str]:
    """The dotted ``names`` that :data:`RESOLVE` cannot find, looked up in a fresh interpreter
    (importing them here would load modules for the rest of the session)."""
    proc = subprocess.run(
        [sys.executable, "-c", RESOLVE, *sorted(names)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_the_api_reference_shows_the_rollout_methods() -> None:
    """``GroupVectorEnv`` gets ``rollout`` and the rest of its rollout API from a mixin, whose
    members mkdocstrings leaves out unless they are named: each public one is named under
    ``GroupVectorEnv``'s ``inherited_members`` on the API reference page."""
    from vecenv.parent.rollouts import RolloutMethods

    page = (REPO / "docs" / "api" / "vector-envs.md").read_text()
    block = page.split("::: vecenv.GroupVectorEnv\n", 1)[1].split(":::", 1)[0]
    named = set(re.findall(r"^\s+- (\w+)$", block, re.M))
    public = {name for name in vars(RolloutMethods) if not name.startswith("_")}
    assert public, "RolloutMethods has no public members: the test no longer sees them"
    assert public <= named, f"not in the API reference: {sorted(public - named)}"


def _api_entries() -> list[tuple[str, str, list[str]]]:
    """Each ``::: NAME`` of the API pages, with the member names its options list (``members:``
    and ``inherited_members:``, inline ``[a, b]`` or one ``- name`` a line)."""
    entries = []
    for page in sorted((REPO / "docs" / "api").glob("*.md")):
        for match in re.finditer(r"^::: (\S+)\n((?:    .*\n)*)", page.read_text(), re.M):
            names: list[str] = []
            for option in re.finditer(r"^ +(?:inherited_)?members: *(\[.*\])?\n((?: +- \w+\n)*)", match[2], re.M):
                names += re.findall(r"\w+", option[1] or "") + re.findall(r"- (\w+)", option[2])
            entries.append((page.name, match[1], names))
    return entries


@pytest.mark.timeout(120)
def test_the_api_members_named_are_there_to_document(tmp_path: Path) -> None:
    """Every member an API page names is an attribute of its class or module itself, where
    mkdocstrings finds it: an instance attribute first set in a method (``self.x = ...``) would
    be named and render nothing."""
    entries = [(page, name, members) for page, name, members in _api_entries() if members]
    assert any("start_method" in members for _, _, members in entries), entries
    # NAME.member resolves as mkdocstrings looks it up: the module, then attributes of it.
    named = {f"{name}.{member}": page for page, name, members in entries for member in members}
    missing = [f"{named[name]}: {name}" for name in _unresolved(named, tmp_path, timeout=100)]
    assert not missing, "named on an API page, not found where mkdocstrings looks:\n" + "\n".join(missing)


def test_every_member_of_state_says_what_may_be_called_in_it() -> None:
    """``vecenv.State`` is on the API reference: mkdocstrings renders a member only with the
    docstring placed after it, so each member has one."""
    from vecenv import State

    tree = ast.parse((REPO / "vecenv" / "parent" / "state.py").read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "State").body
    documented = {
        statement.targets[0].id
        for statement, after in zip(body, body[1:])
        if isinstance(statement, ast.Assign)
        and isinstance(statement.targets[0], ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    }
    assert set(State.__members__) - documented == set()


def test_every_option_of_the_bench_suites_is_on_a_page() -> None:
    """Each option a suite's ``vecenv-bench --suite NAME --help`` lists is named on a page,
    which says what it sets."""
    from vecenv.bench import cli

    text = "\n".join(page.read_text() for page in PAGES)
    missing = []
    for suite in cli.SUITES:
        help_text = re.sub(r"-\n\s+", "-", cli.build_parser(suite).format_help())  # words wrapped at a hyphen
        options = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", help_text))
        assert "--suite" in options, options
        missing += [f"--suite {suite}: {option}" for option in sorted(options) if not _named(option, text)]
    assert not missing, "not on any page:\n" + "\n".join(missing)
