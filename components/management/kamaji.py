"""The management plane: cert-manager, Kamaji, and MetalLB when this stack provides the load-balancer pool.

Order, all on the management Provider:

    cert-manager ─► Kamaji (+ kamaji-etcd) ─► DataStore `default` ─► webhook answers ─► TenantControlPlanes
    Namespace metallb-system ─► MetalLB ─► webhook answers ─► IPAddressPool + L2Advertisement (with a pool)

Kamaji's chart is `charts/kamaji` at the tag of the pinned image (components/charts.json): the published chart is a
`0.0.0+latest` republished from master on every push, whose templates and CRDs drift from a pinned image.

The `default` DataStore is ours, not the chart's: Helm's uninstall deletes unknown kinds last, after Kamaji's
controller, then waits for the DataStore whose finalizer only that controller removes (helm
pkg/releaseutil/kind_sorter.go, pkg/action/uninstall.go; clastix/kamaji controllers/datastore_controller.go). In kind
mode every object is `deleted_with` the cluster, so tear-down works when the cluster was deleted by hand. The pool is
`management.loadBalancerPool`, else carved from the kind subnet; an adopted cluster without one gets no MetalLB. On
an adopted cluster `cert-manager` and `kamaji-system` are Namespaces of this stack (`Kamaji._release_namespace`),
deleted by `pulumi destroy`; a namespace that already exists is never taken over.

Every chart is a Release awaited by Helm (`skip_await=False`), which makes the edges above readiness conditions:
cert-manager's `startupapicheck` Job succeeds only once its webhook answers; kamaji-etcd's post-install Job waits for
the etcd rollout (clastix/kamaji-etcd templates/etcd_job_preinstall_2.yaml, v0.15.0). Two webhooks answer only
after their readiness, so a dry run waits for each (components.management.operations): MetalLB's Service gets its
endpoint after the controller is ready (metallb internal/k8s/k8s.go, v0.15.3), and Kamaji's readiness probe does not
cover its webhook server, again after every upgrade of the release.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

import config
from components import host_operations
from components.helm import Chart, helm_release
from components.management.operations import KamajiWebhookReadyProvider, MetalLBWebhookReadyProvider
from components.tenant import spec as tenant_spec
from naming import (
    CERT_MANAGER_NAMESPACE,
    COMPONENT_PREFIX,
    DEFAULT_DATASTORE,
    KAMAJI_NAMESPACE,
    METALLB_NAMESPACE,
    NAMESPACE_NAME_LABEL,
    PART_OF,
    PART_OF_LABEL,
)

CERT_MANAGER_CHART = Chart("cert-manager", "cert-manager", CERT_MANAGER_NAMESPACE)
METALLB_CHART = Chart("metallb", "metallb", METALLB_NAMESPACE)
# The CRDs hard-code kamaji-system/kamaji-webhook-service and kamaji-serving-cert (clastix/kamaji
# charts/kamaji/crds/kamaji.clastix.io_tenantcontrolplanes.yaml: conversion webhook, cert-manager inject-ca-from).
KAMAJI_RELEASE_NAME = "kamaji"
KAMAJI_CHART = Chart(KAMAJI_RELEASE_NAME, "kamaji", KAMAJI_NAMESPACE)
SHARED_ETCD_REPLICAS = 1
LB_POOL_NAME = "kind-ip-pool"
# On a cluster we did not create the pool holds tenant API server addresses, not kind's.
ADOPTED_LB_POOL_NAME = "tenant-control-planes"
POOL_CONFIG_KEY = "management.loadBalancerPool"

# Helm timeouts (seconds per operation): images are pulled on first install.
CHART_TIMEOUT = 600
KAMAJI_TIMEOUT = 900

# The pool sits in the last /24 of the kind subnet, like Kamaji's kind quickstart
# (docs/content/getting-started/kamaji-kind.md): docker hands container addresses out
# from the bottom, and .200-.250 keeps clear of the broadcast address at the top.
LB_POOL_FIRST_OFFSET = 200
LB_POOL_LAST_OFFSET = 250
LB_POOL_MAX_PREFIX = 24

PRIVILEGED_NAMESPACE_LABELS = {
    f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")
}


def release_revision(release: k8s.helm.v3.Release) -> pulumi.Output[Any]:
    """The release's Helm revision (one more on every upgrade), for waits that must run again after one."""
    return release.status.apply(lambda status: dict.get(status or {}, "revision"))


def lb_pool_range(subnet: str) -> str:
    """MetalLB address range `<first>-<last>` at the top of the kind network's IPv4 subnet."""
    try:
        network = ipaddress.ip_network(subnet, strict=False)
    except ValueError as error:
        raise ValueError(f"kind subnet {subnet!r} is not a network in CIDR form ({error})") from None
    if network.version != 4:
        raise ValueError(f"kind subnet {subnet!r} is not IPv4: MetalLB's pool must come from the IPv4 range")
    if network.prefixlen > LB_POOL_MAX_PREFIX:
        raise ValueError(
            f"kind subnet {subnet!r} is smaller than a /{LB_POOL_MAX_PREFIX}: no room for a load-balancer pool "
            "beside the node containers; recreate the `kind` docker network with a /24 or larger IPv4 range"
        )
    top = ipaddress.ip_network(f"{network.broadcast_address}/{LB_POOL_MAX_PREFIX}", strict=False)
    return f"{top[LB_POOL_FIRST_OFFSET]}-{top[LB_POOL_LAST_OFFSET]}"


def pool_bounds(pool: str) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    """First and last address of a MetalLB pool written as `<first>-<last>` or as an IPv4 CIDR."""
    first, dash, last = pool.partition("-")
    try:
        if dash:
            bounds = ipaddress.IPv4Address(first.strip()), ipaddress.IPv4Address(last.strip())
        else:
            network = ipaddress.IPv4Network(pool.strip(), strict=True)
            bounds = network.network_address, network.broadcast_address
    except ValueError:
        raise ValueError(
            f"{POOL_CONFIG_KEY} = {pool!r} is neither an IPv4 range like 192.168.10.200-192.168.10.250 "
            "nor a CIDR like 192.168.10.192/27"
        ) from None
    if bounds[1] < bounds[0]:
        raise ValueError(f"{POOL_CONFIG_KEY} = {pool!r} ends before it starts")
    return bounds


def choose_lb_pool(kind_subnet: str | None, load_balancer_pool: str | None) -> str | None:
    """The MetalLB pool this stack installs, or None when the cluster provides load balancers itself.

    An explicit pool wins; on kind it must lie inside the kind subnet, clear of the network, gateway and
    broadcast addresses. Without one, kind gets `lb_pool_range(kind_subnet)` and an adopted cluster none.
    """
    if load_balancer_pool is None:
        return lb_pool_range(kind_subnet) if kind_subnet is not None else None
    first, last = pool_bounds(load_balancer_pool)
    if kind_subnet is None:
        return load_balancer_pool
    network = ipaddress.ip_network(kind_subnet, strict=False)
    if first not in network or last not in network:
        raise ValueError(
            f"{POOL_CONFIG_KEY} = {load_balancer_pool!r} is not inside the kind network's IPv4 subnet "
            f"{network}: MetalLB answers ARP only for addresses on that network. {_pool_hint(kind_subnet)}"
        )
    # Docker gives the network's first host address to the gateway (the host's bridge interface).
    reserved = {
        network.network_address: "the network address",
        network.network_address + 1: "the docker gateway",
        network.broadcast_address: "the broadcast address",
    }
    for address, what in reserved.items():
        if first <= address <= last:
            raise ValueError(
                f"{POOL_CONFIG_KEY} = {load_balancer_pool!r} includes {address}, {what} of the kind network "
                f"{network}; handing it to a Service would break the network. {_pool_hint(kind_subnet)}"
            )
    return load_balancer_pool


def _pool_hint(kind_subnet: str) -> str:
    try:
        default = lb_pool_range(kind_subnet)
    except ValueError:
        return "Pick a range inside it, clear of the low addresses docker gives containers."
    return f"Pick a range inside it, e.g. {default}, or remove the key to use that default."


def cert_manager_values(adopted: bool = False) -> dict[str, Any]:
    values: dict[str, Any] = {
        "crds": {"enabled": True},
        # Default, spelled out: this post-install Job is what proves the webhook answers.
        "startupapicheck": {"enabled": True},
    }
    if adopted:
        # The chart puts its leader-election Leases in kube-system (cert-manager/cert-manager
        # deploy/charts/cert-manager/values.yaml `global.leaderElection.namespace`); on a cluster we do not own
        # they go in our namespace, which destroy removes.
        values["global"] = {"leaderElection": {"namespace": CERT_MANAGER_CHART.namespace}}
    return values


def metallb_values() -> dict[str, Any]:
    # Plain L2, whatever the chart's defaults: 0.15 runs an FRR (BGP) sidecar in the speaker, 0.16 the frr-k8s
    # subchart, a privileged FRR DaemonSet (metallb/metallb charts/metallb/values.yaml `speaker.frr`, `frrk8s`).
    return {"speaker": {"frr": {"enabled": False}}, "frrk8s": {"enabled": False}}


def ip_address_pool_spec(pool_range: str) -> dict[str, Any]:
    return {"addresses": [pool_range]}


def l2_advertisement_spec(pool_name: str) -> dict[str, Any]:
    return {"ipAddressPools": [pool_name]}


def kamaji_values(versions: config.Versions) -> dict[str, Any]:
    """Kamaji chart values; `None` means "delete the chart default" (Helm's null)."""
    return {
        "image": {"tag": versions.kamaji_image, "pullPolicy": "IfNotPresent"},
        # The chart's default 200m/100Mi limits (charts/kamaji/values.yaml `resources`) are too tight on kind.
        "resources": None,
        "telemetry": {"disabled": True},
        "defaultDatastoreName": DEFAULT_DATASTORE,
        "kamaji-etcd": {
            # Laptop-sized etcd: one member instead of three, a small volume, and the
            # space alarm set below the volume size (chart default is 8Gi for both).
            "replicas": SHARED_ETCD_REPLICAS,
            "persistentVolumeClaim": {"size": "2Gi"},
            "quotaBackendBytes": str(1024**3),
            # The DataStore object is this program's (see the module docstring).
            "datastore": {"enabled": False},
        },
    }


def etcd_network_policy() -> dict[str, Any]:
    """Only Kamaji and the tenants' control planes (namespaces labelled part-of gpu-tenancy) reach the shared
    etcd's client port; peers reach each other. kamaji-etcd's pods carry app.kubernetes.io/name: kamaji-etcd
    (charts/kamaji-etcd/templates/_helpers.tpl etcd.selectorLabels)."""
    return {
        "metadata": {"name": "kamaji-etcd-clients", "namespace": KAMAJI_NAMESPACE, "labels": {PART_OF_LABEL: PART_OF}},
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kamaji-etcd"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: KAMAJI_NAMESPACE}}}]},
                {"from": [{"namespaceSelector": {"matchLabels": {PART_OF_LABEL: PART_OF}}}],
                 "ports": [{"protocol": "TCP", "port": 2379}]},
            ],
        },
    }


@dataclass
class KamajiArgs:
    provider: k8s.Provider
    # The management cluster's kubeconfig (secret), for the host-side wait on Kamaji's webhook.
    kubeconfig: pulumi.Input[str]
    # IPv4 subnet of the kind network; None on an adopted cluster (one this stack did not create).
    kind_subnet: pulumi.Input[str] | None
    versions: config.Versions
    # `management.loadBalancerPool`: MetalLB's range; None means carve it from the kind subnet, or (adopted
    # cluster) install no MetalLB because the cluster provides LoadBalancer Services itself.
    load_balancer_pool: str | None = None
    # Kind mode: the cluster command; every object on the cluster goes with it.
    deleted_with: pulumi.Resource | None = None
    # The version the webhook probe asks for (any version Kamaji accepts).
    probe_version: str = config.models.DEFAULT_KUBERNETES_VERSION
    # What every install on the cluster waits for (the kind node pulling through the image mirror).
    depends_on: list[pulumi.Resource] = field(default_factory=list)


class Kamaji(pulumi.ComponentResource):
    """cert-manager, Kamaji with its default DataStore, and MetalLB with a pool when this stack provides one."""

    provider: k8s.Provider
    datastore_name: pulumi.Output[str]
    # MetalLB's address range; None when no MetalLB is installed (adopted cluster without a pool).
    lb_pool_range: pulumi.Output[str] | None
    release: k8s.helm.v3.Release
    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: KamajiArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{COMPONENT_PREFIX}:Kamaji", name, None, opts)
        self.provider = args.provider
        self._deleted_with = args.deleted_with
        self._after = list(args.depends_on)
        self._kubeconfig = args.kubeconfig
        versions = args.versions
        adopted = args.kind_subnet is None

        cert_manager = helm_release(
            f"{name}-cert-manager",
            CERT_MANAGER_CHART,
            values=cert_manager_values(adopted),
            timeout=CHART_TIMEOUT,
            **self._release_namespace(f"{name}-cert-manager-namespace", CERT_MANAGER_CHART.namespace, adopted),
        )
        self.release = helm_release(
            f"{name}-kamaji",
            KAMAJI_CHART,
            values=kamaji_values(versions),
            timeout=KAMAJI_TIMEOUT,
            # The chart renders cert-manager Issuer/Certificate objects.
            **self._release_namespace(f"{name}-kamaji-namespace", KAMAJI_NAMESPACE, adopted, [cert_manager]),
        )
        manifest = tenant_spec.datastore_manifest(
            DEFAULT_DATASTORE, tenant_spec.shared_datastore_spec(KAMAJI_NAMESPACE, SHARED_ETCD_REPLICAS))
        datastore = k8s.apiextensions.CustomResource(
            f"{name}-datastore", api_version=manifest["apiVersion"], kind=manifest["kind"],
            metadata=manifest["metadata"], spec=manifest["spec"], opts=self._child([self.release]),
        )
        k8s.networking.v1.NetworkPolicy(
            f"{name}-etcd-clients", **etcd_network_policy(), opts=self._child([self.release]),
        )
        self.webhook = host_operations.resource(
            KamajiWebhookReadyProvider(), f"{name}-webhook-ready",
            {"kubeconfig": args.kubeconfig, "namespace": KAMAJI_NAMESPACE, "datastore": DEFAULT_DATASTORE,
             "version": args.probe_version, "release": self.release.id,
             # Changes on every upgrade (the id never does): an upgrade restarts the webhook, so probe again.
             "revision": release_revision(self.release)},
            pulumi.ResourceOptions(parent=self, depends_on=[datastore], deleted_with=args.deleted_with),
        )
        # TenantControlPlanes need Kamaji's webhook and DataStore, and (with MetalLB) an address from the pool.
        self.ready = [self.webhook, datastore]
        # Derived from resource outputs, so consumers of these values wait for those resources.
        self.datastore_name = datastore.metadata.apply(lambda m: m["name"])

        self.lb_pool_range = None
        if adopted and args.load_balancer_pool is not None:
            # Checked now: nothing about it waits for a resource.
            pool_range = pulumi.Output.from_input(choose_lb_pool(None, args.load_balancer_pool))
            self.lb_pool_range = self._metallb(name, ADOPTED_LB_POOL_NAME, pool_range)
        elif not adopted:
            # Checked inside the apply: the kind subnet is known only once the cluster exists.
            pool_range = pulumi.Output.from_input(args.kind_subnet).apply(
                lambda subnet: choose_lb_pool(subnet, args.load_balancer_pool)
            )
            self.lb_pool_range = self._metallb(name, LB_POOL_NAME, pool_range)
        # Otherwise (adopted, no pool) the cluster provides LoadBalancer Services: no MetalLB of ours.

        self.register_outputs(
            {
                "datastoreName": self.datastore_name,
                "lbPoolRange": self.lb_pool_range,
                "releaseName": self.release.name,
            }
        )

    def _child(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self.provider,
                                      depends_on=[*self._after, *(depends_on or [])], deleted_with=self._deleted_with)

    def _release_namespace(
        self, resource_name: str, namespace: str, adopted: bool, depends_on: list[pulumi.Resource] | None = None
    ) -> dict[str, Any]:
        """`create_namespace` and `opts` of a release: Helm creates the namespace on kind, this stack when adopted."""
        depends_on = list(depends_on or [])
        if not adopted:
            # Kind: the namespace goes away with the cluster (and existing stacks keep their graph).
            return {"create_namespace": True, "opts": self._child(depends_on)}
        # Helm never deletes a namespace it created, and the shared etcd's PVCs outlive its StatefulSet (kamaji
        # renders the kamaji-etcd subchart with the chart's default PVC retention, Retain; clastix/kamaji-etcd
        # charts/kamaji-etcd/templates/etcd_sts.yaml persistentVolumeClaim.retentionPolicyWhenDeleted): deleting
        # the namespace removes the tenants' etcd data on destroy. A namespace that already exists fails
        # `pulumi up` (the adopted cluster's provider never upserts) rather than being taken over.
        owned = k8s.core.v1.Namespace(resource_name, metadata={"name": namespace}, opts=self._child())
        return {"create_namespace": False, "opts": self._child([*depends_on, owned])}

    def _metallb(self, name: str, pool_name: str, pool_range: pulumi.Output[str]) -> pulumi.Output[str]:
        """MetalLB in its own privileged namespace, then the pool and its L2 advertisement (added to `ready`).

        Returns the pool's range as an output that carries the pool resource as a dependency.
        """
        namespace = k8s.core.v1.Namespace(
            f"{name}-metallb-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=METALLB_NAMESPACE, labels=PRIVILEGED_NAMESPACE_LABELS),
            opts=self._child(),
        )
        metallb = helm_release(
            f"{name}-metallb",
            METALLB_CHART,
            values=metallb_values(),
            timeout=CHART_TIMEOUT,
            opts=self._child([namespace]),
        )
        # Custom resources wait for MetalLB's webhook to answer (its endpoints follow the controller's readiness).
        webhook = host_operations.resource(
            MetalLBWebhookReadyProvider(), f"{name}-metallb-webhook-ready",
            {"kubeconfig": self._kubeconfig, "namespace": METALLB_NAMESPACE, "addresses": pool_range,
             "revision": release_revision(metallb)},
            pulumi.ResourceOptions(parent=self, depends_on=[metallb], deleted_with=self._deleted_with),
        )
        pool = k8s.apiextensions.CustomResource(
            f"{name}-ip-pool",
            api_version="metallb.io/v1beta1",
            kind="IPAddressPool",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=pool_name, namespace=METALLB_NAMESPACE),
            spec=pool_range.apply(ip_address_pool_spec),
            opts=self._child([metallb, webhook]),
        )
        l2_advertisement = k8s.apiextensions.CustomResource(
            f"{name}-l2-advertisement",
            api_version="metallb.io/v1beta1",
            kind="L2Advertisement",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=pool_name, namespace=METALLB_NAMESPACE),
            spec=l2_advertisement_spec(pool_name),
            opts=self._child([metallb, webhook]),
        )
        self.ready += [pool, l2_advertisement]
        return pulumi.Output.all(pool.id, pool_range).apply(lambda values: values[1])
