"""Comments a clone can follow: what the code, tests and docs point at is inside the repository or names its
upstream file, never notes kept beside the checkout."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Generated or installed trees, not sources.
SKIPPED_DIRS = {".venv", ".cache", "build", ".git", ".pulumi-state", "__pycache__", ".pytest_cache", ".ruff_cache"}
SOURCE_SUFFIXES = {".py", ".sh", ".md", ".yaml", ".yml", ".toml", ".txt", ".json"}


def source_files() -> list[Path]:
    """Every source, test and doc file of the project (the Makefile included)."""
    found = []
    for path in sorted(ROOT.rglob("*")):
        relative = path.relative_to(ROOT)
        if any(part in SKIPPED_DIRS for part in relative.parts) or not path.is_file():
            continue
        if path.suffix in SOURCE_SUFFIXES or path.name == "Makefile":
            found.append(path)
    return found


# Notes outside the repository (the research notes beside the checkout): a clone has none of them. Spelt in
# pieces so that this file does not match itself.
OUTSIDE_NOTES = re.compile("|".join([r"facts\s+" + "\u00a7", "platform" + r"[- ]facts", r"shared/" + "docs"]),
                           re.IGNORECASE)


def test_nothing_points_at_notes_outside_the_repository():
    files = source_files()
    assert len(files) > 50 and ROOT / "Makefile" in files
    hits = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            for path in files
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if OUTSIDE_NOTES.search(line)]
    assert not hits, "say the reason and name the upstream file instead:\n" + "\n".join(hits)
