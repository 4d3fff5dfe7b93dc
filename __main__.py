"""gpu-tenancy: a multi-tenant GPU Kubernetes platform on one Docker host.

Reads and validates the stack configuration before any resource exists, then builds the layers top-down: the
management cluster (kind, or an adopted one) and its image caches -> Kamaji -> one Tenant per tenant (its hosted
control plane, worker nodes, Calico, HAMi with its GPUs and the in-stack smoke test). Tenants never depend on each
other.
"""

import pulumi

from components.helm import require_charts
from components.management.cluster import COMPONENT_NAME, ManagementCluster, ManagementClusterArgs
from components.management.image_cache import RegistryMirror, RegistryMirrorArgs, mirror_outputs
from components.management.kamaji import Kamaji, KamajiArgs
from components.plan import check_capacity, gpu_plan, plan_summary
from components.tenant.tenant import Platform, Tenant, TenantArgs
from config import read_stack_config

config = read_stack_config()
# Every chart is a local directory: a checkout without them fails here, in one line naming `make charts`.
require_charts(config.versions)
# Where HAMi would place each declared GPU pod: a pod that does not fit is a warning, or with strictCapacity an error
# before any resource exists.
planned_gpus = gpu_plan(config)
check_capacity(config, planned_gpus, pulumi.get_stack(), pulumi.log.warn)

management = ManagementCluster(
    COMPONENT_NAME,
    ManagementClusterArgs(
        cluster_name=config.management.cluster_name,
        node_image=config.management.node_image,
        # Set: adopt that existing cluster instead of creating a kind cluster (wrapped secret there).
        kubeconfig=config.management.kubeconfig,
        worker_cidrs=config.management.worker_cidrs,
        tenant_ranges={f"tenants[{index}].{key}": cidr for index, tenant in enumerate(config.tenants)
                       for key, cidr in (("serviceCidr", tenant.service_cidr), ("podCidr", tenant.pod_cidr)) if cidr},
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

platform = Platform.of(config, management, kamaji, mirror)
tenants = {tenant.name: Tenant(tenant.name, TenantArgs(tenant=tenant, platform=platform)) for tenant in config.tenants}

pulumi.export("plan", plan_summary(config))
pulumi.export("gpuPlan", planned_gpus)
pulumi.export("managementKubeconfig", management.kubeconfig)
pulumi.export("kindSubnet", management.kind_subnet)
pulumi.export("workerNetworks", management.worker_networks)
pulumi.export("lbPoolRange", kamaji.lb_pool_range)
pulumi.export("tenants", {name: tenant.summary for name, tenant in tenants.items()})
# The lab's pull-through caches and the nodes using them (None without them), for `make verify`.
pulumi.export("imageMirror", None if mirror is None else mirror_outputs(mirror, config))
# Secrets in their own outputs, so `tenants` stays readable without --show-secrets.
# The tenants' users get the restricted credential; the admin one is the operator's.
pulumi.export("tenantKubeconfigs", pulumi.Output.secret({name: t.user_kubeconfig for name, t in tenants.items()}))
pulumi.export("tenantAdminKubeconfigs", pulumi.Output.secret({name: t.admin_kubeconfig for name, t in tenants.items()}))
