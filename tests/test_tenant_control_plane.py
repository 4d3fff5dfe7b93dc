"""The TenantControlPlane component under Pulumi mocks: what it registers, with which
secrets, providers and dependencies."""

from __future__ import annotations

import datetime
import re

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pytest

from components import tenant_spec
from components.tenant_control_plane import TenantCni, TenantCniArgs, TenantControlPlane, TenantControlPlaneArgs
from config import load_stack_config
from tests.crd_schema import crd_json_schema, schema_errors
from tests.fixtures import KIND_SUBNET_V4, TENANT_LB_IP, tenant_ca_pem
from tools.mockrun import last_run_registrations, run_program

UTC = datetime.timezone.utc
NOW = datetime.datetime(2026, 8, 20, 9, 30, tzinfo=UTC)
COMPONENT = "gpu-tenancy:index:TenantControlPlane"
TCP_TYPE = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
OUTPUTS = ("kubeconfig", "endpoint", "discovery_hash", "join_token", "namespace")


@pytest.fixture
def stack(dev_config):
    dev_config["tenants"][1]["quota"] = {"gpus": 2, "memoryMiB": 6000, "cores": 60}
    card = {"uuid": "GPU-MOCK-C0", "model": "NVIDIA-A100", "memoryMiB": 8192}
    dev_config["tenants"].append({"name": "tenant-c", "workers": [{"name": "w0", "gpus": [card]}]})
    return load_stack_config(dev_config)


def _program(stack, now=NOW, components=None):
    def program():
        mgmt = k8s.Provider("management", kubeconfig=pulumi.Output.secret("management-kubeconfig"))
        kamaji = k8s.helm.v3.Release(
            "kamaji",
            k8s.helm.v3.ReleaseArgs(chart="kamaji", namespace="kamaji-system"),
            opts=pulumi.ResourceOptions(provider=mgmt),
        )
        for tenant in stack.tenants:
            tcp = TenantControlPlane(
                tenant.name,
                TenantControlPlaneArgs(
                    tenant=tenant,
                    management_provider=mgmt,
                    worker_networks=pulumi.Output.from_input([KIND_SUBNET_V4]),
                    datastore_name="default",
                    versions=stack.versions,
                    depends_on=[kamaji],
                    now=now,
                ),
            )
            if components is not None:
                components[tenant.name] = tcp
            # Stand-in for a worker join: consumes exactly what WorkerNode consumes.
            join = command.local.Command(
                f"{tenant.name}-join-probe",
                create="true",
                environment={
                    "ENDPOINT": tcp.endpoint,
                    "TOKEN": tcp.join_token,
                    "HASH": tcp.discovery_hash,
                },
            )
            cni = TenantCni(
                tenant.name,
                TenantCniArgs(
                    tenant=tenant,
                    tenant_provider=tcp.provider,
                    endpoint=tcp.endpoint,
                    versions=stack.versions,
                    depends_on=[join],
                ),
            )
            if components is not None:
                components[f"{tenant.name}-cni"] = cni
            for key in OUTPUTS:
                pulumi.export(f"{tenant.name}.{key}", getattr(tcp, key))

    return program


@pytest.fixture
def run(stack):
    tenant_ca_pem()  # the mocks serve this (cached) CA; create it before they run in parallel
    return run_program({}, program=_program(stack))


def _provider_urn(registration):
    return registration.provider.rsplit("::", 1)[0]


def _tenant_resources(run, tenant):
    return run.descendants(run.named(tenant, COMPONENT))


# --------------------------------------------------------------------------- #
# Outputs
# --------------------------------------------------------------------------- #


def test_outputs_have_the_promised_values_and_secretness(run, stack):
    for tenant in stack.tenants:
        out = {key: run.outputs[f"{tenant.name}.{key}"] for key in OUTPUTS}
        assert out["namespace"].value == tenant.name and not out["namespace"].secret
        assert out["endpoint"].value == f"{TENANT_LB_IP}:6443" and not out["endpoint"].secret
        assert out["kubeconfig"].secret
        assert f"server: https://{TENANT_LB_IP}:6443" in out["kubeconfig"].value
        assert out["join_token"].secret
        assert tenant_spec.TOKEN_PATTERN.match(out["join_token"].value)
        assert out["discovery_hash"].value == tenant_spec.discovery_hash(tenant_ca_pem())
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", out["discovery_hash"].value)


def test_kubeconfig_and_token_are_secret_in_every_input_that_carries_them(run, stack):
    checked = 0
    for tenant in stack.tenants:
        token = run.outputs[f"{tenant.name}.join_token"].value
        token_id, token_secret = token.split(".")
        secrets = [run.outputs[f"{tenant.name}.kubeconfig"].value, token, token_id, token_secret]
        for resource in run.resources:
            for key, value in resource.inputs.items():
                if any(secret in str(value) for secret in secrets):
                    assert resource.is_secret(key), f"{resource}.{key} carries a secret in plain text"
                    checked += 1
    # Provider kubeconfig, token Secret metadata + stringData, and the join stand-in, per tenant.
    assert checked >= 4 * len(stack.tenants)


def test_secret_carriers_are_marked_at_the_source(run):
    provider = run.named("tenant-a-tenant", "pulumi:providers:kubernetes")
    assert provider.is_secret("kubeconfig")
    token = run.named("tenant-a-bootstrap-token", "kubernetes:core/v1:Secret")
    assert token.is_secret("stringData")
    for part in ("tenant-a-token-id", "tenant-a-token-secret"):
        assert run.named(part).additional_secret_outputs == ["result"]
    for read in ("tenant-a-admin-kubeconfig", "tenant-a-ca"):
        assert {"data", "stringData"} <= set(run.named(read).additional_secret_outputs)


# --------------------------------------------------------------------------- #
# Management cluster objects
# --------------------------------------------------------------------------- #


def test_namespace_and_isolation_policy_on_the_management_cluster(run):
    mgmt = run.named("management")
    namespace = run.named("tenant-a-namespace")
    assert namespace.inputs["metadata"]["name"] == "tenant-a"
    policy = run.named("tenant-a-isolation")
    assert policy.type == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
    expected = tenant_spec.isolation_network_policy("tenant-a", [KIND_SUBNET_V4])
    assert policy.inputs["spec"] == expected["spec"]
    assert policy.inputs["metadata"]["namespace"] == "tenant-a"
    assert {_provider_urn(namespace), _provider_urn(policy)} == {mgmt.urn}
    assert run.depends_on(policy, namespace)


def test_tcp_is_registered_valid_and_ordered_after_kamaji_and_the_fence(run, vendor_dir):
    tcp = run.named("tenant-a-tcp")
    assert tcp.type == TCP_TYPE
    assert _provider_urn(tcp) == run.named("management").urn
    assert run.depends_on(tcp, run.named("kamaji"))
    assert run.depends_on(tcp, run.named("tenant-a-isolation"))
    assert tcp.custom_timeouts["create"] == "20m"
    assert "status" not in tcp.inputs
    schema = crd_json_schema(vendor_dir / "kamaji" / "kamaji.clastix.io_tenantcontrolplanes.yaml")
    assert schema_errors(tcp.inputs, schema) == []
    assert tcp.inputs["metadata"]["annotations"]["pulumi.com/waitFor"] == tenant_spec.WAIT_FOR_READY


def test_credentials_are_read_from_kamajis_secrets_after_the_tcp(run):
    tcp = run.named("tenant-a-tcp")
    mgmt = run.named("management")
    for name, secret_id in (
        ("tenant-a-admin-kubeconfig", "tenant-a/tenant-a-admin-kubeconfig"),
        ("tenant-a-ca", "tenant-a/tenant-a-ca"),
    ):
        read = run.named(name)
        assert read.read and read.resource_id == secret_id
        assert tcp.urn in read.dependencies
        assert _provider_urn(read) == mgmt.urn


# --------------------------------------------------------------------------- #
# Tenant cluster objects
# --------------------------------------------------------------------------- #


def test_bootstrap_token_secret_in_the_tenant(run):
    secret = run.named("tenant-a-bootstrap-token", "kubernetes:core/v1:Secret")
    tenant_provider = run.named("tenant-a-tenant")
    assert _provider_urn(secret) == tenant_provider.urn
    token_id, token_secret = run.outputs["tenant-a.join_token"].value.split(".")
    assert secret.inputs["type"] == "bootstrap.kubernetes.io/token"
    assert secret.inputs["metadata"]["name"] == f"bootstrap-token-{token_id}"
    assert secret.inputs["metadata"]["namespace"] == "kube-system"
    data = secret.inputs["stringData"]
    assert (data["token-id"], data["token-secret"]) == (token_id, token_secret)
    assert data["expiration"] == tenant_spec.token_window(NOW).expiration_rfc3339
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    for part, length in (("tenant-a-token-id", 6), ("tenant-a-token-secret", 16)):
        inputs = run.named(part).inputs
        assert (inputs["length"], inputs["upper"], inputs["special"]) == (length, False, False)
        assert inputs["keepers"] == {"rotationWindow": tenant_spec.token_window(NOW).label}


def test_joins_wait_for_the_token_secret_and_the_ready_tcp(run):
    probe = run.named("tenant-a-join-probe")
    assert run.depends_on(probe, run.named("tenant-a-bootstrap-token", "kubernetes:core/v1:Secret"))
    assert run.depends_on(probe, run.named("tenant-a-tcp"))
    assert not run.depends_on(probe, run.named("tenant-a-calico"))


def test_calico_goes_in_after_the_joins(run):
    # Facts §6 (workers joined -> CNI); on destroy Calico is then removed while its nodes still exist.
    probe = run.named("tenant-a-join-probe")
    assert run.depends_on(run.named("tenant-a-calico-crds"), probe)
    assert run.depends_on(run.named("tenant-a-calico"), probe)


def test_calico_crds_then_operator_on_the_tenant_provider(run, stack):
    for tenant in stack.tenants:
        provider = run.named(f"{tenant.name}-tenant").urn
        crds = run.named(f"{tenant.name}-calico-crds")
        operator = run.named(f"{tenant.name}-calico")
        assert {_provider_urn(crds), _provider_urn(operator)} == {provider}
        assert crds.inputs["chart"] == "crd.projectcalico.org.v1"
        assert operator.inputs["chart"] == "tigera-operator"
        for release in (crds, operator):
            assert release.inputs["version"] == stack.versions.calico == "v3.32.1"
            assert release.inputs["repositoryOpts"] == {"repo": "https://docs.tigera.io/calico/charts"}
            assert release.inputs["namespace"] == "tigera-operator"
        assert run.depends_on(operator, crds)
        assert operator.inputs["timeout"] >= 15 * 60
        values = operator.inputs["values"]
        assert values["installation"]["calicoNetwork"]["ipPools"][0]["cidr"] == tenant.pod_cidr
        assert values["kubernetesServiceEndpoint"] == {"host": TENANT_LB_IP, "port": "6443"}


def test_cni_releases_and_component_attributes(stack):
    components = {}
    run_program({}, program=_program(stack, components=components))
    for tenant in stack.tenants:
        cni = components[f"{tenant.name}-cni"]
        assert [type(r) for r in cni.releases] == [k8s.helm.v3.Release, k8s.helm.v3.Release]
        component = components[tenant.name]
        assert component.tenant_name == tenant.name
        assert isinstance(component.tcp, k8s.apiextensions.CustomResource)
        assert isinstance(component.provider, k8s.Provider)


def test_quota_only_where_configured(run):
    assert not [r for r in run.of_type("kubernetes:core/v1:ResourceQuota") if r.name.startswith("tenant-a")]
    quota = run.named("tenant-b-gpu-quota")
    assert _provider_urn(quota) == run.named("tenant-b-tenant").urn
    assert quota.inputs["metadata"]["namespace"] == "default"
    assert quota.inputs["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "2",
        "requests.nvidia.com/gpumem": "6000",
        "requests.nvidia.com/gpucores": "60",
    }


# --------------------------------------------------------------------------- #
# Shape of the graph
# --------------------------------------------------------------------------- #


def test_every_resource_is_a_child_of_its_tenant_component(run, stack):
    for tenant in stack.tenants:
        component = run.named(tenant.name, COMPONENT)
        expected = {
            "namespace", "isolation", "tcp", "admin-kubeconfig", "ca", "tenant", "token-id", "token-secret",
            "bootstrap-token",
        } | ({"gpu-quota"} if tenant.quota else set())
        assert {child.name for child in run.children(component)} == {f"{tenant.name}-{n}" for n in expected}
        assert run.descendants(component) == run.children(component)
        cni = run.named(tenant.name, "gpu-tenancy:index:TenantCni")
        assert {child.name for child in run.children(cni)} == {f"{tenant.name}-calico-crds", f"{tenant.name}-calico"}


def test_three_tenants_never_depend_on_each_other(run, stack):
    names = [t.name for t in stack.tenants]
    assert len(names) == 3
    for mine in names:
        for other in names:
            if other == mine:
                continue
            other_component = run.named(other, COMPONENT)
            for resource in _tenant_resources(run, mine) + [run.named(f"{mine}-join-probe")]:
                assert not run.depends_on(resource, other_component), f"{resource} waits for tenant {other}"


def test_up_twice_in_one_window_registers_identical_inputs(stack):
    first = run_program({}, program=_program(stack, now=NOW))
    later = NOW + datetime.timedelta(days=1)
    assert tenant_spec.token_window(later) == tenant_spec.token_window(NOW)
    second = run_program({}, program=_program(stack, now=later))
    assert {r.urn: r.inputs for r in first.resources} == {r.urn: r.inputs for r in second.resources}


def test_a_new_window_rotates_only_the_token(stack):
    first = run_program({}, program=_program(stack, now=NOW))
    later = NOW + tenant_spec.TOKEN_ROTATION
    second = run_program({}, program=_program(stack, now=later))
    before = {r.urn: r for r in first.resources}
    changed = {r.name for r in second.resources if r.inputs != before[r.urn].inputs}
    token_resources = {f"{t.name}-{part}" for t in stack.tenants for part in ("token-id", "token-secret", "bootstrap-token")}
    assert changed == token_resources
    for tenant in stack.tenants:
        keepers = second.named(f"{tenant.name}-token-id").inputs["keepers"]
        assert keepers != before[second.named(f"{tenant.name}-token-id").urn].inputs["keepers"]
        expiration = second.named(f"{tenant.name}-bootstrap-token").inputs["stringData"]["expiration"]
        assert expiration == tenant_spec.token_window(later).expiration_rfc3339


def test_an_unresolved_tenant_fails_before_any_tenant_object_is_registered(stack):
    raw = stack.tenants[0].model_copy(update={"service_cidr": None})

    def program():
        mgmt = k8s.Provider("management", kubeconfig="management-kubeconfig")
        TenantControlPlane(
            raw.name,
            TenantControlPlaneArgs(
                tenant=raw, management_provider=mgmt, worker_networks=[KIND_SUBNET_V4], datastore_name="default",
                versions=stack.versions, depends_on=[],
            ),
        )

    with pytest.raises(Exception, match="load_stack_config"):
        run_program({}, program=program)
    assert [r.type for r in last_run_registrations()] == ["pulumi:providers:kubernetes", COMPONENT]


def test_preview_before_the_tcp_exists_does_not_read_its_secrets(stack, monkeypatch):
    # Adding a tenant to a running stack: in preview the TCP has no outputs yet. The Secret reads must
    # then carry an unknown id (the engine skips them) rather than a fixed one (it reads and fails).
    from pulumi.runtime import rpc

    from tools import mockrun

    original = mockrun.LabMocks.new_resource

    def tcp_not_created_yet(self, args):
        if args.typ == TCP_TYPE:
            return "", {}
        return original(self, args)

    monkeypatch.setattr(mockrun.LabMocks, "new_resource", tcp_not_created_yet)
    run_program({}, program=_program(stack), preview=True)
    reads = [r for r in last_run_registrations() if r.read]
    assert {r.name for r in reads} >= {"tenant-a-admin-kubeconfig", "tenant-a-ca"}
    assert {r.resource_id for r in reads} == {rpc.UNKNOWN}
