"""gpu-tenancy: a multi-tenant GPU Kubernetes platform on one Docker host.

Reads and validates the stack configuration before any resource exists, then
builds the layers top-down: kind management cluster -> Kamaji -> one hosted
control plane per tenant -> its worker nodes -> Calico -> HAMi with simulated
GPUs and the in-stack smoke test. Tenants never depend on each other.
"""

import pulumi

from components.gpu.hami import GpuNode, TenantGpus, TenantGpusArgs
from components.management.cluster import ManagementCluster, ManagementClusterArgs
from components.management.image_cache import RegistryMirror, RegistryMirrorArgs, worker_mirrors
from components.management.kamaji import ETCD_CHART_DIR, Kamaji, KamajiArgs
from components.naming import node_name
from components.plan import plan_summary
from components.tenant.control_plane import TenantCni, TenantCniArgs, TenantControlPlane, TenantControlPlaneArgs
from components.worker.node import TenantAccess, WorkerNode, WorkerNodeArgs, worker_image
from config import read_stack_config

config = read_stack_config()

management = ManagementCluster(
    config.management.cluster_name,
    ManagementClusterArgs(
        cluster_name=config.management.cluster_name,
        node_image=config.management.node_image,
        # Set: adopt that existing cluster instead of creating a kind cluster (wrapped secret there).
        kubeconfig=config.management.kubeconfig,
        worker_cidrs=config.management.worker_cidrs,
    ),
)
# The lab's pull-through image caches (kind mode): the kind node and every container worker pull through them.
mirror = None
if config.management.runs_image_mirror:
    mirror = RegistryMirror(
        "image-mirror",
        RegistryMirrorArgs(
            cluster_name=config.management.cluster_name,
            cluster=management.cluster,
            docker_hub=config.management.docker_hub,
        ),
    )
kamaji = Kamaji(
    "kamaji",
    KamajiArgs(
        provider=management.provider,
        kubeconfig=management.kubeconfig,
        kind_subnet=management.kind_subnet,
        versions=config.versions,
        load_balancer_pool=config.management.load_balancer_pool,
        deleted_with=management.cluster,
        depends_on=mirror.node_ready if mirror is not None else [],
    ),
)

tenant_outputs = {}
admin_kubeconfigs = {}
user_kubeconfigs = {}
for tenant in config.tenants:
    control_plane = TenantControlPlane(
        tenant.name,
        TenantControlPlaneArgs(
            tenant=tenant,
            management_provider=management.provider,
            management_kubeconfig=management.kubeconfig,
            worker_networks=management.tenant_worker_networks(tenant.worker_cidrs),
            operator_cidrs=config.management.operator_cidrs,
            shared_datastore=kamaji.datastore_name,
            versions=config.versions,
            etcd_chart=ETCD_CHART_DIR,
            depends_on=kamaji.ready,
            deleted_with=management.cluster,
            images_ready=mirror.node_ready if mirror is not None else [],
        ),
    )
    access = TenantAccess(
        name=tenant.name,
        namespace=control_plane.namespace,
        kubernetes_version=tenant.kubernetes_version,
        endpoint=control_plane.endpoint,
        ca_certificate=control_plane.ca_certificate,
        discovery_hash=control_plane.discovery_hash,
        operator_kubeconfig=control_plane.operator_kubeconfig,
        management_kubeconfig=management.kubeconfig,
        control_plane=control_plane.tcp,
    )
    has_containers = any(worker.ssh is None for worker in tenant.workers)
    image = worker_image(tenant) if has_containers else None
    workers = [
        WorkerNode(
            node_name(tenant.name, worker.name),
            WorkerNodeArgs(
                tenant=access,
                worker=worker,
                image=image,
                # Container workers sit on the kind network, which exists only once the cluster does.
                management_cluster=management.cluster,
                network_name=management.network_name,
                mirrors=worker_mirrors(config.management, worker),
            ),
        )
        for worker in tenant.workers
    ]
    cni = TenantCni(
        tenant.name,
        TenantCniArgs(
            tenant=tenant,
            tenant_provider=control_plane.provider,
            endpoint=control_plane.endpoint,
            versions=config.versions,
            depends_on=[node.registered for node in workers],
            deleted_with=control_plane.tcp,
        ),
    )
    gpus = TenantGpus(
        tenant.name,
        TenantGpusArgs(
            tenant=tenant,
            gpu_mode=config.gpu_mode,
            smoke_test=config.smoke_test,
            versions=config.versions,
            tenant_provider=control_plane.provider,
            operator_kubeconfig=control_plane.operator_kubeconfig,
            management_kubeconfig=management.kubeconfig,
            control_plane_namespace=control_plane.namespace,
            control_plane=control_plane.tcp,
            nodes=[
                GpuNode(worker=worker, access=node.access, registered=node.registered)
                for worker, node in zip(tenant.workers, workers, strict=True)
            ],
            depends_on=cni.releases,
            runtime_class_name=config.nvidia.runtime_class_name if config.nvidia else None,
        ),
    )
    tenant_outputs[tenant.name] = {
        "namespace": control_plane.namespace,
        "controlPlane": control_plane.tenant_name,
        "endpoint": control_plane.endpoint,
        "discoveryHash": control_plane.discovery_hash,
        "dataStore": control_plane.datastore,
        # Who may open a connection to the tenant's API and Konnectivity server (loadBalancerSourceRanges).
        "sourceRanges": control_plane.source_ranges,
        "nodes": gpus.node_names,
        "gpuCapacity": gpus.gpu_capacity,
        "smokeTest": gpus.smoke_test,
    }
    admin_kubeconfigs[tenant.name] = control_plane.admin_kubeconfig
    user_kubeconfigs[tenant.name] = control_plane.user_kubeconfig

pulumi.export("plan", plan_summary(config))
pulumi.export("managementKubeconfig", management.kubeconfig)
pulumi.export("kindSubnet", management.kind_subnet)
pulumi.export("workerNetworks", management.worker_networks)
pulumi.export("lbPoolRange", kamaji.lb_pool_range)
pulumi.export("tenants", tenant_outputs)
# The lab's pull-through caches (None without them): registry -> cache container, for `make verify`.
pulumi.export("imageMirror", None if mirror is None else {
    registry: {"container": cache, "url": mirror.mirrors[registry]}
    for registry, cache in mirror.containers.items()
})
# Secrets in their own outputs, so `tenants` stays readable without --show-secrets.
# The tenants' users get the restricted credential; the admin one is the operator's.
pulumi.export("tenantKubeconfigs", pulumi.Output.secret(user_kubeconfigs))
pulumi.export("tenantAdminKubeconfigs", pulumi.Output.secret(admin_kubeconfigs))
