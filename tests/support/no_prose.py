"""Tests read upstream data from ../shared/vendor only, never the prose under ../shared/docs.

The documents there (architecture notes, platform facts, reviews) are rewritten between rounds; a test that
reads them fails or passes with no change to the code. `Guard` records every open or directory listing under
a folder (Python audit events `open`, `os.listdir`, `os.scandir`: every file read and every glob goes through
one of them), and tests/conftest.py fails the test during which one happened.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

_EVENTS = {"open", "os.listdir", "os.scandir"}
_TESTS = str(Path(__file__).resolve().parents[1]) + os.sep
_GUARDS: list[Guard] = []


def _audit(event: str, args: tuple) -> None:
    if event not in _EVENTS or not _GUARDS or not args:
        return
    target = args[0]
    if isinstance(target, int) or target is None:  # a file descriptor, or os.listdir() of the working directory
        return
    try:
        path = os.fsdecode(os.fspath(target))
    except TypeError:
        return
    for guard in list(_GUARDS):
        guard.saw(path)


sys.addaudithook(_audit)  # audit hooks cannot be removed: one for the process, guards come and go


class Guard:
    """Records what is read under `root` while started."""

    def __init__(self, root: Path):
        self.root = os.path.realpath(root)
        self.reads: list[str] = []

    def saw(self, path: str) -> None:
        if os.path.basename(self.root) not in path:  # cheap first: most opens are nowhere near it
            return
        real = os.path.realpath(path)
        if real == self.root or real.startswith(self.root + os.sep):
            caller = next((f for f in reversed(traceback.extract_stack()) if f.filename.startswith(_TESTS)
                           and os.path.basename(f.filename) not in ("no_prose.py", "conftest.py")), None)
            where = f" ({caller.filename}:{caller.lineno})" if caller else ""
            self.reads.append(real + where)

    def start(self) -> Guard:
        _GUARDS.append(self)
        return self

    def stop(self) -> list[str]:
        if self in _GUARDS:
            _GUARDS.remove(self)
        return self.drain()

    def drain(self) -> list[str]:
        reads, self.reads = self.reads, []
        return reads
