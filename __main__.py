"""gpu-tenancy: a multi-tenant GPU Kubernetes platform on one Docker host.

Reads and validates the stack configuration before any resource exists, then
builds the layers top-down: kind management cluster -> Kamaji -> one hosted
control plane per tenant -> its worker nodes -> HAMi with simulated GPUs and
the in-stack smoke test. Tenants never depend on each other.
"""

import pulumi

from components.hami import GpuNode, HamiMockGpu, HamiMockGpuArgs
from components.kamaji import Kamaji, KamajiArgs
from components.kind_cluster import KindManagementCluster, KindManagementClusterArgs
from components.naming import node_name
from components.plan import plan_summary
from components.tenant_control_plane import TenantCni, TenantCniArgs, TenantControlPlane, TenantControlPlaneArgs
from components.worker_node import WorkerNode, WorkerNodeArgs
from config import read_stack_config

config = read_stack_config()

management = KindManagementCluster(
    config.management.cluster_name,
    KindManagementClusterArgs(
        cluster_name=config.management.cluster_name,
        node_image=config.management.node_image,
        # Set: adopt that existing cluster instead of creating a kind cluster (wrapped secret there).
        kubeconfig=config.management.kubeconfig,
        worker_cidrs=config.management.worker_cidrs,
    ),
)
kamaji = Kamaji(
    "kamaji",
    KamajiArgs(
        provider=management.provider,
        kind_subnet=management.kind_subnet,
        versions=config.versions,
        load_balancer_pool=config.management.load_balancer_pool,
    ),
)

tenant_outputs = {}
tenant_kubeconfigs = {}
tenant_join_tokens = {}
for tenant in config.tenants:
    control_plane = TenantControlPlane(
        tenant.name,
        TenantControlPlaneArgs(
            tenant=tenant,
            management_provider=management.provider,
            worker_networks=management.worker_networks,
            datastore_name=kamaji.datastore_name,
            versions=config.versions,
            depends_on=kamaji.ready,
        ),
    )
    workers = [
        WorkerNode(
            node_name(tenant.name, worker.name),
            WorkerNodeArgs(
                tenant_name=tenant.name,
                worker=worker,
                kubernetes_version=tenant.kubernetes_version,
                endpoint=control_plane.endpoint,
                join_token=control_plane.join_token,
                discovery_hash=control_plane.discovery_hash,
                tenant_kubeconfig=control_plane.kubeconfig,
                # Container workers sit on the kind network, which exists only once the cluster does.
                management_cluster=management,
                network_name=management.network_name,
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
            depends_on=[node.join for node in workers],
        ),
    )
    gpus = HamiMockGpu(
        tenant.name,
        HamiMockGpuArgs(
            tenant=tenant,
            gpu_mode=config.gpu_mode,
            smoke_test=config.smoke_test,
            versions=config.versions,
            tenant_provider=control_plane.provider,
            tenant_kubeconfig=control_plane.kubeconfig,
            nodes=[
                GpuNode(
                    worker=worker,
                    node_name=node.node_name,
                    access=node.access,
                    joined=node.join,
                )
                for worker, node in zip(tenant.workers, workers, strict=True)
            ],
            depends_on=cni.releases,
        ),
    )
    tenant_outputs[tenant.name] = {
        "namespace": control_plane.namespace,
        "controlPlane": control_plane.tenant_name,
        "endpoint": control_plane.endpoint,
        "discoveryHash": control_plane.discovery_hash,
        "joinTokenExpiration": control_plane.token_expiration,
        "nodes": gpus.node_names,
        "gpuCapacity": gpus.gpu_capacity,
        "smokeTest": gpus.smoke_test,
    }
    tenant_kubeconfigs[tenant.name] = control_plane.kubeconfig
    tenant_join_tokens[tenant.name] = control_plane.join_token

pulumi.export("plan", plan_summary(config))
pulumi.export("managementKubeconfig", management.kubeconfig)
pulumi.export("kindSubnet", management.kind_subnet)
pulumi.export("workerNetworks", management.worker_networks)
pulumi.export("lbPoolRange", kamaji.lb_pool_range)
pulumi.export("tenants", tenant_outputs)
# Secrets in their own outputs, so `tenants` stays readable without --show-secrets.
pulumi.export("tenantKubeconfigs", pulumi.Output.secret(tenant_kubeconfigs))
pulumi.export("tenantJoinTokens", pulumi.Output.secret(tenant_join_tokens))
