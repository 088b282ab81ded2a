"""README's Python examples run as written (each in a fresh interpreter, so spawn-safe too)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def _example(section: str) -> str:
    text = README.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", body, re.S)
    assert match, f"README section {section!r} has no python example"
    return match.group(1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("section", ["Quick start", "Asynchronous batches"])
def test_readme_example_runs(section: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    example = _example(section)
    if 'if __name__ == "__main__":' in example:  # run as written
        script.write_text(f"{example}\n    print('EXAMPLE-OK')\n")
    else:
        # The guard makes the example safe under every start method, as users are told to write it.
        body = "\n".join("    " + line for line in example.splitlines())
        script.write_text(f"def main():\n{body}\n\nif __name__ == '__main__':\n    main()\n    print('EXAMPLE-OK')\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=100, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("EXAMPLE-OK")
    assert "Traceback" not in proc.stderr
