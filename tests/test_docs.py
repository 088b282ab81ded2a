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

import dataclasses
import os
import re
import subprocess
import sys
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
