"""What ``vecenv-collect`` prints at the end of a run: counts, statistics, where the output is."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from vecenv.datasets.dataset import Dataset
from vecenv.datasets.minari import datasets_root


def minari_summary(dataset: Any, root: Path) -> str:
    """The end-of-run report of a Minari dataset: counts, where it is, how to open it."""
    record = dataset.storage.metadata.get("vecenv", {})
    dropped = record.get("dropped_open_episodes", {})
    lines = [
        f"transitions: {dataset.total_steps}",
        f"episodes:    {dataset.total_episodes}"
        + (
            f" ({record['truncated_open_episodes']} open ones truncated)"
            if record.get("truncated_open_episodes")
            else ""
        )
        + (
            f" ({dropped['episodes']} open ones dropped: {dropped['transitions']} transitions)"
            if dropped.get("episodes")
            else ""
        ),
        f"output:      {dataset.storage.data_path.parent} (Minari dataset {dataset.id!r}"
        + ("" if record.get("complete", True) else ", incomplete")
        + ")",
    ]
    default_root = os.environ.get("MINARI_DATASETS_PATH")
    prefix = (
        ""
        if default_root and Path(default_root).resolve() == root.resolve()
        else f"MINARI_DATASETS_PATH={shlex.quote(str(root))} "
    )
    if root == datasets_root(None):
        prefix = ""
    lines.append(f"open with:   {prefix}python -c 'import minari; print(minari.load_dataset(\"{dataset.id}\"))'")
    return "\n".join(lines)


def _human_size(size: float) -> str:
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    index = 0
    while size >= 1024 and index < len(units) - 1:
        size /= 1024
        index += 1
    return f"{size:.1f} {units[index]}" if index else f"{int(size)} B"


def dataset_summary(dataset: Dataset) -> str:
    """The end-of-run report: counts, episode statistics, speed, output path and size."""
    metadata, stats = dataset.metadata, dataset.metadata["stats"]
    lines = [
        f"transitions: {metadata['counts']['transitions']}",
        f"episodes:    {metadata['counts']['episodes']} completed",
    ]
    for key, label in (("episode_return", "return:     "), ("episode_length", "length:     ")):
        value = stats[key]
        lines.append(
            label
            + (
                "n/a (no episode completed)"
                if value is None
                else f"mean {value['mean']:.4g}, min {value['min']:.4g}, max {value['max']:.4g}"
            )
        )
    rate = stats["steps_per_second"]
    lines.append(f"steps/s:     {rate:,.0f} over {stats['duration_s']:.1f} s" if rate else "steps/s:     n/a")
    size = sum(p.stat().st_size for p in dataset.path.iterdir() if p.is_file())
    state = "" if dataset.complete else ', incomplete: "complete": false'
    lines.append(f"output:      {dataset.path} ({_human_size(size)}{state})")
    return "\n".join(lines)
