"""Adopting an existing management cluster (`management.kubeconfig`): ManagementCluster and Kamaji on it.

What must hold: nothing runs on the host, nothing in that cluster is created except by the layers that own it,
credentials stay secret, and MetalLB appears only when `management.loadBalancerPool` asks for it.
"""

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.management.cluster import ManagementCluster, ManagementClusterArgs
from components.management.kamaji import (
    ADOPTED_LB_POOL_NAME,
    CERT_MANAGER_CHART,
    METALLB_NAMESPACE,
    Kamaji,
    KamajiArgs,
)
from config import Versions
from naming import COMPONENT_PREFIX, KAMAJI_NAMESPACE
from tests.support.mockrun import ProgramFailedError, run_program
from tests.support.sim import World
from tests.support.sim.lab import lab_world

WORKER_CIDRS = ["10.20.0.0/16", "192.168.7.0/24"]
POOL = "10.20.255.200-10.20.255.220"
VERSIONS = Versions()
KAMAJI = f"{COMPONENT_PREFIX}:Kamaji"
METALLB_TYPES = {"kubernetes:metallb.io/v1beta1:IPAddressPool", "kubernetes:metallb.io/v1beta1:L2Advertisement"}


def _program(created: dict, kubeconfig, *, pool: str | None = None, worker_cidrs=tuple(WORKER_CIDRS)):
    def program():
        cluster = ManagementCluster(
            "management",
            ManagementClusterArgs(
                # What config.Management defaults to; ignored for the cluster itself when adopting.
                cluster_name="gpu-tenancy",
                node_image="kindest/node:v1.35.0",
                kubeconfig=kubeconfig() if callable(kubeconfig) else kubeconfig,
                worker_cidrs=list(worker_cidrs),
            ),
        )
        kamaji = Kamaji("kamaji", KamajiArgs(provider=cluster.provider, kubeconfig=cluster.kubeconfig,
                                             kind_subnet=cluster.kind_subnet, versions=VERSIONS,
                                             load_balancer_pool=pool))
        # Stands in for a TenantControlPlane: waits for `ready`.
        k8s.core.v1.ConfigMap(
            "tenant-consumer",
            metadata={"name": "tenant-consumer", "namespace": "default"},
            data={"datastore": kamaji.datastore_name},
            opts=pulumi.ResourceOptions(provider=kamaji.provider, depends_on=kamaji.ready),
        )
        created.update(cluster=cluster, kamaji=kamaji)
        pulumi.export("kubeconfig", cluster.kubeconfig)
        pulumi.export("worker_networks", cluster.worker_networks)
        pulumi.export("lb_pool_range", kamaji.lb_pool_range)

    return program


def _adopt(pool: str | None = None, *, as_output: bool = False):
    world = lab_world()
    kubeconfig = world.adopt_cluster()
    created: dict = {}
    given = (lambda: pulumi.Output.secret(kubeconfig)) if as_output else kubeconfig
    run = run_program({}, program=_program(created, given, pool=pool), world=world)
    return run, created["cluster"], created["kamaji"], world, kubeconfig


@pytest.fixture(scope="module")
def adopted():
    return _adopt()


@pytest.fixture(scope="module")
def adopted_with_pool():
    return _adopt(POOL)


def _releases(run):
    return {r.inputs["name"]: r for r in run.of_type("kubernetes:helm.sh/v3:Release")}


# --------------------------------------------------------------------------- #
# ManagementCluster in adopt mode
# --------------------------------------------------------------------------- #


def test_nothing_runs_on_the_host_and_no_kind_cluster_is_made(adopted):
    run, _, _, world, _ = adopted
    assert not [r for r in run.resources if r.type.startswith(("command:", "docker:"))]
    assert world.kind == {} and world.docker.containers == {} and world.docker.networks == {}


def test_the_component_holds_only_a_provider(adopted):
    run, cluster, _, _, _ = adopted
    component = run.named("management", f"{COMPONENT_PREFIX}:ManagementCluster")
    assert [r.type for r in run.children(component)] == ["pulumi:providers:kubernetes"]
    assert cluster.adopted is True and cluster.cluster is None
    assert cluster.kind_subnet is None
    # Display name: the current context's cluster, not the kind default.
    assert cluster.cluster_name == "prod-mgmt"


def test_kubeconfig_is_secret_in_the_provider_and_the_output(adopted):
    run, _, _, _, kubeconfig = adopted
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    assert provider.is_secret("kubeconfig") and provider.inputs["kubeconfig"] == kubeconfig
    assert run.outputs["kubeconfig"].secret and run.outputs["kubeconfig"].value == kubeconfig
    webhook = run.named("kamaji-webhook-ready")
    assert webhook.is_secret("kubeconfig") and webhook.inputs["kubeconfig"] == kubeconfig


def test_provider_never_forgets_takes_over_or_replaces_without_cause(adopted):
    run, _, _, world, _ = adopted
    inputs = run.named("management-provider", "pulumi:providers:kubernetes").inputs
    # Explicit "false" (provider config travels as strings), so PULUMI_K8S_* variables cannot flip them.
    assert inputs["deleteUnreachable"] == "false"
    assert inputs["upsertExistingObjects"] == "false"
    # Only a different API server replaces the provider (and with it everything on the cluster).
    assert inputs["clusterIdentifier"] == world.adopted.server


def test_worker_networks_are_the_configured_cidrs(adopted):
    run, _, _, _, _ = adopted
    assert run.outputs["worker_networks"].value == WORKER_CIDRS
    assert not run.outputs["worker_networks"].secret


def test_kubeconfig_given_as_a_secret_output_still_yields_the_server_identity():
    run, cluster, _, world, _ = _adopt(as_output=True)
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    assert provider.inputs["clusterIdentifier"] == world.adopted.server
    assert provider.is_secret("kubeconfig") and run.outputs["kubeconfig"].secret
    # Not readable synchronously: the configured name is shown instead.
    assert cluster.cluster_name == "gpu-tenancy"


def test_a_kubeconfig_without_current_context_fails_before_any_resource():
    kubeconfig = World().adopt_cluster()
    broken = kubeconfig.replace("current-context: ", "current-context: ''\nx-was: ")
    assert broken != kubeconfig
    with pytest.raises(ProgramFailedError) as failed:
        run_program({}, program=_program({}, broken), world=World())
    message = str(failed.value)
    assert "management.kubeconfig has no current-context" in message
    assert "0 unchanged" in message and "to create" not in message
    assert "client-key-data" not in message


def test_a_tenant_without_any_worker_network_fails_naming_the_keys():
    def program():
        cluster = ManagementCluster("mgmt", ManagementClusterArgs(
            cluster_name="unused", node_image="kindest/node:v1.35.0", kubeconfig=World().adopt_cluster()))
        cluster.tenant_worker_networks([])

    with pytest.raises(ProgramFailedError, match=r"management\.workerCidrs is empty"):
        run_program({}, program=program, world=World())


def test_a_tenant_admits_the_shared_networks_and_its_own():
    def program():
        cluster = ManagementCluster("mgmt", ManagementClusterArgs(
            cluster_name="unused", node_image="kindest/node:v1.35.0", kubeconfig=World().adopt_cluster(),
            worker_cidrs=["10.20.0.0/24"]))
        pulumi.export("own", cluster.tenant_worker_networks(["10.20.1.0/24"]))
        pulumi.export("shared", cluster.tenant_worker_networks([]))

    run = run_program({}, program=program, world=World())
    assert run.outputs["own"].value == ["10.20.0.0/24", "10.20.1.0/24"]
    assert run.outputs["shared"].value == ["10.20.0.0/24"]


# --------------------------------------------------------------------------- #
# Kamaji on an adopted cluster without a pool: no MetalLB
# --------------------------------------------------------------------------- #


def test_no_metallb_without_a_pool(adopted):
    run, _, kamaji, world, _ = adopted
    assert "metallb" not in _releases(run)
    assert not [r for r in run.resources if r.type in METALLB_TYPES]
    assert METALLB_NAMESPACE not in {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
    assert kamaji.lb_pool_range is None and run.outputs["lb_pool_range"].value is None
    assert ("Namespace", "", METALLB_NAMESPACE) not in world.adopted.objects


def test_tenants_wait_for_kamajis_webhook_and_data_store(adopted):
    run, _, _, _, _ = adopted
    webhook, datastore = run.named("kamaji-webhook-ready"), run.named("kamaji-datastore")
    consumer = run.named("tenant-consumer", "kubernetes:core/v1:ConfigMap")
    for needed in (webhook, datastore, _releases(run)["kamaji"], _releases(run)["cert-manager"]):
        assert run.depends_on(consumer, needed), needed
    assert run.depends_on(webhook, datastore)


def test_cert_manager_and_kamaji_are_installed_in_namespaces_this_stack_owns(adopted):
    run, _, _, world, _ = adopted
    releases = _releases(run)
    for chart, namespace_name in (("cert-manager", CERT_MANAGER_CHART.namespace), ("kamaji", KAMAJI_NAMESPACE)):
        release = releases[chart]
        namespace = run.named(f"kamaji-{chart}-namespace", "kubernetes:core/v1:Namespace")
        assert namespace.inputs["metadata"]["name"] == namespace_name == release.inputs["namespace"]
        # Helm must not create (and later leave behind) the namespace: destroy deletes ours, after the release.
        assert not release.inputs.get("createNamespace")
        assert namespace.urn in release.dependencies
        assert ("Namespace", "", namespace_name) in world.adopted.objects
    assert run.depends_on(releases["kamaji"], releases["cert-manager"])
    # The chart's leader-election Leases go into our namespace, not the adopted cluster's kube-system.
    assert releases["cert-manager"].inputs["values"]["global"] == {"leaderElection": {"namespace": "cert-manager"}}


KAMAJI_CRD_PATCHES = [f"kamaji-kamaji-crd-{name}.kamaji.clastix.io"
                      for name in ("datastores", "kubeconfiggenerators", "tenantcontrolplanes")]


def test_everything_registered_on_the_cluster_is_created_by_this_stack(adopted):
    """No reads, patches, commands or retained objects: destroy deletes only what `pulumi up` created. The one
    exception is Kamaji's crds/: Helm installs those and never deletes them, so the program applies them itself
    (server-side, a Patch, so a chart bump reaches them) and keeps them on destroy, as Helm did."""
    run, _, _, _, _ = adopted
    for resource in run.resources:
        if not resource.custom or resource.type.startswith("pulumi:providers:") or resource.name in KAMAJI_CRD_PATCHES:
            continue
        assert not resource.read, resource
        assert not resource.type.endswith("Patch"), resource
        assert not resource.retain_on_delete, resource
    for name in KAMAJI_CRD_PATCHES:
        crd = run.named(name, "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinitionPatch")
        assert crd.retain_on_delete
    created = sorted(r.name for r in run.resources if r.custom and r.type.startswith("kubernetes:")
                     and not r.type.startswith("pulumi:providers:") and r.name not in KAMAJI_CRD_PATCHES)
    assert created == ["kamaji-cert-manager", "kamaji-cert-manager-namespace", "kamaji-datastore",
                       "kamaji-etcd-clients", "kamaji-kamaji", "kamaji-kamaji-namespace", "tenant-consumer"]


def test_every_child_uses_the_adopted_clusters_provider(adopted):
    run, _, _, _, _ = adopted
    provider = run.named("management-provider", "pulumi:providers:kubernetes")
    for child in run.children(run.named("kamaji", KAMAJI)):
        if child.type.startswith("kubernetes:"):
            assert child.provider.rsplit("::", 1)[0] == provider.urn, child


# --------------------------------------------------------------------------- #
# Kamaji on an adopted cluster with management.loadBalancerPool: MetalLB with exactly that pool
# --------------------------------------------------------------------------- #


def test_metallb_is_installed_with_exactly_the_configured_pool(adopted_with_pool):
    run, _, kamaji, _, _ = adopted_with_pool
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


def test_tenants_also_wait_for_the_pool_and_its_advertisement(adopted_with_pool):
    run, _, _, _, _ = adopted_with_pool
    consumer = run.named("tenant-consumer", "kubernetes:core/v1:ConfigMap")
    for needed in (_releases(run)["kamaji"], run.named("kamaji-ip-pool"), run.named("kamaji-l2-advertisement")):
        assert run.depends_on(consumer, needed), needed
