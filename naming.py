"""Names, labels and defaults shared by more than one layer (or by the program and its operator commands), in one
place below them all (it imports nothing; `config/` imports nothing from `components/`). A label only one layer
uses lives with that layer.

Label keys and values are state: a renamed key or value no longer matches what an existing stack created
(the kind cluster's marker, the containers `docker ps --filter label=` finds), so rename only with a migration.
"""

# The Pulumi project (Pulumi.yaml `name`): the prefix of its config keys, `gpu-tenancy:tenants`.
PROJECT = "gpu-tenancy"
# Resource type tokens of our components: gpu-tenancy:index:<Class>.
COMPONENT_PREFIX = "gpu-tenancy:index"
# Docker network kind attaches its nodes to; tenant workers join it too.
KIND_NETWORK = "kind"

# Kamaji's release, its controller and the shared kamaji-etcd live here: the CRDs hard-code
# kamaji-system/kamaji-webhook-service (clastix/kamaji charts/kamaji/crds/kamaji.clastix.io_tenantcontrolplanes.yaml).
KAMAJI_NAMESPACE = "kamaji-system"
# The shared DataStore, and Kamaji's default for TenantControlPlanes that name none (charts/kamaji/values.yaml
# `defaultDatastoreName`, the kamaji-etcd subchart's `datastore.name`).
DEFAULT_DATASTORE = "default"
# Namespaces of the charts Kamaji needs on the management cluster (the kind lab installs them; a tenant may not take
# their names).
CERT_MANAGER_NAMESPACE = "cert-manager"
METALLB_NAMESPACE = "metallb-system"

# Label every namespace carries (Kubernetes >= 1.22), so selectors need no labelling of our own.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# On the Kubernetes objects this program creates, in the management cluster and in the tenants.
PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF = "gpu-tenancy"
# On a worker's Node: which join of the worker our patches were applied after. A rejoined worker is a fresh Node
# object without them, so a new join id must re-apply them (and re-create the smoke pod bound to the old one).
JOIN_ANNOTATION = "gpu-tenancy.io/join"

# Where each tenant's Calico operator runs (its chart's release namespace; the operator puts Calico itself in
# calico-system and calico-apiserver).
CALICO_OPERATOR_NAMESPACE = "tigera-operator"
# A tenant's own system namespaces (Kubernetes, the Konnectivity agent, Calico, HAMi run there): HAMi's admission
# webhook never sees them (charts/hami/templates/scheduler/webhook.yaml, a `kubernetes.io/metadata.name NotIn`
# namespaceSelector), so with failurePolicy Fail a dead webhook cannot block CoreDNS, kube-proxy, the agent, Calico
# or HAMi itself. tenants[].namespaces may not name them: every pod of the tenant's users goes through the webhook.
TENANT_SYSTEM_NAMESPACES = (
    "kube-system",
    "kube-public",
    "kube-node-lease",
    CALICO_OPERATOR_NAMESPACE,
    "calico-system",
    "calico-apiserver",
)

# HAMi's scheduler policies when none is set: charts/hami values.yaml scheduler.defaultSchedulerPolicy, rendered into
# the extender's --node-scheduler-policy and --gpu-scheduler-policy (templates/scheduler/deployment.yaml), the same
# as cmd/scheduler/main.go's flag defaults. The planner, the chart values and the config model read them from here.
DEFAULT_NODE_POLICY = "binpack"
DEFAULT_GPU_POLICY = "spread"

# The extended resources a pod asks for its share of a card with, as HAMi's device plugins advertise them
# (Project-HAMi/HAMi v2.10.0 charts/hami values.yaml resourceName, resourceMem, resourceCores).
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MEMORY_RESOURCE = "nvidia.com/gpumem"
GPU_CORES_RESOURCE = "nvidia.com/gpucores"

# Docker labels on every container and volume this program creates (workers, image caches), for
# `docker ps --filter label=...` and cleanup checks.
DOCKER_LABEL_PREFIX = "gpu-tenancy"
LABEL_STACK = f"{DOCKER_LABEL_PREFIX}.stack"
LABEL_TENANT = f"{DOCKER_LABEL_PREFIX}.tenant"
LABEL_WORKER = f"{DOCKER_LABEL_PREFIX}.worker"
LABEL_ROLE = f"{DOCKER_LABEL_PREFIX}.role"


def node_name(tenant: str, worker: str) -> str:
    """Worker container name, hostname and Kubernetes Node name."""
    return f"{tenant}-{worker}"

# The scheduler name HAMi's webhook writes into every pod it admits (Project-HAMi/HAMi v2.10.0 charts/hami
# values.yaml schedulerName); the chart values, the smoke evidence and the webhook probe read it from here.
HAMI_SCHEDULER_NAME = "hami-scheduler"
