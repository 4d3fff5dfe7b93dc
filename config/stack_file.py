"""Read a stack file (`Pulumi.<stack>.yaml`): a YAML mistake is a message naming the file and the position.

PyYAML names the stream it parses in its error marks; a string is `"<unicode string>"`, so the text is handed to it
as a stream named after the file: the message reads `in "Pulumi.dev.yaml", line 6, column 5`. A stream (unlike a
string) also gives marks without a snippet of the line, which could hold a credential written in plain text.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import yaml


class StackFileError(ValueError):
    """The stack file is not valid YAML: `detail` names the file and the position, `fix` says what to do."""

    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(f"{detail}\n{fix}")
        self.detail, self.fix = detail, fix


class _NamedText(io.StringIO):
    """Text PyYAML reads as a stream called `name` (io.StringIO itself takes no attributes)."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__(text)
        self.name = name


def parse(text: str, name: str) -> Any:
    """The YAML document `text` of the file called `name`; StackFileError when it is not YAML."""
    try:
        return yaml.safe_load(_NamedText(text, name))
    except yaml.YAMLError as error:
        where = "\n".join(f"  {line}" for line in str(error).splitlines())
        raise StackFileError(f"{name} is not valid YAML:\n{where}",
                             f"fix the YAML of {name} at the position above") from None


def load(path: Path) -> Any:
    """The parsed stack file at `path` (OSError when it cannot be read, e.g. FileNotFoundError)."""
    return parse(path.read_text(), path.name)
