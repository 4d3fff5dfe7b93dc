"""The plain-mocks runner (`ops/registrations.py`): what a Registration records, which outputs come back secret, and
what the mocks answer for the program to register everything."""

import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi.runtime.rpc import UNKNOWN

from ops.registrations import KIND_SUBNET_V4, run
from tests.support.mockrun import ProgramFailedError, reference_stack, registered

TOKEN = "abcdef.0123456789abcdef"


def _program():
    provider = k8s.Provider("cluster", kubeconfig=pulumi.Output.secret("apiVersion: v1\nkind: Config\n"))
    on_cluster = pulumi.ResourceOptions(provider=provider)
    first = k8s.core.v1.ConfigMap("first", metadata={"name": "first", "namespace": "default"}, data={"a": "1"},
                                  opts=pulumi.ResourceOptions(provider=provider, additional_secret_outputs=["data"]))
    second = k8s.core.v1.ConfigMap(
        "second",
        metadata={"name": "second", "namespace": "default"},
        data={"token": pulumi.Output.secret(TOKEN), "from": first.metadata.apply(lambda m: m["name"])},
        opts=pulumi.ResourceOptions.merge(on_cluster, pulumi.ResourceOptions(
            deleted_with=first, delete_before_replace=True, replace_on_changes=["data"], retain_on_delete=True,
            ignore_changes=["metadata.labels"], custom_timeouts=pulumi.CustomTimeouts(create="2m"))),
    )
    k8s.core.v1.ConfigMap("unrelated", metadata={"name": "unrelated", "namespace": "default"},
                          data={"copy": first.data.apply(lambda d: d["a"])}, opts=on_cluster)
    read = k8s.core.v1.Namespace.get("kube-system", "kube-system", opts=on_cluster)
    pulumi.export("token", pulumi.Output.secret(second.data.apply(lambda d: d["token"])))
    pulumi.export("namespace", read.metadata.apply(lambda m: (m or {}).get("name")))


@pytest.fixture(scope="module")
def plain():
    return run({}, program=_program)


def test_registrations_record_inputs_secret_markers_dependencies_and_options(plain):
    first, second, unrelated = (plain.named(name, "kubernetes:core/v1:ConfigMap")
                                for name in ("first", "second", "unrelated"))
    provider = plain.named("cluster", "pulumi:providers:kubernetes")
    assert provider.is_secret("kubeconfig") and provider.inputs["kubeconfig"].startswith("apiVersion: v1")
    assert second.inputs["data"] == {"token": TOKEN, "from": "first"}
    assert second.is_secret("data") and not second.is_secret("metadata")
    assert second.provider.rsplit("::", 1)[0] == provider.urn and second.custom
    assert (second.deleted_with, second.delete_before_replace, second.retain_on_delete) == (first.urn, True, True)
    assert (second.replace_on_changes, second.ignore_changes) == (["data"], ["metadata.labels"])
    assert second.custom_timeouts["create"] == "2m"
    assert second.property_dependencies["data"] == [first.urn]
    assert plain.depends_on(second, first) and not plain.depends_on(first, second)
    assert first.additional_secret_outputs == ["data"]
    read = plain.named("kube-system", "kubernetes:core/v1:Namespace")
    assert (read.read, read.resource_id) == (True, "kube-system") and not first.read
    assert (plain.outputs["token"].value, plain.outputs["token"].secret) == (TOKEN, True)
    assert not plain.outputs["namespace"].secret


def test_outputs_named_in_additional_secret_outputs_come_back_secret(plain):
    # As the engine encrypts them: what is built from them is secret too.
    unrelated = plain.named("unrelated", "kubernetes:core/v1:ConfigMap")
    assert unrelated.inputs["data"] == {"copy": "1"} and unrelated.is_secret("data")


def test_a_preview_leaves_ids_and_what_providers_compute_unknown():
    def program():
        provider = k8s.Provider("cluster", kubeconfig="apiVersion: v1\nkind: Config\n")
        on_cluster = pulumi.ResourceOptions(provider=provider)
        tcp = k8s.apiextensions.CustomResource("tcp", api_version="kamaji.clastix.io/v1alpha1",
                                               kind="TenantControlPlane", metadata={"name": "t"}, opts=on_cluster)
        uid = tcp.metadata.apply(lambda m: (m or {}).get("uid"))
        k8s.core.v1.ConfigMap("consumer", metadata={"name": "c"}, data={"id": tcp.id, "uid": uid}, opts=on_cluster)

    preview = registered({}, program=program, preview=True)
    data = preview.named("consumer").raw_inputs["data"]
    assert data["id"] == UNKNOWN and set(data.values()) == {UNKNOWN}
    up = registered({}, program=program)
    assert up.named("consumer").inputs["data"] == {"id": "tcp-id", "uid": "uid-tcp"}


def test_an_invoke_without_an_answer_fails_naming_it():
    def program():
        pulumi.runtime.invoke("docker:index/getNetwork:getNetwork", {"name": "kind"})

    with pytest.raises(ProgramFailedError, match="no answer for the invoke docker:index/getNetwork:getNetwork"):
        registered({}, program=program)


def test_the_reference_lab_registers_everything_with_the_outputs_it_reads_back():
    lab = registered(reference_stack())
    # The kind network from kind-create.sh's stdout, each tenant's endpoint and credentials from Kamaji, the
    # smoke test's evidence from HAMi: the program reached its last resources and exports.
    assert lab.outputs["kindSubnet"].value == KIND_SUBNET_V4
    for name, tenant in lab.outputs["tenants"].value.items():
        assert tenant["endpoint"].endswith(":6443") and tenant["discoveryHash"].startswith("sha256:")
        assert tenant["smokeTest"]["node"] == f"{name}-worker-0"
        assert "token: mock-service-account-token" in lab.outputs["tenantKubeconfigs"].value[name]
    assert lab.named("tenant-b-gpu-smoke-node").read
