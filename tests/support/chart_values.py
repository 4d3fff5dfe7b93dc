"""Check Helm values we set against a chart's own (vendored) values.yaml.

Charts like HAMi ship no values schema, so Helm silently ignores a misspelled
key. A key we set must exist at the same path in the chart's values.yaml;
below a key whose default is an empty map or null (annotations, resources,
selectors) any sub-key is allowed, since those are free-form maps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_chart_values(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def unknown_value_keys(values: dict[str, Any], chart: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of keys in `values` that the chart's values.yaml does not define."""
    unknown = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if key not in chart:
            unknown.append(path)
            continue
        default = chart[key]
        if isinstance(value, dict) and isinstance(default, dict) and default:
            unknown.extend(unknown_value_keys(value, default, f"{path}."))
    return unknown
