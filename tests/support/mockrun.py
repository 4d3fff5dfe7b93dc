"""Run the real program (or one component) once, and inspect what it registered.

The engine behind most unit tests (`tests/`) and `make graph`: no Docker, no cluster and no Pulumi CLI
needed. `run_program(config)` runs `__main__.py` as a first `pulumi up` (or a preview) would, through the
lifecycle simulator (`tests/support/sim`): a simulated machine answers the way the pinned providers do. The result
lists every registered resource with its inputs (secret markers preserved), parent, dependencies and options,
and the stack outputs with their secret-ness. Lifecycle questions (a second `up`, a change, destroy) are asked
of `tests.support.sim.Lifecycle` directly.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config import stack_file
from tests.support.sim.state import contains_secret, plain

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MAIN = PROJECT_ROOT / "__main__.py"
PROJECT = "gpu-tenancy"

# --------------------------------------------------------------------------- #
# Registrations
# --------------------------------------------------------------------------- #


# Plain values (secret markers removed) and whether a value holds a secret: the simulator's own helpers.
unwrap = plain


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    raw_inputs: dict[str, Any]
    parent: str
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    provider: str
    custom: bool
    read: bool = False
    resource_id: str = ""
    additional_secret_outputs: list[str] = field(default_factory=list)
    retain_on_delete: bool = False
    delete_before_replace: bool = False
    ignore_changes: list[str] = field(default_factory=list)
    replace_on_changes: list[str] = field(default_factory=list)
    custom_timeouts: dict[str, str] = field(default_factory=dict)
    deleted_with: str = ""

    @property
    def inputs(self) -> dict[str, Any]:
        return unwrap(self.raw_inputs)

    def is_secret(self, key: str) -> bool:
        """Whether input `key` (or anything inside it) was marked secret."""
        return contains_secret(self.raw_inputs.get(key))

    def __repr__(self) -> str:
        return f"<{self.type} {self.name}>"


# --------------------------------------------------------------------------- #
# Running a program and reading the result
# --------------------------------------------------------------------------- #


@dataclass
class StackOutput:
    value: Any
    secret: bool


@dataclass
class ProgramRun:
    resources: list[Registration]
    outputs: dict[str, StackOutput]

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str, type_: str | None = None) -> Registration:
        found = [r for r in self.resources if r.name == name and (type_ is None or r.type == type_)]
        if len(found) != 1:
            raise AssertionError(
                f"expected one resource named {name!r} (type {type_}), found {found}; "
                f"names: {sorted(r.name for r in self.resources)}"
            )
        return found[0]

    def by_urn(self, urn: str) -> Registration:
        for resource in self.resources:
            if resource.urn == urn:
                return resource
        raise AssertionError(f"no resource with urn {urn}")

    def children(self, parent: Registration) -> list[Registration]:
        return [r for r in self.resources if r.parent == parent.urn]

    def descendants(self, parent: Registration) -> list[Registration]:
        found = []
        for child in self.children(parent):
            found.append(child)
            found.extend(self.descendants(child))
        return found

    def direct_dependencies(self, resource: Registration) -> set[str]:
        """URNs this resource waits for: explicit depends_on, input deps, and its provider."""
        deps = set(resource.dependencies)
        for urns in resource.property_dependencies.values():
            deps.update(urns)
        if resource.provider:
            # A provider reference is "<urn>::<id>".
            deps.add(resource.provider.rsplit("::", 1)[0])
        return deps

    def dependency_closure(self, resource: Registration) -> set[str]:
        """Every URN reachable through dependencies (and providers) from `resource`."""
        seen: set[str] = set()
        stack = [resource.urn]
        by_urn = {r.urn: r for r in self.resources}
        while stack:
            urn = stack.pop()
            current = by_urn.get(urn)
            if current is None:
                continue
            for dep in self.direct_dependencies(current):
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    def depends_on(self, resource: Registration, other: Registration) -> bool:
        """True when `resource` transitively waits for `other` (or for a descendant of it)."""
        targets = {other.urn} | {d.urn for d in self.descendants(other)}
        return bool(self.dependency_closure(resource) & targets)


class ProgramFailedError(AssertionError):
    """The program (or a provider answering it) failed; the message is the operation's plan."""


def registration(resource: Any) -> Registration:
    """A simulator resource as a Registration."""
    return Registration(
        urn=resource.urn, type=resource.type, name=resource.name, raw_inputs=resource.inputs, parent=resource.parent,
        dependencies=list(resource.dependencies), property_dependencies=dict(resource.property_dependencies),
        provider=resource.provider, custom=resource.custom, read=resource.external, resource_id=resource.id,
        additional_secret_outputs=list(resource.additional_secret_outputs),
        retain_on_delete=resource.retain_on_delete,
        delete_before_replace=bool(resource.delete_before_replace),
        ignore_changes=list(resource.ignore_changes), replace_on_changes=list(resource.replace_on_changes),
        custom_timeouts=dict(resource.custom_timeouts), deleted_with=resource.deleted_with,
    )


def run_program(
    config: dict[str, Any],
    *,
    stack: str = "dev",
    preview: bool = False,
    program: Callable[[], Any] | None = None,
    secret_keys: Iterable[str] = (),
    world: Any = None,
) -> ProgramRun:
    """Run `__main__.py` (or `program`) once under the simulator: a first `up` (skipping the preview, as the
    Automation API does), or a first preview. Whole-program runs get a machine that fits the config
    (`tests.support.sim.lab.world_for`); a custom `program` runs against `world` (default: an empty machine)."""
    from tests.support.sim import Lifecycle, World
    from tests.support.sim.lab import world_for

    config = copy.deepcopy(config)
    if world is None:
        world = world_for(config) if program is None else World()
    sim = Lifecycle(config, world=world, stack=stack, secret_keys=secret_keys, program=program)
    plan = sim.preview(expect_error=True) if preview else sim.up(skip_preview=True, expect_error=True)
    if not plan.ok:
        raise ProgramFailedError(plan.render())
    operation = sim.engine.last_operation
    resources = [registration(r) for r in operation.registered.values()]
    outputs = {name: StackOutput(value=unwrap(value), secret=name in plan.secret_outputs)
               for name, value in plan.outputs.items()}
    return ProgramRun(resources=resources, outputs=outputs)


def load_stack_file(name: str = "dev") -> dict[str, Any]:
    """The `gpu-tenancy:*` keys of `Pulumi.<name>.yaml`, namespace removed."""
    document = stack_file.load(PROJECT_ROOT / f"Pulumi.{name}.yaml")
    prefix = f"{PROJECT}:"
    return {
        key[len(prefix):]: value
        for key, value in (document.get("config") or {}).items()
        if key.startswith(prefix)
    }
