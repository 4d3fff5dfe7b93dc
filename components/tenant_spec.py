"""Plain-data builders for the tenant plane: namespace isolation, the TenantControlPlane,
tenant credentials, the rotating bootstrap token, Calico values and the GPU quota.

Everything here takes and returns plain data, so it is tested without Pulumi.
`components.tenant_control_plane` wires these functions to resources.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from components.helm import Chart
from config import Quota, Tenant
from config.cidrs import dns_service_ip

# --------------------------------------------------------------------------- #
# Management cluster: the tenant namespace and its NetworkPolicy
# --------------------------------------------------------------------------- #

# Kamaji's release must live here (facts §2); its controller and the kamaji-etcd datastore run here.
KAMAJI_NAMESPACE = "kamaji-system"
# Label every namespace carries (Kubernetes >= 1.22), so selectors need no labelling of our own.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
TENANT_LABEL = "gpu-tenancy/tenant"
PART_OF_LABEL = "app.kubernetes.io/part-of"
PART_OF = "gpu-tenancy"
ISOLATION_POLICY_NAME = "tenant-isolation"


def namespace_labels(tenant_name: str) -> dict[str, str]:
    return {PART_OF_LABEL: PART_OF, TENANT_LABEL: tenant_name}


def _namespace_selector(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}


def isolation_network_policy(namespace: str, worker_networks: Sequence[str]) -> dict[str, Any]:
    """NetworkPolicy that fences every pod of a tenant namespace on the management cluster.

    Ingress only from: pods of the same namespace, Kamaji (kamaji-system), and the
    worker networks (in the lab the docker `kind` network: the tenant's workers, the
    host running Pulumi, and the management nodes, which is where LoadBalancer traffic
    and kubelet probes come from; on real infrastructure `management.workerCidrs`).
    Egress only to: the same namespace, kamaji-system (the kamaji-etcd datastore),
    cluster DNS, and the worker networks. Pods of other tenants' namespaces match
    none of these in either direction, so tenants cannot reach each other's control planes.
    """
    if not worker_networks:
        raise ValueError("no worker networks: tenant workers could not reach their control plane")
    blocks = []
    for cidr in worker_networks:
        network = ipaddress.ip_network(cidr, strict=False)
        if network.version != 4:
            raise ValueError(f"worker network {cidr!r} is not IPv4: NetworkPolicy ipBlocks here are IPv4 only")
        blocks.append({"ipBlock": {"cidr": str(network)}})
    same_namespace = {"podSelector": {}}
    kamaji = _namespace_selector(KAMAJI_NAMESPACE)
    cluster_dns = {
        **_namespace_selector("kube-system"),
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": ISOLATION_POLICY_NAME,
            "namespace": namespace,
            "labels": namespace_labels(namespace),
        },
        "spec": {
            # Every pod of the namespace: the TCP pods and anything Kamaji adds later.
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [same_namespace, kamaji]},
                # From outside the cluster only the API server and the Konnectivity server are served.
                {
                    "from": blocks,
                    "ports": [
                        {"protocol": "TCP", "port": API_SERVER_PORT},
                        {"protocol": "TCP", "port": KONNECTIVITY_PORT},
                    ],
                },
            ],
            "egress": [
                {"to": [same_namespace, kamaji, *blocks]},
                {
                    "to": [cluster_dns],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
            ],
        },
    }


# --------------------------------------------------------------------------- #
# The TenantControlPlane custom resource (facts §3)
# --------------------------------------------------------------------------- #

TCP_API_VERSION = "kamaji.clastix.io/v1alpha1"
TCP_KIND = "TenantControlPlane"
API_SERVER_PORT = 6443
KONNECTIVITY_PORT = 8132
# Pulumi does not await custom resources by default; this makes it wait for Kamaji's Ready.
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
WAIT_FOR_READY = "jsonpath={.status.kubernetesResources.version.status}=Ready"
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _require_dns1035(name: str) -> str:
    # Kamaji derives Service and Secret names from the TCP name, so it must be a DNS-1035 label.
    if len(name) > 63 or not DNS1035_LABEL.match(name):
        raise ValueError(
            f"TenantControlPlane name {name!r} is not a DNS-1035 label (lower-case letters, digits, '-', "
            "starting with a letter); rename the tenant"
        )
    return name


def resolved_cidrs(tenant: Tenant) -> tuple[str, str]:
    if tenant.service_cidr is None or tenant.pod_cidr is None:
        raise ValueError(
            f"tenant {tenant.name!r} has no resolved serviceCidr/podCidr: build tenants with "
            "config.load_stack_config, which allocates the missing ranges"
        )
    return tenant.service_cidr, tenant.pod_cidr


def tenant_control_plane_metadata(tenant: Tenant) -> dict[str, Any]:
    name = _require_dns1035(tenant.name)
    return {
        "name": name,
        "namespace": name,
        "labels": namespace_labels(name),
        "annotations": {WAIT_FOR_ANNOTATION: WAIT_FOR_READY},
    }


def tenant_control_plane_spec(tenant: Tenant, datastore: str) -> dict[str, Any]:
    service_cidr, pod_cidr = resolved_cidrs(tenant)
    return {
        "dataStore": datastore,
        "controlPlane": {
            # One machine: the CRD's default of 2 replicas buys nothing but memory.
            "deployment": {"replicas": 1},
            # MetalLB hands out an address on the docker `kind` network.
            "service": {"serviceType": "LoadBalancer"},
        },
        "kubernetes": {
            "version": tenant.kubernetes_version,
            # kindest/node runs containerd with the systemd cgroup driver.
            "kubelet": {"cgroupfs": "systemd"},
        },
        "networkProfile": {
            "port": API_SERVER_PORT,
            # Exact casing matters: serviceCIDR/podCIDR would silently fall back to Kamaji's defaults.
            "serviceCidr": service_cidr,
            "podCidr": pod_cidr,
            "dnsServiceIPs": [dns_service_ip(service_cidr)],
        },
        # An absent addon is not installed (facts §3): no DNS, no kube-proxy, no tunnel.
        "addons": {
            "coreDNS": {},
            "kubeProxy": {},
            "konnectivity": {"server": {"port": KONNECTIVITY_PORT}},
        },
    }


def tenant_control_plane_manifest(tenant: Tenant, datastore: str) -> dict[str, Any]:
    """The whole TenantControlPlane object, as it is validated against Kamaji's CRD."""
    return {
        "apiVersion": TCP_API_VERSION,
        "kind": TCP_KIND,
        "metadata": tenant_control_plane_metadata(tenant),
        "spec": tenant_control_plane_spec(tenant, datastore),
    }


def control_plane_endpoint(status: Mapping[str, Any] | None, tcp_name: str) -> str:
    """`<LB IP>:6443` from a Ready TenantControlPlane's status."""
    endpoint = (status or {}).get("controlPlaneEndpoint")
    if not endpoint:
        raise ValueError(
            f"TenantControlPlane {tcp_name!r} reports no status.controlPlaneEndpoint: check that MetalLB "
            f"assigned an address (`kubectl -n {tcp_name} get tcp,svc`)"
        )
    return str(endpoint)


def split_endpoint(endpoint: str) -> tuple[str, str]:
    """('172.18.255.200', '6443') from '172.18.255.200:6443'."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"control plane endpoint {endpoint!r} is not <host>:<port>")
    return host.strip("[]"), port


# --------------------------------------------------------------------------- #
# Tenant credentials (facts §4)
# --------------------------------------------------------------------------- #

ADMIN_KUBECONFIG_KEY = "admin.conf"
CA_CERT_KEY = "ca.crt"


def admin_kubeconfig_secret_name(tcp_name: str) -> str:
    return f"{tcp_name}-admin-kubeconfig"


def ca_secret_name(tcp_name: str) -> str:
    return f"{tcp_name}-ca"


def decode_secret_value(data: Mapping[str, str] | None, key: str, secret: str) -> str:
    """The text stored base64-encoded under `key` of a Secret's `data`."""
    encoded = (data or {}).get(key)
    if not encoded:
        raise ValueError(f"Secret {secret!r} has no key {key!r}; Kamaji writes it once the control plane is Ready")
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as error:
        raise ValueError(f"Secret {secret!r} key {key!r} is not base64-encoded text ({error})") from None


def discovery_hash(ca_pem: str | bytes) -> str:
    """kubeadm's --discovery-token-ca-cert-hash: sha256 of the CA's DER SubjectPublicKeyInfo."""
    pem = ca_pem.encode() if isinstance(ca_pem, str) else ca_pem
    certificate = x509.load_pem_x509_certificate(pem)
    public_key_info = certificate.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    digest = hashes.Hash(hashes.SHA256())
    digest.update(public_key_info)
    return "sha256:" + digest.finalize().hex()


def admin_kubeconfig(data: Mapping[str, str] | None, tcp_name: str) -> str:
    """The tenant admin kubeconfig from the `data` of `<tcp>-admin-kubeconfig`."""
    return decode_secret_value(data, ADMIN_KUBECONFIG_KEY, admin_kubeconfig_secret_name(tcp_name))


def ca_discovery_hash(data: Mapping[str, str] | None, tcp_name: str) -> str:
    """The discovery hash of the tenant CA from the `data` of `<tcp>-ca`."""
    return discovery_hash(decode_secret_value(data, CA_CERT_KEY, ca_secret_name(tcp_name)))


# --------------------------------------------------------------------------- #
# Bootstrap token with time-window rotation
# --------------------------------------------------------------------------- #

BOOTSTRAP_TOKEN_TYPE = "bootstrap.kubernetes.io/token"
BOOTSTRAP_TOKEN_NAMESPACE = "kube-system"
BOOTSTRAP_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
TOKEN_ID_LENGTH = 6
TOKEN_SECRET_LENGTH = 16
TOKEN_PATTERN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
# A new token is minted by the first `pulumi up` of every window; each token stays
# valid one extra window, so it has at least TOKEN_ROTATION left when it is minted.
TOKEN_ROTATION = datetime.timedelta(days=7)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class TokenWindow:
    """The rotation window `now` falls in: its label keys the random token parts."""

    label: str
    start: datetime.datetime
    expiration: datetime.datetime

    @property
    def expiration_rfc3339(self) -> str:
        return self.expiration.strftime("%Y-%m-%dT%H:%M:%SZ")


def token_window(now: datetime.datetime, rotation: datetime.timedelta = TOKEN_ROTATION) -> TokenWindow:
    """Fixed, epoch-aligned window containing `now`; the same for every run inside it."""
    if now.tzinfo is None:
        raise ValueError("token_window needs a timezone-aware time (e.g. datetime.now(timezone.utc))")
    index = (now - _EPOCH) // rotation
    start = _EPOCH + index * rotation
    return TokenWindow(
        label=start.strftime("%Y-%m-%dT%H:%M:%SZ"),
        start=start,
        expiration=start + 2 * rotation,
    )


def bootstrap_token_secret(token_id: str, token_secret: str, expiration: str) -> dict[str, Any]:
    """The kube-system Secret kubeadm join authenticates with (Kamaji creates every other join object)."""
    token = f"{token_id}.{token_secret}"
    if not TOKEN_PATTERN.match(token):
        raise ValueError("bootstrap token must match [a-z0-9]{6}.[a-z0-9]{16}")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            # The API server looks tokens up by this exact name.
            "name": f"bootstrap-token-{token_id}",
            "namespace": BOOTSTRAP_TOKEN_NAMESPACE,
            "labels": {PART_OF_LABEL: PART_OF},
        },
        "type": BOOTSTRAP_TOKEN_TYPE,
        "stringData": {
            "description": "gpu-tenancy worker join token, rotated by pulumi up",
            "token-id": token_id,
            "token-secret": token_secret,
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": BOOTSTRAP_TOKEN_GROUP,
        },
    }


# --------------------------------------------------------------------------- #
# Calico (tigera-operator chart, projectcalico/calico charts/ at the pinned tag)
# --------------------------------------------------------------------------- #

CALICO_CHART_REPO = "https://docs.tigera.io/calico/charts"
# The operator reads its kubernetes-services-endpoint ConfigMap from the release namespace.
CALICO_NAMESPACE = "tigera-operator"
# Since 3.32 the CRDs are a chart of their own, installed before the operator chart.
CALICO_CRDS_CHART = Chart("calico-crds", "crd.projectcalico.org.v1", CALICO_CHART_REPO, CALICO_NAMESPACE)
CALICO_OPERATOR_CHART = Chart("calico", "tigera-operator", CALICO_CHART_REPO, CALICO_NAMESPACE)
CALICO_BLOCK_SIZE = 26


def calico_operator_values(pod_cidr: str, endpoint: str, workers: int) -> dict[str, Any]:
    """tigera-operator chart values: one VXLAN pool over the tenant's pod range."""
    host, port = split_endpoint(endpoint)
    return {
        "installation": {
            "calicoNetwork": {
                # VXLAN needs no BGP peering between the worker containers.
                "bgp": "Disabled",
                "ipPools": [
                    {
                        "cidr": pod_cidr,
                        "encapsulation": "VXLAN",
                        "natOutgoing": "Enabled",
                        "nodeSelector": "all()",
                        "blockSize": CALICO_BLOCK_SIZE,
                    }
                ],
                # The kubelet's InternalIP is the container's address on the `kind` network.
                "nodeAddressAutodetectionV4": {"kubernetes": "NodeInternalIP"},
            },
            # Typha replicas need distinct nodes; more than the workers would stay Pending.
            "controlPlaneReplicas": max(1, min(2, workers)),
        },
        # The aggregated API server, flow aggregator and UI are not needed and add failure modes.
        "apiServer": {"enabled": False},
        "goldmane": {"enabled": False},
        "whisker": {"enabled": False},
        # Host-networked operator and calico-node reach the API server directly, not via a Service
        # that only works once kube-proxy (and so a node) is up.
        "kubernetesServiceEndpoint": {"host": host, "port": port},
    }


# --------------------------------------------------------------------------- #
# GPU quota inside the tenant
# --------------------------------------------------------------------------- #

GPU_QUOTA_NAME = "gpu-quota"
GPU_QUOTA_NAMESPACE = "default"


def gpu_quota_hard(quota: Quota | None) -> dict[str, str]:
    """ResourceQuota `spec.hard` for the quota keys that are set (extended resources: requests only)."""
    if quota is None:
        return {}
    hard = {}
    for resource, value in (
        ("requests.nvidia.com/gpu", quota.gpus),
        ("requests.nvidia.com/gpumem", quota.memory_mib),
        ("requests.nvidia.com/gpucores", quota.cores),
    ):
        if value is not None:
            hard[resource] = str(value)
    return hard


def gpu_resource_quota(quota: Quota | None) -> dict[str, Any] | None:
    hard = gpu_quota_hard(quota)
    if not hard:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": GPU_QUOTA_NAME, "namespace": GPU_QUOTA_NAMESPACE, "labels": {PART_OF_LABEL: PART_OF}},
        "spec": {"hard": hard},
    }
