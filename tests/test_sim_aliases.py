"""The simulator's URNs and aliases, each against the engine code it follows (pulumi/pulumi at 1b594989).

URNs: pkg/resource/deploy/deployment.go generateURN. Aliases: pkg/resource/deploy/step_generator.go
generateAliases / getOldResource / inheritedChildAlias / collapseAliasToUrn / providerChanged, and
pkg/resource/deploy/snapshot.go NormalizeURNReferences. The Python SDK sends alias *specs* to a monitor that
reports the aliasSpecs feature, as the mock monitor does (sdk/python/lib/pulumi/runtime/resource.py
prepare_aliases, runtime/mocks.py GetDeploymentInfo): a child's inherited aliases are then the engine's work.
"""

from __future__ import annotations

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pytest

from tests.support.sim import Lifecycle, World, scripts
from tests.support.sim.state import plain

STACK_PREFIX = "urn:pulumi:dev::gpu-tenancy::"


@pytest.fixture
def ran(monkeypatch):
    """The commands the simulated host ran, as (action, script); a script `fail` fails its delete."""
    calls: list[tuple[str, str]] = []

    def execute(world, resource_type, inputs, action):
        script = str(plain(inputs).get(action) or "")
        calls.append((action, script))
        if script == "fail" and action == "delete":
            raise scripts.CommandFailedError("it failed")
        return "ok"

    monkeypatch.setattr(scripts, "execute", execute)
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


def _nothing_changes(plan, new_components=()) -> None:
    assert plan.changed() == {}, plan.render()
    assert plan.component_changes() == ({"create": set(new_components)} if new_components else {}), plan.render()
    assert {s.op for s in plan.steps if not (s.component and s.name in new_components)} == {"same"}, plan.render()


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


def _renamed(alias: bool):
    def program():
        aliases = [pulumi.Alias(type_="test:index:Old")] if alias else []
        Box("test:index:New", "box", pulumi.ResourceOptions(aliases=aliases))
    return program


def test_a_type_alias_keeps_the_component_and_its_children(ran):
    sim = _sim(lambda: Box("test:index:Old", "box"))
    sim.up()
    ran.clear()
    sim.program = _renamed(alias=True)
    _nothing_changes(sim.preview())
    _nothing_changes(sim.up())
    # The state moved to the new URNs; the old ones are gone without a delete.
    assert _urns(sim) == {"test:index:New::box", "test:index:New$command:local:Command::box-leaf"}
    assert ran == []
    sim.destroy()
    assert sim.engine.state == {} and ran == [("delete", "true")]


def test_without_the_alias_the_renamed_children_are_deleted_and_created(ran):
    sim = _sim(lambda: Box("test:index:Old", "box"))
    sim.up()
    sim.program = _renamed(alias=False)
    plan = sim.preview()
    assert plan.changed() == {"create": {"box-leaf"}, "delete": {"box-leaf"}}
    # step_generator.go diff "prov == nil": a component is created and deleted too (no provider call).
    assert plan.component_changes() == {"create": {"box"}, "delete": {"box"}}


def _moved(aliases):
    def program():
        Wrapper("wrap", lambda self: Box("test:index:Part", "part", pulumi.ResourceOptions(
            parent=self, aliases=aliases)))
    return program


@pytest.mark.parametrize("alias", [pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE),
                                   "urn:pulumi:dev::gpu-tenancy::test:index:Part::part"],
                         ids=["no-parent-spec", "old-urn"])
def test_a_component_moved_under_a_new_parent_keeps_its_children(ran, alias):
    sim = _sim(lambda: Box("test:index:Part", "part"))
    sim.up()
    sim.program = _moved([alias])
    # Only the new parent is new: a component, which the preview lists but which holds nothing.
    _nothing_changes(sim.preview(), new_components=["wrap"])
    sim.up()
    assert "test:index:Wrapper$test:index:Part$command:local:Command::part-leaf" in _urns(sim)


def test_moved_without_an_alias_is_delete_and_create(ran):
    sim = _sim(lambda: Box("test:index:Part", "part"))
    sim.up()
    sim.program = _moved([])
    assert sim.preview().changed() == {"create": {"part-leaf"}, "delete": {"part-leaf"}}


def test_a_renamed_parent_finds_children_named_after_its_old_name(ran):
    """SG inheritedChildAlias: `new-leaf` under a parent found as `old` was `old-leaf`."""
    sim = _sim(lambda: Box("test:index:Box", "old"))
    sim.up()
    sim.program = lambda: Box("test:index:Box", "new", pulumi.ResourceOptions(aliases=[pulumi.Alias(name="old")]))
    _nothing_changes(sim.preview())


def test_an_aliased_resource_is_diffed_as_usual(ran):
    sim = _sim(lambda: Box("test:index:Old", "box"))
    sim.up()
    sim.program = lambda: Box("test:index:New", "box", pulumi.ResourceOptions(
        aliases=[pulumi.Alias(type_="test:index:Old")]), create="true # changed")
    plan = sim.up()
    assert plan.changed() == {"update": {"box-leaf"}}, plan.render()
    assert plan.step("box-leaf").urn == f"{STACK_PREFIX}test:index:New$command:local:Command::box-leaf"


def test_two_resources_claiming_one_alias_fail_the_operation(ran):
    sim = _sim(lambda: Box("test:index:Old", "box"))
    sim.up()

    def program():
        first = Box("test:index:A", "box", pulumi.ResourceOptions(aliases=[pulumi.Alias(type_="test:index:Old")]))
        Box("test:index:B", "box", pulumi.ResourceOptions(aliases=[pulumi.Alias(type_="test:index:Old")],
                                                          depends_on=[first]))

    sim.program = program
    plan = sim.preview(expect_error=True)
    # sdk/go/common/diag/errors.go GetDuplicateResourceAliasError (2008).
    assert f"Duplicate resource alias '{STACK_PREFIX}test:index:Old::box' applied to resource with URN " \
           f"'{STACK_PREFIX}test:index:B::box' conflicting with resource with URN '{STACK_PREFIX}test:index:A::box'" \
           in plan.error, plan.render()


def test_a_urn_another_resource_claimed_as_its_alias_fails_the_operation(ran):
    sim = _sim(lambda: command.local.Command("a", create="true"))
    sim.up()

    def program():
        b = command.local.Command("b", create="true", opts=pulumi.ResourceOptions(aliases=[pulumi.Alias(name="a")]))
        command.local.Command("a", create="true", opts=pulumi.ResourceOptions(depends_on=[b]))

    sim.program = program
    plan = sim.preview(expect_error=True)
    # errors.go GetDuplicateResourceAliasedError (2016).
    assert f"Duplicate resource URN '{STACK_PREFIX}command:local:Command::a' conflicting with alias on resource " \
           f"with URN '{STACK_PREFIX}command:local:Command::b'" in plan.error, plan.render()


def test_a_provider_found_under_an_alias_is_no_provider_change():
    world = World()
    world.create_kind_cluster("lab", {"nodes": [{"role": "control-plane"}]})
    kubeconfig = world.kind_admin_kubeconfig("lab")

    def build(parent, aliases):
        provider = k8s.Provider("lab", kubeconfig=pulumi.Output.secret(kubeconfig),
                                opts=pulumi.ResourceOptions(parent=parent, aliases=aliases))
        k8s.core.v1.Namespace("ns", metadata={"name": "team"}, opts=pulumi.ResourceOptions(provider=provider))

    sim = _sim(lambda: build(None, []), world)
    sim.up()
    sim.program = lambda: Wrapper("wrap", lambda self: build(self, [pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)]))
    _nothing_changes(sim.up(), new_components=["wrap"])
    namespace = sim.resource("ns")
    assert namespace.provider_urn == f"{STACK_PREFIX}test:index:Wrapper$pulumi:providers:kubernetes::lab"


def test_what_stays_under_an_old_urn_refers_to_the_new_urns(ran):
    def before():
        box = Box("test:index:Old", "box")
        command.local.Command("dependent", create="true", delete="fail",
                              opts=pulumi.ResourceOptions(depends_on=[box.leaf]))

    sim = _sim(before)
    sim.up()
    sim.program = _renamed(alias=True)
    plan = sim.up(expect_error=True)
    assert plan.step("dependent").op == "delete" and plan.step("dependent").failed
    # snapshot.go NormalizeURNReferences: the resource whose delete failed now waits for the renamed leaf.
    assert sim.resource("dependent").dependencies == [f"{STACK_PREFIX}test:index:New$command:local:Command::box-leaf"]
    assert not any("test:index:Old" in urn for urn in sim.engine.state)



def test_a_resource_keeps_a_provider_found_under_an_alias_even_when_its_config_replaces_it():
    """SG:2834 providerChanged returns "no change" for an aliased provider before it asks DiffConfig: only the
    provider is replaced, not what it manages (without the alias both would be)."""
    world = World()
    for cluster in ("lab", "other"):
        world.create_kind_cluster(cluster, {"nodes": [{"role": "control-plane"}]})

    def build(parent, aliases, cluster):
        provider = k8s.Provider("lab", kubeconfig=pulumi.Output.secret(world.kind_admin_kubeconfig(cluster)),
                                opts=pulumi.ResourceOptions(parent=parent, aliases=aliases))
        k8s.core.v1.Namespace("ns", metadata={"name": "team"}, opts=pulumi.ResourceOptions(provider=provider))

    sim = _sim(lambda: build(None, [], "lab"), world)
    sim.up()
    moved = sim.fork()
    moved.program = lambda: Wrapper("wrap", lambda self: build(
        self, [pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)], "other"))
    plan = moved.preview()
    assert {("replace", "lab"), ("same", "ns")} <= {(s.op, s.name) for s in plan.steps}, plan.render()
    sim.program = lambda: build(None, [], "other")
    plan = sim.preview()
    assert {("replace", "lab"), ("replace", "ns")} <= {(s.op, s.name) for s in plan.steps}, plan.render()


def test_a_component_is_unchanged_while_its_inputs_are_and_updated_when_they_change(ran):
    """step_generator.go diff: a component has no provider, so equal inputs are "same", others "update"."""
    def program_with(value):
        def program():
            pulumi.ComponentResource("test:index:Props", "props", {"value": value}).register_outputs({})
        return program

    sim = _sim(program_with("1"))
    assert sim.up().component_changes() == {"create": {"props"}}
    assert sim.preview().component_changes() == {}
    sim.program = program_with("2")
    assert sim.preview().component_changes() == {"update": {"props"}}
    assert sim.destroy().component_changes() == {"delete": {"props"}}
