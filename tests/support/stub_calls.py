"""The argv logs stub binaries write in the shell-script tests: one line per call, "<argc>\x1f<arg>\x1f<arg>..."."""

from __future__ import annotations

from pathlib import Path


def recorded_calls(path: Path) -> list[list[str]]:
    """Every call logged in `path` (none when the stub never ran), each checked against its argument count."""
    if not path.exists():
        return []
    result = []
    for line in path.read_text().splitlines():
        count, *args = line.split("\x1f")
        assert int(count) == len(args)
        result.append(args)
    return result
