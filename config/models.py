"""Pydantic models of the `gpu-tenancy` stack configuration.

The camelCase key names are the public interface (what users write in
`Pulumi.<stack>.yaml`); Python attributes are snake_case. Every model forbids
unknown keys, so a typo such as `podCIDR` is an error instead of a silently
ignored setting. Checks that span several objects (overlaps, uniqueness, the
smoke test fitting somewhere) live in `config.validate`, which reports every
problem at once with its full key path.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from naming import CERT_MANAGER_NAMESPACE, DEFAULT_GPU_POLICY, DEFAULT_NODE_POLICY, KAMAJI_NAMESPACE, METALLB_NAMESPACE

from .kubeconfig import KubeconfigError, parse

# Kamaji builds tenant kubelet/kubeadm config with Kubernetes 1.36 libraries:
# kubelets older than 1.35 refuse it (clastix/kamaji issue 1062), and its webhook
# rejects versions above 1.36.x (internal/webhook/handlers/tcp_version.go,
# upgrade.KubeadmVersion). Worker images are kindest/node:<version>.
MIN_KUBERNETES_VERSION = (1, 35, 0)
MAX_KUBERNETES_VERSION_EXCLUSIVE = (1, 37, 0)
DEFAULT_KUBERNETES_VERSION = "v1.35.0"

# kindest/node images whose digests are published for a kind release, by Kubernetes version: a worker
# container runs the image of its tenant's version (or `tenants[].nodeImage`). kind v0.31.0
# pkg/apis/config/defaults/image.go (v1.35.0), kind v0.32.0 image.go (v1.36.1), and kind v0.32.0's release
# list as kubernetes-sigs/cluster-api test/infrastructure/kind/mapper.go records it (v1.35.5).
KIND_NODE_IMAGES = {
    "v1.35.0": "kindest/node:v1.35.0@sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f",
    "v1.35.5": "kindest/node:v1.35.5@sha256:ce977ae6d65918d0b58a5f8b5e940429c2ce42fa3a5619ec2bbc60b949c0ac95",
    "v1.36.1": "kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5",
}

# Derived names: the tenant namespace and TCP are `<tenant>`, worker containers
# and Nodes are `<tenant>-<worker>` (a DNS label, at most 63 characters), and
# Kamaji derives Secret/Service names from the TCP name.
MAX_TENANT_NAME_LENGTH = 30
MAX_WORKER_NAME_LENGTH = 63

# Namespaces that already exist (or that this program creates) on the
# management cluster; a tenant named like one would collide with it.
RESERVED_TENANT_NAMES = frozenset(
    {"default", CERT_MANAGER_NAMESPACE, METALLB_NAMESPACE, KAMAJI_NAMESPACE, "local-path-storage"}
)

# HAMi's mock device plugin registers one fake device per MiB of gpumem
# (Project-HAMi/mock-device-plugin internal/pkg/mock/server.go ListAndWatch); past
# ~100000 per node the list exceeds kubelet's 4 MiB gRPC message limit.
MAX_SIMULATED_MEMORY_MIB_PER_WORKER = 100_000

# k8s.io/apimachinery pkg/util/validation/validation.go dns1035LabelFmt / dns1123LabelFmt; matched whole
# (fullmatch: `$` would also accept a trailing newline) and ASCII only.
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
VERSION_PATTERN = re.compile(r"v([0-9]+)\.([0-9]+)\.([0-9]+)")
# Card ids and models are written into HAMi annotations whose encoding uses
# `,` `:` and `;` as separators (`<uuid>,NVIDIA,<mem>,<cores>:;`).
CARD_UUID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
HAMI_SEPARATORS = ",:;"


class StrictModel(BaseModel):
    """Base: camelCase keys only (the public interface; `pod_cidr` is an unknown key like any other typo)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=False,
        extra="forbid",
        frozen=True,
    )


def _dns1035_label(value: str) -> str:
    if not DNS1035_LABEL.fullmatch(value):
        raise ValueError(
            "must be a DNS-1035 label: lower-case letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return value


def _dns1123_label(value: str) -> str:
    if not DNS1123_LABEL.fullmatch(value):
        raise ValueError(
            "must be a DNS label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return value


def parse_version(value: str) -> tuple[int, int, int]:
    match = VERSION_PATTERN.fullmatch(value)
    if not match:
        raise ValueError("must look like v1.35.0")
    return tuple(int(part) for part in match.groups())  # type: ignore[return-value]


def _kubernetes_version(value: str) -> str:
    version = parse_version(value)
    if not MIN_KUBERNETES_VERSION <= version < MAX_KUBERNETES_VERSION_EXCLUSIVE:
        raise ValueError(
            "must be >= v1.35.0 and < v1.37.0: Kamaji generates kubelet and kubeadm "
            "configuration that older kubelets refuse, and its webhook rejects "
            "versions newer than v1.36.x (use e.g. v1.35.0)"
        )
    return value


def _ipv4_network(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as error:
        raise ValueError(
            f"must be an IPv4 network in CIDR form such as 10.96.0.0/16 ({error})"
        ) from None
    if network.version != 4:
        raise ValueError("must be an IPv4 network such as 10.96.0.0/16 (IPv6 is not supported)")
    return str(network)


def _service_cidr(value: str) -> str:
    value = _ipv4_network(value)
    prefix = ipaddress.ip_network(value).prefixlen
    # kube-apiserver refuses service ranges larger than /12; the DNS service
    # takes the 10th address, so the range needs at least 16 addresses.
    if not 12 <= prefix <= 28:
        raise ValueError("must have a prefix length between /12 and /28 (e.g. 10.96.0.0/16)")
    return value


def _pod_cidr(value: str) -> str:
    value = _ipv4_network(value)
    prefix = ipaddress.ip_network(value).prefixlen
    # The tenant controller manager hands each node a /24 out of this range.
    if not 8 <= prefix <= 24:
        raise ValueError(
            "must have a prefix length between /8 and /24: every node gets a /24 "
            "from it (e.g. 10.244.0.0/16)"
        )
    return value


def _hami_safe_text(value: str) -> str:
    bad = sorted({char for char in value if char in HAMI_SEPARATORS})
    if bad:
        raise ValueError(
            f"must not contain {' '.join(repr(c) for c in bad)}: HAMi uses ',', ':' "
            "and ';' as separators in its device annotations"
        )
    if not value.strip() or any(not char.isprintable() for char in value):
        raise ValueError("must be non-empty printable text")
    return value


def _private_key(value: str) -> str:
    # Never echo the value: it is a secret.
    text = value.strip()
    if not (text.startswith("-----BEGIN ") and "PRIVATE KEY-----" in text and text.endswith("-----")):
        raise ValueError("must be a PEM private key (-----BEGIN ... PRIVATE KEY----- ... -----END ...-----)")
    return value


def _kubeconfig(value: str) -> str:
    # Never echo the value: it holds credentials.
    try:
        document = parse(value)
    except KubeconfigError:
        document = {}
    if not document.get("clusters") or not document.get("users"):
        raise ValueError("must be a kubeconfig document (YAML with clusters, users and contexts)")
    return value


def _address_pool(value: str) -> str:
    """A MetalLB pool: an IPv4 CIDR or a `<first>-<last>` IPv4 range."""
    first, dash, last = value.partition("-")
    try:
        if not dash:
            ipaddress.IPv4Network(value, strict=True)
            return value
        start, end = ipaddress.IPv4Address(first.strip()), ipaddress.IPv4Address(last.strip())
    except ValueError:
        raise ValueError(
            "must be an IPv4 range like 192.168.10.200-192.168.10.250 or a CIDR like 192.168.10.192/27"
        ) from None
    if end < start:
        raise ValueError("range ends before it starts")
    return f"{start}-{end}"


def _card_uuid(value: str) -> str:
    _hami_safe_text(value)
    if not CARD_UUID_PATTERN.fullmatch(value):
        raise ValueError(
            "must start with a letter or digit and contain only letters, digits, "
            "'.', '_' and '-' (e.g. GPU-MOCK-A0)"
        )
    return value


TenantName = Annotated[
    str,
    Field(min_length=1, max_length=MAX_TENANT_NAME_LENGTH),
    AfterValidator(_dns1035_label),
]
WorkerName = Annotated[
    str,
    Field(min_length=1, max_length=MAX_WORKER_NAME_LENGTH),
    AfterValidator(_dns1123_label),
]
KubernetesVersion = Annotated[str, AfterValidator(_kubernetes_version)]
ServiceCidr = Annotated[str, AfterValidator(_service_cidr)]
PodCidr = Annotated[str, AfterValidator(_pod_cidr)]
CardModel = Annotated[str, Field(max_length=64), AfterValidator(_hami_safe_text)]
CardUuid = Annotated[str, Field(max_length=64), AfterValidator(_card_uuid)]


class GpuCard(StrictModel):
    """One simulated (or, in nvidia mode, expected real) GPU card on a worker."""

    uuid: CardUuid
    model: CardModel
    memory_mib: int = Field(ge=1, alias="memoryMiB")
    # Percent of the card's compute; 100 is the whole card.
    cores: int = Field(default=100, ge=1, le=100)
    # How many containers may share the card (HAMi's deviceSplitCount).
    slots: int = Field(default=10, ge=1, le=1000)


# Ed25519 or ECDSA only: pulumi-command offers exactly the pinned key's algorithm, and for RSA that is the
# SHA-1 `ssh-rsa` which OpenSSH >= 8.8 servers no longer accept.
HOST_KEY_PATTERN = r"^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+$"


def _host_key_blob(value: str) -> str:
    """The key must be what `ssh-keyscan` prints: base64 of the SSH wire-format blob, which names its own type
    (RFC 4253 section 6.6: string type, then the key); an example or truncated key is refused here, not at join."""
    import base64
    import binascii

    key_type, _, encoded = value.partition(" ")
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64: paste the key exactly as ssh-keyscan prints it") from None
    length = int.from_bytes(blob[:4], "big") if len(blob) >= 4 else -1
    named = blob[4:4 + length].decode("ascii", "replace") if length > 0 else ""
    if named != key_type:
        raise ValueError(f"is not an {key_type} public key (its data names {named or 'nothing'!r}): paste the key "
                         "exactly as ssh-keyscan prints it")
    if key_type == "ssh-ed25519" and len(blob) != 4 + 11 + 4 + 32:
        raise ValueError("is not a whole ssh-ed25519 public key (32 bytes): paste it exactly as ssh-keyscan prints it")
    return value


class SshConnection(StrictModel):
    """How to reach a real machine that joins as a worker (instead of a local kindest/node container)."""

    host: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]*$")]
    user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] = "root"
    port: int = Field(default=22, ge=1, le=65535)
    # Must be set with `pulumi config set --secret`; checked in config.validate.
    private_key: Annotated[str, AfterValidator(_private_key)] = Field(alias="privateKey", repr=False)
    # The server's public host key (`ssh-keyscan -t ed25519 <host>`, without the host name): a server presenting
    # another key is refused before it receives anything. Required (config.validate says how to get it).
    host_key: Annotated[str, Field(pattern=HOST_KEY_PATTERN), AfterValidator(_host_key_blob)] | None = None


class Worker(StrictModel):
    name: WorkerName
    gpus: list[GpuCard] = Field(default_factory=list)
    ssh: SshConnection | None = None


# How many objects of each kind the restricted tenant user (the built-in `edit` role) may keep in each workload
# namespace: an object-count ResourceQuota (`count/<resource>.<group>`), so that one user cannot fill the etcd the
# tenant's control plane writes to (by default Kamaji's shared one, with a 1 GiB space quota). The kinds are every
# namespaced resource `edit` may create (kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go
# system:aggregate-to-edit; components.tenant.spec.counted_kinds). `pods` counts terminated pods too: they stay in
# etcd until garbage-collected; `events` counts the cluster's own events in the namespace too (beyond it they are
# dropped, the workloads keep running).
DEFAULT_OBJECT_COUNTS: dict[str, int] = {
    "pods": 50,
    "services": 10,
    "secrets": 20,
    "configmaps": 20,
    "persistentvolumeclaims": 10,
    "replicationcontrollers": 5,
    "serviceaccounts": 10,
    "deployments.apps": 10,
    # A Deployment keeps 10 old ReplicaSets by default (revisionHistoryLimit).
    "replicasets.apps": 50,
    "statefulsets.apps": 5,
    "daemonsets.apps": 5,
    "jobs.batch": 20,
    "cronjobs.batch": 5,
    "horizontalpodautoscalers.autoscaling": 5,
    "ingresses.networking.k8s.io": 5,
    "networkpolicies.networking.k8s.io": 10,
    "poddisruptionbudgets.policy": 5,
    "events": 80,
    "leases.coordination.k8s.io": 10,
}


class Quota(StrictModel):
    """Quotas of each of the tenant's workload namespaces (`namespaces`): GPU ResourceQuotas HAMi enforces, and
    object counts (`objects`, over DEFAULT_OBJECT_COUNTS) kube-apiserver enforces."""

    gpus: int | None = Field(default=None, ge=0)
    memory_mib: int | None = Field(default=None, ge=0, alias="memoryMiB")
    cores: int | None = Field(default=None, ge=0)
    # Per kind, replacing that kind's default; a kind not listed keeps its default.
    objects: dict[str, Annotated[int, Field(ge=0)]] | None = None

    @field_validator("objects")
    @classmethod
    def _known_kinds(cls, value: dict[str, int] | None) -> dict[str, int] | None:
        unknown = sorted(set(value or {}) - set(DEFAULT_OBJECT_COUNTS))
        if unknown:
            raise ValueError(f"unknown kind {', '.join(map(repr, unknown))}: use one of "
                             f"{', '.join(DEFAULT_OBJECT_COUNTS)} (the resource names ResourceQuota counts)")
        return value


def object_counts(quota: Quota | None) -> dict[str, int]:
    """The object-count limits of one workload namespace: the defaults, with `quota.objects` over them."""
    return {**DEFAULT_OBJECT_COUNTS, **((quota.objects or {}) if quota else {})}


class DataStore(StrictModel):
    """Where a tenant's control plane keeps its state: Kamaji's shared etcd, or an etcd of its own."""

    # A dedicated etcd (a kamaji-etcd release in the tenant's management namespace and its own DataStore): no other
    # tenant can fill it or read it. Off: the shared DataStore `default` that every such tenant uses.
    dedicated: bool = False
    replicas: Literal[1, 3] = 1
    storage_size: Annotated[str, Field(pattern=r"^[1-9][0-9]*(Mi|Gi)$")] = "2Gi"
    # etcd's space quota; keep it below the volume size.
    quota_mib: int = Field(default=1024, ge=64, alias="quotaMiB")


NodeImage = Annotated[str, Field(pattern=r"^[^\s:@]+(:[A-Za-z0-9._-]+)?(@sha256:[0-9a-f]{64})?$")]


class Workload(StrictModel):
    """A GPU workload the tenant plans to run: `replicas` pods of one container each, planned at preview time the way
    HAMi's scheduler would place them (components/gpu/capacity.py). Nothing is deployed from it."""

    name: Annotated[str, Field(min_length=1, max_length=63), AfterValidator(_dns1123_label)]
    replicas: int = Field(default=1, ge=1, le=1000)
    # nvidia.com/gpu: cards per pod. 1 is HAMi's defaultGPUNum (Project-HAMi/HAMi v2.10.0 charts/hami/values.yaml
    # devices.nvidia / pkg/device/nvidia/device.go mutateContainerResource).
    gpus: int = Field(default=1, ge=1, le=64)
    # nvidia.com/gpumem (MiB per card) or nvidia.com/gpumem-percentage; neither: the whole card's memory
    # (defaultMemory 0 -> 100 percent, pkg/device/nvidia/device.go GenerateResourceRequests).
    memory_mib: int | None = Field(default=None, ge=1, alias="memoryMiB")
    memory_percent: int | None = Field(default=None, ge=1, le=100)
    # nvidia.com/gpucores, percent of each card; unset: 100 (the card exclusively) when the whole memory is asked
    # for, else defaultCores 0 (pkg/device/nvidia/device.go defaultExclusiveCoreIfNeeded).
    cores: int | None = Field(default=None, ge=0, le=100)
    # One of tenants[].namespaces (default: the first); its quota applies.
    namespace: Annotated[str, Field(max_length=63), AfterValidator(_dns1123_label)] | None = None


class Scheduling(StrictModel):
    """HAMi's scheduler policies of the tenant (charts/hami values.yaml scheduler.defaultSchedulerPolicy)."""

    # Which node a pod goes to: binpack the fullest that fits, spread the emptiest.
    node_policy: Literal["binpack", "spread"] = DEFAULT_NODE_POLICY
    # Which cards of that node: spread the emptiest, binpack the fullest.
    gpu_policy: Literal["spread", "binpack"] = DEFAULT_GPU_POLICY


class Tenant(StrictModel):
    name: TenantName
    kubernetes_version: KubernetesVersion = DEFAULT_KUBERNETES_VERSION
    service_cidr: ServiceCidr | None = None
    pod_cidr: PodCidr | None = None
    workers: list[Worker] = Field(min_length=1)
    quota: Quota | None = None
    # Namespaces the tenant's users work in: the restricted credential may edit them, Pod Security `baseline`
    # is enforced there, and `quota` applies to each.
    namespaces: list[Annotated[str, Field(max_length=63), AfterValidator(_dns1123_label)]] = Field(
        default_factory=lambda: ["default"], min_length=1
    )
    data_store: DataStore = Field(default_factory=DataStore)
    # IPv4 networks only this tenant's workers connect from: its control plane admits these besides
    # management.workerCidrs (which every tenant admits), management.operatorCidrs and, in the lab, the kind network.
    # Put each team's servers here, and only shared networks (the management nodes) in management.workerCidrs, and
    # one team's servers cannot even open a connection to another team's API server.
    worker_cidrs: list[Annotated[str, AfterValidator(_ipv4_network)]] = Field(default_factory=list)
    # The kindest/node image of this tenant's container workers (default: the image published for
    # kubernetesVersion, pinned by digest).
    node_image: NodeImage | None = None
    # GPU workloads to plan (not deployed): `pulumi preview` shows where each pod would land (output gpuPlan).
    workloads: list[Workload] = Field(default_factory=list)
    scheduling: Scheduling = Field(default_factory=Scheduling)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_TENANT_NAMES or value.startswith("kube-"):
            raise ValueError(
                "is a namespace the management cluster already uses; "
                "pick another name (e.g. team-a)"
            )
        return value


# A registry host as image references name it (`docker.io`, `registry.example:5000`) and a mirror's base URL.
REGISTRY_HOST_PATTERN = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?$"
MIRROR_URL_PATTERN = r"^https?://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$"
RegistryHost = Annotated[str, Field(pattern=REGISTRY_HOST_PATTERN, max_length=253)]
MirrorUrl = Annotated[str, Field(pattern=MIRROR_URL_PATTERN, max_length=2000)]


class DockerHubCredentials(StrictModel):
    """A Docker Hub account for the docker.io mirror (its pull limit instead of the anonymous one)."""

    username: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]{1,63}$")]
    # A personal access token (read-only is enough). Must be set with `pulumi config set --secret`.
    token: str = Field(min_length=1, repr=False)


# Networks a tenant's API server admits at most (management.workerCidrs, operatorCidrs and the tenant's workerCidrs,
# plus the kind network in the lab): Kamaji's CRD limit on loadBalancerSourceRanges
# (clastix/kamaji api/v1alpha1/tenantcontrolplane_types.go: +kubebuilder:validation:MaxItems=16).
MAX_SOURCE_RANGES = 16


class Management(StrictModel):
    # The kind cluster this program creates (not used with `kubeconfig`).
    cluster_name: Annotated[
        str, Field(min_length=1, max_length=40), AfterValidator(_dns1123_label)
    ] = "gpu-tenancy"
    # The newest 1.35 patch kind publishes (v0.32.0's release list), pinned by digest; kind v0.31.0 and v0.32.0
    # both write it kubeadm v1beta3 (pkg/cluster/internal/kubeadm/config.go).
    node_image: NodeImage = KIND_NODE_IMAGES["v1.35.5"]
    # An existing cluster to adopt instead of creating one (a secret config value).
    kubeconfig: Annotated[str, AfterValidator(_kubeconfig)] | None = Field(default=None, repr=False)
    # MetalLB address pool; required for MetalLB on an existing cluster, carved from the kind network otherwise.
    load_balancer_pool: Annotated[str, AfterValidator(_address_pool)] | None = None
    # Networks tenant API servers accept connections from (workers, load-balancer source NAT), besides the
    # kind network in the lab.
    worker_cidrs: list[Annotated[str, AfterValidator(_ipv4_network)]] = Field(default_factory=list)
    # Where operators (and the Pulumi host, if it is elsewhere) reach tenant API servers from: added to every
    # tenant's loadBalancerSourceRanges next to the worker networks.
    operator_cidrs: list[Annotated[str, AfterValidator(_ipv4_network)]] = Field(default_factory=list)
    # 0.0.0.0/0 in workerCidrs/operatorCidrs opens every tenant API to anyone who can reach it: refused unless set.
    allow_any_source: bool = False
    # An exec credential plugin in `kubeconfig` runs a command on the Pulumi host: refused unless set (some
    # managed clusters need one).
    allow_exec_credentials: bool = False
    # Kind mode: a pull-through cache per upstream registry on the kind network, used by the kind node and every
    # container worker (components/management/image_cache.py). Not available with `kubeconfig` (see registryMirrors).
    image_mirror: bool = True
    # Docker Hub account for the docker.io cache (secret); without it the cache pulls anonymously.
    docker_hub: DockerHubCredentials | None = None
    # Existing mirrors SSH workers should pull through, by registry host: {"docker.io": "https://mirror.corp"}.
    registry_mirrors: dict[RegistryHost, MirrorUrl] = Field(default_factory=dict)
    # With registryMirrors: a server's containerd 2.x that does not read /etc/containerd/certs.d gets a drop-in file
    # that makes it, and a restart (components/worker/scripts/node-mirrors.sh). Off: such a server is refused with
    # the line to change.
    configure_containerd: bool = False
    # A management.nodeImage or tenants[].nodeImage without @sha256:<digest> is refused unless set (an image built
    # locally has no registry digest).
    allow_unpinned_node_images: bool = False
    # A plain-HTTP mirror in registryMirrors is refused unless set: anyone on the path to it can substitute the
    # content. Even then it serves blobs only (by digest); tags are resolved at the registry over HTTPS.
    allow_http_mirrors: bool = False

    @property
    def adopts_existing_cluster(self) -> bool:
        return self.kubeconfig is not None

    @property
    def runs_image_mirror(self) -> bool:
        """Whether this stack runs the pull-through cache (kind mode, not switched off)."""
        return self.image_mirror and not self.adopts_existing_cluster


# The tenant namespace the smoke-test pod runs in: the program's own, never a workload namespace, so no user quota
# is spent on the proof and no quota of the users' applies to it.
SMOKE_TEST_NAMESPACE = "gpu-tenancy-smoke"


class SmokeTest(StrictModel):
    """The fractional GPU request `pulumi up` uses to prove each tenant works."""

    enabled: bool = True
    gpus: int = Field(default=1, ge=1)
    memory_mib: int = Field(default=3000, ge=1, alias="memoryMiB")
    cores: int = Field(default=30, ge=1, le=100)

    def fits(self, worker: Worker) -> bool:
        """Whether the request fits on `worker`: `gpus` of its cards, each with enough memory and cores."""
        return sum(card.memory_mib >= self.memory_mib and card.cores >= self.cores for card in worker.gpus) >= self.gpus

    def worker_in(self, tenant: Tenant) -> Worker | None:
        """The worker the smoke pod is pinned to: the first, in config order, the request fits on. Pinned, so that
        adding a worker leaves the proof alone, and replacing this worker (which drops the pod with its Node)
        proves again."""
        return next((worker for worker in tenant.workers if self.fits(worker)), None)


class Versions(StrictModel):
    """Every chart, manifest and image version the program installs, in one place."""

    # jetstack/cert-manager; 1.20+ supports the Kubernetes 1.35 management cluster.
    cert_manager: str = "v1.21.1"
    # metallb/metallb chart, native L2 mode.
    metallb: str = "0.15.3"
    # clastix/kamaji image; the chart installed with it is charts/kamaji at the same tag, fetched and verified
    # by `make charts` (components/charts.json), because the published chart is a moving 0.0.0+latest.
    kamaji_image: str = "26.8.2-edge"
    # projectcalico tigera-operator + CRD charts; 3.32 is tested on Kubernetes 1.34-1.36.
    calico: str = "v3.32.1"
    # Project-HAMi/HAMi chart.
    hami: str = "2.10.0"
    # Project-HAMi/mock-device-plugin image; no tag newer than 1.0.1 exists, so the
    # device config it reads is rendered without the v2.9+ `vnpus` block, a map that
    # 1.0.1's internal/pkg/config/config.go cannot decode.
    mock_device_plugin: str = "1.0.1"


class Nvidia(StrictModel):
    """Options of gpuMode nvidia (real cards and HAMi's device plugin)."""

    # A RuntimeClass for GPU pods and the device plugin (HAMi chart devicePlugin.runtimeClassName, created with
    # handler `nvidia` by createRuntimeClass); unset: the nvidia runtime must be containerd's default.
    runtime_class_name: Annotated[str, Field(max_length=63), AfterValidator(_dns1123_label)] | None = None


class StackConfig(StrictModel):
    tenants: list[Tenant] = Field(min_length=1)
    management: Management = Field(default_factory=Management)
    gpu_mode: Literal["mock", "nvidia"] = "mock"
    nvidia: Nvidia | None = None
    smoke_test: SmokeTest = Field(default_factory=SmokeTest)
    versions: Versions = Field(default_factory=Versions)
    # A declared workload the plan cannot place (tenants[].workloads) stops `pulumi preview`/`up` before any resource
    # is created; false: a warning, and the stack deploys.
    strict_capacity: bool = False
