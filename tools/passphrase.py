"""`make backend`: the local backend's passphrase file, generated once with mode 600 (and kept at 600).

    python -m tools.passphrase <path>
"""

from __future__ import annotations

import secrets
import stat
import sys
from pathlib import Path

from tools.private_file import write_private


def ensure_passphrase(path: Path) -> str:
    """Create `path` with a random passphrase unless it holds one; either way leave it readable by its owner only."""
    if path.exists() and path.read_text(encoding="utf-8").strip():
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
            return f"{path}: was readable by others; now mode 600"
        return ""
    write_private(path, secrets.token_urlsafe(32) + "\n")
    return f"generated {path} (keep it: it is the only key to the secrets in the stack's state)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tools.passphrase <passphrase file>", file=sys.stderr)
        return 2
    message = ensure_passphrase(Path(args[0]).expanduser())
    if message:
        print(message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
