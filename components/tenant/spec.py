"""Plain-data builders for the tenant plane: namespace isolation, the TenantControlPlane, tenant credentials,
data stores, Calico values, and inside the tenant the workload namespaces, restricted credential and GPU quota.

Everything here takes and returns plain data, so it is tested without Pulumi.
`components.tenant.control_plane` wires these functions to resources.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from components import kube
from components.gpu.capacity import QUOTA_GPUS
from components.helm import Chart
from components.images import CFSSL_REPOSITORY, CFSSL_TAG
from config import Quota, Tenant
from config.cidrs import dns_service_ip
from config.models import DNS1035_LABEL, MAX_SOURCE_RANGES, DataStore, object_counts
from naming import (
    CALICO_OPERATOR_NAMESPACE,
    GPU_CORES_RESOURCE,
    GPU_MEMORY_RESOURCE,
    KAMAJI_NAMESPACE,
    NAMESPACE_NAME_LABEL,
    PART_OF,
    PART_OF_LABEL,
)
from sdk import sdk_field

# --------------------------------------------------------------------------- #
# Management cluster: the tenant namespace and its NetworkPolicy
# --------------------------------------------------------------------------- #

TENANT_LABEL = "gpu-tenancy/tenant"
ISOLATION_POLICY_NAME = "tenant-isolation"


def namespace_labels(tenant_name: str) -> dict[str, str]:
    return {PART_OF_LABEL: PART_OF, TENANT_LABEL: tenant_name}


def _namespace_selector(name: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}


def api_source_ranges(worker_networks: Sequence[str], operator_cidrs: Sequence[str]) -> list[str]:
    """Who may open a connection to a tenant's API and Konnectivity server: its worker networks and the operators'.

    One list for both fences: the LoadBalancer's `loadBalancerSourceRanges` and the isolation policy's ingress. A
    source the load balancer passes can reach the pod with its own address: kube-proxy masquerades in POSTROUTING,
    after CNIs that police before source NAT (kubernetes-sigs/kube-network-policies pkg/networkpolicy
    controller.go), and source-preserving dataplanes do not NAT at all. A policy admitting fewer networks than the
    load balancer drops those connections (always on a one-node cluster).
    """
    ranges = sorted({*worker_networks, *operator_cidrs})
    if len(ranges) > MAX_SOURCE_RANGES:
        # Validation refuses this before anything runs; this guards callers that bypass it.
        raise ValueError(
            f"{len(ranges)} source networks ({', '.join(ranges)}): a TenantControlPlane admits at most "
            f"{MAX_SOURCE_RANGES} loadBalancerSourceRanges; merge adjacent networks in management.workerCidrs, "
            "management.operatorCidrs and tenants[].workerCidrs"
        )
    return ranges


def _ip_blocks(cidrs: Sequence[str], what: str) -> list[dict[str, Any]]:
    blocks = []
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr, strict=False)
        if network.version != 4:
            raise ValueError(f"{what} {cidr!r} is not IPv4: NetworkPolicy ipBlocks here are IPv4 only")
        blocks.append({"ipBlock": {"cidr": str(network)}})
    return blocks


def isolation_network_policy(namespace: str, worker_networks: Sequence[str],
                             operator_cidrs: Sequence[str] = ()) -> dict[str, Any]:
    """NetworkPolicy that fences every pod of a tenant namespace on the management cluster.

    Ingress only from: pods of the same namespace, Kamaji (kamaji-system), and, on the API server and Konnectivity
    ports, every network the load balancer admits (`api_source_ranges`): the worker networks (in the lab the docker
    `kind` network: the tenant's workers, the host running Pulumi, and the management nodes, which is where
    LoadBalancer traffic and kubelet probes come from; on real infrastructure `management.workerCidrs` and the
    tenant's `workerCidrs`) and `management.operatorCidrs`.
    Egress only to: the same namespace, kamaji-system (the kamaji-etcd datastore),
    cluster DNS, and the worker networks. Pods of other tenants' namespaces match
    none of these in either direction, so tenants cannot reach each other's control planes.
    """
    if not worker_networks:
        raise ValueError("no worker networks: tenant workers could not reach their control plane")
    blocks = _ip_blocks(worker_networks, "worker network")
    sources = _ip_blocks(api_source_ranges(worker_networks, operator_cidrs), "source network")
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
                    "from": sources,
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


# A dedicated etcd's Helm hooks run kubectl against the management API server (clastix/kamaji-etcd
# charts/kamaji-etcd/templates/etcd_job_preinstall_1.yaml `kubectl create secret`, etcd_job_preinstall_2.yaml
# `kubectl rollout status`, etcd_job_postdelete.yaml `kubectl delete secret`; Jobs named `<release>-<suffix>`).
# Their pod templates carry no labels of their own; the Job API adds batch.kubernetes.io/job-name
# (kubernetes pkg/apis/batch/types.go JobNameLabel).
ETCD_SETUP_POLICY_NAME = "etcd-setup-api"
ETCD_SETUP_JOB_SUFFIXES = ("etcd-setup-1", "etcd-setup-2", "etcd-teardown")
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def etcd_setup_job_names(release: str) -> list[str]:
    return [f"{release}-{suffix}" for suffix in ETCD_SETUP_JOB_SUFFIXES]


def etcd_setup_pod_selector(release: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": JOB_NAME_LABEL, "operator": "In", "values": etcd_setup_job_names(release)}]}


def management_api_destinations(service: Mapping[str, Any] | None,
                                endpoint_slice: Mapping[str, Any] | None) -> list[tuple[str, int]]:
    """(IPv4 address, TCP port) pairs an in-cluster client uses to reach the management API server: the `default/
    kubernetes` Service's ClusterIP on its https port, and the endpoints behind it (the apiserver writes the
    EndpointSlice `kubernetes`, kubernetes pkg/controlplane/reconcilers/endpointsadapter.go). Both, because whether
    a NetworkPolicy sees the Service address or the endpoint is implementation-defined (kubernetes/website
    content/en/docs/concepts/services-networking/network-policies.md, ipBlock)."""
    destinations: list[tuple[str, int]] = []
    spec = sdk_field(service, "spec", "spec")
    cluster_ip = sdk_field(spec, "clusterIP", "cluster_ip")
    for port in sdk_field(spec, "ports", "ports") or []:
        if cluster_ip and (sdk_field(port, "protocol", "protocol") or "TCP") == "TCP":
            destinations.append((str(cluster_ip), int(sdk_field(port, "port", "port"))))
    ports = [int(sdk_field(p, "port", "port")) for p in sdk_field(endpoint_slice, "ports", "ports") or []
             if sdk_field(p, "port", "port") and (sdk_field(p, "protocol", "protocol") or "TCP") == "TCP"]
    for endpoint in sdk_field(endpoint_slice, "endpoints", "endpoints") or []:
        for address in sdk_field(endpoint, "addresses", "addresses") or []:
            destinations += [(str(address), port) for port in ports]
    usable = [(a, p) for a, p in destinations if ipaddress.ip_address(a).version == 4]
    if not any(a != cluster_ip for a, _ in usable):
        raise ValueError(
            "the management cluster's EndpointSlice default/kubernetes lists no IPv4 API server address and port "
            f"(read: {endpoint_slice!r}); a dedicated data store's setup Jobs could not reach the API server. "
            "Check `kubectl -n default get endpointslice kubernetes -o yaml`, or use the shared data store"
        )
    return sorted(set(usable))


def etcd_setup_network_policy(namespace: str, release: str,
                              destinations: Sequence[tuple[str, int]]) -> dict[str, Any]:
    """Egress from a dedicated etcd's hook Jobs to the management API server, on top of the isolation policy.

    Only those pods: the control plane and etcd have no business with the management API. Policies add up, so
    everything else about these pods stays as `isolation_network_policy` says."""
    if not destinations:
        raise ValueError("no management API server address: an egress rule without destinations admits all")
    by_port: dict[int, list[str]] = {}
    for address, port in destinations:
        by_port.setdefault(port, []).append(address)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": ETCD_SETUP_POLICY_NAME, "namespace": namespace, "labels": namespace_labels(namespace)},
        "spec": {
            "podSelector": etcd_setup_pod_selector(release),
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"ipBlock": {"cidr": f"{address}/32"}} for address in sorted(set(addresses))],
                 "ports": [{"protocol": "TCP", "port": port}]}
                for port, addresses in sorted(by_port.items())
            ],
        },
    }


# --------------------------------------------------------------------------- #
# The TenantControlPlane custom resource (charts/kamaji/crds/kamaji.clastix.io_tenantcontrolplanes.yaml)
# --------------------------------------------------------------------------- #

TCP_API_VERSION = "kamaji.clastix.io/v1alpha1"
TCP_KIND = "TenantControlPlane"
API_SERVER_PORT = 6443
KONNECTIVITY_PORT = 8132
# Pulumi does not await custom resources by default; this makes it wait for Kamaji's Ready.
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
WAIT_FOR_READY = "jsonpath={.status.kubernetesResources.version.status}=Ready"
# Kamaji's default `spec.kubernetes.admissionControllers` (the CRD default, clastix/kamaji
# api/v1alpha1/tenantcontrolplane_types.go L136) plus NodeRestriction, which kubeadm enables and Kamaji's list
# lacks: without it any node's kubelet credential can modify every other Node. The list replaces the default,
# so it is spelled out whole.
KAMAJI_DEFAULT_ADMISSION_CONTROLLERS = (
    "CertificateApproval", "CertificateSigning", "CertificateSubjectRestriction", "DefaultIngressClass",
    "DefaultStorageClass", "DefaultTolerationSeconds", "LimitRanger", "MutatingAdmissionWebhook",
    "NamespaceLifecycle", "PersistentVolumeClaimResize", "Priority", "ResourceQuota", "RuntimeClass",
    "ServiceAccount", "StorageObjectInUseProtection", "TaintNodesByCondition", "ValidatingAdmissionWebhook",
)
ADMISSION_CONTROLLERS = (*KAMAJI_DEFAULT_ADMISSION_CONTROLLERS, "NodeRestriction")
# A changed range of an existing tenant re-creates its control plane (a planned replacement in the preview): the
# controller manager's --cluster-cidr, Calico's pool and every Service address would otherwise disagree.
CIDR_REPLACE_ON_CHANGES = ("spec.networkProfile.serviceCidrs", "spec.networkProfile.podCidrs")


def _require_dns1035(name: str) -> str:
    # Kamaji derives Service and Secret names from the TCP name, so it must be a DNS-1035 label.
    if len(name) > 63 or not DNS1035_LABEL.fullmatch(name):
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


def tenant_control_plane_spec(tenant: Tenant, datastore: str, source_ranges: Sequence[str]) -> dict[str, Any]:
    """The TCP spec: one replica behind a LoadBalancer reachable only from `source_ranges`."""
    service_cidr, pod_cidr = resolved_cidrs(tenant)
    if not source_ranges:
        raise ValueError(f"tenant {tenant.name!r}: no networks may reach its API server")
    return {
        "dataStore": datastore,
        "controlPlane": {
            # One machine: the CRD's default of 2 replicas buys nothing but memory.
            "deployment": {"replicas": 1},
            # MetalLB hands out an address on the docker `kind` network. No NodePorts: kube-proxy applies
            # loadBalancerSourceRanges to the LoadBalancer address only, so a node port on every management node
            # would bypass them (clastix/kamaji internal/resources/k8s_service_resource.go copies the field
            # onto the Service and, when it is false, writes 0 over node ports allocated before; CHANGELOG.md
            # says when the API server releases them).
            "service": {"serviceType": "LoadBalancer", "allocateLoadBalancerNodePorts": False},
        },
        "kubernetes": {
            "version": tenant.kubernetes_version,
            # kindest/node runs containerd with the systemd cgroup driver.
            "kubelet": {"cgroupfs": "systemd"},
            "admissionControllers": list(ADMISSION_CONTROLLERS),
        },
        "networkProfile": {
            "port": API_SERVER_PORT,
            # The list forms: the singular serviceCidr/podCidr are deprecated and Kamaji copies them into the lists
            # on CREATE only (internal/webhook/handlers/tcp_defaults.go), so a later change would be ignored.
            "serviceCidrs": [service_cidr],
            "podCidrs": [pod_cidr],
            "dnsServiceIPs": [dns_service_ip(service_cidr)],
            # Copied onto the LoadBalancer Service (internal/resources/k8s_service_resource.go): kube-proxy drops
            # connections from anywhere else.
            "loadBalancerSourceRanges": sorted(source_ranges),
        },
        # An absent addon is not installed (clastix/kamaji internal/resources/addons/coredns.go,
        # internal/resources/konnectivity/agent.go): CoreDNS and the Konnectivity tunnel come from Kamaji;
        # kube-proxy is installed by this program (components/tenant/kube_proxy.py) with conntrack.maxPerCore 0,
        # because Kamaji's addon keeps kubeadm's default, which writes a host sysctl a container cannot change.
        "addons": {
            "coreDNS": {},
            "konnectivity": {"server": {"port": KONNECTIVITY_PORT}},
        },
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
# Tenant credentials (the Secrets Kamaji writes in the control plane's namespace)
# --------------------------------------------------------------------------- #

# Both in the Secret Kamaji names in status.kubeconfig.admin.secretName (clastix/kamaji
# internal/resources/kubeconfig.go): admin.conf is in group kubeadm:cluster-admins, which has no rights until
# Kamaji's soot controller binds it after Ready; super-admin.conf is system:masters. Users get admin.conf; the
# program itself writes with super-admin.conf, so its first writes into a new tenant cannot hit that window.
ADMIN_KUBECONFIG_KEY = "admin.conf"
SUPER_ADMIN_KUBECONFIG_KEY = "super-admin.conf"


def admin_kubeconfig_secret_name(tcp_name: str) -> str:
    """The name Kamaji gives the Secret (clastix/kamaji controllers/resources.go `AddTenantPrefix`)."""
    return f"{tcp_name}-admin-kubeconfig"


def admin_secret_id(metadata: Mapping[str, Any] | None, status: Mapping[str, Any] | None, tcp_name: str) -> str:
    """`<namespace>/<secret>` of the admin kubeconfigs, from Kamaji's own status pointer.

    The status is stripped from a create preview (pulumi-kubernetes provider.go L1849-1854), so this stays
    unknown - and the read is skipped - until the control plane exists.
    """
    name = (((status or {}).get("kubeconfig") or {}).get("admin") or {}).get("secretName")
    if not name:
        raise ValueError(f"TenantControlPlane {tcp_name!r} reports no status.kubeconfig.admin.secretName yet")
    return f"{(metadata or {}).get('namespace') or tcp_name}/{name}"


def decode_secret_value(data: Mapping[str, str] | None, key: str, secret: str) -> str:
    """The text stored base64-encoded under `key` of a Secret's `data`."""
    encoded = (data or {}).get(key)
    if not encoded:
        raise ValueError(f"Secret {secret!r} has no key {key!r}; Kamaji writes it once the control plane is Ready")
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as error:
        raise ValueError(f"Secret {secret!r} key {key!r} is not base64-encoded text ({error})") from None


def ca_certificate(kubeconfig: str) -> str:
    """The cluster CA (PEM) of a kubeconfig's current context: public, and all a worker needs to trust."""
    return kube.current_context(kubeconfig).ca_certificate()


def discovery_hash(ca_pem: str | bytes) -> str:
    """kubeadm's --discovery-token-ca-cert-hash: sha256 of the CA's DER SubjectPublicKeyInfo."""
    pem = ca_pem.encode() if isinstance(ca_pem, str) else ca_pem
    certificate = x509.load_pem_x509_certificate(pem)
    public_key_info = certificate.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    digest = hashes.Hash(hashes.SHA256())
    digest.update(public_key_info)
    return "sha256:" + digest.finalize().hex()


# --------------------------------------------------------------------------- #
# Data stores (Kamaji DataStore + kamaji-etcd)
# --------------------------------------------------------------------------- #

# The shared etcd Kamaji's chart deploys (kamaji-etcd subchart: fullnameOverride kamaji-etcd, cert-manager
# certificates, in kamaji-system; charts/kamaji/values.yaml). This program owns the DataStore object itself, so
# Helm's uninstall never waits on its finalizer (that only Kamaji's controller removes) and tear-down deletes it
# while the controller still runs.
SHARED_ETCD_NAME = "kamaji-etcd"
ETCD_CLIENT_PORT = 2379
# Dedicated data stores install the kamaji-etcd chart Kamaji's chart vendors as its subchart (the namespace is the
# tenant's).
ETCD_CHART = Chart("etcd", "kamaji/charts/kamaji-etcd", "")
DEDICATED_ETCD_NAME = "etcd"


def _etcd_endpoints(fullname: str, namespace: str, replicas: int) -> list[str]:
    # clastix/kamaji-etcd charts/kamaji-etcd/templates/_helpers.tpl "etcd.endpointsYAML" (headless service).
    return [f"{fullname}-{i}.{fullname}.{namespace}.svc.cluster.local:{ETCD_CLIENT_PORT}" for i in range(replicas)]


def _secret_ref(name: str, namespace: str, key: str) -> dict[str, Any]:
    return {"secretReference": {"name": name, "namespace": namespace, "keyPath": key}}


def _etcd_datastore_spec(fullname: str, namespace: str, replicas: int, ca: tuple[str, str, str],
                         client: str) -> dict[str, Any]:
    """An etcd DataStore: the endpoints of kamaji-etcd's headless service, its CA (secret, certificate key, private
    key key) and its client certificate secret (tls.crt / tls.key)."""
    ca_secret, ca_cert, ca_key = ca
    return {
        "driver": "etcd",
        "endpoints": _etcd_endpoints(fullname, namespace, replicas),
        "tlsConfig": {
            "certificateAuthority": {"certificate": _secret_ref(ca_secret, namespace, ca_cert),
                                     "privateKey": _secret_ref(ca_secret, namespace, ca_key)},
            "clientCertificate": {"certificate": _secret_ref(client, namespace, "tls.crt"),
                                  "privateKey": _secret_ref(client, namespace, "tls.key")},
        },
    }


def shared_datastore_spec(namespace: str, replicas: int) -> dict[str, Any]:
    """The DataStore kamaji-etcd would render in cert-manager mode (templates/etcd_datastore.yaml, v0.15.0)."""
    return _etcd_datastore_spec(SHARED_ETCD_NAME, namespace, replicas,
                                (f"{SHARED_ETCD_NAME}-ca", "tls.crt", "tls.key"), f"{SHARED_ETCD_NAME}-client-certs")


def dedicated_datastore_name(tenant: str) -> str:
    return f"{tenant}-etcd"


def dedicated_datastore_spec(namespace: str, replicas: int) -> dict[str, Any]:
    """A tenant's own kamaji-etcd (self-signed mode): etcd.caSecretName / etcd.clientSecretName in _helpers.tpl."""
    return _etcd_datastore_spec(DEDICATED_ETCD_NAME, namespace, replicas,
                                (f"{DEDICATED_ETCD_NAME}-certs", "ca.crt", "ca.key"),
                                f"{DEDICATED_ETCD_NAME}-root-client-certs")


def _mib_bytes(mib: int) -> str:
    # A string: a JSON number reaches Go templates as float64 and renders as 1.073741824e+09.
    return str(mib * 1024 * 1024)


def dedicated_etcd_values(store: DataStore) -> dict[str, Any]:
    """kamaji-etcd chart values of a tenant's own etcd (its DataStore object is this program's)."""
    return {
        "fullnameOverride": DEDICATED_ETCD_NAME,
        "replicas": store.replicas,
        "persistentVolumeClaim": {"size": store.storage_size, "retentionPolicyWhenDeleted": "Delete"},
        "quotaBackendBytes": _mib_bytes(store.quota_mib),
        "datastore": {"enabled": False},
        # The CA generator, by digest instead of `latest` (templates/etcd_job_preinstall_1.yaml joins image:tag).
        "jobs": {"cfssl": {"image": CFSSL_REPOSITORY, "tag": CFSSL_TAG}},
    }


def datastore_manifest(name: str, spec: dict[str, Any], tenant: str | None = None) -> dict[str, Any]:
    labels = {PART_OF_LABEL: PART_OF, **({TENANT_LABEL: tenant} if tenant else {})}
    return {"apiVersion": TCP_API_VERSION, "kind": "DataStore", "metadata": {"name": name, "labels": labels},
            "spec": spec}


# --------------------------------------------------------------------------- #
# Calico (tigera-operator chart, projectcalico/calico charts/ at the pinned tag)
# --------------------------------------------------------------------------- #

# The operator reads its kubernetes-services-endpoint ConfigMap from the release namespace.
# Since 3.32 the CRDs are a chart of their own, installed before the operator chart.
CALICO_CRDS_CHART = Chart("calico-crds", "crd.projectcalico.org.v1", CALICO_OPERATOR_NAMESPACE)
CALICO_OPERATOR_CHART = Chart("calico", "tigera-operator", CALICO_OPERATOR_NAMESPACE)
CALICO_BLOCK_SIZE = 26


# The label of a tenant's workers without GPUs, where the platform's most powerful controllers then run. The
# `node-restriction.kubernetes.io/` prefix is one a kubelet may not set on its own Node (NodeRestriction admission,
# kubernetes plugin/pkg/admission/noderestriction), and NODE_LABEL_POLICY refuses it to every other identity but the
# program's: root on a GPU worker cannot label that worker a system one and draw the controllers, and their tokens,
# to it. The program sets it from the Pulumi host.
SYSTEM_NODE_LABEL = "node-restriction.kubernetes.io/gpu-tenancy-system"


# Who may still write node-restriction labels: NodeRestriction stops only the kubelets, and calico-node's token on
# every worker may write `nodes/status` cluster-wide (tigera/operator pkg/render/node.go), where a label change is
# kept (kubernetes pkg/registry/core/node/strategy.go nodeStatusStrategy resets only `spec`).
NODE_LABEL_POLICY = "gpu-tenancy-node-restriction-labels"
_RESTRICTED = "'node-restriction.kubernetes.io/'"


def node_label_policy() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding: only `system:masters` (this program's super-admin credential)
    adds, changes or removes a `node-restriction.kubernetes.io/` label, through `nodes` or `nodes/status`."""
    new, old = "object.metadata.labels", "oldObject.metadata.labels"
    kept = (f"!has({new}) || {new}.all(k, !k.startsWith({_RESTRICTED}) || "
            f"(has({old}) && k in {old} && {old}[k] == {new}[k]))")
    not_dropped = f"!has({old}) || {old}.all(k, !k.startsWith({_RESTRICTED}) || (has({new}) && k in {new}))"
    created = f"!has({new}) || !{new}.exists(k, k.startsWith({_RESTRICTED}))"
    return kube.admission_policy(NODE_LABEL_POLICY, {
        "matchConstraints": {"resourceRules": [{
            "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
            "resources": ["nodes", "nodes/status"]}]},
        "matchConditions": [{"name": "not-the-program",
                             "expression": "!('system:masters' in request.userInfo.groups)"}],
        "validations": [{
            "expression": f"request.operation == 'CREATE' ? ({created}) : (({kept}) && ({not_dropped}))",
            "message": "only gpu-tenancy sets node-restriction.kubernetes.io/ labels on nodes",
        }],
    })


def system_node_selector(tenant: Tenant) -> dict[str, str] | None:
    """{SYSTEM_NODE_LABEL: "true"} when the tenant has a worker without GPUs, else None (no place but GPU workers)."""
    return {SYSTEM_NODE_LABEL: "true"} if any(not worker.gpus for worker in tenant.workers) else None


def calico_operator_values(pod_cidr: str, endpoint: str, workers: int,
                           system_nodes: dict[str, str] | None = None) -> dict[str, Any]:
    """tigera-operator chart values: one VXLAN pool over the tenant's pod range. With `system_nodes`, the operator
    (whose ClusterRole may bind and escalate roles: charts/tigera-operator/templates/tigera-operator/
    02-role-tigera-operator.yaml) and calico-kube-controllers run only there."""
    host, port = split_endpoint(endpoint)
    placement: dict[str, Any] = {}
    if system_nodes:
        placement = {
            # The chart's own default (values.yaml nodeSelector) kept; Helm merges the maps.
            "nodeSelector": {"kubernetes.io/os": "linux", **system_nodes},
        }
    values: dict[str, Any] = {
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
        **placement,
    }
    if system_nodes:
        # Installation.spec.calicoKubeControllersDeployment (operator.tigera.io CRD): a pod-template override.
        values["installation"]["calicoKubeControllersDeployment"] = {
            "spec": {"template": {"spec": {"nodeSelector": dict(system_nodes)}}}}
    return values


# --------------------------------------------------------------------------- #
# Inside the tenant: workload namespaces, the restricted credential, the GPU quota
# --------------------------------------------------------------------------- #

GPU_QUOTA_NAME = "gpu-quota"
# Pod Security Admission labels (kubernetes.io/docs/concepts/security/pod-security-admission).
POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
TENANT_USER = "tenant-user"
TENANT_USER_NAMESPACE = "kube-system"
TENANT_USER_TOKEN = "tenant-user-token"


def gpu_quota_hard(quota: Quota | None) -> dict[str, str]:
    """ResourceQuota `spec.hard` for the quota keys that are set.

    HAMi's quota manager counts memory and cores per allocated device only for `limits.` keys of its own
    resources (Project-HAMi/HAMi v2.10.0 pkg/device/quota.go managedQuotaName); the card count is a native
    extended-resource quota (`requests.`), which kube-apiserver enforces.
    """
    if quota is None:
        return {}
    hard = {}
    for resource, value in (
        (QUOTA_GPUS, quota.gpus),
        (f"limits.{GPU_MEMORY_RESOURCE}", quota.memory_mib),
        (f"limits.{GPU_CORES_RESOURCE}", quota.cores),
    ):
        if value is not None:
            hard[resource] = str(value)
    return hard


def gpu_resource_quota(quota: Quota | None, namespace: str) -> dict[str, Any] | None:
    hard = gpu_quota_hard(quota)
    if not hard:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": GPU_QUOTA_NAME, "namespace": namespace, "labels": {PART_OF_LABEL: PART_OF}},
        "spec": {"hard": hard},
    }


OBJECT_QUOTA_NAME = "object-quota"
# The role the tenant user is bound to in its namespaces, and the API group Kubernetes stopped serving in 1.22 (its
# kinds are served by apps and networking.k8s.io, which the role names too).
TENANT_USER_ROLE = "edit"
UNSERVED_GROUPS = ("extensions",)


def counted_kinds(rules: Sequence[Mapping[str, Any]]) -> set[str]:
    """The `count/` names (`<resource>`, `<resource>.<group>`) of every kind RBAC `rules` let a user create: what an
    object-count quota must list so that no kind the user can write is unbounded. Subresources store nothing."""
    return {resource if not group else f"{resource}.{group}"
            for rule in rules if {"create", "*"} & set(rule.get("verbs") or ())
            for group in rule.get("apiGroups") or () if group not in UNSERVED_GROUPS
            for resource in rule.get("resources") or () if "/" not in resource}


def object_resource_quota(quota: Quota | None, namespace: str) -> dict[str, Any]:
    """The object-count ResourceQuota of a workload namespace (config.models.DEFAULT_OBJECT_COUNTS, `quota.objects`).

    `count/<resource>.<group>` counts every object of that kind stored in the namespace (kubernetes
    pkg/quota/v1/generic/evaluator.go ObjectCountQuotaResourceNameFor); kube-apiserver's ResourceQuota admission
    refuses a create beyond it, for the tenant user and everyone else in that namespace.
    """
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": OBJECT_QUOTA_NAME, "namespace": namespace, "labels": {PART_OF_LABEL: PART_OF}},
        "spec": {"hard": {f"count/{kind}": str(count) for kind, count in object_counts(quota).items()}},
    }


def workload_namespace(name: str) -> dict[str, Any]:
    """A namespace the tenant's users work in, with Pod Security `baseline` enforced (no privileged pods,
    host namespaces or hostPath: in the lab a privileged pod would be root on the Docker host)."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {PART_OF_LABEL: PART_OF, **POD_SECURITY}}}


def tenant_user_objects(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The restricted tenant credential: a ServiceAccount with the built-in `edit` role in each workload namespace
    only (no cluster-scoped writes), and a long-lived token Secret for its kubeconfig."""
    subject = {"kind": "ServiceAccount", "name": TENANT_USER, "namespace": TENANT_USER_NAMESPACE}
    labels = {PART_OF_LABEL: PART_OF}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": TENANT_USER, "namespace": TENANT_USER_NAMESPACE, "labels": labels}},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": TENANT_USER_TOKEN, "namespace": TENANT_USER_NAMESPACE, "labels": labels,
                      "annotations": {"kubernetes.io/service-account.name": TENANT_USER}}},
    ]
    for namespace in namespaces:
        objects.append({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{TENANT_USER}-edit", "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TENANT_USER_ROLE},
            "subjects": [subject],
        })
    return objects


def tenant_user_kubeconfig(endpoint: str, ca_pem: str, token: str, tenant: str, namespace: str) -> str:
    """A kubeconfig for the restricted credential (server and CA as in admin.conf)."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": tenant, "cluster": {
            "server": f"https://{endpoint}",
            "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode()}}],
        "users": [{"name": f"{tenant}-user", "user": {"token": token}}],
        "contexts": [{"name": tenant, "context": {"cluster": tenant, "user": f"{tenant}-user",
                                                  "namespace": namespace}}],
        "current-context": tenant,
    }, sort_keys=False)
