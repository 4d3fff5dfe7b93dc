"""Run the real program (or one component) once, and inspect what it registered.

Two runners give the same result (`ProgramRun`: every registered resource with its inputs, secret markers
preserved, parent, dependencies and options, and the stack outputs with their secret-ness):

- `registered(config)`: plain Pulumi mocks (`ops.registrations`, what `make graph` uses). For tests that ask only
  what is registered; a fraction of the simulator's cost.
- `run_program(config)`: a first `pulumi up` (or a preview) through the lifecycle simulator (`tests/support/sim`):
  a simulated machine answers the way the pinned providers do. For tests that ask what the providers answered or
  what the machine did; lifecycle questions (a second `up`, a change, destroy) go to `tests.support.sim.Lifecycle`.

The tests' stack is `tests/fixtures/reference-stack.yaml` (`reference_stack()`), never the user's Pulumi.dev.yaml.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ops import registrations
from ops.registrations import ProgramRun, Registration, StackOutput, stack_keys
from tests.support.sim.state import plain

__all__ = ["ProgramRun", "Registration", "StackOutput", "ProgramFailedError", "registered", "run_program",
           "reference_stack", "load_stack_file", "REFERENCE_STACK"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
MAIN = PROJECT_ROOT / "__main__.py"
PROJECT = "gpu-tenancy"
# The lab every test, `make docs` and the e2e suite use: Pulumi.dev.yaml as shipped, which the user may edit.
REFERENCE_STACK = PROJECT_ROOT / "tests" / "fixtures" / "reference-stack.yaml"

# Plain values (secret markers removed): the simulator's own helper.
unwrap = plain


class ProgramFailedError(AssertionError):
    """The program (or a provider answering it) failed; the message is the operation's plan (simulator) or the
    program's error (plain mocks)."""


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


def registered(
    config: dict[str, Any],
    *,
    stack: str = "dev",
    preview: bool = False,
    program: Callable[[], Any] | None = None,
    secret_keys: Iterable[str] = (),
) -> ProgramRun:
    """What `__main__.py` (or `program`) registers in a first `up` (or a preview), under plain mocks; a program error
    raises ProgramFailedError with its message."""
    try:
        return registrations.run(copy.deepcopy(config), stack=stack, preview=preview, program=program,
                                 secret_keys=secret_keys)
    except Exception as error:  # noqa: BLE001 -- the program's failure, as the simulator reports one
        raise ProgramFailedError(f"program failed: {type(error).__name__}: {error}") from error


def reference_stack() -> dict[str, Any]:
    """The `gpu-tenancy:*` keys of the reference stack (tests/fixtures/reference-stack.yaml), namespace removed."""
    return stack_keys(REFERENCE_STACK)


def load_stack_file(name: str) -> dict[str, Any]:
    """The `gpu-tenancy:*` keys of a shipped example, `Pulumi.<name>.yaml` (e.g. "prod.example"), namespace removed."""
    return stack_keys(PROJECT_ROOT / f"Pulumi.{name}.yaml")
