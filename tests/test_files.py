"""vecenv.files: result files written whole or not at all, and strict JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from vecenv.files import json_text, replaced, write_text_atomically


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"not strict JSON: {name}")


def test_json_text_writes_null_for_nan_and_infinity_at_any_depth() -> None:
    value = {"a": math.nan, "b": [1.5, math.inf, (-math.inf, np.float64("nan"))], "c": {"d": 2.0, "e": "x"}}
    text = json_text(value)
    assert json.loads(text, parse_constant=_refuse_constant) == {
        "a": None,
        "b": [1.5, None, [None, None]],
        "c": {"d": 2.0, "e": "x"},
    }
    assert text.endswith("}\n")


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt), replaced(target) as temporary:
        temporary.write_text("half of the new")
        raise KeyboardInterrupt
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_finished_write_replaces_the_file_and_keeps_the_suffix_for_writers_that_read_it(tmp_path: Path) -> None:
    target = tmp_path / "curve.png"
    target.write_text("old")
    with replaced(target) as temporary:
        assert temporary.parent == tmp_path and temporary.suffix == ".png" and temporary != target
        temporary.write_text("new")
    write_text_atomically(tmp_path / "notes.md", "# notes\n")
    assert target.read_text() == "new"
    assert (tmp_path / "notes.md").read_text() == "# notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png", "notes.md"]
