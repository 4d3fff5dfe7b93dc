"""Reading objects back through the Pulumi SDK."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def sdk_field(obj: Mapping[str, Any] | None, camel: str, snake: str) -> Any:
    """A field of an object read back through the Pulumi SDK, which may hand it over snake_cased."""
    if not obj:
        return None
    return dict.get(obj, camel, dict.get(obj, snake))  # type: ignore[arg-type]
