"""Names derived from the configuration, in one place."""

# Resource type tokens of our components: gpu-tenancy:index:<Class>.
COMPONENT_PREFIX = "gpu-tenancy:index"
# Docker network kind attaches its nodes to; tenant workers join it too.
KIND_NETWORK = "kind"


def node_name(tenant: str, worker: str) -> str:
    """Worker container name, hostname and Kubernetes Node name."""
    return f"{tenant}-{worker}"
