"""Validate objects against a CRD's OpenAPI v3 schema with plain JSON Schema.

The API server prunes or rejects fields a structural schema does not declare,
while JSON Schema allows them by default; so every object schema that declares
`properties` (and neither `additionalProperties` nor
`x-kubernetes-preserve-unknown-fields`) is closed here, which turns a typo like
`serviceCIDR` into an error. `x-kubernetes-int-or-string` becomes
integer-or-string, `nullable` allows null, other `x-kubernetes-*` extensions
(CEL rules, list types) are dropped: CEL is not checked.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml

_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf")


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        key: value
        for key, value in node.items()
        if not key.startswith("x-kubernetes-")
        and key not in ("properties", "items", "additionalProperties", "not", *_SCHEMA_LISTS)
    }
    if "properties" in node:
        out["properties"] = {name: _strict(child) for name, child in node["properties"].items()}
    if isinstance(node.get("items"), dict):
        out["items"] = _strict(node["items"])
    if "additionalProperties" in node:
        extra = node["additionalProperties"]
        out["additionalProperties"] = _strict(extra) if isinstance(extra, dict) else extra
    elif "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if isinstance(node.get("not"), dict):
        out["not"] = _strict(node["not"])
    for keyword in _SCHEMA_LISTS:
        if keyword in node:
            out[keyword] = [_strict(child) for child in node[keyword]]
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


@functools.cache
def _load(crd_path: Path) -> Any:
    # libyaml when available: the TenantControlPlane CRD is 9000 lines.
    return yaml.load(crd_path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def crd_json_schema(crd_path: Path, version: str = "v1alpha1") -> dict[str, Any]:
    crd = copy.deepcopy(_load(crd_path))
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return _strict(entry["schema"]["openAPIV3Schema"])
    raise AssertionError(f"{crd_path} has no version {version}")


def schema_errors(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Every violation as '<path>: <message>', sorted; empty when valid."""
    validator = jsonschema.Draft7Validator(schema)
    return sorted(
        f"{'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in validator.iter_errors(instance)
    )
