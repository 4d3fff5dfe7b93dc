"""`make` run by a test as a user runs it from a shell, whatever make the test itself runs under."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

# What a make passes to the makes under it: under `make test TEST_JOBS=0` (docs/development.md), MAKEFLAGS carries TEST_JOBS=0
# into every `make -n test` a test runs, and its answer would be the outer command line's, not the Makefile's.
_FROM_OUTER_MAKE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def _command_line_variables(makeflags: str) -> set[str]:
    """The variables an outer make's command line set (`MAKEFLAGS= -- TEST_JOBS=0`, GNU make 4.x). Make also
    exports each into its recipes' environment (GNU make manual, "Communicating Variables to a Sub-make"), where
    a make under the test would read them as if the user had set them."""
    words = shlex.split(makeflags)
    definitions = words[words.index("--") + 1:] if "--" in words else [word for word in words if "=" in word]
    return {word.split("=", 1)[0] for word in definitions if "=" in word}


def run_make(*args: str, cwd: Path, env: dict[str, str] | None = None,
             check: bool = False) -> subprocess.CompletedProcess[str]:
    """`make ARGS` in `cwd` (environment `env`, default this process's), without an outer make's variables."""
    base = dict(os.environ if env is None else env)
    for name in (*_command_line_variables(base.get("MAKEFLAGS", "")), *_FROM_OUTER_MAKE):
        base.pop(name, None)
    # make found on this process's PATH: `env` may have another (the child's PATH decides what make itself finds).
    return subprocess.run([shutil.which("make") or "make", *args], cwd=cwd, env=base, capture_output=True, text=True, check=check)
