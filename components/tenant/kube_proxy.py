"""kube-proxy for a tenant, as the plain objects kubeadm's kube-proxy addon creates.

Why not Kamaji's `kubeProxy` addon: Kamaji renders kubeadm's addon with kubeadm's static defaults and overwrites the
ConfigMap's `data` on every reconcile (clastix/kamaji internal/resources/addons/kube_proxy.go). Those leave
`conntrack.maxPerCore` unset, so kube-proxy writes `net.netfilter.nf_conntrack_max`, which is read-only outside the
host's network namespace (linux net/netfilter/nf_conntrack_standalone.c), and crash-loops on container workers.
Kamaji ignores these objects: they lack its `kamaji.clastix.io/project=kamaji` label (kube_proxy.go L110-114 at
ddbabd87ed0e, the pinned 26.8.2-edge).

Reproduced from kubernetes/kubernetes kubeadm v1.35 (the same templates at abd60651f20b and after v1.36):
cmd/kubeadm/app/phases/addons/proxy/manifests.go (`KubeProxyConfigMap19`, `KubeProxyDaemonSet19`), proxy.go
`printOrCreateKubeProxyObjects` (ServiceAccount, ClusterRoleBinding, the bootstrap-token Role and RoleBinding, then
ConfigMap and DaemonSet, in that order), constants/constants.go (the names), componentconfigs/kubeproxy.go `Default`
(only the fields it sets; kube-proxy defaults the rest as absent, pkg/proxy/apis/config/v1alpha1/defaults.go). Not
reproduced: the shell's HTTP(S)_PROXY variables (`GetProxyEnvVars`) and the component-config hash annotation, whose
absence marks the config as user supplied (componentconfigs/checksums.go), as it is.

`kubeadm join` reads this ConfigMap with its bootstrap token but only logs a NotFound or Forbidden answer
(componentconfigs/kubeproxy.go `kubeProxyConfigFromCluster`, mustExist=false); the bootstrap Role and RoleBinding
are kept, as kubeadm binds them "for allowing fetchConfiguration during join" (proxy.go).

Conntrack TCP timeouts stay at kube-proxy's defaults: those sysctls belong to each network namespace and stay
writable there (nf_conntrack_standalone.c). kind zeroes them only for rootless providers (kind v0.32.0
pkg/cluster/internal/kubeadm/config.go L643-648); on rootless Docker or Podman set both to "0s" as kind does.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import yaml

from components.images import kubernetes_image_tag
from components.tenant.spec import split_endpoint
from config.models import parse_version
from naming import PART_OF, PART_OF_LABEL

KUBE_SYSTEM = "kube-system"
# cmd/kubeadm/app/constants/constants.go
KUBE_PROXY = "kube-proxy"  # KubeProxy: image and DaemonSet name
KUBE_PROXY_CONFIG_MAP = "kube-proxy"  # KubeProxyConfigMap
KUBE_PROXY_CONFIG_MAP_KEY = "config.conf"  # KubeProxyConfigMapKey
KUBE_PROXY_KUBECONFIG_KEY = "kubeconfig.conf"  # fixed in manifests.go KubeProxyConfigMap19
KUBE_PROXY_CLUSTER_ROLE_BINDING = "kubeadm:node-proxier"  # KubeProxyClusterRoleBindingName
KUBE_PROXY_CLUSTER_ROLE = "system:node-proxier"  # KubeProxyClusterRoleName (an RBAC bootstrap role)
NODE_BOOTSTRAP_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"  # NodeBootstrapTokenAuthGroup
# cmd/kubeadm/app/phases/addons/proxy/proxy.go
KUBE_PROXY_SERVICE_ACCOUNT = "kube-proxy"  # KubeProxyServiceAccountName
KUBE_PROXY_CONFIG_MAP_ROLE = "kube-proxy"  # KubeProxyConfigMapRoleName (Role and RoleBinding)

# Where the DaemonSet mounts the ConfigMap (manifests.go), and so where kube-proxy reads its files.
CONFIG_DIR = "/var/lib/kube-proxy"
# componentconfigs/kubeproxy.go kubeproxyKubeConfigFileName
KUBECONFIG_PATH = f"{CONFIG_DIR}/{KUBE_PROXY_KUBECONFIG_KEY}"
# The projected service-account token and CA (manifests.go KubeProxyConfigMap19).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_CA = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
SERVICE_ACCOUNT_TOKEN = f"{SERVICE_ACCOUNT_DIR}/token"

KUBE_PROXY_CONFIG_API_VERSION = "kubeproxy.config.k8s.io/v1alpha1"


def _labels(upstream: dict[str, str] | None = None) -> dict[str, str]:
    return {**(upstream or {}), PART_OF_LABEL: PART_OF}


def _metadata(name: str, namespace: str | None = None, upstream_labels: dict[str, str] | None = None) -> dict:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = _labels(upstream_labels)
    return metadata


def kube_proxy_image(kubernetes_version: str, image_registry: str = "registry.k8s.io") -> str:
    """`<registry>/kube-proxy:<version>`, as kubeadm's `images.GetKubernetesImage` builds it."""
    parse_version(kubernetes_version)  # only v1.35.0-style versions; kubeadm would also map "+" to "_"
    registry = image_registry.rstrip("/")
    if not registry:
        raise ValueError("image_registry is empty")
    # Pinned by digest where it is known (components/images.py).
    return f"{registry}/{KUBE_PROXY}:{kubernetes_image_tag(KUBE_PROXY, kubernetes_version)}"


def kube_proxy_kubeconfig(endpoint: str) -> dict[str, Any]:
    """The `kubeconfig.conf` kube-proxy uses: the pod's service-account token against `https://<endpoint>`.

    `endpoint` is the tenant's `<LB address>:<port>` (TenantControlPlane status.controlPlaneEndpoint),
    the server every Kamaji kubeconfig uses; kubeadm writes its control-plane endpoint here.
    """
    if "://" in endpoint:
        raise ValueError(f"control plane endpoint {endpoint!r} must be <host>:<port>, without a scheme")
    split_endpoint(endpoint)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "cluster": {"certificate-authority": SERVICE_ACCOUNT_CA, "server": f"https://{endpoint}"},
                "name": "default",
            }
        ],
        "contexts": [{"context": {"cluster": "default", "namespace": "default", "user": "default"}, "name": "default"}],
        "current-context": "default",
        "users": [{"name": "default", "user": {"tokenFile": SERVICE_ACCOUNT_TOKEN}}],
    }


def kube_proxy_configuration(pod_cidr: str) -> dict[str, Any]:
    """The `config.conf` KubeProxyConfiguration: kubeadm's defaults plus the changes below."""
    network = ipaddress.ip_network(pod_cidr, strict=True)
    if network.version != 4:
        raise ValueError(f"pod CIDR {pod_cidr!r} is not IPv4: kube-proxy here binds 0.0.0.0 (IPv4 single stack)")
    return {
        "apiVersion": KUBE_PROXY_CONFIG_API_VERSION,
        "kind": "KubeProxyConfiguration",
        # kubeadm: DefaultProxyBindAddressv4 for an IPv4 advertise address.
        "bindAddress": "0.0.0.0",
        # kubeadm: where the DaemonSet mounts kubeconfig.conf.
        "clientConnection": {"kubeconfig": KUBECONFIG_PATH},
        # Changed: the tenant's pod CIDR (kubeadm uses networking.podSubnet, which Kamaji does not pass here).
        "clusterCIDR": str(network),
        # Changed: explicit iptables (kubeadm leaves "", which kube-proxy 1.35 resolves to iptables on Linux).
        "mode": "iptables",
        # Changed: 0 leaves nf_conntrack_max as it is, so no sysctl write (kind does the same;
        # kube-proxy config/v1alpha1/types.go: "0 to leave the limit as-is and ignore min").
        "conntrack": {"maxPerCore": 0},
    }


def _yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def kube_proxy_objects(
    *, endpoint: str, kubernetes_version: str, pod_cidr: str, image_registry: str = "registry.k8s.io"
) -> list[dict[str, Any]]:
    """The objects kubeadm's kube-proxy addon creates for `kubernetes_version`, in kubeadm's order.

    ServiceAccount, ClusterRoleBinding, Role, RoleBinding, ConfigMap, DaemonSet. Each carries
    kubeadm's labels plus `app.kubernetes.io/part-of: gpu-tenancy`, and none carries Kamaji's
    project label.
    """
    image = kube_proxy_image(kubernetes_version, image_registry)
    service_account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(KUBE_PROXY_SERVICE_ACCOUNT, KUBE_SYSTEM),
    }
    cluster_role_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _metadata(KUBE_PROXY_CLUSTER_ROLE_BINDING),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KUBE_PROXY_CLUSTER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": KUBE_PROXY_SERVICE_ACCOUNT, "namespace": KUBE_SYSTEM}],
    }
    # Read-only access to the ConfigMap for bootstrap tokens, "for allowing fetchConfiguration during join".
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(KUBE_PROXY_CONFIG_MAP_ROLE, KUBE_SYSTEM),
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [KUBE_PROXY_CONFIG_MAP], "verbs": ["get"]}
        ],
    }
    role_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(KUBE_PROXY_CONFIG_MAP_ROLE, KUBE_SYSTEM),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": KUBE_PROXY_CONFIG_MAP_ROLE},
        # kubeadm leaves apiGroup empty; the API server defaults it to this for Group subjects.
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": NODE_BOOTSTRAP_TOKEN_GROUP}],
    }
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(KUBE_PROXY_CONFIG_MAP, KUBE_SYSTEM, {"app": KUBE_PROXY}),
        "data": {
            KUBE_PROXY_KUBECONFIG_KEY: _yaml(kube_proxy_kubeconfig(endpoint)),
            KUBE_PROXY_CONFIG_MAP_KEY: _yaml(kube_proxy_configuration(pod_cidr)),
        },
    }
    selector = {"k8s-app": KUBE_PROXY}
    daemon_set = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _metadata(KUBE_PROXY, KUBE_SYSTEM, selector),
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {
                            "name": KUBE_PROXY,
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": [
                                "/usr/local/bin/kube-proxy",
                                f"--config={CONFIG_DIR}/{KUBE_PROXY_CONFIG_MAP_KEY}",
                                "--hostname-override=$(NODE_NAME)",
                            ],
                            "securityContext": {"privileged": True},
                            "volumeMounts": [
                                {"mountPath": CONFIG_DIR, "name": "kube-proxy"},
                                {"mountPath": "/run/xtables.lock", "name": "xtables-lock", "readOnly": False},
                                {"mountPath": "/lib/modules", "name": "lib-modules", "readOnly": True},
                            ],
                            "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        }
                    ],
                    "hostNetwork": True,
                    "serviceAccountName": KUBE_PROXY_SERVICE_ACCOUNT,
                    "volumes": [
                        {"name": "kube-proxy", "configMap": {"name": KUBE_PROXY_CONFIG_MAP}},
                        {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
                        {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
                    ],
                    # Every taint: kube-proxy must run on control-plane and tainted GPU nodes alike.
                    "tolerations": [{"operator": "Exists"}],
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                },
            },
        },
    }
    return [service_account, cluster_role_binding, role, role_binding, config_map, daemon_set]
