"""The simulated machine: a Docker host, kind, Kamaji's control planes, the tenants' nodes and HAMi.

Everything `pulumi up` touches outside the Pulumi state lives here, so a lifecycle scenario can carry it
from one operation to the next, break it on purpose (delete the kind cluster by hand, take a tenant
down) and check what is left after `destroy`. Each behaviour is modelled from the upstream source the
project pins; the file and the rule are named next to it. Races in the real system (Kamaji's RBAC
window, its webhook coming up) are resolved against the program: the simulated system is as slow as
it may legally be, unless something in the program waits for it.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from components.kube import ApiError, UnreachableError
from config.models import DEFAULT_KUBERNETES_VERSION
from tests.support.sim import pki

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

SYSTEM_MASTERS = "system:masters"
CLUSTER_ADMINS = "kubeadm:cluster-admins"
NODES_GROUP = "system:nodes"

KIND_SUBNET_V4 = "172.18.0.0/16"
# The kind node's address on it (docker hands out .2 first).
KIND_CONTROL_PLANE_IP = "172.18.0.2"
KIND_SUBNET_V6 = "fc00:f853:ccd:e793::/64"
# An adopted cluster's own load balancer hands out addresses from here.
ADOPTED_LB_RANGE = "10.20.255.200-10.20.255.250"


class WaitTimeoutError(Exception):
    """A wait that a provider or a script gives up on."""


Key = tuple[str, str, str]  # (kind, namespace, name)


def _key(kind: str, namespace: str | None, name: str) -> Key:
    return (kind, namespace or "", name)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist) against `labels`; an
    empty selector matches nothing here (eviction.go getPodDisruptionBudgets: "it should match nothing")."""
    match, expressions = selector.get("matchLabels") or {}, selector.get("matchExpressions") or []
    if not match and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match.items()):
        return False
    for expression in expressions:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "In" and labels.get(key) not in values or operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels or operator == "DoesNotExist" and key in labels:
            return False
    return True


# --------------------------------------------------------------------------- #
# A Kubernetes API server
# --------------------------------------------------------------------------- #


@dataclass
class KubeApi:
    """One API server: objects, who may write them, and controllers that react to writes."""

    name: str
    server: str
    ca: pki.CertificateAuthority
    world: World
    reachable: bool = True
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # Kinds the server serves (a CRD's kind appears once its chart is installed).
    kinds: set[str] = field(
        default_factory=lambda: {
            "Namespace", "Secret", "ConfigMap", "ServiceAccount", "Service", "Pod", "Node", "ResourceQuota",
            "NetworkPolicy", "Deployment", "DaemonSet", "StatefulSet", "Role", "RoleBinding", "ClusterRole",
            "ClusterRoleBinding", "RuntimeClass", "Lease", "Event", "EndpointSlice", "CustomResourceDefinition",
            # admissionregistration.k8s.io/v1, served by every API server since Kubernetes 1.30.
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
        }
    )
    # Admission: callables(identity, operation, obj, old) -> obj (mutated) or raise ApiError.
    admission: list[Callable[..., dict[str, Any]]] = field(default_factory=list)
    # Controllers: callables(event, obj) run after a write ("create" / "update" / "delete").
    controllers: list[Callable[[str, dict[str, Any]], None]] = field(default_factory=list)
    # Authorisation beyond system:masters: callable(identity, verb, kind, namespace, name) -> bool.
    authorizer: Callable[[pki.Identity, str, str, str, str], bool] | None = None
    helm: dict[tuple[str, str], HelmRelease] = field(default_factory=dict)

    # ---- authentication / authorisation ---------------------------------- #

    def authenticate(self, kubeconfig: str) -> pki.Identity:
        if not self.reachable:
            raise UnreachableError(f"{self.server}: connection refused")
        parsed = pki.parse_kubeconfig(kubeconfig)
        if parsed is None or parsed.client_certificate is None:
            raise ApiError(401, "Unauthorized")
        if not self.ca.verify(parsed.client_certificate):
            raise ApiError(401, "Unauthorized: certificate signed by unknown authority")
        return pki.identity_of(parsed.client_certificate)

    def authorize(self, identity: pki.Identity, verb: str, kind: str, namespace: str, name: str) -> None:
        if SYSTEM_MASTERS in identity.groups:
            return
        if self.authorizer is not None and self.authorizer(identity, verb, kind, namespace, name):
            return
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        raise ApiError(
            403,
            f'{kind.lower()}s "{name}" is forbidden: User "{identity.user}" cannot {verb} resource '
            f'"{kind.lower()}s"{where}',
        )

    # ---- object access ---------------------------------------------------- #

    def _require_kind(self, kind: str) -> None:
        if kind not in self.kinds:
            raise ApiError(404, f'no matches for kind "{kind}"')

    def get(self, identity: pki.Identity, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        self.authorize(identity, "get", kind, namespace or "", name)
        self._require_kind(kind)
        obj = self.objects.get(_key(kind, namespace, name))
        if obj is None:
            raise ApiError(404, f'{kind.lower()}s "{name}" not found')
        return copy.deepcopy(obj)

    def find(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """Controller-side read: no authentication."""
        return self.objects.get(_key(kind, namespace, name))

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            obj for (k, ns, _), obj in self.objects.items() if k == kind and (namespace is None or ns == namespace)
        ]

    def create(
        self, identity: pki.Identity | None, obj: dict[str, Any], dry_run: bool = False
    ) -> dict[str, Any]:
        kind = obj["kind"]
        metadata = obj.setdefault("metadata", {})
        namespace, name = metadata.get("namespace") or "", metadata["name"]
        if identity is not None:
            self.authorize(identity, "create", kind, namespace, name)
        self._require_kind(kind)
        # NamespaceLifecycle, before every webhook: k8s.io/apiserver pkg/admission/plugin/namespace/lifecycle Admit.
        if namespace and _key("Namespace", None, namespace) not in self.objects:
            raise ApiError(404, f'namespaces "{namespace}" not found')
        if _key(kind, namespace, name) in self.objects:
            raise ApiError(409, f'{kind.lower()}s "{name}" already exists')
        obj = copy.deepcopy(obj)
        for hook in self.admission:
            obj = hook(identity, "CREATE", obj, None)
        if dry_run:
            return obj
        metadata = obj["metadata"]
        metadata.setdefault("uid", self.world.new_uid(kind, name))
        metadata.setdefault("generation", 1)
        self.objects[_key(kind, namespace, name)] = obj
        self._serve(obj)
        self._react("create", obj)
        return copy.deepcopy(self.objects.get(_key(kind, namespace, name), obj))

    def update(self, identity: pki.Identity | None, obj: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        """Apply `obj`'s fields over the live object (what an apply of the fields Pulumi manages does)."""
        kind = obj["kind"]
        namespace, name = obj["metadata"].get("namespace") or "", obj["metadata"]["name"]
        if identity is not None:
            self.authorize(identity, "update", kind, namespace, name)
        self._require_kind(kind)
        old = self.objects.get(_key(kind, namespace, name))
        if old is None:
            raise ApiError(404, f'{kind.lower()}s "{name}" not found')
        new = _merge(copy.deepcopy(old), obj)
        for hook in self.admission:
            new = hook(identity, "UPDATE", new, old)
        if dry_run:
            return new
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        self.objects[_key(kind, namespace, name)] = new
        self._serve(new)
        self._react("update", new)
        return copy.deepcopy(self.objects[_key(kind, namespace, name)])

    def patch_status(self, identity: pki.Identity, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.authorize(identity, "patch", f"{kind}/status", "", name)
        old = self.objects.get(_key(kind, None, name))
        if old is None:
            raise ApiError(404, f'{kind.lower()}s "{name}" not found')
        # The status strategy resets only `spec`: metadata from the request, labels too, is kept (kubernetes
        # pkg/registry/core/node/strategy.go nodeStatusStrategy PrepareForUpdate, GetResetFields).
        new = _merge(copy.deepcopy(old), {key: value for key, value in patch.items() if key != "spec"},
                     delete_nulls=True)
        for hook in self.admission:
            new = hook(identity, "UPDATE", new, old, "status")
        self.objects[_key(kind, None, name)] = new
        self._react("update", new)
        return copy.deepcopy(new)

    def evict(self, identity: pki.Identity | None, namespace: str, name: str) -> None:
        """POST pods/<name>/eviction (kubernetes pkg/registry/core/pod/storage/eviction.go Create): a terminal pod is
        deleted at once; otherwise the one PodDisruptionBudget whose non-empty selector matches the pod's labels must
        have caught up with its generation and allow a disruption (its status, as the disruption controller wrote
        it), which the eviction takes; more than one matching budget is an error. The simulator has no disruption
        controller: a budget without status.disruptionsAllowed is refused rather than guessed."""
        if identity is not None:
            self.authorize(identity, "create", "Pod/eviction", namespace, name)
        pod = self.objects.get(_key("Pod", namespace, name))
        if pod is None:
            raise ApiError(404, f'pods "{name}" not found')
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            labels = (pod.get("metadata") or {}).get("labels") or {}
            budgets = [pdb for pdb in self.list("PodDisruptionBudget", namespace) if labels
                       and _selects(((pdb.get("spec") or {}).get("selector") or {}), labels)]
            if len(budgets) > 1:
                raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                    "does not support.")
            if budgets:
                budget = budgets[0]
                status = budget.get("status") or {}
                if "disruptionsAllowed" not in status:
                    raise ApiError(500, f"simulator: PodDisruptionBudget {namespace}/{budget['metadata']['name']} has "
                                        "no status.disruptionsAllowed; the simulator runs no disruption controller")
                generation, pdb = budget["metadata"].get("generation", 1), budget["metadata"]["name"]
                # The Status's cause names the budget; components/kube.py _status_message appends it to the message.
                refused = "Cannot evict pod as it would violate the pod's disruption budget."
                if status.get("observedGeneration", generation) < generation:
                    raise ApiError(429, f"{refused} The disruption budget {pdb} is still being processed by the "
                                        "server.")
                if int(status["disruptionsAllowed"]) <= 0:
                    raise ApiError(429, f"{refused} The disruption budget {pdb} needs {status.get('desiredHealthy', 0)}"
                                        f" healthy pods and has {status.get('currentHealthy', 0)} currently")
                status["disruptionsAllowed"] = int(status["disruptionsAllowed"]) - 1
        self.remove("Pod", namespace, name)

    def delete(self, identity: pki.Identity | None, kind: str, namespace: str | None, name: str) -> None:
        if identity is not None:
            self.authorize(identity, "delete", kind, namespace or "", name)
        self._require_kind(kind)
        obj = self.objects.get(_key(kind, namespace, name))
        if obj is None:
            raise ApiError(404, f'{kind.lower()}s "{name}" not found')
        if obj["metadata"].get("finalizers"):
            obj["metadata"]["deletionTimestamp"] = self.world.now.isoformat()
            self._react("update", obj)
            return
        self.remove(kind, namespace, name)

    def remove(self, kind: str, namespace: str | None, name: str) -> None:
        obj = self.objects.pop(_key(kind, namespace, name), None)
        if obj is not None:
            self._react("delete", obj)
            if kind == "Namespace":
                for key in [k for k in self.objects if k[1] == name]:
                    self.remove(*key)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Controller-side write (a system component creating its own objects)."""
        metadata = obj["metadata"]
        metadata.setdefault("uid", self.world.new_uid(obj["kind"], metadata["name"]))
        self.objects[_key(obj["kind"], metadata.get("namespace"), metadata["name"])] = obj
        return obj

    def _serve(self, obj: dict[str, Any]) -> None:
        """A CustomResourceDefinition makes the server serve its kind."""
        if obj["kind"] == "CustomResourceDefinition":
            kind = ((obj.get("spec") or {}).get("names") or {}).get("kind")
            if kind:
                self.kinds.add(kind)

    def _react(self, event: str, obj: dict[str, Any]) -> None:
        for controller in list(self.controllers):
            controller(event, obj)

    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        if _key("Namespace", None, name) not in self.objects:
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}})


def _merge(base: Any, overlay: Any, delete_nulls: bool = False) -> Any:
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            if value is None and delete_nulls:
                out.pop(key, None)
            else:
                out[key] = _merge(base.get(key), value, delete_nulls)
        return out
    return copy.deepcopy(overlay)


# --------------------------------------------------------------------------- #
# Helm releases (what `helm install` leaves in a cluster)
# --------------------------------------------------------------------------- #


@dataclass
class HelmRelease:
    name: str
    namespace: str
    chart: str
    values: dict[str, Any]
    # skipCrds: Helm installs none of the chart's crds/ (on upgrade it never does anyway).
    skip_crds: bool = False
    # Objects the release rendered, in install order; (kind, namespace, name, annotations).
    manifest: list[tuple[str, str, str, dict[str, str]]] = field(default_factory=list)
    revision: int = 1  # Helm's release revision: 1 on install, one more on each upgrade


# helm/helm v3.20.2 pkg/releaseutil/kind_sorter.go UninstallOrder; kinds not listed sort last
# ("unknown kind is last"), so Kamaji's DataStore is deleted after its controller Deployment.
UNINSTALL_ORDER = [
    "APIService", "Ingress", "IngressClass", "Service", "CronJob", "Job", "StatefulSet", "HorizontalPodAutoscaler",
    "Deployment", "ReplicaSet", "ReplicationController", "Pod", "DaemonSet", "RoleBindingList", "RoleBinding",
    "RoleList", "Role", "ClusterRoleBindingList", "ClusterRoleBinding", "ClusterRoleList", "ClusterRole",
    "CustomResourceDefinition", "PersistentVolumeClaim", "PersistentVolume", "StorageClass", "ConfigMap", "SecretList",
    "Secret", "ServiceAccount", "PodDisruptionBudget", "PodSecurityPolicy", "LimitRange", "ResourceQuota",
    "NetworkPolicy", "Namespace", "PriorityClass",
]


def uninstall_order(manifest: Iterable[tuple[str, str, str, dict[str, str]]]) -> list[tuple[str, str, str, dict]]:
    rank = {kind: i for i, kind in enumerate(UNINSTALL_ORDER)}
    return sorted(manifest, key=lambda entry: (rank.get(entry[0], len(rank)), entry[0] if entry[0] not in rank else ""))


# --------------------------------------------------------------------------- #
# Docker host, kind, SSH machines
# --------------------------------------------------------------------------- #


@dataclass
class Container:
    name: str
    image: str
    network: str
    labels: dict[str, str]
    # moby container/state.go: State.Running, which SetRestarting keeps true during a restart back-off ("we
    # should consider the container running when it is restarting"); `restarting` tells the two apart.
    running: bool = True
    privileged: bool = False
    files: dict[str, str] = field(default_factory=dict)
    volumes: tuple[str, ...] = ()  # named volumes it mounts
    env: tuple[str, ...] = ()
    restart: str = "no"  # HostConfig.RestartPolicy.Name
    healthcheck: tuple[str, ...] = ()  # Config.Healthcheck.Test; () without one
    restarting: bool = False
    health: str | None = None  # State.Health.Status: "starting", "healthy"; None without a healthcheck
    exit_code: int = 0
    restart_count: int = 0
    logs: list[str] = field(default_factory=list)

    @property
    def up(self) -> bool:
        """Its process runs (what answers on its ports): running and not between two restarts."""
        return self.running and not self.restarting


@dataclass
class Machine:
    """A worker node's operating system: a kindest/node container's or a real SSH machine's."""

    name: str
    kubelet_conf: str | None = None  # server the kubelet is joined to
    kubelet_ca_hash: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    # The real cards of a GPU server (config card objects: uuid, model, memoryMiB), what NVML would report.
    cards: list[dict[str, Any]] = field(default_factory=list)
    # Its network interfaces (name -> IPv4 address), the one the default route leaves by, its other routes
    # (destination network -> the interface they leave by) and /etc/hosts (name -> address). An SSH machine added at
    # an IPv4 address has one interface there with the default route (World.add_ssh_host); a machine without
    # interfaces has no network the simulator knows, and an SSH join on it is refused (scripts._join).
    interfaces: dict[str, str] = field(default_factory=dict)
    default_interface: str | None = None
    routes: dict[str, str] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)
    # What HAMi's device plugin needs and this server lacks, as node-join.sh names it in gpuMode nvidia
    # ("driver", "toolkit", "nvidia runtime", "nvidia default runtime", "other device plugin": one that runs).
    nvidia_missing: set[str] = field(default_factory=set)
    # The kubelet an SSH machine has installed ("v1.35.0"); None: not modelled, and its Node reports no version.
    # A container's kubelet is its kindest/node image's. The running kubelet reports the installed one from its
    # registration or its last restart on (what the Node's status.nodeInfo.kubeletVersion shows).
    kubelet_version: str | None = None
    # The kubeadm an SSH machine has installed; None: not modelled (the upgrade script's model refuses to guess).
    kubeadm_version: str | None = None
    # How it installs packages: "apt", "dnf" or "yum" (what node-upgrade.sh finds on PATH); None: none of them.
    package_manager: str | None = None
    # /var/lib/kubelet/gpu-tenancy-version: the version node-upgrade.sh last brought the kubelet configuration to.
    kubelet_config_version: str | None = None


@dataclass
class SshHost:
    host: str
    host_key: str
    machine: Machine
    reachable: bool = True


@dataclass
class DockerHost:
    networks: dict[str, list[str]] = field(default_factory=dict)
    containers: dict[str, Container] = field(default_factory=dict)
    images: set[str] = field(default_factory=set)
    image_pulls: list[str] = field(default_factory=list)
    # Image id -> the reference it was pulled as (containers name their image by id).
    image_names: dict[str, str] = field(default_factory=dict)
    # Named volumes: name -> labels.
    volumes: dict[str, dict[str, str]] = field(default_factory=dict)
    cpus: int = 4
    # Host sysctls kube-proxy may try to write (read-only from a container's netns).
    nf_conntrack_max: int = 262144
    conntrack_hashsize: int = 65536
    # The internet as seen from this host: hosts nothing here reaches (an outage, a firewall), whether direct
    # connections are refused (a host behind a corporate proxy), and the HTTP proxies that do forward.
    blocked_hosts: set[str] = field(default_factory=set)
    proxy_only: bool = False
    proxies: set[str] = field(default_factory=set)

    def reaches(self, url: str, env: Mapping[str, str]) -> bool:
        """Whether a Go program with environment `env` gets an answer from `url` (net/http's default transport,
        which takes its proxy from the environment)."""
        host = urlsplit(url).hostname or ""
        if host in self.blocked_hosts:
            return False
        proxy = proxy_for(url, env)
        if proxy is not None:
            return proxy in self.proxies
        return not self.proxy_only

    def start(self, container: Container) -> None:
        """moby daemon/start.go and monitor.go: run the image's process; when it exits, the restart policy
        decides whether the container waits to be restarted (state.go SetRestarting) or stays exited."""
        why = self._exits_at_start(container)
        # daemon/health.go initHealthMonitor: every (re)start resets the health to "starting".
        container.health = "starting" if container.healthcheck else None
        if why is None:
            container.running, container.restarting = True, False
            if container.healthcheck:
                container.health = "healthy"
            return
        container.logs.append(why)
        container.exit_code = 2  # a Go panic
        # restartmanager/restartmanager.go ShouldRestart: "always" and "unless-stopped" always, "on-failure" on a
        # non-zero exit code; "no" never.
        if container.restart in ("always", "unless-stopped", "on-failure"):
            container.running = container.restarting = True
        else:
            container.running = container.restarting = False

    def retry_restarts(self) -> None:
        """Time passes: the restart manager's back-off (100 ms doubling up to a minute) runs out and every
        container waiting for a restart starts again."""
        for container in self.containers.values():
            if container.restarting:
                container.restart_count += 1
                self.start(container)

    def _exits_at_start(self, container: Container) -> str | None:
        """Why the image's process dies at once (its log line), or None when it keeps running."""
        image = self.image_names.get(container.image, container.image)
        if _repository(image) in ("registry", "library/registry"):
            return _distribution_start(container, self)
        return None


def _repository(reference: str) -> str:
    """`docker.io/library/registry:3.1.2@sha256:...` -> `library/registry`."""
    name = reference.split("@", 1)[0]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        name = rest
    path, _, last = name.rpartition("/")
    return f"{path}/{last.split(':', 1)[0]}" if path else last.split(":", 1)[0]


def _distribution_start(container: Container, docker: DockerHost) -> str | None:
    """distribution v3.1.1 (HEAD unchanged) in proxy mode: registry/handlers/app.go NewApp calls
    proxy.NewRegistryPullThroughCache and panics on its error; that calls configureAuth unless
    REGISTRY_PROXY_EXEC_COMMAND is set (registry/proxy/proxyregistry.go), whose getAuthURLs does
    `http.Get(remoteURL + "/v2/")` (registry/proxy/proxyauth.go) through http.DefaultClient, so with the
    environment's proxy."""
    env = dict(entry.split("=", 1) for entry in container.env if "=" in entry)
    remote = env.get("REGISTRY_PROXY_REMOTEURL")
    if not remote or env.get("REGISTRY_PROXY_EXEC_COMMAND"):
        return None
    if docker.reaches(f"{remote}/v2/", env):
        return None
    return f'panic: Get "{remote}/v2/": dial tcp: lookup {urlsplit(remote).hostname}: i/o timeout'


def proxy_for(url: str, env: Mapping[str, str]) -> str | None:
    """golang.org/x/net/http/httpproxy FromEnvironment + ProxyFunc: HTTPS_PROXY (or https_proxy) for https URLs,
    HTTP_PROXY (or http_proxy) for http ones, none for localhost, loopback addresses or a host NO_PROXY (or
    no_proxy) names: "*", the host, or a domain of it ("example.com" and ".example.com" both match
    "a.example.com"; only the former matches "example.com")."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    scheme = "HTTPS" if parts.scheme == "https" else "HTTP"
    proxy = env.get(f"{scheme}_PROXY") or env.get(f"{scheme.lower()}_proxy") or None
    if proxy is None or host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    for entry in (env.get("NO_PROXY") or env.get("no_proxy") or "").split(","):
        entry = entry.strip().lower().split(":", 1)[0]
        if not entry:
            continue
        if entry == "*" or host == entry or host.endswith("." + entry.lstrip(".")):
            return None
    return proxy


@dataclass
class KindCluster:
    name: str
    api: KubeApi
    node_image: str
    config: dict[str, Any]


# --------------------------------------------------------------------------- #
# Tenants (Kamaji control planes and what runs in them)
# --------------------------------------------------------------------------- #


@dataclass
class Tenant:
    """A hosted control plane Kamaji runs, and the state of its cluster."""

    namespace: str
    name: str
    address: str
    api: KubeApi
    # Kamaji's soot controller binds kubeadm:cluster-admins (and the bootstrap RBAC) only after Ready
    # (clastix/kamaji controllers/soot/manager.go: the manager starts for Ready TCPs only; phase
    # PhaseClusterAdminRBAC in internal/resources/kubeadm_phases.go).
    rbac_ready: bool = False
    node_restriction: bool = False


class World:
    """Everything outside the Pulumi state."""

    def __init__(self, *, now: datetime.datetime | None = None, kind_network: bool = False):
        self.now = now or datetime.datetime(2026, 11, 30, 9, 0, tzinfo=datetime.timezone.utc)
        self.docker = DockerHost()
        if kind_network:
            self.docker.networks["kind"] = [KIND_SUBNET_V6, KIND_SUBNET_V4]
        self.kind: dict[str, KindCluster] = {}
        self.apis: dict[str, KubeApi] = {}
        self.tenants: dict[str, Tenant] = {}  # by server URL
        self.tenant_hosts: dict[str, KubeApi] = {}  # tenant server URL -> the management API hosting it
        # A control plane another cluster started at an address that was already announced: (tenant, its host) by
        # server URL, while both clusters' MetalLB answer for it (see `contested`); every such clash, for scenarios.
        self.shadowed: dict[str, tuple[Tenant, KubeApi]] = {}
        self.address_clashes: list[str] = []
        self.ssh: dict[str, SshHost] = {}
        self.machines: dict[str, Machine] = {}  # by node name (containers) or host (SSH)
        self.events: list[str] = []
        # Races of the real system, lost unless the program waits (see the module docstring). Scenarios that
        # examine one race may switch the other off.
        self.kamaji_webhook_lag = True
        self.soot_rbac_lag = True
        # HAMi's webhook Service has no endpoint until the scheduler labels itself leader (first 15 s tick), MetalLB's
        # until the endpoints controller lists the Ready controller, and the mock device plugin's resources reach the
        # Node only after its poll (tests/support/sim/systems.py HAMI_LEADER_TICK, PLUGIN_DELAY, METALLB_ENDPOINTS).
        self.hami_webhook_lag = True
        self.metallb_webhook_lag = True
        self.device_plugin_lag = True
        # Swap on the Docker host (visible to every kindest/node container, which cannot turn it off).
        self.host_swap = False
        self._uid = 0
        self._port = 41233
        # The adopted management cluster, if the scenario starts from one.
        self.adopted: KubeApi | None = None
        self.mark_preexisting()

    def mark_preexisting(self) -> None:
        """What is on the Docker host now was there before the scenario: `leftovers` does not count it."""
        self.preexisting = {"network": set(self.docker.networks), "image": set(self.docker.images),
                            "volume": set(self.docker.volumes)}

    # ---- bookkeeping ------------------------------------------------------ #

    def new_uid(self, kind: str, name: str) -> str:
        self._uid += 1
        return f"{self._uid:08d}-{kind.lower()}-{name}"

    def log(self, message: str) -> None:
        self.events.append(message)

    def api_for(self, kubeconfig: str) -> KubeApi:
        """The API server a client with this kubeconfig reaches. Unreachable when nothing answers, when two
        clusters announce the address (`contested`), and when the server's certificate is not signed by the
        kubeconfig's CA: the client's TLS handshake fails before any request (urllib3 raises SSLError, which
        components/kube.py reports as UnreachableError), so a stale CA never gets an HTTP answer such as 401."""
        parsed = pki.parse_kubeconfig(kubeconfig)
        if parsed is None:
            raise UnreachableError("the kubeconfig names no usable cluster")
        clash = self.contested(parsed.server)
        if clash is not None:
            raise UnreachableError(clash)
        api = self.apis.get(parsed.server)
        if api is None or not api.reachable:
            raise UnreachableError(f"{parsed.server}: connection refused")
        if parsed.ca_pem and parsed.ca_pem != api.ca.pem:
            raise UnreachableError(f"{parsed.server}: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                                   "unable to get local issuer certificate")
        return api

    def contested(self, server: str) -> str | None:
        """Why a client cannot know which control plane answers at `server`, or None.

        MetalLB's L2 speaker answers every ARP request for an address its own cluster announces, whoever else
        answers too (metallb v0.15.3 internal/layer2/arp.go processRequest; leader election is among one
        cluster's speakers only), and a client keeps whichever reply came last. With two clusters on one network
        announcing the same address, which API server a connection reaches is a race: the simulator refuses to
        pick one."""
        shadow = self.shadowed.get(server)
        current = self.tenant_hosts.get(server)
        if shadow is None or current is None:
            return None
        old_tenant, old_host = shadow
        if not (old_host.reachable and old_host.server in self.apis):
            return None
        return (f"{server}: two clusters announce {old_tenant.address} ({old_host.name} and {current.name}); which "
                "one answers is an ARP race (MetalLB L2 answers for every address its cluster owns)")

    def end_of_operation(self) -> None:
        """Time passes between two operations: every control plane has finished its RBAC by then, and Docker has
        restarted every container waiting for a restart."""
        for tenant in self.tenants.values():
            tenant.rbac_ready = True
        self.docker.retry_restarts()
        for cluster in self.kind.values():
            _kamaji_settles(cluster.api)
        if self.adopted is not None:
            _kamaji_settles(self.adopted)
        from tests.support.sim import systems

        systems.time_passed(self, settled=True)

    def wait_for_tenant(self, server: str) -> None:
        """Something in the program waited (retried) on this tenant: the soot controller caught up."""
        tenant = self.tenants.get(server)
        if tenant is not None:
            tenant.rbac_ready = True

    # ---- management clusters --------------------------------------------- #

    def _new_api(self, name: str, server: str, endpoint: tuple[str, int] | None = None) -> KubeApi:
        """An API server at `server`; in-cluster clients reach it at `endpoint` (default: the server's address)."""
        api = KubeApi(name=name, server=server, ca=pki.new_ca(name), world=self)
        for namespace in ("default", "kube-system", "kube-public", "kube-node-lease"):
            api.ensure_namespace(namespace)
        if endpoint is None:
            host, _, port = server.removeprefix("https://").rpartition(":")
            endpoint = (host.strip("[]"), int(port))
        set_api_endpoint(api, *endpoint)
        self.apis[server] = api
        return api

    def create_kind_cluster(self, name: str, config: dict[str, Any]) -> KindCluster:
        if "kind" not in self.docker.networks:
            # kind v0.31 pkg/cluster/internal/providers/docker/network.go: IPv6 ULA plus a docker-chosen IPv4.
            self.docker.networks["kind"] = [KIND_SUBNET_V6, KIND_SUBNET_V4]
        self._port += 1
        # The host reaches the API server through a published port; pods reach the node's address on the network.
        api = self._new_api(f"kind-{name}", f"https://127.0.0.1:{self._port}", (KIND_CONTROL_PLANE_IP, 6443))
        api.ensure_namespace("local-path-storage")
        node = config["nodes"][0]
        image = node.get("image", "kindest/node:v1.35.0")
        api.put({"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": f"{name}-control-plane", "labels": dict(node.get("labels") or {})},
                 "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        self.docker.containers[f"{name}-control-plane"] = Container(
            name=f"{name}-control-plane", image=image, network="kind",
            labels={"io.x-k8s.kind.cluster": name, "io.x-k8s.kind.role": "control-plane"}, privileged=True,
            # kind pkg/cluster/internal/providers/docker/provision.go commonArgs: "--restart=on-failure:1", "to
            # restart on host / dockerd reboot" and for no other reason.
            restart="on-failure",
        )
        cluster = KindCluster(name=name, api=api, node_image=image, config=config)
        self.kind[name] = cluster
        self.log(f"kind cluster {name} created")
        return cluster

    def restart_docker(self, *, reboot: bool = False) -> None:
        """The Docker daemon restarts, or the whole host reboots (`reboot=True`).

        Which containers run again: moby restartmanager/restartmanager.go ShouldRestart, asked by the daemon's
        restore for every container that was running (daemon/daemon.go restore): `always` and `unless-stopped`
        restart; `on-failure[:N]` restarts because the daemon stopped the container with a non-zero status and
        its retry count starts again at daemon start (the reason kind gives for its nodes' `on-failure:1`,
        provision.go); `no` stays stopped. A kind node that runs again brings its cluster back (kind's entrypoint
        fixes its own address in the manifests, images/base/files/usr/local/bin/entrypoint
        enable_network_magic), and with it the control planes Kamaji runs there. Container file systems and
        volumes persist; on a reboot, a node's tmpfs mounts (/run and /tmp, kind's `--tmpfs`) come back empty.
        """
        from tests.support.sim import systems

        for container in self.docker.containers.values():
            container.running = container.running and _restarts_with_the_daemon(container.restart)
            machine = self.machines.get(container.name)
            if reboot and machine is not None:
                machine.files = {path: text for path, text in machine.files.items()
                                 if not path.startswith(("/run/", "/tmp/"))}
        for name, cluster in self.kind.items():
            node = self.docker.containers.get(f"{name}-control-plane")
            cluster.api.reachable = node is not None and node.running
            for server, host in self.tenant_hosts.items():
                if host is cluster.api and server in self.tenants:
                    self.tenants[server].api.reachable = cluster.api.reachable
        for tenant in self.tenants.values():
            systems.refresh_nodes(self, tenant.api)
        self.log("docker daemon restarted" + (" (host reboot)" if reboot else ""))

    def delete_kind_cluster(self, name: str) -> None:
        cluster = self.kind.pop(name, None)
        if cluster is None:
            return
        cluster.api.reachable = False
        self.apis.pop(cluster.api.server, None)
        self.docker.containers.pop(f"{name}-control-plane", None)
        self.machines.pop(f"{name}-control-plane", None)
        # Everything Kamaji hosted dies with the cluster; an address it shared is the other cluster's alone again.
        for server in [s for s, (_, host) in self.shadowed.items() if host is cluster.api]:
            self.shadowed.pop(server)
        for server in [s for s, host in self.tenant_hosts.items() if host is cluster.api]:
            self.drop_tenant(server)
        self.log(f"kind cluster {name} deleted")

    def adopt_cluster(self, name: str = "prod-mgmt") -> str:
        """An existing management cluster (adopt mode); returns its admin kubeconfig."""
        api = self._new_api(name, "https://10.20.0.10:6443")
        self.adopted = api
        return pki.kubeconfig(api.server, api.ca, "ops-admin", (SYSTEM_MASTERS,), name)

    def kind_admin_kubeconfig(self, name: str) -> str:
        """What `kind get kubeconfig` prints: the same admin credential every time (kind keeps it on the node)."""
        cluster = self.kind[name]
        if not hasattr(cluster, "admin_kubeconfig"):
            cluster.admin_kubeconfig = pki.kubeconfig(  # type: ignore[attr-defined]
                cluster.api.server, cluster.api.ca, "kubernetes-admin", (SYSTEM_MASTERS,), f"kind-{name}")
        return cluster.admin_kubeconfig  # type: ignore[attr-defined]

    def drop_tenant(self, server: str) -> None:
        self.tenant_hosts.pop(server, None)
        tenant = self.tenants.pop(server, None)
        if tenant is not None:
            tenant.api.reachable = False
            self.apis.pop(server, None)
            self.log(f"control plane {tenant.namespace}/{tenant.name} at {tenant.address} is gone")
        shadow = self.shadowed.pop(server, None)
        if shadow is not None:
            # The other cluster still announces the address: it alone answers there now.
            self.tenants[server], self.tenant_hosts[server] = shadow
            self.apis[server] = shadow[0].api

    # ---- SSH machines ----------------------------------------------------- #

    def add_ssh_host(self, host: str, host_key: str, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION, *,
                     address: str | None = None) -> SshHost:
        """A server reachable over SSH at `host`, set up as docs/real-clusters.md asks: kubeadm and kubelet of
        `kubernetes_version` installed (the default tenant version unless a scenario says otherwise). Its network: one
        interface, `eth0`, with the default route, at `address` -- by default `host` itself when that is an IPv4
        address; a server known by a name and given no address has no network the simulator knows (a scenario then
        sets Machine.interfaces and its routes)."""
        machine = Machine(name=host, kubelet_version=kubernetes_version, kubeadm_version=kubernetes_version)
        if address is None:
            try:
                address = str(ipaddress.IPv4Address(host))
            except ValueError:
                address = None
        if address is not None:
            machine.interfaces, machine.default_interface = {"eth0": address}, "eth0"
        entry = SshHost(host=host, host_key=host_key, machine=machine)
        self.ssh[host] = entry
        return entry

    # ---- introspection for scenarios ------------------------------------- #

    def tenant_api(self, namespace: str, name: str | None = None) -> KubeApi | None:
        for tenant in self.tenants.values():
            if tenant.namespace == namespace and (name is None or tenant.name == name):
                return tenant.api
        return None

    def pull_source(self, node: str, registry: str) -> str:
        """Where `node`'s containerd gets an image of `registry` from: each `[host]` of its
        /etc/containerd/certs.d/<registry>/hosts.toml in order, then `server` (containerd
        core/remotes/docker/config/hosts.go puts the server last; core/remotes/docker/resolver.go logs "trying
        next host" on a connection error or a status above 399); without the file, the registry itself. A cache
        answers while its process runs (a name without a dot is a container, which only Docker's embedded DNS
        resolves); the registry answers when the host reaches it directly (nodes are given no proxy variables
        here). UnreachableError when no host answers."""
        machine = self.machines.get(node)
        text = (machine.files if machine else {}).get(f"/etc/containerd/certs.d/{registry}/hosts.toml")
        default = "https://registry-1.docker.io" if registry == "docker.io" else f"https://{registry}"
        config = tomllib.loads(text) if text else {}
        tried = []
        for url in [*(config.get("host") or {}), config.get("server") or default]:
            tried.append(url)
            host = urlsplit(url).hostname or ""
            if "." not in host:  # a container name, which only Docker's embedded DNS resolves
                cache = self.docker.containers.get(host)
                if cache is not None and cache.up:
                    return url
            elif self.docker.reaches(url, {}):
                return url
        raise UnreachableError(f"{node}: failed to resolve an image of {registry}: tried {', '.join(tried)}")

    def leftovers(self) -> list[str]:
        """What would still be on the machine after a complete tear-down: containers, kind clusters, control
        planes, joined SSH machines and our files on them, and the Docker networks, images and volumes that
        were not there before the scenario (`mark_preexisting`), sorted within each kind."""
        left = [f"container {name}" for name in self.docker.containers]
        for kind, names in (("network", self.docker.networks), ("image", self.docker.images),
                            ("volume", self.docker.volumes)):
            left += [f"{kind} {name}" for name in sorted(names) if name not in self.preexisting[kind]]
        left += [f"kind cluster {name}" for name in self.kind]
        left += [f"control plane at {t.address}" for t in self.tenants.values()]
        for host in self.ssh.values():
            if host.machine.kubelet_conf:
                left.append(f"machine {host.host} still joined to {host.machine.kubelet_conf}")
            left += [f"machine {host.host}: {path}" for path, content in host.machine.files.items()
                     if content.startswith(MIRROR_MARKER) or TENANT_TRACES.get(path) == content]
        return left


# What a tenant leaves on an SSH machine it ran on, beyond kubeadm's own files: the two files node-join.sh
# persists, Calico's CNI configuration and state, and the cali-/KUBE- iptables chains (as one pseudo-path).
TENANT_TRACES = {
    "/etc/sysctl.d/99-gpu-tenancy.conf": "# gpu-tenancy worker join: kube-proxy and the pod network need IPv4 "
                                         "forwarding.\nnet.ipv4.ip_forward = 1",
    "/etc/modules-load.d/gpu-tenancy.conf": "# gpu-tenancy worker join: bridged pod traffic must traverse "
                                            "iptables.\nbr_netfilter",
    "/etc/cni/net.d/10-calico.conflist": "calico network configuration",
    "/var/lib/calico/nodename": "calico node name",
    "iptables: cali-* and KUBE-* chains": "calico and kube-proxy rules",
}


# The first line of every hosts.toml components/worker/scripts/node-mirrors.sh writes.
MIRROR_MARKER = "# gpu-tenancy image mirror: written by node-mirrors.sh, removed with it"


def set_api_endpoint(api: KubeApi, address: str, port: int) -> None:
    """The `default/kubernetes` Service and the EndpointSlice the API server keeps for itself (kubernetes
    pkg/controlplane/reconcilers/endpointsadapter.go: named like the Service, IPv4, port `https`)."""
    api.put({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default"},
             "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                      "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]}})
    api.put({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
             "metadata": {"name": "kubernetes", "namespace": "default",
                          "labels": {"kubernetes.io/service-name": "kubernetes"}},
             "addressType": "IPv4",
             "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
             "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})


def _restarts_with_the_daemon(policy: str) -> bool:
    """moby restartmanager.go ShouldRestart for a container the daemon itself stopped (see World.restart_docker)."""
    return policy.split(":", 1)[0] in ("always", "unless-stopped", "on-failure")


def _kamaji_settles(api: KubeApi) -> None:
    state = getattr(api, "kamaji", None)
    if state is not None:
        state.webhook_ready = state.running


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)
