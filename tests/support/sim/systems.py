"""How the upstream systems behave inside the simulated clusters: charts, Kamaji, kubeadm, HAMi.

Each rule is what the pinned upstream source does; the file is named next to it. The provider models
(`tests.support.sim.providers`) call into here when Pulumi creates, updates or deletes something in a cluster.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from components.kube import ApiError, UnreachableError
from config import upgrade
from tests.support import cel
from tests.support.sim import pki
from tests.support.sim.world import (
    CLUSTER_ADMINS,
    NODES_GROUP,
    SYSTEM_MASTERS,
    HelmRelease,
    KubeApi,
    Machine,
    Tenant,
    WaitTimeoutError,
    World,
    uninstall_order,
)

# --------------------------------------------------------------------------- #
# Helm charts
# --------------------------------------------------------------------------- #

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
VGPU_NODE = "hami.io/vgpu-node"
VGPU_DEVICES = "hami.io/vgpu-devices-allocated"
GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUCORES = "nvidia.com/gpucores"
KAMAJI_DATASTORE_FINALIZER = "kamaji.clastix.io/TenantControlPlane"
KEEP = "helm.sh/resource-policy"


@dataclass
class KamajiState:
    api: KubeApi
    # Kamaji's readiness probe is a plain ping (clastix/kamaji cmd/manager/cmd.go `AddReadyzCheck("readyz",
    # healthz.Ping)`): a Ready pod does not prove the TenantControlPlane webhooks (failurePolicy Fail) answer.
    webhook_ready: bool = False
    tcp_webhook_calls: int = 0

    @property
    def running(self) -> bool:
        """The controller runs while its Deployment exists (Helm deletes it before the DataStore)."""
        return self.api.find("Deployment", "kamaji-system", "kamaji") is not None


@dataclass
class TenantFeatures:
    """What is installed in a tenant cluster (set by its charts and Kamaji's addons)."""

    calico_crds: bool = False
    cni: bool = False
    hami: dict[str, Any] | None = None
    kube_proxy_max_per_core: int | None = None  # None: no kube-proxy at all
    konnectivity: bool = False
    # Node uid -> when the mock device plugin could first register there (capacity, annotation and plugin all in
    # place): its resources reach the Node PLUGIN_DELAY later.
    plugin_since: dict[str, datetime.datetime] = field(default_factory=dict)
    # Node uid -> when its network is ready (NODE_NETWORK_DELAY); node name -> (the restarted kubelet's version, when
    # it first posts: KUBELET_STATUS_PERIOD); node name -> since when its kubelet posts nothing (NODE_MONITOR_GRACE).
    network_at: dict[str, datetime.datetime] = field(default_factory=dict)
    restarted: dict[str, tuple[str, datetime.datetime]] = field(default_factory=dict)
    silent_since: dict[str, datetime.datetime] = field(default_factory=dict)


# Project-HAMi/HAMi v2.10.0 pkg/scheduler/scheduler.go L420-453: the leader label `hami.io/scheduler-role: leader`,
# which the webhook Service selects (charts/hami/templates/scheduler/service.yaml), is patched on the first 15 s
# tick of RegisterFromNodeAnnotations, while the readiness probe answers 200 from the start (routes/route.go
# ReadyzRoute): a finished install or upgrade leaves the webhook without an endpoint that long.
HAMI_LEADER_TICK = datetime.timedelta(seconds=15)
# Project-HAMi/mock-device-plugin v1.0.1 internal/pkg/api/device/device.go L115-125: Register reads the Node, then
# sleeps 30 s; the kubelet publishes the plugin's resources at its next status update (nodeStatusUpdateFrequency,
# 10 s by default).
PLUGIN_DELAY = datetime.timedelta(seconds=40)
# kubernetes pkg/kubelet/apis/config/v1beta1/defaults.go nodeStatusUpdateFrequency: a restarted kubelet's version
# reaches its Node at its status update; until then the Node keeps the old kubelet's last status (Ready, old version).
KUBELET_STATUS_PERIOD = datetime.timedelta(seconds=10)
# A Node registered while the tenant's CNI runs stays NotReady until calico-node has started there and written the CNI
# config (the kubelet's Ready condition carries the runtime's NetworkReady=false, kubernetes
# pkg/kubelet/nodestatus/setters.go ReadyCondition). No upstream bound: a time the program must wait out.
NODE_NETWORK_DELAY = datetime.timedelta(seconds=20)
# kubernetes pkg/controller/nodelifecycle/config/v1alpha1/defaults.go NodeMonitorGracePeriod (40 s at 0d173114):
# a Node whose kubelet posts nothing that long gets Ready Unknown (node_lifecycle_controller.go tryUpdateNodeHealth);
# until then it keeps the status last posted.
NODE_MONITOR_GRACE = datetime.timedelta(seconds=40)
# metallb/metallb v0.15.3: the controller's readiness covers its webhook server, not the propagation of the
# metallb-webhook-service EndpointSlice (kube-controller-manager's endpointslice controller, batched ~1 s).
METALLB_ENDPOINTS = datetime.timedelta(seconds=1)



@dataclass
class Hook:
    """A controller, admission plugin or authorizer bound to the objects it works on. A plain object rather than a
    closure, so that copying a world (Lifecycle.fork) binds the copy's hooks to the copy's objects."""

    function: Callable[..., Any]
    bound: tuple[Any, ...]

    def __call__(self, *args: Any) -> Any:
        return self.function(*self.bound, *args)

def _manifest_entry(kind: str, namespace: str, name: str, annotations: dict[str, str] | None = None):
    return (kind, namespace, name, dict(annotations or {}))


def _workload(api: KubeApi, kind: str, namespace: str, name: str, labels: dict | None = None) -> None:
    api.ensure_namespace(namespace)
    api.put({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace,
                                                                   "labels": labels or {}}})


def helm_install(world: World, api: KubeApi, release: HelmRelease) -> None:
    """What `helm install --wait` does for the charts this program installs (or WaitTimeoutError/ApiError)."""
    chart = release.chart.rsplit("/", 1)[-1]
    installer = _CHARTS.get(chart)
    if installer is None:
        raise ApiError(404, f"chart {release.chart!r} not found in the simulated repositories")
    if release.namespace and not api.find("Namespace", None, release.namespace):
        raise ApiError(404, f'create: failed to create: namespaces "{release.namespace}" not found')
    installer(world, api, release)
    api.helm[(release.namespace, release.name)] = release


def helm_upgrade(world: World, api: KubeApi, release: HelmRelease) -> None:
    old = api.helm.get((release.namespace, release.name))
    if old is None:
        raise ApiError(404, f'"{release.name}" has no deployed releases')
    chart = release.chart.rsplit("/", 1)[-1]
    release.revision = old.revision + 1  # helm pkg/action/upgrade.go: every upgrade is a new revision
    _CHARTS[chart](world, api, release)
    state = getattr(api, "kamaji", None)
    if chart == "kamaji" and state is not None and old.values != release.values and world.kamaji_webhook_lag:
        # Changed values roll Kamaji's Deployment; the new pod is Ready on a ping before its webhook server serves
        # (clastix/kamaji cmd/manager/cmd.go `AddReadyzCheck("readyz", healthz.Ping)`).
        state.webhook_ready = False
    api.helm[(release.namespace, release.name)] = release


def helm_uninstall(world: World, api: KubeApi, name: str, namespace: str, wait: bool) -> None:
    """helm v3.20.2 pkg/action/uninstall.go: delete in UninstallOrder, skip `resource-policy: keep`, wait once
    for everything deleted; on a wait timeout the release record is purged anyway and an error returned."""
    release = api.helm.get((namespace, name))
    if release is None:
        # helm_release.go Delete passes helm's error through: the release must exist.
        raise ApiError(404, f"uninstall: Release not loaded: {name}: release: not found")
    deleted = []
    for kind, ns, obj_name, object_annotations in uninstall_order(release.manifest):
        if object_annotations.get(KEEP) is not None:
            continue  # resource_policy.go: kept (any value of the annotation keeps it out of the delete list)
        if api.find(kind, ns or None, obj_name) is not None:
            api.delete(None, kind, ns or None, obj_name)
            deleted.append((kind, ns, obj_name))
    api.helm.pop((namespace, name), None)  # purged, whatever the wait says
    _on_uninstall(world, api, release)
    if wait:
        stuck = [f"{k} {n}" for k, ns, n in deleted if api.find(k, ns or None, n) is not None]
        if stuck:
            raise WaitTimeoutError(
                f"uninstallation completed with 1 error(s): timed out waiting for the condition "
                f"({', '.join(stuck)} still terminating)"
            )


def _on_uninstall(world: World, api: KubeApi, release: HelmRelease) -> None:
    chart = release.chart.rsplit("/", 1)[-1]
    if chart == "kamaji":
        api.kamaji.webhook_ready = False  # type: ignore[attr-defined]
    tenant = _tenant_of(world, api)
    if tenant is not None:
        features = _features(api)
        if chart == "tigera-operator":
            features.cni = False
        if chart == "hami":
            features.hami = None


def _cert_manager(world: World, api: KubeApi, release: HelmRelease) -> None:
    api.kinds |= {"Issuer", "ClusterIssuer", "Certificate", "CertificateRequest"}
    _workload(api, "Deployment", release.namespace, "cert-manager")
    _workload(api, "Deployment", release.namespace, "cert-manager-webhook")
    release.manifest = [_manifest_entry("Deployment", release.namespace, n) for n in ("cert-manager",
                                                                                       "cert-manager-webhook")]


def _metallb(world: World, api: KubeApi, release: HelmRelease) -> None:
    api.kinds |= {"IPAddressPool", "L2Advertisement"}
    _workload(api, "Deployment", release.namespace, "metallb-controller")
    _workload(api, "DaemonSet", release.namespace, "metallb-speaker")
    release.manifest = [_manifest_entry("Deployment", release.namespace, "metallb-controller"),
                        _manifest_entry("DaemonSet", release.namespace, "metallb-speaker")]
    # Every install or upgrade rolls out a controller whose webhook endpoint follows its readiness.
    lag = METALLB_ENDPOINTS if world.metallb_webhook_lag else datetime.timedelta()
    api.metallb_webhook_at = world.now + lag  # type: ignore[attr-defined]
    if not getattr(api, "metallb_admission", False):
        api.metallb_admission = True  # type: ignore[attr-defined]
        api.admission.append(Hook(_metallb_admission, (world, api)))


def _metallb_admission(world: World, api: KubeApi, identity, operation: str, obj: dict, old: dict | None,
                       subresource: str = "") -> dict:
    # metallb internal/k8s/webhooks/webhookv1beta1: ipaddresspoolvalidationwebhook.metallb.io and
    # l2advertisementvalidationwebhook.metallb.io, failurePolicy=fail, served behind metallb-webhook-service.
    kind = obj.get("kind")
    if kind not in ("IPAddressPool", "L2Advertisement"):
        return obj
    if api.find("Deployment", "metallb-system", "metallb-controller") is None:
        return obj  # uninstalled: the ValidatingWebhookConfiguration went with the release
    ready_at = getattr(api, "metallb_webhook_at", None)
    if ready_at is not None and world.now < ready_at:
        webhook = "ipaddresspoolvalidationwebhook" if kind == "IPAddressPool" else "l2advertisementvalidationwebhook"
        raise ApiError(500, f'Internal error occurred: failed calling webhook "{webhook}.metallb.io": failed to call '
                            'webhook: Post "https://metallb-webhook-service.metallb-system.svc:443/validate-metallb-io-'
                            f'v1beta1-{kind.lower()}?timeout=10s": no endpoints available for service '
                            '"metallb-webhook-service"')
    return obj


def _kamaji(world: World, api: KubeApi, release: HelmRelease) -> None:
    # The chart renders cert-manager Issuer/Certificate objects for its webhook TLS (charts/kamaji/templates/
    # certmanager_issuer.yaml, certmanager_certificate.yaml).
    if "Issuer" not in api.kinds:
        raise ApiError(400, 'unable to build kubernetes objects from release manifest: no matches for kind '
                            '"Issuer" in version "cert-manager.io/v1" (ensure CRDs are installed first)')
    # The CRDs are in the chart's crds/ (charts/kamaji/crds): Helm creates them at install unless skipCrds, and then
    # the kamaji-etcd subchart's DataStore (templates/etcd_datastore.yaml) needs them from somewhere else.
    if not release.skip_crds:
        api.kinds |= {"TenantControlPlane", "DataStore"}
    elif "DataStore" not in api.kinds:
        raise ApiError(400, 'unable to build kubernetes objects from release manifest: resource mapping not found for '
                            'name: "default" namespace: "" from "": no matches for kind "DataStore" in version '
                            '"kamaji.clastix.io/v1alpha1" (ensure CRDs are installed first)')
    ns = release.namespace
    _workload(api, "Deployment", ns, "kamaji")
    _workload(api, "StatefulSet", ns, "kamaji-etcd")
    manifest = [_manifest_entry("Deployment", ns, "kamaji"), _manifest_entry("StatefulSet", ns, "kamaji-etcd")]
    # charts/kamaji/values.yaml L101-117 (26.8.2-edge): kamaji-etcd is deployed and renders DataStore "default".
    etcd = (release.values.get("kamaji-etcd") or {})
    datastore = etcd.get("datastore") or {}
    if etcd.get("deploy", True) and datastore.get("enabled", True):
        name = datastore.get("name") or "default"
        annotations = dict(datastore.get("annotations") or {})
        if api.find("DataStore", None, name) is None:
            api.put({"apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore",
                     "metadata": {"name": name, "annotations": annotations}, "spec": {"driver": "etcd"}})
        manifest.append(_manifest_entry("DataStore", "", name, annotations))
    release.manifest = manifest
    state = getattr(api, "kamaji", None)
    if state is None:
        api.kamaji = KamajiState(api=api, webhook_ready=not world.kamaji_webhook_lag)  # type: ignore[attr-defined]
        api.admission.append(Hook(_tcp_admission, (world, api)))
        api.controllers.append(Hook(_kamaji_controller, (world, api)))
    # clastix/kamaji controllers/datastore_controller.go L77-86: every DataStore gets the finalizer.
    for ds in api.list("DataStore"):
        ds["metadata"].setdefault("finalizers", [KAMAJI_DATASTORE_FINALIZER])


def _kamaji_etcd(world: World, api: KubeApi, release: HelmRelease) -> None:
    ns = release.namespace
    _workload(api, "StatefulSet", ns, f"{release.name}-kamaji-etcd")
    release.manifest = [_manifest_entry("StatefulSet", ns, f"{release.name}-kamaji-etcd")]


def _calico_crds(world: World, api: KubeApi, release: HelmRelease) -> None:
    api.kinds |= {"Installation", "IPPool", "FelixConfiguration"}
    release.manifest = [_manifest_entry("CustomResourceDefinition", "", "installations.operator.tigera.io")]
    _features(api).calico_crds = True


def _ready_nodes(api: KubeApi) -> list[dict[str, Any]]:
    return [n for n in api.list("Node") if _condition(n, "Ready")]


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _calico(world: World, api: KubeApi, release: HelmRelease) -> None:
    features = _features(api)
    if not features.calico_crds:
        raise ApiError(400, 'no matches for kind "Installation" in version "operator.tigera.io/v1"')
    if not api.list("Node"):
        # The operator Deployment (and calico-node) need a node: helm --wait times out.
        raise WaitTimeoutError("release calico: timed out waiting for the condition (Deployment tigera-operator "
                               "has no node)")
    _workload(api, "Deployment", release.namespace, "tigera-operator")
    release.manifest = [_manifest_entry("Deployment", release.namespace, "tigera-operator")]
    features.cni = True
    refresh_nodes(world, api)


def _hami(world: World, api: KubeApi, release: HelmRelease) -> None:
    features = _features(api)
    values = release.values
    nodes = api.list("Node")
    if not _ready_nodes(api):
        raise WaitTimeoutError("release hami: timed out waiting for the condition (no Ready node: is the CNI "
                               "installed?)")
    if not kube_proxy_works(world, api):
        # hami-scheduler reaches the API through the `kubernetes` Service: without kube-proxy its Deployment
        # never becomes ready.
        raise WaitTimeoutError("release hami: timed out waiting for the condition (hami-scheduler cannot reach the "
                               "API: kube-proxy is not running on the nodes)")
    device_plugin = (values.get("devicePlugin") or {}).get("enabled", True)
    if device_plugin:
        # charts/hami templates/device-plugin/daemonsetnvidia.yaml selects gpu=on nodes; in a kindest/node
        # container the real plugin panics in nvml.Init (register.go getAPIDevices): helm --wait times out.
        for node in nodes:
            if (node["metadata"].get("labels") or {}).get("gpu") == "on" and _machine_of(world, node).gpus == 0:
                raise WaitTimeoutError(f"release hami: timed out waiting for the condition (hami-device-plugin on "
                              f"{node['metadata']['name']} crash-loops: no NVIDIA driver on that node)")
    webhook = ((values.get("scheduler") or {}).get("admissionWebhook") or {})
    extender_args = ((values.get("scheduler") or {}).get("extender") or {}).get("extraArgs") or ["--debug", "-v=4"]
    features.hami = {
        "failurePolicy": webhook.get("failurePolicy", "Ignore"),
        "exempt": set(webhook.get("whitelistNamespaces") or []),
        "mock": bool((values.get("mockDevicePlugin") or {}).get("enabled", False)),
        "extraArgs": list(extender_args),
        # No webhook endpoint before this (HAMI_LEADER_TICK); every install or upgrade rolls the scheduler.
        "endpoints_at": world.now + (HAMI_LEADER_TICK if world.hami_webhook_lag else datetime.timedelta()),
    }
    _workload(api, "Deployment", release.namespace, "hami-scheduler")
    services = _hami_services(release.namespace, values, device_plugin)
    for service in services:
        api.put(service)
    # templates/scheduler/webhook.yaml: clientConfig.service is hami-scheduler on scheduler.service.httpPort.
    features.hami["webhookPort"] = int((values.get("scheduler") or {}).get("service", {}).get("httpPort", 443))
    release.manifest = [_manifest_entry("Deployment", release.namespace, "hami-scheduler"),
                        _manifest_entry("MutatingWebhookConfiguration", "", "hami-webhook"),
                        *(_manifest_entry("Service", release.namespace, s["metadata"]["name"]) for s in services)]
    refresh_nodes(world, api)


def _hami_services(namespace: str, values: dict[str, Any], device_plugin: bool) -> list[dict[str, Any]]:
    """The chart's Services as HAMi v2.10.0 renders them (charts/hami/templates/scheduler/service.yaml and
    templates/device-plugin/monitorservice.yaml, the latter only with devicePlugin.enabled): `type` defaults to
    NodePort, and only a NodePort gets the fixed nodePorts (31998/31993; 31992)."""
    def service(name: str, settings: dict[str, Any], ports: list[tuple[str, int, int, int]]) -> dict[str, Any]:
        kind = settings.get("type") or "NodePort"
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                "spec": {"type": kind, "ports": [
                    {"name": port_name, "port": port, "targetPort": target, "protocol": "TCP",
                     **({"nodePort": node_port} if kind == "NodePort" else {})}
                    for port_name, port, target, node_port in ports]}}

    scheduler = {"type": "NodePort", "httpPort": 443, "schedulerPort": 31998, "monitorPort": 31993,
                 "monitorTargetPort": 9395, "httpTargetPort": 443,
                 **((values.get("scheduler") or {}).get("service") or {})}
    out = [service("hami-scheduler", scheduler, [
        ("http", scheduler["httpPort"], scheduler["httpTargetPort"], scheduler["schedulerPort"]),
        ("monitor", scheduler["monitorPort"], scheduler["monitorTargetPort"], scheduler["monitorPort"])])]
    if device_plugin:
        plugin = {"type": "NodePort", "httpPort": 31992, **((values.get("devicePlugin") or {}).get("service") or {})}
        out.append(service("hami-device-plugin-monitor", plugin,
                           [("monitorport", plugin["httpPort"], 9394, plugin["httpPort"])]))
    return out


_CHARTS = {
    "cert-manager": _cert_manager,
    "metallb": _metallb,
    "kamaji": _kamaji,
    "kamaji-etcd": _kamaji_etcd,
    "crd.projectcalico.org.v1": _calico_crds,
    "tigera-operator": _calico,
    "hami": _hami,
}


# --------------------------------------------------------------------------- #
# Kamaji: admission and the TenantControlPlane controller
# --------------------------------------------------------------------------- #

MAX_TENANT_VERSION = (1, 36)  # clastix/kamaji internal/upgrade/kubeadm_version.go: KubeadmVersion v1.36.0


def _effective(spec_profile: dict[str, Any], plural: str, singular: str) -> list[str]:
    # clastix/kamaji internal/utilities/utilities.go GetEffectiveCIDRs: the list wins when non-empty.
    values = spec_profile.get(plural) or []
    return list(values) if values else ([spec_profile[singular]] if spec_profile.get(singular) else [])


def _tcp_admission(world: World, api: KubeApi, identity, operation: str, obj: dict, old: dict | None,
                   subresource: str = "") -> dict:
    if obj.get("kind") != "TenantControlPlane":
        return obj
    state: KamajiState = api.kamaji  # type: ignore[attr-defined]
    state.tcp_webhook_calls += 1
    if not state.webhook_ready:
        # mtenantcontrolplane.kb.io is failurePolicy Fail (charts/kamaji/controller-gen/mutating-webhook.yaml).
        raise ApiError(500, 'Internal error occurred: failed calling webhook "mtenantcontrolplane.kb.io": failed to '
                            'call webhook: Post "https://kamaji-webhook-service.kamaji-system.svc:443/mutate-kamaji-'
                            'clastix-io-v1alpha1-tenantcontrolplane": dial tcp: connect: connection refused')
    spec = obj.setdefault("spec", {})
    profile = spec.setdefault("networkProfile", {})
    if operation == "CREATE":
        # internal/webhook/handlers/tcp_defaults.go L97-104: singular copied into the list on CREATE only.
        for plural, singular, default in (("serviceCidrs", "serviceCidr", "10.96.0.0/16"),
                                          ("podCidrs", "podCidr", "10.244.0.0/16")):
            if not profile.get(plural):
                profile[plural] = [profile.get(singular) or default]
    version = (spec.get("kubernetes") or {}).get("version", "")
    major, minor = (int(x) for x in version.lstrip("v").split(".")[:2])
    denied = 'admission webhook "vtenantcontrolplane.kb.io" denied the request: '
    if operation == "UPDATE" and old is not None and not obj["metadata"].get("deletionTimestamp"):
        # internal/webhook/handlers/tcp_version.go OnUpdate, patch versions set to 0 before comparing.
        before = ((old.get("spec") or {}).get("kubernetes") or {}).get("version", "")
        old_minor = tuple(int(x) for x in before.lstrip("v").split(".")[:2])
        supported = "v{}.{}".format(*MAX_TENANT_VERSION)
        if (major, minor) > MAX_TENANT_VERSION:
            raise ApiError(400, f"{denied}unable to upgrade to a version greater than the supported one ({supported})")
        if (major, minor) < old_minor:
            raise ApiError(400, f"{denied}unable to downgrade a TenantControlPlane from {old_minor[0]}.{old_minor[1]}.0 "
                                f"to {major}.{minor}.0")
        if minor - old_minor[1] > 1:
            raise ApiError(400, f"{denied}unable to upgrade to a minor version in a non-sequential mode")
    elif (major, minor) > MAX_TENANT_VERSION:
        raise ApiError(400, f'{denied}unable to create a TenantControlPlane with a Kubernetes version greater than the '
                            f'supported one ({version})')
    datastore = spec.get("dataStore") or "default"
    if api.find("DataStore", None, datastore) is None:
        # internal/webhook/handlers/tcp_datastore.go
        raise ApiError(400, f'admission webhook "vtenantcontrolplane.kb.io" denied the request: {datastore} '
                            'DataStore does not exist')
    services = _effective(profile, "serviceCidrs", "serviceCidr")
    for dns in profile.get("dnsServiceIPs") or []:
        # internal/webhook/handlers/tcp_dns.go: DNS service IPs must lie in a configured service range.
        if not any(ipaddress.ip_address(dns) in ipaddress.ip_network(cidr) for cidr in services):
            raise ApiError(400, f'admission webhook "vtenantcontrolplane.kb.io" denied the request: the DNS service '
                                f'IP {dns} is not in the service CIDRs {services}')
    return obj


def _kamaji_controller(world: World, api: KubeApi, event: str, obj: dict[str, Any]) -> None:
    kind = obj.get("kind")
    state: KamajiState = api.kamaji  # type: ignore[attr-defined]
    if kind == "DataStore":
        if event == "create" and state.running:
            # controllers/datastore_controller.go L77-86: every DataStore gets the finalizer.
            obj["metadata"].setdefault("finalizers", [KAMAJI_DATASTORE_FINALIZER])
        if obj["metadata"].get("deletionTimestamp") and state.running:
            name = obj["metadata"]["name"]
            used = [t for t in api.list("TenantControlPlane")
                    if ((t.get("status") or {}).get("storage") or {}).get("dataStoreName") == name]
            if not used:  # datastore_controller.go L144-156: removed only when no TCP uses it
                api.remove("DataStore", None, name)
        return
    if kind != "TenantControlPlane" or not state.running:
        return
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    if event == "delete":
        _stop_tenant(world, api, namespace, name, obj)
        return
    if obj["metadata"].get("deletionTimestamp"):
        # finalizer.kamaji.clastix.io: the tenant's data is removed through its DataStore, then the TCP goes.
        _stop_tenant(world, api, namespace, name, obj)
        obj["metadata"]["finalizers"] = []
        api.remove("TenantControlPlane", namespace, name)
        return
    obj["metadata"].setdefault("finalizers", ["finalizer.kamaji.clastix.io"])
    _reconcile_tenant(world, api, obj)


def _allocate_address(world: World, api: KubeApi, tcp: dict[str, Any]) -> str | None:
    used = {t.address for server, t in world.tenants.items() if world.tenant_hosts.get(server) is api}
    ranges = []
    if getattr(api, "external_lb", None):
        ranges.append(api.external_lb)  # type: ignore[attr-defined]
    if api.find("Deployment", "metallb-system", "metallb-controller"):
        ranges += [a for pool in api.list("IPAddressPool", "metallb-system")
                   for a in (pool.get("spec") or {}).get("addresses") or []]
    for entry in ranges:
        first, _, last = entry.partition("-")
        if not last:
            network = ipaddress.ip_network(first)
            first, last = str(network[0]), str(network[-1])
        start, end = int(ipaddress.ip_address(first)), int(ipaddress.ip_address(last))
        for value in range(start, end + 1):
            address = str(ipaddress.ip_address(value))
            if address not in used:
                return address
    return None


def _reconcile_tenant(world: World, api: KubeApi, tcp: dict[str, Any]) -> None:
    namespace, name = tcp["metadata"]["namespace"], tcp["metadata"]["name"]
    spec = tcp.get("spec") or {}
    status = tcp.setdefault("status", {})
    datastore = spec.get("dataStore") or "default"
    if api.find("DataStore", None, datastore) is None:
        status["kubernetesResources"] = {"version": {"status": "NotReady"}}
        return
    tenant = next((t for s, t in world.tenants.items()
                   if world.tenant_hosts.get(s) is api and (t.namespace, t.name) == (namespace, name)), None)
    if tenant is None:
        address = _allocate_address(world, api, tcp)
        if address is None:
            # No LoadBalancer address: the Service stays pending and Kamaji never reports Ready.
            status["kubernetesResources"] = {"version": {"status": "Provisioning"}}
            return
        tenant = _start_tenant(world, api, namespace, name, address)
    profile = spec.get("networkProfile") or {}
    plugins = (spec.get("kubernetes") or {}).get("admissionControllers") or []
    tenant.node_restriction = "NodeRestriction" in plugins
    tenant.load_balancer_source_ranges = list(profile.get("loadBalancerSourceRanges") or [])  # type: ignore
    tenant.pod_cidrs = _effective(profile, "podCidrs", "podCidr")  # type: ignore[attr-defined]
    tenant.service_cidrs = _effective(profile, "serviceCidrs", "serviceCidr")  # type: ignore[attr-defined]
    _addons(world, tenant, spec.get("addons") or {}, spec)
    api.put(control_plane_service(api, tcp, tenant.address))
    secret_names = {"admin": f"{name}-admin-kubeconfig", "ca": f"{name}-ca"}
    status.update(
        {
            "controlPlaneEndpoint": f"{tenant.address}:6443",
            "kubernetesResources": {"version": {"status": "Ready",
                                                "version": (spec.get("kubernetes") or {}).get("version")}},
            # api/v1alpha1/tenantcontrolplane_status.go: status.kubeconfig.admin.secretName,
            # status.certificates.ca.secretName (set before Ready).
            "kubeconfig": {"admin": {"secretName": secret_names["admin"]}},
            "certificates": {"ca": {"secretName": secret_names["ca"]}},
            "storage": {"dataStoreName": datastore},
            "observedGeneration": tcp["metadata"].get("generation", 1),
        }
    )


FIRST_NODE_PORT = 30000  # the API server's default --service-node-port-range 30000-32767


def control_plane_service(api: KubeApi, tcp: dict[str, Any], address: str) -> dict[str, Any]:
    """The LoadBalancer Service Kamaji keeps for a TCP (clastix/kamaji 26.8.2-edge internal/resources/
    k8s_service_resource.go, konnectivity/service_resource.go): named after it, ports kube-apiserver and
    konnectivity-server, the source ranges, and `allocateLoadBalancerNodePorts` from the spec (default true).
    The API server keeps a port's node port across updates; with the field false Kamaji writes 0, and the API
    server releases it (kubernetes pkg/registry/core/service/storage/storage.go patchAllocatedValues, since
    kubernetes#122320)."""
    namespace, name = tcp["metadata"]["namespace"], tcp["metadata"]["name"]
    spec = tcp.get("spec") or {}
    allocate = ((spec.get("controlPlane") or {}).get("service") or {}).get("allocateLoadBalancerNodePorts", True)
    profile = spec.get("networkProfile") or {}
    ports = [("kube-apiserver", int(profile.get("port") or 6443))]
    konnectivity = (spec.get("addons") or {}).get("konnectivity")
    if konnectivity is not None:
        ports.append(("konnectivity-server", int((konnectivity.get("server") or {}).get("port") or 8132)))
    live = ((api.find("Service", namespace, name) or {}).get("spec") or {}).get("ports") or []
    kept = {p["name"]: p["nodePort"] for p in live if p.get("nodePort")}
    used = {p["nodePort"] for svc in api.list("Service") for p in (svc.get("spec") or {}).get("ports") or []
            if p.get("nodePort")}
    service_ports = []
    for port_name, port in ports:
        entry: dict[str, Any] = {"name": port_name, "protocol": "TCP", "port": port, "targetPort": port}
        if allocate:
            node_port = kept.get(port_name) or min(set(range(FIRST_NODE_PORT, FIRST_NODE_PORT + 2768)) - used)
            used.add(node_port)
            entry["nodePort"] = node_port
        service_ports.append(entry)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": allocate, "ports": service_ports,
                     "loadBalancerSourceRanges": list(profile.get("loadBalancerSourceRanges") or [])},
            "status": {"loadBalancer": {"ingress": [{"ip": address}]}}}


def _kubeconfig_secret(tenant: Tenant, tcp_name: str, namespace: str) -> dict[str, Any]:
    import base64

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    server = tenant.api.server
    svc = f"https://{tcp_name}.{namespace}.svc:6443"
    admin, masters = (CLUSTER_ADMINS,), (SYSTEM_MASTERS,)
    data = {
        # kubeadm phases/kubeconfig getKubeConfigSpecsBase: admin in kubeadm:cluster-admins,
        # super-admin in system:masters (clastix/kamaji internal/resources/kubeconfig.go L227-243).
        "admin.conf": pki.kubeconfig(server, tenant.api.ca, "kubernetes-admin", admin, tcp_name),
        "admin.svc": pki.kubeconfig(svc, tenant.api.ca, "kubernetes-admin", admin, tcp_name),
        "super-admin.conf": pki.kubeconfig(server, tenant.api.ca, "kubernetes-super-admin", masters, tcp_name),
        "super-admin.svc": pki.kubeconfig(svc, tenant.api.ca, "kubernetes-super-admin", masters, tcp_name),
    }
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": f"{tcp_name}-admin-kubeconfig", "namespace": namespace},
            "data": {k: b64(v) for k, v in data.items()}}


def _write_credentials(host: KubeApi, tenant: Tenant) -> None:
    """The Secrets Kamaji keeps a control plane's CA and admin kubeconfigs in, on the management cluster."""
    import base64

    host.put(_kubeconfig_secret(tenant, tenant.name, tenant.namespace))
    ca_pem = tenant.api.ca.pem.decode()
    host.put({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": f"{tenant.name}-ca", "namespace": tenant.namespace},
              "data": {"ca.crt": base64.b64encode(ca_pem.encode()).decode(),
                       "ca.key": base64.b64encode(b"simulated CA private key").decode()}})


def rotate_ca(world: World, server: str) -> None:
    """Kamaji re-keys a control plane in place (status CARotating, clastix/kamaji controllers/soot/manager.go): same
    TenantControlPlane, uid and address, a new CA, and admin kubeconfigs signed by it. Clients holding the old CA
    fail their TLS handshake from then on (World.api_for)."""
    tenant, host = world.tenants[server], world.tenant_hosts[server]
    tenant.api.ca = pki.new_ca(f"tenant-{tenant.name}")
    _write_credentials(host, tenant)
    world.log(f"control plane {tenant.namespace}/{tenant.name} has a new CA")


def _start_tenant(world: World, host: KubeApi, namespace: str, name: str, address: str) -> Tenant:

    server = f"https://{address}:6443"
    previous, previous_host = world.tenants.get(server), world.tenant_hosts.get(server)
    if previous is not None and previous_host is not None and previous_host is not host and previous_host.reachable:
        # Another cluster's MetalLB announces this address already (see World.contested).
        world.shadowed[server] = (previous, previous_host)
        world.address_clashes.append(f"{address}: {previous_host.name} and {host.name}")
        world.log(f"address {address} announced by {previous_host.name} and {host.name}")
    api = world._new_api(f"tenant-{name}", server)
    tenant = Tenant(namespace=namespace, name=name, address=address, api=api, rbac_ready=not world.soot_rbac_lag)
    api.features = TenantFeatures()  # type: ignore[attr-defined]
    api.tenant = tenant  # type: ignore[attr-defined]
    api.authorizer = Hook(_tenant_rbac, (world, tenant))
    api.admission.append(Hook(_tenant_admission, (world, api)))
    api.controllers.append(Hook(_tenant_controller, (world, api)))
    world.tenants[server] = tenant
    world.tenant_hosts[server] = host
    _write_credentials(host, tenant)
    # What Kamaji's soot phases create in the tenant (kubeadm-config, kubelet-config, cluster-info).
    for namespace_, name_ in (("kube-public", "cluster-info"), ("kube-system", "kubeadm-config")):
        api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name_, "namespace": namespace_}})
    world.log(f"control plane {namespace}/{name} Ready at {address}:6443")
    return tenant


def _addons(world: World, tenant: Tenant, addons: dict[str, Any], spec: dict[str, Any]) -> None:
    api = tenant.api
    features = _features(api)
    if "konnectivity" in addons and not api.find("DaemonSet", "kube-system", "konnectivity-agent"):
        _workload(api, "DaemonSet", "kube-system", "konnectivity-agent", {"kamaji.clastix.io/project": "kamaji"})
    features.konnectivity = "konnectivity" in addons
    if "kubeProxy" in addons:
        # clastix/kamaji internal/resources/addons/kube_proxy.go: kubeadm's addon with kubeadm's static defaults,
        # whose conntrack.maxPerCore (null) defaults to 32768 in kube-proxy; `data` is overwritten on reconcile.
        _workload(api, "DaemonSet", "kube-system", "kube-proxy", {"kamaji.clastix.io/project": "kamaji"})
        api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "kube-proxy", "namespace": "kube-system", "labels": {"kamaji.clastix.io/project": "kamaji"}},
            "data": {"config.conf": json.dumps({"conntrack": {"maxPerCore": None}})}})
    refresh_nodes(world, api)


def _stop_tenant(world: World, host: KubeApi, namespace: str, name: str, tcp: dict[str, Any]) -> None:
    host.remove("Service", namespace, name)  # owned by the TCP: garbage-collected with it
    for server, tenant in list(world.tenants.items()):
        if world.tenant_hosts.get(server) is host and (tenant.namespace, tenant.name) == (namespace, name):
            world.drop_tenant(server)
    host.objects.pop(("Secret", namespace, f"{name}-admin-kubeconfig"), None)
    host.objects.pop(("Secret", namespace, f"{name}-ca"), None)


def _features(api: KubeApi) -> TenantFeatures:
    """What is installed in a tenant cluster; a management cluster has none of it."""
    features = getattr(api, "features", None)
    if features is None:
        features = api.features = TenantFeatures()  # type: ignore[attr-defined]
    return features


def _tenant_of(world: World, api: KubeApi) -> Tenant | None:
    return getattr(api, "tenant", None)


# --------------------------------------------------------------------------- #
# Inside a tenant: RBAC, kube-proxy, nodes, admission and scheduling
# --------------------------------------------------------------------------- #


CALICO_NODE = "system:serviceaccount:calico-system:calico-node"


def _tenant_rbac(world: World, tenant: Tenant, identity: pki.Identity, verb: str, kind: str, ns: str,
                 name: str) -> bool:
    if CLUSTER_ADMINS in identity.groups:
        # The kubeadm:cluster-admins binding exists only once the soot controller ran (see Tenant.rbac_ready).
        return tenant.rbac_ready
    if identity.user == CALICO_NODE and kind == "Node/status":
        # calico-node's ClusterRole: nodes/status patch and update, cluster-wide (tigera/operator v1.42
        # pkg/render/node.go); its token is on every worker.
        return verb in ("patch", "update")
    if NODES_GROUP in identity.groups and kind in ("Node", "Node/status"):
        node = identity.user.removeprefix("system:node:")
        # NodeRestriction (if enabled) limits a kubelet to its own Node object.
        return not tenant.node_restriction or name == node
    return False


def kube_proxy_works(world: World, api: KubeApi) -> bool:
    """Whether kube-proxy runs on the tenant's container nodes.

    kube-proxy 1.29-1.36 writes nf_conntrack_max whenever it differs from its target, and the hash size
    when it is below target/4 (kubernetes pkg/proxy/conntrack/sysctls.go `setIntSysCtl`: `val != value`);
    both are read-only from a container's network namespace, and the error is fatal
    (cmd/kube-proxy/app/server_linux.go). `conntrack.maxPerCore: 0` skips the write (kind does that).
    """
    config = api.find("ConfigMap", "kube-system", "kube-proxy")
    if api.find("DaemonSet", "kube-system", "kube-proxy") is None or config is None:
        return False
    conf = _parse_proxy_config((config.get("data") or {}).get("config.conf", ""))
    max_per_core = (conf.get("conntrack") or {}).get("maxPerCore")
    if max_per_core == 0:
        return True
    per_core = 32768 if max_per_core is None else max_per_core
    target = max(per_core * world.docker.cpus, 131072)
    containers = [n for n in api.list("Node") if n["metadata"]["name"] in world.docker.containers]
    if not containers:
        return True
    return world.docker.nf_conntrack_max == target and world.docker.conntrack_hashsize >= target // 4


def _parse_proxy_config(text: str) -> dict[str, Any]:
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return value if isinstance(value, dict) else {}


def _machine_of(world: World, node: dict[str, Any]) -> Machine:
    name = node["metadata"]["name"]
    machine = world.machines.get(name)
    return machine if machine is not None else Machine(name=name)


def time_passed(world: World, *, settled: bool = False) -> None:
    """Simulated time went on (a provider slept, or, with `settled`, one operation ended and the next has not
    begun): what waits for time catches up."""
    for api in list(world.apis.values()):
        if settled and getattr(api, "metallb_webhook_at", None) is not None:
            api.metallb_webhook_at = None  # type: ignore[attr-defined]
        features = getattr(api, "features", None)
        if features is None:
            continue
        if settled and features.hami is not None:
            features.hami["endpoints_at"] = None
        refresh_nodes(world, api, settled=settled)


def hami_webhook_serves(world: World, features: TenantFeatures) -> bool:
    """HAMi's webhook Service has its leader endpoint (HAMI_LEADER_TICK)."""
    at = (features.hami or {}).get("endpoints_at")
    return at is None or world.now >= at


def refresh_nodes(world: World, api: KubeApi, *, settled: bool = False) -> None:
    """Node conditions and what the mock device plugin registered, from the tenant's current state."""
    features = _features(api)
    for node in api.list("Node"):
        status = node.setdefault("status", {})
        name, uid = node["metadata"]["name"], node["metadata"].get("uid")
        # A node whose container is stopped, or whose machine is gone or reset, has no kubelet posting its status; a
        # restarted one posts at its first status update (KUBELET_STATUS_PERIOD, NODE_MONITOR_GRACE).
        container = world.docker.containers.get(name)
        restarted = features.restarted.get(name)
        if restarted is not None and (settled or world.now >= restarted[1]):
            status.setdefault("nodeInfo", {})["kubeletVersion"] = restarted[0]
            del features.restarted[name]
            restarted = None
        machine = world.machines.get(name)
        if container is not None and not container.running or machine is None or machine.kubelet_conf is None:
            since = features.silent_since.setdefault(name, world.now)
            if settled or world.now >= since + NODE_MONITOR_GRACE:
                status["conditions"] = [{"type": "Ready", "status": "Unknown"}]
        elif restarted is None:
            features.silent_since.pop(name, None)
            network = settled or world.now >= features.network_at.get(uid or name, world.now)
            status["conditions"] = [{"type": "Ready", "status": "True" if features.cni and network else "False"}]
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
        allocatable = status.setdefault("allocatable", {})
        capacity = status.setdefault("capacity", {})
        # Project-HAMi/mock-device-plugin v1.0.1 internal/pkg/api/device/device.go: registers gpumem/gpucores from
        # the register annotation, only while status.capacity[nvidia.com/gpu] > 0.
        mock = features.hami is not None and features.hami.get("mock")
        machine = _machine_of(world, node)
        if features.hami is not None and not mock and node["metadata"].get("labels", {}).get("gpu") == "on" \
                and machine.cards:
            # The plugin is a DaemonSet pod without hostNetwork (charts/hami templates/device-plugin/
            # daemonsetnvidia.yaml `hostNetwork: {{ .Values.devicePlugin.hostNetwork | default false }}`): it runs
            # once the kubelet does and the CNI gives it a network, and registers only where NVML, the toolkit and
            # the runtime node-join.sh checks for are all there.
            if ready and not machine.nvidia_missing:
                _real_plugin_registers(node, machine)
            elif GPU in capacity:
                # kubernetes pkg/kubelet/nodestatus/setters.go MachineInfo: a device plugin's resource that is no
                # longer registered stays in capacity at 0 ("to indicate that the resource is managed by device
                # plugin and had been registered before").
                capacity[GPU] = "0"
        devices = _devices(node)
        uid = node["metadata"].get("uid") or node["metadata"]["name"]
        if mock and int(capacity.get(GPU, 0) or 0) > 0 and devices:
            since = features.plugin_since.setdefault(uid, world.now)
            polled = settled or not world.device_plugin_lag or world.now >= since + PLUGIN_DELAY
            if polled or allocatable.get(GPUMEM):
                for resource, total in ((GPUMEM, sum(d["devmem"] for d in devices)),
                                        (GPUCORES, sum(d["devcore"] for d in devices))):
                    capacity[resource] = allocatable[resource] = str(total)
        else:
            features.plugin_since.pop(uid, None)
            for resource in (GPUMEM, GPUCORES):
                capacity.pop(resource, None)
                allocatable.pop(resource, None)
        if container is None or container.running:
            _kubelet_allocatable(status)


def _extended(resource: str) -> bool:
    """kubernetes pkg/apis/core/v1/helper/helpers.go IsExtendedResourceName: a qualified name outside the
    kubernetes.io domain (and not a quota's `requests.` form): nvidia.com/gpu and the mock plugin's resources."""
    domain = resource.partition("/")[0] if "/" in resource else ""
    return bool(domain) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io") \
        and not resource.startswith("requests.")


def _kubelet_allocatable(status: dict[str, Any]) -> None:
    """What the kubelet's status update does with extended resources (kubernetes pkg/kubelet/nodestatus/setters.go
    MachineInfo, read at commit 00267ac8, the only version of the file stored here): capacity entries others wrote (the
    program's `nvidia.com/gpu` patch) are kept ("avoid blindly overwriting the capacity"), every capacity entry
    is copied into allocatable (no reservation applies to an extended resource), and an extended resource gone from
    capacity leaves allocatable too."""
    capacity, allocatable = status.setdefault("capacity", {}), status.setdefault("allocatable", {})
    for resource in [key for key in allocatable if _extended(key) and key not in capacity]:
        del allocatable[resource]
    for resource, value in capacity.items():
        if _extended(resource):
            allocatable[resource] = value


# charts/hami values.yaml devicePlugin.deviceSplitCount (vendored, v2.10.0).
DEVICE_SPLIT_COUNT = 10


def _real_plugin_registers(node: dict[str, Any], machine: Machine) -> None:
    """HAMi's NVIDIA device plugin on a real GPU server (pkg/device-plugin/nvidiadevice/nvinternal/plugin/
    register.go): the register annotation from NVML, and `nvidia.com/gpu` = cards x deviceSplitCount through
    the kubelet. It advertises no gpumem/gpucores (only the mock plugin does)."""
    devices = [{"id": card["uuid"], "index": index, "count": DEVICE_SPLIT_COUNT, "devmem": card["memoryMiB"],
                "devcore": 100, "numa": 0, "mode": "hami-core", "health": True,
                "type": card["model"] if card["model"].startswith("NVIDIA") else f"NVIDIA-{card['model']}"}
               for index, card in enumerate(machine.cards)]
    node["metadata"].setdefault("annotations", {})[REGISTER_ANNOTATION] = json.dumps(devices)
    quantity = str(DEVICE_SPLIT_COUNT * len(devices))
    node["status"].setdefault("capacity", {})[GPU] = quantity
    node["status"].setdefault("allocatable", {})[GPU] = quantity


def _devices(node: dict[str, Any]) -> list[dict[str, Any]]:
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(REGISTER_ANNOTATION)
    if not text:
        return []
    try:
        devices = json.loads(text)
    except ValueError:
        return []
    return [d for d in devices if isinstance(d, dict) and d.get("health")]


def join(world: World, machine: Machine, *, endpoint: str, token: str, ca_hash: str, node_name: str,
         kubelet_patches: dict[str, Any] | None = None, over_ssh: bool = False, node_ip: str | None = None) -> str:
    """`kubeadm join` of `machine` (with the script's retries): the Node's name, or an error message."""
    server = f"https://{endpoint}"
    tenant = world.tenants.get(server)
    clash = world.contested(server)
    if clash is not None:
        raise UnreachableError(clash)
    if tenant is None:
        raise UnreachableError(f"cannot reach the tenant API server at {endpoint}")
    actual = "sha256:" + hashlib.sha256(
        tenant.api.ca.certificate.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    ).hexdigest()
    if ca_hash != actual:
        raise ApiError(401, "cluster CA found in cluster-info ConfigMap is invalid: none of the public keys "
                            f"\"{actual}\" are pinned")
    token_id, _, secret = token.partition(".")
    stored = tenant.api.find("Secret", "kube-system", f"bootstrap-token-{token_id}")
    data = (stored or {}).get("stringData") or {}
    expiration = data.get("expiration")
    if stored is None or data.get("token-secret") != secret:
        raise ApiError(401, f'couldn\'t validate the identity of the API Server: token id "{token_id}" is invalid')
    if expiration and datetime.datetime.fromisoformat(expiration.replace("Z", "+00:00")) <= world.now:
        raise ApiError(401, f'token id "{token_id}" has expired')
    # The script retries while Kamaji's soot controller finishes the bootstrap RBAC (clastix/kamaji
    # internal/resources/kubeadm_phases.go PhaseBootstrapToken, run after Ready).
    world.wait_for_tenant(server)
    swap_ok = (kubelet_patches or {}).get("failSwapOn") is False or over_ssh or not world.host_swap
    if not swap_ok:
        raise ApiError(500, "kubelet: running with swap on is not supported, please disable swap or set "
                            "failSwapOn: false")
    machine.kubelet_conf = server
    machine.kubelet_ca_hash = ca_hash
    world.machines[node_name] = machine
    _register_node(world, tenant, node_name)
    address = kubelet_node_address(machine, node_name, node_ip)
    if node_ip is not None and address is None:
        # kubernetes pkg/kubelet/kubelet_node_status.go validateNodeIP, run by setters.go NodeAddress: the Node is
        # registered, but its addresses are never set.
        world.log(f'kubelet on {node_name}: Failed to set some node status fields: failed to validate nodeIP: node '
                  f'IP: "{node_ip}" not found in the host\'s network interfaces')
    if address is not None:
        node = tenant.api.find("Node", None, node_name)
        node["status"]["addresses"] = [{"type": "InternalIP", "address": address},
                                       {"type": "Hostname", "address": node_name}]
    return node_name


def kubelet_node_address(machine: Machine, node_name: str, node_ip: str | None = None) -> str | None:
    """The InternalIP a kubelet without a cloud provider reports (kubernetes pkg/kubelet/nodestatus/setters.go
    NodeAddress): its --node-ip when set -- None when that is on none of the machine's interfaces, which the
    kubelet's validateNodeIP (pkg/kubelet/kubelet_node_status.go) refuses; else an IP given as its hostname override
    (kubeadm passes the node name there when it differs from the host name: cmd/kubeadm/app/phases/kubelet/
    flags.go); else the first IPv4 address the node name resolves to (/etc/hosts, then DNS); else the address of
    the interface the default route leaves by (k8s.io/apimachinery pkg/util/net ChooseHostInterface). None for a
    machine with no interfaces."""
    if node_ip is not None:
        return node_ip if node_ip in machine.interfaces.values() else None
    if not machine.interfaces:
        return None
    try:
        return str(ipaddress.IPv4Address(node_name))
    except ValueError:
        pass
    if node_name in machine.hosts:
        return machine.hosts[node_name]
    return machine.interfaces.get(machine.default_interface or "")


def route_get(machine: Machine, destination: str) -> tuple[str, str] | None:
    """`ip route get <destination>` on `machine`: (source address, interface) of the most specific route that covers
    it -- its routes, then the default route by `default_interface` -- or None when none does ("RTNETLINK answers:
    Network is unreachable"). Linux picks the longest matching prefix (net/ipv4/fib_trie.c fib_table_lookup) and,
    for a route without a preferred source, the address of the interface it leaves by (net/ipv4/fib_semantics.c
    fib_info_update_nhc_saddr, inet_select_addr); each interface here has one address."""
    target = ipaddress.IPv4Address(destination)
    routes = [(ipaddress.IPv4Network(network), interface) for network, interface in machine.routes.items()]
    if machine.default_interface is not None:
        routes.append((ipaddress.IPv4Network("0.0.0.0/0"), machine.default_interface))
    matching = [(network.prefixlen, interface) for network, interface in routes if target in network]
    if not matching:
        return None
    _, interface = max(matching)
    return machine.interfaces[interface], interface


def admits(tenant: Tenant, source: str) -> bool:
    """Whether a connection from `source` passes the tenant's LoadBalancer source ranges: kube-proxy drops any
    other to the LoadBalancer address (kubernetes pkg/proxy/iptables/proxier.go, "firewall filter based on each
    source range", then KUBE-MARK-DROP). No ranges: everyone is admitted."""
    ranges = list(getattr(tenant, "load_balancer_source_ranges", None) or [])
    address = ipaddress.ip_address(source)
    return not ranges or any(address in ipaddress.ip_network(network) for network in ranges)


def kubelet_version(world: World, node_name: str) -> str | None:
    """The kubelet a node runs: a container's is its kindest/node image's tag, an SSH machine's what it has installed
    (None when a scenario did not say: the simulator does not guess)."""
    container = world.docker.containers.get(node_name)
    if container is not None:
        reference = world.docker.image_names.get(container.image, container.image)
        return upgrade.image_version(reference)
    machine = world.machines.get(node_name)
    return machine.kubelet_version if machine is not None else None


def _register_node(world: World, tenant: Tenant, node_name: str) -> None:
    api = tenant.api
    if api.find("Node", None, node_name) is None:
        status: dict[str, Any] = {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}
        version = kubelet_version(world, node_name)
        if version is not None:
            # pkg/kubelet/nodestatus/setters.go VersionInfo: status.nodeInfo.kubeletVersion.
            status["nodeInfo"] = {"kubeletVersion": version}
        created = api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name, "annotations": {},
                           # The kubelet's own well-known labels (pkg/kubelet/kubelet_node_status.go initialNode).
                           "labels": {"kubernetes.io/hostname": node_name, "kubernetes.io/os": "linux"}},
                           "status": status})
        features = _features(api)
        if features.cni:
            features.network_at[created["metadata"].get("uid") or node_name] = world.now + NODE_NETWORK_DELAY
    refresh_nodes(world, api)


def reset(world: World, machine: Machine) -> None:
    """`kubeadm reset -f`: the kubelet stops and forgets the cluster (and /var/lib/kubelet is emptied: kubernetes
    cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go)."""
    machine.kubelet_conf = None
    machine.kubelet_ca_hash = None
    machine.kubelet_config_version = None


def kubeadm_upgrade_node(world: World, machine: Machine, node_name: str) -> str:
    """`kubeadm upgrade node` on a worker: with the node's own credentials (/etc/kubernetes/kubelet.conf) it reads
    the kubeadm-config and kubelet-config ConfigMaps and writes /var/lib/kubelet/config.yaml; its control-plane
    phases skip a node without a kube-apiserver manifest (kubernetes cmd/kubeadm/app/cmd/upgrade/node.go
    newNodeData, cmd/kubeadm/app/phases/upgrade/postupgrade.go WriteKubeletConfigFiles). Kamaji writes kubeadm-config
    from the TenantControlPlane's spec.kubernetes.version (clastix/kamaji 26.8.2-edge internal/resources/
    kubeadm_utils.go KubeadmPhaseCreate) and lets system:nodes read kubelet-config (internal/kubeadm/uploadconfig.go
    createConfigMapRBACRules). Returns the version the configuration is now of."""
    tenant = world.tenants.get(machine.kubelet_conf or "")
    if tenant is None or not tenant.api.reachable:
        raise UnreachableError(f"unable to fetch the kubeadm-config ConfigMap: cannot reach {machine.kubelet_conf}")
    host = world.tenant_hosts.get(tenant.api.server)
    tcp = host.find("TenantControlPlane", tenant.namespace, tenant.name) if host is not None else None
    if tcp is None:
        raise ApiError(404, 'unable to fetch the kubeadm-config ConfigMap: configmaps "kubeadm-config" not found')
    return tcp["spec"]["kubernetes"]["version"]


def restart_kubelet(world: World, machine: Machine, node_name: str) -> None:
    """`systemctl restart kubelet`: the kubelet now runs the installed binary and reports its version on its Node
    (kubernetes pkg/kubelet/nodestatus/setters.go VersionInfo)."""
    tenant = world.tenants.get(machine.kubelet_conf or "")
    node = tenant.api.find("Node", None, node_name) if tenant is not None else None
    if node is not None and machine.kubelet_version is not None:
        _features(tenant.api).restarted[node_name] = (machine.kubelet_version, world.now + KUBELET_STATUS_PERIOD)


def _tenant_controller(world: World, api: KubeApi, event: str, obj: dict[str, Any]) -> None:
    if obj.get("kind") == "Secret" and obj.get("type") == "kubernetes.io/service-account-token" and event == "create":
        # The token controller of kube-controller-manager fills in a long-lived token.
        import base64

        account = (obj["metadata"].get("annotations") or {}).get("kubernetes.io/service-account.name", "")
        obj["data"] = {"token": base64.b64encode(f"token-of-{account}-{obj['metadata']['uid']}".encode()).decode()}
        return
    if obj.get("kind") != "Node":
        return
    name = obj["metadata"]["name"]
    if event == "delete":
        machine = world.machines.get(name)
        tenant = _tenant_of(world, api)
        if machine is not None and tenant is not None and machine.kubelet_conf == tenant.api.server:
            # A running kubelet registers its Node again (kubelet_node_status.go registerWithAPIServer).
            world.log(f"kubelet on {name} re-registered its Node after it was deleted")
            _register_node(world, tenant, name)
            return
        # PodGC deletes pods bound to a Node that no longer exists.
        for pod in api.list("Pod"):
            if (pod.get("spec") or {}).get("nodeName") == name:
                api.remove("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
    else:
        refresh_nodes_single(world, api, obj)


def refresh_nodes_single(world: World, api: KubeApi, node: dict[str, Any]) -> None:
    features = getattr(api, "features", None)
    if features is not None:
        refresh_nodes(world, api)


def _requests(pod: dict[str, Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        for source in (resources.get("limits") or {}, resources.get("requests") or {}):
            for key, value in source.items():
                if key.startswith("nvidia.com/"):
                    total[key] = max(total.get(key, 0), int(str(value)))
    return total


TERMINAL_PHASES = ("Succeeded", "Failed")


def _charged(pod: dict[str, Any]) -> bool:
    """Whether a pod counts against quotas: not in a terminal phase (kubernetes pkg/quota/v1/evaluator/core/pods.go
    QuotaV1Pod; HAMi's scheduler drops finished pods from its quota cache the same way)."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def _quota_usage(pod: dict[str, Any]) -> dict[str, int]:
    """What kube-apiserver's ResourceQuota admission charges a pod for its extended resources: only
    `requests.<resource>`, from the pod's requests, which default to its limits (kubernetes
    pkg/quota/v1/evaluator/core/pods.go podComputeUsageHelper: "only quota objects in format of
    requests.resourceName is allowed for extended resource"; pkg/apis/core/v1/defaults.go SetDefaults_Pod). A
    `limits.nvidia.com/...` key is never charged by the API server: it is HAMi's (see `_hami_quota_denial`)."""
    def requested(container: dict[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {key: int(str(value)) for key, value in merged.items() if key.startswith("nvidia.com/")}

    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for key, value in requested(container).items():
            total[key] = total.get(key, 0) + value
    for container in spec.get("initContainers") or []:  # init containers run one at a time
        for key, value in requested(container).items():
            total[key] = max(total.get(key, 0), value)
    return {f"requests.{key}": value for key, value in total.items()}


def _hami_quota_denial(api: KubeApi, namespace: str, pod: dict[str, Any]) -> str | None:
    """HAMi's webhook refuses a GPU pod whose card memory or cores would exceed the namespace's
    `limits.nvidia.com/gpumem` / `limits.nvidia.com/gpucores` (Project-HAMi/HAMi v2.10.0 pkg/scheduler/webhook.go
    fitResourceQuota: memory x cards summed over the containers; pkg/device/quota.go FitQuota against the usage of
    the pods its scheduler allocated, AddQuota only for `limits.` keys of its own resources)."""
    requested = {GPUMEM: 0, GPUCORES: 0}
    for container in (pod.get("spec") or {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        cards = int(str(limits.get(GPU, 0)))
        for key in requested:
            requested[key] += int(str(limits.get(key, 0))) * cards
    used = {GPUMEM: 0, GPUCORES: 0}
    for other in api.list("Pod", namespace):
        allocated = ((other.get("metadata") or {}).get("annotations") or {}).get(VGPU_DEVICES)
        if not allocated or not _charged(other):
            continue
        for entry in allocated.replace(";", ":").split(":"):
            fields = entry.split(",")
            if len(fields) == 4:
                used[GPUMEM] += int(fields[2])
                used[GPUCORES] += int(fields[3])
    for quota in api.list("ResourceQuota", namespace):
        hard = (quota.get("spec") or {}).get("hard") or {}
        for key in requested:
            limit = hard.get(f"limits.{key}")
            if limit is not None and requested[key] and used[key] + requested[key] > int(str(limit)):
                return "exceeding resource quota"
    return None


def _tenant_admission(world: World, api: KubeApi, identity, operation: str, obj: dict, old: dict | None,
                      subresource: str = "") -> dict:
    if obj.get("kind") != "Pod" or operation != "CREATE":
        _validating_policies(api, identity, operation, obj, old, subresource)
        if operation == "CREATE" and obj["metadata"].get("namespace"):
            _object_count_quota(api, obj)
        return obj
    features = _features(api)
    namespace = obj["metadata"].get("namespace") or "default"
    requests = _requests(obj)
    # kubernetes pkg/apis/core/v1/defaults.go SetDefaults_PodSpec: defaulting, before any admission.
    scheduler = obj.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
    # HAMi v2.10.0 templates/scheduler/webhook.yaml objectSelector `hami.io/webhook NotIn [ignore]`: never called.
    skipped = (obj["metadata"].get("labels") or {}).get("hami.io/webhook") == "ignore"
    # pkg/scheduler/webhook.go Handle: another scheduler than default-scheduler or HAMi's is allowed unmutated.
    foreign = scheduler not in ("default-scheduler", "hami-scheduler")
    if features.hami is not None and namespace not in features.hami["exempt"] and not skipped:
        # charts/hami templates/scheduler/webhook.yaml: every pod CREATE outside the exempt namespaces.
        tunnel = features.konnectivity and api.find("DaemonSet", "kube-system", "konnectivity-agent") is not None \
            and bool(_ready_nodes(api))
        service = api.find("Service", "kube-system", "hami-scheduler")
        # The API server dials the webhook's Service port, whatever the Service's type (through the agents).
        served = any(p.get("port") == features.hami.get("webhookPort", 443)
                     for p in ((service or {}).get("spec") or {}).get("ports") or [])
        if not tunnel or not served:
            if features.hami["failurePolicy"] == "Fail":
                reason = "no Konnectivity agent" if not tunnel else "Service kube-system/hami-scheduler has no such port"
                raise ApiError(500, 'Internal error occurred: failed calling webhook "vgpu.hami.io": failed to call '
                                    f'webhook: the tenant API server cannot reach the webhook ({reason})')
        elif not hami_webhook_serves(world, features):
            if features.hami["failurePolicy"] == "Fail":
                raise ApiError(500, 'Internal error occurred: failed calling webhook "vgpu.hami.io": failed to call '
                                    'webhook: Post "https://hami-scheduler.kube-system.svc:443/webhook?timeout=10s": '
                                    'no endpoints available for service "hami-scheduler"')
        elif GPU in requests and not foreign:
            spec = obj.setdefault("spec", {})
            if spec.get("nodeName"):
                raise ApiError(400, 'admission webhook "vgpu.hami.io" denied the request: nodeName is set')
            spec["schedulerName"] = "hami-scheduler"
            denial = _hami_quota_denial(api, namespace, obj)
            if denial:
                # controller-runtime admission.Denied answers 403 Forbidden.
                raise ApiError(403, f'admission webhook "vgpu.hami.io" denied the request: {denial}')
    _validating_policies(api, identity, operation, obj, old)
    # kube-apiserver's ResourceQuota admission (plugin/pkg/admission/resourcequota), after the mutating webhooks.
    charged = _quota_usage(obj)
    for quota in api.list("ResourceQuota", namespace):
        hard = (quota.get("spec") or {}).get("hard") or {}
        used: dict[str, int] = {}
        for pod in api.list("Pod", namespace):
            if _charged(pod):
                for key, value in _quota_usage(pod).items():
                    used[key] = used.get(key, 0) + value
        for key, limit in hard.items():
            if key in charged and used.get(key, 0) + charged[key] > int(str(limit)):
                raise ApiError(403, f'pods "{obj["metadata"]["name"]}" is forbidden: exceeded quota: '
                                    f'{quota["metadata"]["name"]}, requested: {key}={charged[key]}, '
                                    f'used: {key}={used.get(key, 0)}, limited: {key}={limit}')
    return obj


def _namespace_selected(api: KubeApi, selector: dict[str, Any], namespace: str) -> bool:
    """A binding's namespaceSelector (matchExpressions In / NotIn only) against the namespace's labels, which carry
    kubernetes.io/metadata.name (kubernetes pkg/registry/core/namespace/strategy.go)."""
    if set(selector) - {"matchExpressions"} or any(e["operator"] not in ("In", "NotIn")
                                                   for e in selector.get("matchExpressions", [])):
        raise AssertionError(f"the simulator does not evaluate the namespaceSelector {selector}")
    labels = {**((api.find("Namespace", None, namespace) or {}).get("metadata", {}).get("labels") or {}),
              "kubernetes.io/metadata.name": namespace}
    return all((labels.get(e["key"]) in e["values"]) == (e["operator"] == "In")
               for e in selector.get("matchExpressions", []))


def _plural(kind: str) -> str:
    """A kind's resource name (k8s.io/apimachinery pkg/api/meta/restmapper.go UnsafeGuessKindToResource)."""
    lower = kind.lower()
    return lower + "es" if lower.endswith("s") else lower[:-1] + "ies" if lower.endswith("y") else lower + "s"


def _object_count_quota(api: KubeApi, obj: dict) -> None:
    """kube-apiserver's ResourceQuota admission for an object count: `count/<plural>.<group>` (core: no group) refuses
    the create past `hard` (kubernetes pkg/quota/v1/generic/evaluator.go ObjectCountQuotaResourceNameFor,
    plugin/pkg/admission/resourcequota/controller.go)."""
    namespace, kind = obj["metadata"]["namespace"], obj["kind"]
    for quota in api.list("ResourceQuota", namespace):
        hard = {key: value for key, value in ((quota.get("spec") or {}).get("hard") or {}).items()
                if key.startswith("count/")}
        if not hard:
            continue
        group = obj["apiVersion"].rpartition("/")[0]
        key = f"count/{_plural(kind)}" + (f".{group}" if group else "")
        used = len(api.list(kind, namespace))
        if key in hard and used + 1 > int(str(hard[key])):
            raise ApiError(403, f'{_plural(kind)} "{obj["metadata"]["name"]}" is forbidden: exceeded quota: '
                                f'{quota["metadata"]["name"]}, requested: {key}=1, used: {key}={used}, '
                                f'limited: {key}={hard[key]}')


def _validating_policies(api: KubeApi, identity, operation: str, obj: dict, old: dict | None,
                         subresource: str = "") -> None:
    """kube-apiserver's ValidatingAdmissionPolicy admission (k8s.io/apiserver pkg/admission/plugin/policy/validating,
    admissionregistration.k8s.io/v1), after the mutating webhooks: each binding's policy whose rules, namespace
    selector and matchConditions match; a false validation, or a CEL error under failurePolicy Fail, denies. The CEL
    is evaluated by cel-python (core CEL: has, in, exists, startsWith); what else a policy may use is refused."""
    resource, namespace = f"{obj['kind'].lower()}s", obj["metadata"].get("namespace") or ""
    resource += f"/{subresource}" if subresource else ""
    for binding in api.list("ValidatingAdmissionPolicyBinding"):
        bound = binding["spec"]
        policy = api.find("ValidatingAdmissionPolicy", None, bound["policyName"])
        if policy is None:
            continue
        spec = policy["spec"]
        unknown = (set(spec) - {"failurePolicy", "matchConstraints", "matchConditions", "validations"}) | \
            (set(bound) - {"policyName", "validationActions", "matchResources"}) | \
            (set(bound.get("matchResources") or {}) - {"namespaceSelector"})
        if unknown or bound["validationActions"] != ["Deny"] or spec.get("failurePolicy") != "Fail":
            raise AssertionError(f"the simulator does not evaluate {sorted(unknown) or 'this policy'}")
        if not any(resource in rule["resources"] and operation in rule["operations"]
                   for rule in spec["matchConstraints"]["resourceRules"]):
            continue
        selector = (bound.get("matchResources") or {}).get("namespaceSelector")
        if selector and (not namespace or not _namespace_selected(api, selector, namespace)):
            continue
        refused = cel.denial(spec, getattr(identity, "user", ""), tuple(getattr(identity, "groups", ())), operation,
                             resource, obj, old)
        if refused is not None:
            # A validation without a `reason` answers Invalid, 422 (k8s.io/apiserver pkg/admission/plugin/policy/
            # validating/dispatcher.go, reasonToCode).
            raise ApiError(422, f"{resource} \"{obj['metadata'].get('name', '')}\" is forbidden: "
                                f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
                                f"'{binding['metadata']['name']}' denied request: {refused}")


def _selected(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """The pod's nodeSelector matches the node's labels (the NodeAffinity filter, which runs before any extender)."""
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(key) == value for key, value in ((pod.get("spec") or {}).get("nodeSelector") or {}).items())


def schedule(world: World, api: KubeApi, pod: dict[str, Any]) -> None:
    """What the schedulers and the kubelet do with a created pod (HAMi's extender for GPU pods)."""
    features = _features(api)
    spec = pod.setdefault("spec", {})
    requests = _requests(pod)
    metadata = pod["metadata"]
    status = pod.setdefault("status", {"phase": "Pending"})
    if spec.get("schedulerName") == "hami-scheduler":
        if features.hami is None:
            return
        # Project-HAMi/HAMi v2.10.0 pkg/scheduler/score.go getNodeResources: only devices whose type contains
        # "NVIDIA" (case-insensitively); fitInDevices needs `gpu` cards with enough memory and cores each.
        for node in _ready_nodes(api):
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            # HAMi's scheduler is kube-scheduler with an extender: its NodeUnschedulable filter runs first.
            if (node.get("spec") or {}).get("unschedulable"):
                continue
            if not _selected(pod, node) or int(allocatable.get(GPU, 0) or 0) <= 0:
                continue
            cards = [d for d in _devices(node) if "nvidia" in str(d.get("type", "")).lower()
                     and d.get("devmem", 0) >= requests.get(GPUMEM, 0)
                     and d.get("devcore", 0) >= requests.get(GPUCORES, 0)]
            if len(cards) < requests.get(GPU, 1):
                continue
            chosen = cards[: requests.get(GPU, 1)]
            annotations = metadata.setdefault("annotations", {})
            annotations[VGPU_NODE] = node["metadata"]["name"]
            annotations[VGPU_DEVICES] = "".join(
                f"{c['id']},NVIDIA,{requests.get(GPUMEM, 0)},{requests.get(GPUCORES, 0)}:" for c in chosen) + ";"
            spec["nodeName"] = node["metadata"]["name"]
            _run(pod, node)
            return
        return
    # default-scheduler: any Ready node with the extended resources it advertises, not cordoned (the NodeUnschedulable
    # filter, pkg/scheduler/framework/plugins/nodeunschedulable).
    for node in _ready_nodes(api):
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if _selected(pod, node) and all(int(allocatable.get(k, 0) or 0) >= v for k, v in requests.items() if k == GPU):
            spec["nodeName"] = node["metadata"]["name"]
            _run(pod, node)
            return
    status["phase"] = "Pending"


def _run(pod: dict[str, Any], node: dict[str, Any]) -> None:
    # The kubelet drops extended requests the node does not advertise (pkg/kubelet/lifecycle/predicate.go
    # removeMissingExtendedResources), so a pod runs even if the mock plugin registered nothing.
    # On a node of HAMi's NVIDIA plugin (gpu=on) a GPU container runs NVIDIA's createContainer hooks, which write into
    # its root (nvidia-container-toolkit v1.20.0 cmd/nvidia-cdi-hook/update-application-profile run, kserve#5711): a
    # read-only root is never created. Which toolkit a server runs is unknown here: refused, not guessed.
    if (node["metadata"].get("labels") or {}).get("gpu") == "on" and GPU in _requests(pod) and any(
            (c.get("securityContext") or {}).get("readOnlyRootFilesystem") for c in pod["spec"].get("containers", [])):
        pod["status"] = {"phase": "Pending", "reason": "CreateContainerError",
                         "message": "createContainer hook: read-only file system"}
        return
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


__all__ = ["KamajiState", "TenantFeatures", "helm_install", "helm_upgrade", "helm_uninstall", "join", "reset",
           "schedule", "refresh_nodes", "kube_proxy_works", "field"]
