"""Read every `gpu-tenancy:*` key from the Pulumi config, unknown ones included.

`pulumi.Config.get` only answers for keys it is asked about, which would let a
misspelled top-level key pass silently; reading the whole config map lets the
model reject it by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pulumi

from naming import PROJECT
from sdk import all_config

from .models import StackConfig
from .validate import load_stack_config


def _decode(value: Any) -> Any:
    # Pulumi hands structured values (objects, lists) to programs as JSON text.
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def raw_stack_config() -> dict[str, Any]:
    """All keys of the project namespace, with the namespace prefix removed."""
    entries = {**pulumi.runtime.get_config_env(), **all_config()}
    prefix = f"{PROJECT}:"
    return {
        key[len(prefix):]: _decode(value)
        for key, value in entries.items()
        if key.startswith(prefix)
    }


def secret_stack_keys(keys: Iterable[str]) -> set[str]:
    """Those of `keys` (without namespace) that Pulumi holds as secrets or that contain a secret."""
    from_env = set(pulumi.runtime.get_config_secret_keys_env())
    return {
        key for key in keys
        if pulumi.runtime.is_config_secret(f"{PROJECT}:{key}") or f"{PROJECT}:{key}" in from_env
    }


def read_stack_config() -> StackConfig:
    """The validated stack configuration; raises ConfigError listing every problem, its fix naming this stack."""
    raw = raw_stack_config()
    return load_stack_config(raw, secret_stack_keys(raw), pulumi.get_stack())
