"""The harness itself (`tests.support.mockrun`): what a Registration records, stack outputs, and how a failed run reads."""

import pulumi
import pulumi_kubernetes as k8s
import pytest

from tests.support.mockrun import ProgramFailedError, reference_stack, run_program
from tests.support.sim.lab import lab_world

TOKEN = "abcdef.0123456789abcdef"


def _program(kubeconfig: str):
    def program():
        provider = k8s.Provider("cluster", kubeconfig=pulumi.Output.secret(kubeconfig))
        on_cluster = pulumi.ResourceOptions(provider=provider)
        first = k8s.core.v1.ConfigMap("first", metadata={"name": "first", "namespace": "default"}, data={"a": "1"},
                                      opts=on_cluster)
        second = k8s.core.v1.ConfigMap(
            "second",
            metadata={"name": "second", "namespace": "default"},
            data={"token": pulumi.Output.secret(TOKEN), "from": first.metadata.apply(lambda m: m["name"])},
            opts=pulumi.ResourceOptions.merge(on_cluster, pulumi.ResourceOptions(
                deleted_with=first, delete_before_replace=True, replace_on_changes=["data"],
                ignore_changes=["metadata.labels"], custom_timeouts=pulumi.CustomTimeouts(create="2m"))),
        )
        k8s.core.v1.ConfigMap("unrelated", metadata={"name": "unrelated", "namespace": "default"}, opts=on_cluster)
        read = k8s.core.v1.Namespace.get("kube-system", "kube-system", opts=on_cluster)
        pulumi.export("token", pulumi.Output.secret(second.data.apply(lambda d: d["token"])))
        pulumi.export("namespace", read.metadata.apply(lambda m: m["name"]))

    return program


@pytest.fixture(scope="module")
def run():
    world = lab_world()
    return run_program({}, program=_program(world.adopt_cluster()), world=world)


def test_registrations_record_inputs_secret_markers_and_options(run):
    first, second, unrelated = (run.named(name, "kubernetes:core/v1:ConfigMap")
                                for name in ("first", "second", "unrelated"))
    provider = run.named("cluster", "pulumi:providers:kubernetes")
    assert provider.is_secret("kubeconfig") and "clusters" in provider.inputs["kubeconfig"]
    # Unwrapped inputs, secret marker kept in raw_inputs only.
    assert second.inputs["data"] == {"token": TOKEN, "from": "first"}
    assert second.is_secret("data") and not second.is_secret("metadata")
    assert TOKEN not in str(second.inputs["metadata"])
    assert second.provider.rsplit("::", 1)[0] == provider.urn
    assert (second.deleted_with, second.delete_before_replace) == (first.urn, True)
    assert (second.replace_on_changes, second.ignore_changes) == (["data"], ["metadata.labels"])
    assert second.custom_timeouts.get("create") == "2m"
    assert second.property_dependencies["data"] == [first.urn]
    assert run.depends_on(second, first) and not run.depends_on(first, second)
    assert not run.depends_on(unrelated, first)
    assert run.named("kube-system", "kubernetes:core/v1:Namespace").read
    assert not first.read


def test_stack_outputs_carry_value_and_secretness(run):
    assert (run.outputs["token"].value, run.outputs["token"].secret) == (TOKEN, True)
    assert (run.outputs["namespace"].value, run.outputs["namespace"].secret) == ("kube-system", False)


def test_a_failed_run_raises_with_the_rendered_plan():
    world = lab_world()
    kubeconfig = world.adopt_cluster()

    def program():
        provider = k8s.Provider("cluster", kubeconfig=pulumi.Output.secret(kubeconfig))
        k8s.core.v1.ConfigMap("fine", metadata={"name": "fine", "namespace": "default"},
                              opts=pulumi.ResourceOptions(provider=provider))
        k8s.core.v1.ConfigMap("orphan", metadata={"name": "orphan", "namespace": "missing"},
                              opts=pulumi.ResourceOptions(provider=provider))

    with pytest.raises(ProgramFailedError) as failed:
        run_program({}, program=program, world=world)
    plan = str(failed.value)
    assert plan.startswith("Updating (simulated):")
    assert "kubernetes:core/v1:ConfigMap" in plan and "orphan" in plan and "**failed**" in plan
    assert 'namespaces "missing" not found' in plan
    assert plan.splitlines()[-1].startswith("error: kubernetes:core/v1:ConfigMap orphan:")


def test_the_reference_stack_is_read_without_the_project_namespace():
    raw = reference_stack()
    assert {"tenants", "gpuMode", "smokeTest"} <= set(raw)
    assert not any(key.startswith("gpu-tenancy:") for key in raw)
