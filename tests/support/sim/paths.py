"""The Pulumi engine's property-path grammar, for `replace_on_changes`, `ignore_changes` and diff keys.

A port of pulumi/pulumi `sdk/go/common/resource/properties_path.go` (`parsePropertyPath`, `Contains`,
`String`, read at commit 1b594989, 2026-08-21). The engine parses every `replaceOnChanges` entry and
every detailed-diff key with it, and turns a change into a replacement only when a replace path
`Contains` the diff path (pkg/resource/deploy/step_generator.go `applyReplaceOnChanges`). Bare names
run up to the next '.' or '[', so `metadata.annotations.gpu-tenancy.io/join` is four segments
(`gpu-tenancy`, `io/join`) and never contains the provider's 3-segment diff key
`metadata.annotations["gpu-tenancy.io/join"]`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

Segment = str | int
WILDCARD = "*"


class PropertyPathError(ValueError):
    """A path the engine's parser rejects."""


def parse(path: str) -> tuple[Segment, ...]:
    """`parsePropertyPath(path, strict=false)`: segments of a property path."""
    elements: list[Segment] = []
    if path.startswith("."):
        raise PropertyPathError(f"{path!r}: expected property path to start with a name or index")
    rest = path
    while rest:
        head = rest[0]
        if head == ".":
            rest = rest[1:]
            if not rest:
                raise PropertyPathError(f"{path!r}: expected property path to end with a name or index")
        elif head == "[":
            if len(rest) > 1 and rest[1] == '"':
                key: list[str] = []
                i = 2
                while True:
                    if i >= len(rest):
                        raise PropertyPathError(f"{path!r}: missing closing quote in property name")
                    if rest[i] == '"':
                        i += 1
                        break
                    if rest[i] == "\\" and i + 1 < len(rest) and rest[i + 1] == '"':
                        key.append('"')
                        i += 2
                    else:
                        key.append(rest[i])
                        i += 1
                if i >= len(rest) or rest[i] != "]":
                    raise PropertyPathError(f"{path!r}: missing closing bracket in property access")
                elements.append("".join(key))
                rest = rest[i + 1:]
            else:
                close = rest.find("]")
                if close == -1:
                    raise PropertyPathError(f"{path!r}: missing closing bracket in array index")
                segment = rest[1:close]
                if segment == WILDCARD:
                    elements.append(WILDCARD)
                else:
                    try:
                        elements.append(int(segment, 10))
                    except ValueError:
                        raise PropertyPathError(f"{path!r}: invalid array index {segment!r}") from None
                rest = rest[close + 1:]
        else:
            end = next((i for i, c in enumerate(rest) if c in ".["), len(rest))
            elements.append(rest[:end])
            rest = rest[end:]
    return tuple(elements)


def contains(path: tuple[Segment, ...], other: tuple[Segment, ...]) -> bool:
    """`PropertyPath.Contains`: `other` is `path` or lies below it (`*` matches any one segment)."""
    if len(other) < len(path):
        return False
    for mine, theirs in zip(path, other, strict=False):
        if isinstance(mine, int):
            if not isinstance(theirs, int) or theirs != mine:
                return False
        elif mine != WILDCARD and (not isinstance(theirs, str) or theirs != mine):
            return False
    return True


def _requires_quote(char: str) -> bool:
    return not (char.isascii() and (char.isalnum() or char == "_"))


def render(path: tuple[Segment, ...]) -> str:
    """`PropertyPath.String`: how the engine (and pulumi-kubernetes' detailed diff) spells a path."""
    out = []
    for index, key in enumerate(path):
        if isinstance(key, int):
            out.append(f"[{key}]")
        elif any(_requires_quote(c) for c in key):
            escaped = key.replace('"', '\\"')
            out.append(f'["{escaped}"]')
        else:
            out.append(key if index == 0 else f".{key}")
    return "".join(out)


_MISSING = object()


def get(value: Any, path: tuple[Segment, ...]) -> Any:
    """`PropertyPath.Get`: the value at `path`, or `MISSING` when any segment is absent."""
    for key in path:
        if isinstance(value, list):
            if not isinstance(key, int) or not 0 <= key < len(value):
                return MISSING
            value = value[key]
        elif isinstance(value, Mapping):
            if not isinstance(key, str) or key not in value:
                return MISSING
            value = value[key]
        else:
            return MISSING
    return value


MISSING = _MISSING


def leaves(value: Any, prefix: tuple[Segment, ...] = ()) -> Iterator[tuple[tuple[Segment, ...], Any]]:
    """Every path to a non-container value (and to empty containers) inside `value`."""
    if isinstance(value, Mapping) and value:
        for key, child in value.items():
            yield from leaves(child, (*prefix, key))
    elif isinstance(value, list) and value:
        for index, child in enumerate(value):
            yield from leaves(child, (*prefix, index))
    else:
        yield prefix, value


def matches_any_input(path: tuple[Segment, ...], inputs: Mapping[str, Any], unknown: Any = MISSING) -> bool:
    """Whether `path` (wildcards allowed) names something that exists in `inputs`; a value that is `unknown` (not
    known yet, in a preview) may hold anything."""
    def walk(value: Any, rest: tuple[Segment, ...]) -> bool:
        if value is unknown and unknown is not MISSING:
            return True
        if not rest:
            return True
        key, tail = rest[0], rest[1:]
        if key == WILDCARD:
            children = list(value.values()) if isinstance(value, Mapping) else value if isinstance(value, list) else []
            return any(walk(child, tail) for child in children)
        child = get(value, (key,))
        return child is not MISSING and walk(child, tail)

    return walk(inputs, path)
