"""Names shared by more than one layer, and the labels this program puts on what it creates, in one place.

Label keys and values are state: a renamed key or value no longer matches what an existing stack created
(the kind cluster's marker, the containers `docker ps --filter label=` finds), so rename only with a migration.
"""

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
