"""Writing a secret to a file on the operator's host: mode 600 from the first byte, replaced atomically.

`umask 077 && cmd > file` keeps the mode of a file that already exists (0644 stays 0644) and leaves a 0-byte
file behind when `cmd` fails; this writes a temporary file next to the target with 0600 and renames it over.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_private(path: str | Path, content: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target
