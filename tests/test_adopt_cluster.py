"""Adopting an existing management cluster (`management.kubeconfig`): KindManagementCluster and Kamaji under mocks.

What must hold: nothing runs on the host, nothing in that cluster is created except by the layers that own it,
credentials stay secret, and MetalLB appears only when `management.loadBalancerPool` asks for it.
"""

import ipaddress

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.kamaji import (
    ADOPTED_LB_POOL_NAME,
    CERT_MANAGER_CHART,
    KAMAJI_NAMESPACE,
    METALLB_NAMESPACE,
    Kamaji,
    KamajiArgs,
)
from components.kind_cluster import KindManagementCluster, KindManagementClusterArgs
from components.naming import COMPONENT_PREFIX
from config import Versions
from tests.fixtures import kubeconfig_yaml
from tools.mockrun import run_program

SERVER = "https://mgmt.example.net:6443"
KUBECONFIG = kubeconfig_yaml(SERVER, "prod-mgmt")
WORKER_CIDRS = ["10.20.0.0/16", "192.168.7.0/24"]
POOL = "10.20.255.200-10.20.255.220"
VERSIONS = Versions()

METALLB_TYPES = {
    "kubernetes:metallb.io/v1beta1:IPAddressPool",
    "kubernetes:metallb.io/v1beta1:L2Advertisement",
}


def _program(created: dict, *, pool: str | None = None, kubeconfig=KUBECONFIG):
    def program():
        cluster = KindManagementCluster(
            "management",
            KindManagementClusterArgs(
                # What config.Management defaults to; ignored for the cluster itself when adopting.
                cluster_name="gpu-tenancy",
                node_image="kindest/node:v1.35.0",
                kubeconfig=kubeconfig() if callable(kubeconfig) else kubeconfig,
                worker_cidrs=WORKER_CIDRS,
            ),
        )
        kamaji = Kamaji(
            "kamaji",
            KamajiArgs(
                provider=cluster.provider, kind_subnet=cluster.kind_subnet, versions=VERSIONS, load_balancer_pool=pool
            ),
        )
        # Stands in for a TenantControlPlane: waits for `ready`.
        k8s.core.v1.ConfigMap(
            "tenant-consumer",
            data={"datastore": kamaji.datastore_name},
            opts=pulumi.ResourceOptions(provider=kamaji.provider, depends_on=kamaji.ready),
        )
        created.update(cluster=cluster, kamaji=kamaji)
        pulumi.export("kubeconfig", cluster.kubeconfig)
        pulumi.export("worker_networks", cluster.worker_networks)
        pulumi.export("lb_pool_range", kamaji.lb_pool_range)

    return program


@pytest.fixture(scope="module")
def adopted():
    created: dict = {}
    run = run_program({}, program=_program(created))
    return run, created["cluster"], created["kamaji"]


@pytest.fixture(scope="module")
def adopted_with_pool():
    created: dict = {}
    run = run_program({}, program=_program(created, pool=POOL))
    return run, created["cluster"], created["kamaji"]


def _run_expecting(match: str, program) -> pytest.ExceptionInfo:
    with pytest.raises(ValueError, match=match) as raised:
        run_program({}, program=program)
    return raised


def _releases(run):
    return {r.inputs["chart"]: r for r in run.of_type("kubernetes:helm.sh/v3:Release")}


# --------------------------------------------------------------------------- #
# KindManagementCluster in adopt mode
# --------------------------------------------------------------------------- #


def test_nothing_runs_on_the_host_and_docker_is_not_asked(adopted):
    run, _, _ = adopted
    assert not [r for r in run.resources if r.type.startswith("command:")]
    assert not [r for r in run.resources if r.type.startswith("docker:")]
    assert not [c for c in run.calls if c.token == "docker:index/getNetwork:getNetwork"]
    assert run.calls == []


def test_the_component_holds_only_a_provider(adopted):
    run, cluster, _ = adopted
    component = run.named("management", f"{COMPONENT_PREFIX}:KindManagementCluster")
    assert [r.type for r in run.children(component)] == ["pulumi:providers:kubernetes"]
    assert cluster.adopted is True
    assert cluster.kind_subnet is None
    assert cluster.network_name == "kind"
    # Display name: the current context's cluster, not the kind default.
    assert cluster.cluster_name == "prod-mgmt"


def test_kubeconfig_is_secret_in_the_provider_and_the_output(adopted):
    run, _, _ = adopted
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    assert provider.is_secret("kubeconfig")
    assert provider.inputs["kubeconfig"] == KUBECONFIG
    assert run.outputs["kubeconfig"].secret
    assert run.outputs["kubeconfig"].value == KUBECONFIG


def test_provider_never_forgets_takes_over_or_replaces_without_cause(adopted):
    run, _, _ = adopted
    inputs = run.named("management-provider", "pulumi:providers:kubernetes").inputs
    # Explicit "false" (provider config travels as strings), so PULUMI_K8S_* variables cannot flip them.
    assert inputs["deleteUnreachable"] == "false"
    assert inputs["upsertExistingObjects"] == "false"
    # Only a different API server replaces the provider (and with it everything on the cluster).
    assert inputs["clusterIdentifier"] == SERVER


def test_worker_networks_are_the_configured_cidrs(adopted):
    run, _, _ = adopted
    assert run.outputs["worker_networks"].value == WORKER_CIDRS
    assert not run.outputs["worker_networks"].secret


def test_kubeconfig_given_as_a_secret_output_still_yields_the_server_identity():
    created: dict = {}
    run = run_program({}, program=_program(created, kubeconfig=lambda: pulumi.Output.secret(KUBECONFIG)))
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    assert provider.inputs["clusterIdentifier"] == SERVER
    assert provider.is_secret("kubeconfig")
    assert run.outputs["kubeconfig"].secret
    # Not readable synchronously: the configured name is shown instead.
    assert created["cluster"].cluster_name == "gpu-tenancy"


def test_a_kubeconfig_without_current_context_fails_before_any_resource():
    broken = KUBECONFIG.replace("current-context: prod-mgmt", "current-context: ''")
    assert broken != KUBECONFIG
    raised = _run_expecting("management.kubeconfig has no current-context", _program({}, kubeconfig=broken))
    assert "mock-token" not in str(raised.value)


def test_adopting_without_worker_cidrs_fails_naming_the_key():
    def program():
        KindManagementCluster("management", KindManagementClusterArgs("gpu-tenancy", "x", kubeconfig=KUBECONFIG))

    _run_expecting("management.workerCidrs is empty", program)


# --------------------------------------------------------------------------- #
# Kamaji on an adopted cluster without a pool: no MetalLB
# --------------------------------------------------------------------------- #


def test_no_metallb_without_a_pool(adopted):
    run, _, kamaji = adopted
    assert "metallb" not in _releases(run)
    assert not [r for r in run.resources if r.type in METALLB_TYPES]
    namespaces = {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
    assert METALLB_NAMESPACE not in namespaces
    assert kamaji.lb_pool_range is None
    assert run.outputs["lb_pool_range"].value is None


def test_ready_is_the_kamaji_release_alone(adopted):
    run, _, kamaji = adopted
    assert kamaji.ready == [kamaji.release]
    consumer = run.named("tenant-consumer", "kubernetes:core/v1:ConfigMap")
    assert run.depends_on(consumer, _releases(run)["kamaji"])
    assert run.depends_on(consumer, _releases(run)["cert-manager"])


def test_cert_manager_and_kamaji_are_still_installed_in_namespaces_this_stack_owns(adopted):
    run, _, _ = adopted
    component = run.named("kamaji", f"{COMPONENT_PREFIX}:Kamaji")
    children = run.children(component)
    assert sorted(r.type for r in children) == [
        "kubernetes:core/v1:Namespace",
        "kubernetes:core/v1:Namespace",
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:helm.sh/v3:Release",
    ]
    releases = _releases(run)
    for chart, namespace_name in (("cert-manager", CERT_MANAGER_CHART.namespace), ("kamaji", KAMAJI_NAMESPACE)):
        release = releases[chart]
        namespace = run.named(f"kamaji-{chart}-namespace", "kubernetes:core/v1:Namespace")
        assert namespace.inputs["metadata"]["name"] == namespace_name == release.inputs["namespace"]
        # Helm must not create (and later leave behind) the namespace: destroy deletes ours, after the release.
        assert not release.inputs.get("createNamespace")
        assert namespace.urn in release.dependencies
    assert releases["kamaji"].inputs["name"] == "kamaji"
    assert run.depends_on(releases["kamaji"], releases["cert-manager"])


def test_cert_manager_keeps_its_leader_election_out_of_kube_system(adopted):
    run, _, _ = adopted
    values = _releases(run)["cert-manager"].inputs["values"]
    assert values["global"] == {"leaderElection": {"namespace": "cert-manager"}}
    assert values["crds"] == {"enabled": True}


def test_everything_registered_is_created_by_this_stack(adopted):
    """No reads, patches or commands: destroy can only delete what `pulumi up` created."""
    run, _, _ = adopted
    for resource in run.resources:
        if not resource.custom or resource.type.startswith("pulumi:providers:"):
            continue
        assert not resource.read, resource
        assert not resource.type.endswith("Patch"), resource
        assert not resource.retain_on_delete, resource
    created = sorted(r.type for r in run.resources if r.custom and not r.type.startswith("pulumi:providers:"))
    assert created == [
        "kubernetes:core/v1:ConfigMap",  # the test's stand-in consumer
        "kubernetes:core/v1:Namespace",
        "kubernetes:core/v1:Namespace",
        "kubernetes:helm.sh/v3:Release",
        "kubernetes:helm.sh/v3:Release",
    ]


def test_every_child_uses_the_adopted_clusters_provider(adopted):
    run, _, _ = adopted
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    for child in run.children(run.named("kamaji", f"{COMPONENT_PREFIX}:Kamaji")):
        assert child.provider.rsplit("::", 1)[0] == provider.urn, child


# --------------------------------------------------------------------------- #
# Kamaji on an adopted cluster with management.loadBalancerPool: MetalLB with exactly that pool
# --------------------------------------------------------------------------- #


def test_metallb_is_installed_with_exactly_the_configured_pool(adopted_with_pool):
    run, _, kamaji = adopted_with_pool
    metallb = _releases(run)["metallb"]
    assert metallb.inputs["namespace"] == METALLB_NAMESPACE
    pool = run.named("kamaji-ip-pool", "kubernetes:metallb.io/v1beta1:IPAddressPool")
    l2 = run.named("kamaji-l2-advertisement", "kubernetes:metallb.io/v1beta1:L2Advertisement")
    assert pool.inputs["spec"] == {"addresses": [POOL]}
    assert pool.inputs["metadata"] == {"name": ADOPTED_LB_POOL_NAME, "namespace": METALLB_NAMESPACE}
    assert l2.inputs["spec"] == {"ipAddressPools": [ADOPTED_LB_POOL_NAME]}
    for resource in (pool, l2):
        assert metallb.urn in resource.dependencies
    assert run.outputs["lb_pool_range"].value == POOL
    assert len(kamaji.ready) == 3 and kamaji.ready[0] is kamaji.release


def test_ready_with_a_pool_includes_the_pool_and_its_advertisement(adopted_with_pool):
    run, _, _ = adopted_with_pool
    consumer = run.named("tenant-consumer", "kubernetes:core/v1:ConfigMap")
    for needed in (_releases(run)["kamaji"], run.named("kamaji-ip-pool"), run.named("kamaji-l2-advertisement")):
        assert run.depends_on(consumer, needed), needed


def test_a_cidr_pool_is_passed_through():
    run = run_program({}, program=_program({}, pool="10.20.255.192/27"))
    pool = run.named("kamaji-ip-pool", "kubernetes:metallb.io/v1beta1:IPAddressPool")
    assert pool.inputs["spec"] == {"addresses": ["10.20.255.192/27"]}
    assert ipaddress.ip_network("10.20.255.192/27").num_addresses == 32


@pytest.mark.parametrize("pool", ["10.20.255.250-10.20.255.200", "not-a-pool", "10.20.255.1/24"])
def test_an_unusable_pool_fails_naming_the_key(pool):
    _run_expecting(r"management\.loadBalancerPool", _program({}, pool=pool))
