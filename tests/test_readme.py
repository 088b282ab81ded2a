"""README is the front page: its two commands, a guarded first example, links that resolve.

README's examples run with every other page's in tests/test_docs.py. Here: what README promises
that no example shows. Its "Set up" section gives the main job and the test command, which
.ci/run runs too (the install of ``.[test]`` and ``python -m pytest -m "not slow" -n auto``); they stay
word for word, first in the section.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAIN_JOB = "pip install -e . && python scripts/collect_rollouts.py"
TEST_COMMAND = 'pip install -e ".[test]" && python -m pytest -m "not slow" -n auto'
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _section(text: str, title: str) -> str:
    assert f"\n## {title}\n" in text, f"README has no '## {title}' section"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def slug(heading: str) -> str:
    """The anchor GitHub and MkDocs give a heading (lower case, punctuation dropped, spaces to -)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s+", "-", text)


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    found = {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}
    return found | set(re.findall(r'<a id="([^"]+)"', text))


def test_set_up_gives_the_main_job_then_the_tests() -> None:
    setup = _section(README.read_text(), "Set up")
    commands = [line.strip() for line in setup.splitlines() if line.startswith("    ")]
    assert commands[:2] == [MAIN_JOB, TEST_COMMAND]
    assert "collect a 10,000-step rollout of `CartPole-v1` into `rollouts/CartPole-v1`" in setup


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert '-e ".[test]"' in ci and '-m pytest -m "not slow" -n auto' in ci


def test_ci_runs_the_readme_rllib_command() -> None:
    """The RLlib tests, deselected in the .[test] venv, run in CI as docs/rllib.md (linked from
    README's Tests and CI) says."""
    command = (
        'pip install -e ".[test-rllib]" && python -m pytest -m "rllib and not slow" tests/integrations/test_rllib.py'
    )
    assert "docs/rllib.md#tests" in _section(README.read_text(), "Tests and CI")
    assert f"    {command}\n" in (REPO / "docs" / "rllib.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert '-e ".[test-rllib]"' in ci and '-m pytest -m "rllib and not slow"' in ci
    assert "tests/integrations/test_rllib.py" in ci


def test_first_example_has_the_main_guard() -> None:
    example = re.search(r"```python\n(.*?)```", _section(README.read_text(), "Quick start"), re.S)
    assert example, "README's quick start has no python example"
    assert 'if __name__ == "__main__":' in example.group(1)


def test_links_resolve() -> None:
    """Every relative link of README names a file of the repository, and its anchor a heading."""
    broken = []
    for target in LINK.findall(README.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = (README.parent / path) if path else README
        if not page.exists():
            broken.append(f"{target}: no such file")
        elif anchor and page.suffix == ".md" and anchor not in anchors(page):
            broken.append(f"{target}: no heading {anchor!r} in {page.relative_to(REPO)}")
    assert not broken, broken
    assert any(t.startswith("docs/") for t in LINK.findall(README.read_text())), "README links into no page of docs/"


def test_readme_stays_a_front_page() -> None:
    """The details live under docs/; README keeps what a first visit needs (about 200 lines)."""
    assert len(README.read_text().splitlines()) <= 250
