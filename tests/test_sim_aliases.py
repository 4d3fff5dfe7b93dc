"""The simulator's URNs, against the engine code it follows (pulumi/pulumi at 1b594989):
pkg/resource/deploy/deployment.go generateURN.
"""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pytest

from tests.support.sim import Lifecycle, World, scripts

STACK_PREFIX = "urn:pulumi:dev::gpu-tenancy::"


@pytest.fixture
def ran(monkeypatch):
    """The commands the simulated host ran, as (action, script); a script `fail` fails its delete."""
    calls: list[tuple[str, str]] = []

    def run(world, invocation, action):
        calls.append((action, invocation.script))
        if invocation.script == "fail" and action == "delete":
            raise scripts.CommandFailedError("it failed")
        return "ok"

    monkeypatch.setattr(scripts, "run", run)
    return calls


class Box(pulumi.ComponentResource):
    """A component with one command named after it (`<name>-leaf`), as this project names its children."""

    def __init__(self, type_: str, name: str, opts: pulumi.ResourceOptions | None = None, create: str = "true"):
        super().__init__(type_, name, None, opts)
        self.leaf = command.local.Command(f"{name}-leaf", create=create, delete="true",
                                          opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})


class Wrapper(pulumi.ComponentResource):
    def __init__(self, name: str, build):
        super().__init__("test:index:Wrapper", name, None, None)
        build(self)
        self.register_outputs({})


def _sim(program, world=None) -> Lifecycle:
    return Lifecycle({}, world=world or World(), program=program)


def _urns(sim: Lifecycle) -> set[str]:
    return {urn.removeprefix(STACK_PREFIX) for urn in sim.engine.state if "pulumi:pulumi:Stack" not in urn}


def _nothing_changes(plan) -> None:
    assert plan.changed() == {}, plan.render()
    assert {s.op for s in plan.steps} == {"same"}, plan.render()


def test_a_urn_holds_the_whole_parent_chain_and_nothing_for_the_stack(ran):
    def program():
        outer = Wrapper("outer", lambda self: Box("test:index:Inner", "inner", pulumi.ResourceOptions(parent=self)))
        del outer

    sim = _sim(program)
    sim.up()
    # deployment.go generateURN: parent.QualifiedType() (every level), and no type for the root stack.
    assert _urns(sim) == {
        "test:index:Wrapper::outer",
        "test:index:Wrapper$test:index:Inner::inner",
        "test:index:Wrapper$test:index:Inner$command:local:Command::inner-leaf",
    }

