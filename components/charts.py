"""The Helm charts the program installs: components/charts.json, one entry per chart directory (standard library only).

Each chart lands in .cache/charts/<dir> (a subchart inside its parent's charts/), taken from `repo` at `commit` (the
release tag `tag`): the directory `path` of that tree without `exclude` (what the project's packaging leaves out),
with `links` (a symlink in the chart, filled with the directory it points to, as `helm package` follows it) and
`edits` (the release step that sets Chart.yaml's version, which the git copy keeps as a placeholder: each `line`
occurs once and becomes the lines of `with`). `versions` is the config field the chart's version must equal, and
`crds` the files in its crds/ that the program applies itself (components/helm.py).

`sha256` pins the directory as installed, subcharts included (`tree_digest`). Each Release carries it in its
description, so a new pin is a `helm upgrade`; `make charts` (ops/upstream.py) checks the files against it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CHARTS: dict[str, dict] = {
    chart["dir"]: chart for chart in json.loads(Path(__file__).with_name("charts.json").read_text(encoding="utf-8"))
}


def tree_digest(directory: Path) -> str:
    """sha256 of the sorted lines "<path relative to `directory`>\\0<sha256 of the file>", joined by newlines.

    Raises ValueError for a symlink or anything else that is not a regular file or a directory: Helm would follow it.
    """
    lines = []
    for path in directory.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ValueError(f"{path.relative_to(directory)} is not a regular file")
        if path.is_file():
            lines.append(f"{path.relative_to(directory).as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}")
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()
