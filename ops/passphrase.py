"""`make backend`: the local backend's passphrase file, generated once with mode 600 (and kept at 600).

    python -m ops.passphrase [<path>] [--stack NAME --state-dir DIR] [--project-dir DIR]

Without <path> the file is $PULUMI_CONFIG_PASSPHRASE_FILE, which the Makefile exports unless the operator exported
PULUMI_CONFIG_PASSPHRASE; when it is unset or empty there is nothing to do.

A new passphrase is never generated for a stack that already has state: that state was encrypted with another
one (typically the project moved, and the file name carries a hash of its path), which is listed instead. Nor is
one generated while an older checkout's `.pulumi-passphrase` sits in the project directory: the command that
moves it there is printed instead.
"""

from __future__ import annotations

import os
import secrets
import shlex
import stat
import sys
from pathlib import Path

from naming import PROJECT
from ops.private_file import write_private


def ensure_passphrase(path: Path) -> str:
    """Create `path` with a random passphrase unless it holds one; either way leave it readable by its owner only."""
    if path.exists() and path.read_text(encoding="utf-8").strip():
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
            return f"{path}: was readable by others; now mode 600"
        return ""
    write_private(path, secrets.token_urlsafe(32) + "\n")
    return f"generated {path} (keep it: it is the only key to the secrets in the stack's state)"


def stack_state_files(state_dir: Path, stack: str, project: str = PROJECT) -> list[Path]:
    """The local backend's state file(s) of `stack` (project-scoped layout, and the older flat one)."""
    candidates = [state_dir / ".pulumi" / "stacks" / project / f"{stack}.json",
                  state_dir / ".pulumi" / "stacks" / f"{stack}.json"]
    return [path for path in candidates if path.exists()]


class PassphraseError(Exception):
    pass


# Where checkouts before the passphrase moved out of the project kept it.
LEGACY_FILE = ".pulumi-passphrase"


def refuse_passphrase_inside_the_project(path: Path, project_dir: Path) -> None:
    """An older checkout's passphrase in the project directory is the key to this state: move it, never replace it."""
    legacy = project_dir / LEGACY_FILE
    if not (legacy.is_file() and legacy.stat().st_size > 0) or (path.is_file() and path.stat().st_size > 0):
        return
    raise PassphraseError(
        f"found {LEGACY_FILE} in the project directory: move it out, next to nothing it protects:\n"
        f"  mkdir -p {shlex.quote(str(path.parent))} && mv {LEGACY_FILE} {shlex.quote(str(path))}"
    )


def refuse_new_passphrase_for_existing_state(path: Path, stack: str, state_dir: Path) -> None:
    if path.exists() and path.read_text(encoding="utf-8").strip():
        return
    states = stack_state_files(state_dir, stack)
    if not states:
        return
    others = sorted(str(p) for p in path.parent.glob(f"{stack}-*.passphrase")) if path.parent.is_dir() else []
    where = ("; the passphrase files for this stack name here are: " + ", ".join(others)) if others else ""
    raise PassphraseError(
        f"stack {stack!r} already has state ({states[0]}) but there is no passphrase at {path}: a new one would not "
        f"decrypt it. If the project moved, copy its old passphrase file there (mode 600){where}; or export "
        "PULUMI_CONFIG_PASSPHRASE(_FILE) yourself"
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ops.passphrase")
    parser.add_argument("path", nargs="?", help="default: $PULUMI_CONFIG_PASSPHRASE_FILE")
    parser.add_argument("--stack")
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument("--project-dir", type=Path, default=Path("."))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    given = args.path or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE", "")
    if not given:
        return 0  # the operator exported PULUMI_CONFIG_PASSPHRASE
    path = Path(given).expanduser()
    try:
        refuse_passphrase_inside_the_project(path, args.project_dir)
        if args.stack and args.state_dir:
            refuse_new_passphrase_for_existing_state(path, args.stack, args.state_dir)
    except PassphraseError as error:
        print(f"make backend: {error}", file=sys.stderr)
        return 1
    message = ensure_passphrase(path)
    if message:
        print(message)
    return 0


if __name__ == "__main__":
    sys.exit(main())
