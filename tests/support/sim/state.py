"""Resource state as the engine keeps it, and helpers for values with secrets and unknowns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pulumi.runtime import rpc

# Secret markers and unknowns as the SDK puts them on the wire: one reader for the plain mocks and the simulator.
from ops.registrations import contains_secret, plain  # noqa: F401 -- re-exported
from ops.registrations import with_unknowns as normalize  # noqa: F401 -- re-exported

UNKNOWN = rpc.UNKNOWN


def comparable(value: Any) -> Any:
    """`plain(value)` with assets replaced by their content (the engine compares assets by hash)."""
    from pulumi.asset import FileAsset, StringAsset

    # One pass: secret markers come off node by node as the walk reaches them (plain() of the whole tree at every
    # level made a diff quadratic in the depth of the inputs).
    while rpc.is_rpc_secret(value):
        value = rpc.unwrap_rpc_secret(value)
    if isinstance(value, StringAsset):
        return ("asset", value.text)
    if isinstance(value, FileAsset):
        return ("asset", str(value.path))
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def is_secret(value: Any) -> bool:
    return rpc.is_rpc_secret(value)


def secret(value: Any) -> dict[str, Any]:
    return rpc.wrap_rpc_secret(value)


def contains_unknown(value: Any) -> bool:
    if value == UNKNOWN:
        return True
    if rpc.is_rpc_secret(value):
        return contains_unknown(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return any(contains_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_unknown(v) for v in value)
    return False


def annotate_secrets(outputs: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """pulumi/pulumi pkg/resource/plugin/provider_plugin.go `annotateSecrets`: an output whose input of the same
    name held a secret is secret too (for providers that do not accept secrets, e.g. dynamic providers)."""
    out = dict(outputs)
    for key, value in inputs.items():
        if key not in out:
            continue
        if isinstance(out[key], dict) and isinstance(value, dict) and not is_secret(value) and not is_secret(out[key]):
            out[key] = annotate_secrets(out[key], value)
        elif not is_secret(out[key]) and contains_secret(value):
            out[key] = secret(out[key])
    return out


@dataclass(frozen=True)
class Alias:
    """One alias of a registration as the SDK sends it (pulumi/pulumi proto/pulumi/alias.proto): a whole old URN,
    or a spec of what was different before (empty fields: as now)."""

    urn: str = ""
    name: str = ""
    type: str = ""
    stack: str = ""
    project: str = ""
    parent: str = ""  # the old parent's URN
    no_parent: bool = False  # it had no parent (was top-level)


@dataclass
class Resource:
    """One resource in the engine's state (or being registered)."""

    urn: str
    type: str
    name: str
    custom: bool
    parent: str = ""
    provider: str = ""  # "<provider urn>::<provider id>"
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    delete_before_replace: bool | None = None
    replace_on_changes: list[str] = field(default_factory=list)
    ignore_changes: list[str] = field(default_factory=list)
    deleted_with: str = ""
    retain_on_delete: bool = False
    custom_timeouts: dict[str, str] = field(default_factory=dict)
    additional_secret_outputs: list[str] = field(default_factory=list)
    external: bool = False  # a read (`.get`): never deleted, never counted as a change
    init_error: bool = False
    aliases: tuple[Alias, ...] = ()

    @property
    def provider_urn(self) -> str:
        return self.provider.rsplit("::", 1)[0] if self.provider else ""

    @property
    def is_provider(self) -> bool:
        return self.type.startswith("pulumi:providers:")

    def all_dependencies(self) -> set[str]:
        deps = set(self.dependencies)
        for urns in self.property_dependencies.values():
            deps.update(urns)
        if self.provider_urn:
            deps.add(self.provider_urn)
        if self.deleted_with:
            deps.add(self.deleted_with)
        if self.parent:
            deps.add(self.parent)
        return deps
