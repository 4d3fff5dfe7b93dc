"""The management plane on the kind cluster: cert-manager, MetalLB with a pool from the kind subnet, and Kamaji.

Order, all on the management Provider:

    cert-manager ──────────────────────────────► Kamaji (+ kamaji-etcd, DataStore `default`)
    Namespace metallb-system ─► MetalLB ─► IPAddressPool + L2Advertisement

Every chart is a `helm.v3.Release` awaited by Helm (`skip_await=False`), which
is what makes the edges above real readiness conditions:
- cert-manager's post-install `startupapicheck` Job only succeeds once its
  webhook answers, so Kamaji's Issuer/Certificate are admitted.
- MetalLB's controller serves its webhook and its readiness endpoint together
  (metallb/metallb internal/k8s/k8s.go, v0.15.3), so a Ready controller means
  `metallb-webhook-service` answers the pool's validation.
- kamaji-etcd renders the `default` DataStore as a plain manifest of the
  release and its post-install Job waits for the etcd StatefulSet rollout
  (clastix/kamaji-etcd charts/kamaji-etcd/templates/etcd_datastore.yaml,
  etcd_job_preinstall_2.yaml, v0.15.0 as locked in kamaji's Chart.lock), so a
  finished Kamaji release means the DataStore exists and etcd answers.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

import config
from components.helm import Chart, helm_release
from components.naming import COMPONENT_PREFIX

CERT_MANAGER_CHART = Chart("cert-manager", "cert-manager", "https://charts.jetstack.io", "cert-manager")
METALLB_NAMESPACE = "metallb-system"
METALLB_CHART = Chart("metallb", "metallb", "https://metallb.github.io/metallb", METALLB_NAMESPACE)
KAMAJI_NAMESPACE = "kamaji-system"
# The CRDs hard-code kamaji-system/kamaji-webhook-service and kamaji-serving-cert (facts §2).
KAMAJI_RELEASE_NAME = "kamaji"
KAMAJI_CHART = Chart(KAMAJI_RELEASE_NAME, "kamaji", "https://clastix.github.io/charts", KAMAJI_NAMESPACE)
# The DataStore kamaji-etcd creates and TenantControlPlanes use when they name none.
DEFAULT_DATASTORE = "default"
LB_POOL_NAME = "kind-ip-pool"

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


def cert_manager_values() -> dict[str, Any]:
    return {
        "crds": {"enabled": True},
        # Default, spelled out: this post-install Job is what proves the webhook answers.
        "startupapicheck": {"enabled": True},
    }


def metallb_values() -> dict[str, Any]:
    # Plain L2: the 0.15 chart runs an FRR (BGP) sidecar in the speaker by default
    # (metallb/metallb charts/metallb/values.yaml `speaker.frr.enabled: true`).
    return {"speaker": {"frr": {"enabled": False}}}


def ip_address_pool_spec(pool_range: str) -> dict[str, Any]:
    return {"addresses": [pool_range]}


def l2_advertisement_spec(pool_name: str) -> dict[str, Any]:
    return {"ipAddressPools": [pool_name]}


def kamaji_values(versions: config.Versions) -> dict[str, Any]:
    """Kamaji chart values; `None` means "delete the chart default" (Helm's null)."""
    return {
        "image": {"tag": versions.kamaji_image, "pullPolicy": "IfNotPresent"},
        # The default 200m/100Mi limits are too tight on kind (facts §2).
        "resources": None,
        "telemetry": {"disabled": True},
        "defaultDatastoreName": DEFAULT_DATASTORE,
        "kamaji-etcd": {
            # Laptop-sized etcd: one member instead of three, a small volume, and the
            # space alarm set below the volume size (chart default is 8Gi for both).
            "replicas": 1,
            "persistentVolumeClaim": {"size": "2Gi"},
            "quotaBackendBytes": str(1024**3),
            "datastore": {"enabled": True, "name": DEFAULT_DATASTORE},
        },
    }


@dataclass
class KamajiArgs:
    provider: k8s.Provider
    kind_subnet: pulumi.Input[str]
    versions: config.Versions


class Kamaji(pulumi.ComponentResource):
    """cert-manager, MetalLB (pool from the kind subnet) and Kamaji with its default DataStore."""

    provider: k8s.Provider
    datastore_name: pulumi.Output[str]
    lb_pool_range: pulumi.Output[str]
    release: k8s.helm.v3.Release
    ready: list[pulumi.Resource]

    def __init__(self, name: str, args: KamajiArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"{COMPONENT_PREFIX}:Kamaji", name, None, opts)
        self.provider = args.provider
        versions = args.versions

        def child(depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=depends_on)

        cert_manager = helm_release(
            f"{name}-cert-manager",
            CERT_MANAGER_CHART,
            version=versions.cert_manager,
            values=cert_manager_values(),
            create_namespace=True,
            timeout=CHART_TIMEOUT,
            opts=child(),
        )

        metallb_namespace = k8s.core.v1.Namespace(
            f"{name}-metallb-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=METALLB_NAMESPACE, labels=PRIVILEGED_NAMESPACE_LABELS),
            opts=child(),
        )
        metallb = helm_release(
            f"{name}-metallb",
            METALLB_CHART,
            version=versions.metallb,
            values=metallb_values(),
            timeout=CHART_TIMEOUT,
            opts=child(depends_on=[metallb_namespace]),
        )

        pool_range = pulumi.Output.from_input(args.kind_subnet).apply(lb_pool_range)
        # Custom resources wait for the MetalLB release: its webhook must answer first.
        pool = k8s.apiextensions.CustomResource(
            f"{name}-ip-pool",
            api_version="metallb.io/v1beta1",
            kind="IPAddressPool",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=LB_POOL_NAME, namespace=METALLB_NAMESPACE),
            spec=pool_range.apply(ip_address_pool_spec),
            opts=child(depends_on=[metallb]),
        )
        l2_advertisement = k8s.apiextensions.CustomResource(
            f"{name}-l2-advertisement",
            api_version="metallb.io/v1beta1",
            kind="L2Advertisement",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=LB_POOL_NAME, namespace=METALLB_NAMESPACE),
            spec=l2_advertisement_spec(LB_POOL_NAME),
            opts=child(depends_on=[metallb]),
        )

        self.release = helm_release(
            f"{name}-kamaji",
            KAMAJI_CHART,
            version=versions.kamaji_chart,
            values=kamaji_values(versions),
            create_namespace=True,
            timeout=KAMAJI_TIMEOUT,
            # The chart renders cert-manager Issuer/Certificate objects.
            opts=child(depends_on=[cert_manager]),
        )

        # TenantControlPlanes need Kamaji's webhook and DataStore, and an address from the pool.
        self.ready = [self.release, pool, l2_advertisement]
        # Derived from resource outputs, so consumers of these values wait for those resources.
        self.datastore_name = self.release.id.apply(lambda _: DEFAULT_DATASTORE)
        self.lb_pool_range = pulumi.Output.all(pool.id, pool_range).apply(lambda values: values[1])

        self.register_outputs(
            {
                "datastoreName": self.datastore_name,
                "lbPoolRange": self.lb_pool_range,
                "releaseName": self.release.name,
            }
        )
