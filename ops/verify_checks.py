"""The checks behind `make verify`: plain functions over `components.kube.KubeClient`, one result per check.

Each result names the broken link and a likely fix. Objects are the API's JSON
(dicts); the only side effects are the probe pods (the GPU probe, and the network
probes that try to reach other tenants), which are always deleted again.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.utils import parse_quantity

from components import kube
from components.gpu.smoke import DEVICES_ALLOCATED_ANNOTATION, VGPU_NODE_ANNOTATION, hami_evidence
from components.gpu.values import HAMI_NAMESPACE, HAMI_POD_POLICY, HAMI_RELEASE, HAMI_WEBHOOK_IGNORE, HAMI_WEBHOOK_LABEL
from components.images import PAUSE_IMAGE
from components.kube import ApiError, Connect, Json, KubeClient
from components.management import image_cache
from components.management.kamaji import etcd_network_policy
from components.tenant.spec import (
    API_SERVER_PORT,
    ETCD_CHART,
    ETCD_SETUP_POLICY_NAME,
    ISOLATION_POLICY_NAME,
    KONNECTIVITY_PORT,
    NODE_LABEL_POLICY,
    OBJECT_QUOTA_NAME,
    SYSTEM_NODE_LABEL,
    TENANT_USER_ROLE,
    counted_kinds,
    dedicated_datastore_name,
    etcd_setup_pod_selector,
)
from config import Versions
from naming import (
    GPU_CORES_RESOURCE,
    GPU_MEMORY_RESOURCE,
    GPU_RESOURCE,
    KAMAJI_NAMESPACE,
    PART_OF,
    PART_OF_LABEL,
)

# Kamaji installs the agent under this name in the tenant's kube-system
# (clastix/kamaji internal/resources/konnectivity/constants.go: AgentName).
KONNECTIVITY_AGENT = "konnectivity-agent"
# HAMi release `hami` in kube-system: charts/hami/templates/_helpers.tpl names the
# scheduler `<fullname>-scheduler` and the webhook configuration `<fullname>-webhook`.
HAMI_SCHEDULER = f"{HAMI_RELEASE}-scheduler"
HAMI_WEBHOOK = f"{HAMI_RELEASE}-webhook"
HAMI_EXTENDER_CONTAINER = "vgpu-scheduler-extender"

PROBE_NAMESPACE = "default"
PROBE_PREFIX = "verify-gpu-"
# The smoke-test pod's image (pinned by digest), so every worker already has it; the mock plugin's Allocate
# injects nothing.
PROBE_IMAGE = PAUSE_IMAGE
PROBE_LABELS = {"app.kubernetes.io/name": "gpu-tenancy-verify", PART_OF_LABEL: PART_OF}
# pause's own non-root user: the probe passes the `restricted` Pod Security level.
PROBE_UID = 65535

# The network probe: a pod in one tenant that opens a TCP connection to another tenant's endpoints. Its image is
# calico-node's, which every tenant worker already holds (Calico's DaemonSet), and which has bash for /dev/tcp.
NETWORK_PROBE_PREFIX = "verify-net-"
NETWORK_PROBE_COMPONENT = "network-probe"
# What the probe's bash runs (its inputs in the environment), under shellcheck like the layers' scripts.
NETWORK_PROBE_SCRIPT = Path(__file__).resolve().parent / "scripts" / "network-probe.sh"
# activeDeadlineSeconds: the kubelet stops a connect that no one answers (a dropped SYN) after this long.
NETWORK_PROBE_DEADLINE = 10
# A probe still running this long after its deadline counts as unanswered (the kubelet has not acted yet).
NETWORK_PROBE_GRACE = 5
# nobody: the probe needs no privilege at all (it passes `restricted`, hence the tenants' `baseline`).
NETWORK_PROBE_UID = 65534
TARGET_ANNOTATION = "gpu-tenancy.io/probe-target"
# What bash prints when the name does not resolve (lib/sh/netopen.c: "host unknown" or gai_strerror's text).
UNRESOLVED_MESSAGES = ("host unknown", "name or service not known", "name does not resolve",
                       "temporary failure in name resolution", "no address associated")


# The management NetworkPolicies the program creates: each tenant namespace's fence
# (components/tenant/spec.py isolation_network_policy) and the shared etcd's (components/management/kamaji.py).
ETCD_POLICY = etcd_network_policy()
ETCD_POLICY_NAME = ETCD_POLICY["metadata"]["name"]
ETCD_POLICY_NAMESPACE = ETCD_POLICY["metadata"].get("namespace") or KAMAJI_NAMESPACE
ETCD_POD_SELECTOR = ETCD_POLICY["spec"]["podSelector"]

OK, FAIL, SKIP, NOT_ENFORCED = "OK", "FAIL", "SKIP", "NOT ENFORCED"

# HAMi v2.10.0 charts/hami/values.yaml scheduler.service: the node ports the chart publishes the scheduler extender
# (/filter, /bind, no authentication) and its metrics on by default. Probed on another tenant's nodes even when its
# Service is a ClusterIP, so a node port left over from an older release shows up too.
HAMI_DEFAULT_NODE_PORTS = (31998, 31993)
HAMI_SCHEDULER_SERVICE = HAMI_SCHEDULER
# The management cluster's CNI, by the DaemonSet that runs it (namespace, name) -> what enforces NetworkPolicy.
# kind v0.32.0 images/kindnetd/cmd/kindnetd/main.go builds kube-network-policies' dataplane with FailOpen: true:
# kube-network-policies (go.mod f67f0fb35e2b) pkg/dataplane/controller.go queues with the `bypass` flag and accepts
# a packet it cannot judge, so every packet passes while kindnetd is not reading the queue, or the queue is full.
KINDNET = ("kube-system", "kindnet")
CNI_DAEMONSETS = {KINDNET: "kindnetd", ("calico-system", "calico-node"): "Calico",
                  ("kube-system", "calico-node"): "Calico", ("kube-system", "cilium"): "Cilium"}
# Where the management-side probe runs: a namespace no NetworkPolicy of the program admits anything from.
ENFORCEMENT_PROBE_NAMESPACE = "default"


@dataclass(frozen=True)
class CheckResult:
    """One row of a verify table: OK (the check holds), FAIL (it does not, or could not be run: fails the run) or,
    with `skipped`, SKIP: nothing could be tried by construction (printed with the reason; does not fail the run,
    and is not counted as OK)."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    skipped: bool = False
    # NOT ENFORCED: what should hold held when tried, but the platform does not guarantee it (a fail-open CNI);
    # printed apart, does not fail the run, never counted as OK.
    unenforced: bool = False

    def __post_init__(self) -> None:
        if self.ok and (self.skipped or self.unenforced):
            raise ValueError(f"{self.name}: a check is either OK, skipped or not enforced")

    @property
    def status(self) -> str:
        return SKIP if self.skipped else NOT_ENFORCED if self.unenforced else OK if self.ok else FAIL

    @property
    def failed(self) -> bool:
        return self.status == FAIL


def skip(name: str, detail: str, fix: str = "") -> CheckResult:
    return CheckResult(name, False, detail, fix, skipped=True)


def not_enforced(name: str, detail: str, fix: str = "") -> CheckResult:
    return CheckResult(name, False, detail, fix, unenforced=True)


def calico_node_image(calico_version: str) -> str:
    return f"quay.io/calico/node:{calico_version}"


@dataclass(frozen=True)
class ProbeRequest:
    """The fractional GPU the probe pod asks for (the plan's smokeTest)."""

    gpus: int
    memory_mib: int
    cores: int


@dataclass(frozen=True)
class TenantTarget:
    """One tenant as the stack outputs describe it."""

    name: str
    namespace: str
    control_plane: str
    # The tenant's admin kubeconfig (tenantAdminKubeconfigs): nodes, kube-system, the GPU probe.
    kubeconfig: Json
    # node name -> planned cards, as in the plan output (uuid, memoryMiB, cores, slots, ...)
    workers: Mapping[str, list[Json]]
    # The restricted credential the tenant's users get (tenantKubeconfigs): the network probes run as it.
    user_kubeconfig: Json | None = None
    # host:port of the tenant's API server (outputs tenants.<name>.endpoint).
    endpoint: str | None = None
    # Who may connect to its API and Konnectivity server (loadBalancerSourceRanges); None: not in the outputs.
    source_ranges: tuple[str, ...] | None = None
    # Where its workers connect from: the shared outputs.workerNetworks plus its own plan workerCidrs.
    worker_networks: tuple[str, ...] = ()
    # The DataStore the outputs name (the TenantControlPlane's status wins when it answers).
    data_store: str | None = None
    # Its pod and service networks (plan): an address inside them is the tenant's own, not another cluster's.
    own_networks: tuple[str, ...] = ()
    # The cards of output gpuPlan (uuid -> node, slots, memoryMiB, cores, holders); empty: outputs of an older run.
    planned_cards: Mapping[str, Json] = field(default_factory=dict)


@dataclass(frozen=True)
class ImageCache:
    """One pull-through cache of the lab: what its URL names and the address Docker gave it on the kind network."""

    registry: str
    host: str
    port: int
    address: str | None = None


@dataclass(frozen=True)
class Platform:
    management_cluster: str
    gpu_mode: str
    probe: ProbeRequest
    tenants: Mapping[str, TenantTarget]
    # tenant -> what the stack outputs lack for it
    incomplete: Mapping[str, str] = field(default_factory=dict)
    network_probe_image: str = calico_node_image(Versions().calico)
    image_caches: tuple[ImageCache, ...] = ()


@dataclass(frozen=True)
class Waiting:
    """How long and how often the probe polls; tests pass a fake clock."""

    timeout: float = 60.0
    interval: float = 1.0
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _name(obj: Json) -> str:
    return _dig(obj, "metadata", "name") or "?"


# --- kubeconfigs ------------------------------------------------------------------------------


def api_server(kubeconfig: Json) -> str:
    """The API server the kubeconfig's current context names, for messages ("?" when it names none)."""
    return str(kube.current_context(kubeconfig).cluster.get("server") or "?")


def cross_tenant_kubeconfig(own: Json, other: Json) -> Json:
    """This tenant's user credentials aimed at the other tenant's API server (its server and CA)."""
    return kube.kubeconfig(kube.current_context(other).cluster, kube.current_context(own).user,
                           name="cross-tenant", cluster_name="other-tenant", user_name="this-tenant")


# --- management cluster -----------------------------------------------------------------------


def check_control_plane(management: KubeClient, tenant: TenantTarget, cluster: str) -> CheckResult:
    name = "control plane Ready"
    where = f"TenantControlPlane {tenant.namespace}/{tenant.control_plane}"
    # The stack's output, not a kubectl context: kind-create.sh keeps kind's kubeconfig private, and an adopted
    # cluster's context has its own name.
    # Read through a pipe (bash process substitution): the credential, system:masters, never lands on disk.
    fix = (f"KUBECONFIG=<(pulumi stack output managementKubeconfig --show-secrets) kubectl -n {tenant.namespace} "
           f"describe tcp {tenant.control_plane} (then the same with -n kamaji-system logs deploy/kamaji)")
    try:
        tcp = management.find("TenantControlPlane", tenant.control_plane, tenant.namespace)
    except ApiError as error:
        return CheckResult(name, False, f"cannot read {where} from the management cluster ({error})",
                           f"is the management cluster up? (kind: docker ps --filter name={cluster}-control-plane)")
    if tcp is None:
        return CheckResult(name, False, f"{where} not found → the tenant has no control plane",
                           "run `make up` to re-create it")
    version = _dig(tcp, "status", "kubernetesResources", "version") or {}
    status = version.get("status") or "no status yet"
    if status != "Ready":
        return CheckResult(name, False, f"{where} is {status} → the tenant API server is not serving", fix)
    endpoint = _dig(tcp, "status", "controlPlaneEndpoint") or "no endpoint"
    return CheckResult(name, True, f"{where} Ready ({version.get('version') or '?'} at {endpoint})")


def _selects_all(selector: Any) -> bool:
    """An empty LabelSelector (or none) selects every pod of the namespace."""
    selector = selector or {}
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


def _policy_types(policy: Json) -> list[str]:
    """spec.policyTypes as the API server defaults it: Ingress, plus Egress when there are egress rules."""
    spec = policy.get("spec") or {}
    return list(spec.get("policyTypes") or ["Ingress", *(["Egress"] if spec.get("egress") else [])])


def _admits_on(rule: Json, port: int) -> bool:
    ports = rule.get("ports") or []
    return not ports or any(p.get("port") in (None, port) and p.get("protocol", "TCP") == "TCP" for p in ports)


def _unadmitted_sources(policy: Json, source_ranges: Sequence[str]) -> list[str]:
    """The source ranges the policy's ingress does not admit whole on both the API and the Konnectivity port."""
    def admitted(source: str, port: int) -> bool:
        network = ipaddress.ip_network(source, strict=False)
        for rule in _dig(policy, "spec", "ingress") or []:
            if not _admits_on(rule, port):
                continue
            for peer in rule.get("from") or []:
                block = peer.get("ipBlock") or {}
                cidr = block.get("cidr")
                if cidr and network.subnet_of(ipaddress.ip_network(cidr, strict=False)) and not any(
                        network.overlaps(ipaddress.ip_network(e, strict=False)) for e in block.get("except") or []):
                    return True
        return False

    return [source for source in source_ranges
            if not all(admitted(source, port) for port in (API_SERVER_PORT, KONNECTIVITY_PORT))]


def _isolation_problem(policies: list[Json], namespace: str, source_ranges: Sequence[str] | None = None) -> str | None:
    where = f"{namespace}/{ISOLATION_POLICY_NAME}"
    policy = next((p for p in policies if _name(p) == ISOLATION_POLICY_NAME), None)
    if policy is None:
        present = ", ".join(sorted(_name(p) for p in policies)) or "none"
        return (f"NetworkPolicy {where} not found (present: {present}) → the tenant's control-plane pods are "
                "reachable from every other namespace")
    problems = []
    selector = _dig(policy, "spec", "podSelector")
    if not _selects_all(selector):
        problems.append(f"its podSelector {selector} leaves some pods unfenced")
    missing = [kind for kind in ("Ingress", "Egress") if kind not in _policy_types(policy)]
    if missing:
        problems.append(f"its policyTypes lack {' and '.join(missing)}")
    if problems:
        return f"NetworkPolicy {where}: {'; '.join(problems)} → the tenant's control-plane pods are not fully fenced"
    dropped = _unadmitted_sources(policy, source_ranges or ())
    if dropped:
        return (f"NetworkPolicy {where} does not admit {', '.join(dropped)} on ports {API_SERVER_PORT} and "
                f"{KONNECTIVITY_PORT}, which the load balancer admits (loadBalancerSourceRanges) → connections from "
                "there pass the load balancer and are dropped at the pod wherever they arrive un-NATed")
    return None


def _etcd_setup_problem(policies: list[Json], namespace: str) -> str | None:
    """A dedicated etcd's hook Jobs may reach the management API server (components/tenant/spec.py)."""
    where = f"{namespace}/{ETCD_SETUP_POLICY_NAME}"
    consequence = ("the dedicated etcd's setup Jobs cannot reach the management API server unless it lies in a "
                   "worker network: its Helm release hangs on install, upgrade and removal")
    policy = next((p for p in policies if _name(p) == ETCD_SETUP_POLICY_NAME), None)
    if policy is None:
        return f"NetworkPolicy {where} not found → {consequence}"
    problems = []
    selector = _dig(policy, "spec", "podSelector")
    expected = etcd_setup_pod_selector(ETCD_CHART.release)
    if selector != expected:
        problems.append(f"its podSelector {selector} is not the setup Jobs' {expected}")
    egress = _dig(policy, "spec", "egress") or []
    if "Egress" not in _policy_types(policy) or not any(rule.get("to") for rule in egress):
        problems.append("it admits no egress to an address")
    return f"NetworkPolicy {where}: {'; '.join(problems)} → {consequence}" if problems else None


def _etcd_problem(policies: list[Json]) -> str | None:
    where = f"{ETCD_POLICY_NAMESPACE}/{ETCD_POLICY_NAME}"
    policy = next((p for p in policies if _name(p) == ETCD_POLICY_NAME), None)
    if policy is None:
        return f"NetworkPolicy {where} not found → every pod of the management cluster reaches the shared etcd"
    problems = []
    selector = _dig(policy, "spec", "podSelector")
    if selector != ETCD_POD_SELECTOR:
        problems.append(f"its podSelector {selector} is not the etcd pods' {ETCD_POD_SELECTOR}")
    if "Ingress" not in _policy_types(policy):
        problems.append("its policyTypes lack Ingress")
    return f"NetworkPolicy {where}: {'; '.join(problems)} → the shared etcd is not fenced" if problems else None


def check_network_policies(management: KubeClient, tenant: TenantTarget) -> CheckResult:
    """The tenant namespace's fence (all pods, ingress and egress) and the shared etcd's, by name and shape."""
    name = "NetworkPolicies (management)"
    fix = "run `make up` to re-create the management NetworkPolicies"
    try:
        own = management.list("NetworkPolicy", tenant.namespace)
        etcd = management.list("NetworkPolicy", ETCD_POLICY_NAMESPACE)
    except ApiError as error:
        return CheckResult(name, False, f"cannot list NetworkPolicies ({error})",
                           "see the control plane row: is the management cluster answering?")
    dedicated = tenant.data_store == dedicated_datastore_name(tenant.name)
    checks = [_isolation_problem(own, tenant.namespace, tenant.source_ranges), _etcd_problem(etcd)]
    if dedicated:
        checks.append(_etcd_setup_problem(own, tenant.namespace))
    problems = [problem for problem in checks if problem]
    if problems:
        return CheckResult(name, False, "; ".join(problems), fix)
    setup = (f"; {tenant.namespace}/{ETCD_SETUP_POLICY_NAME} lets its etcd's setup Jobs reach the management API"
             if dedicated else "")
    return CheckResult(name, True, f"exist: {tenant.namespace}/{ISOLATION_POLICY_NAME} selects every pod (Ingress "
                                   f"and Egress); {ETCD_POLICY_NAMESPACE}/{ETCD_POLICY_NAME} the etcd pods{setup} "
                                   "(the objects only: see 'NetworkPolicy enforced')")


# --- tenant cluster ---------------------------------------------------------------------------


def check_tenant_api(tenant: TenantTarget, connect: Connect) -> tuple[CheckResult, KubeClient | None, list[Json]]:
    """Reach the tenant API server with the stack's admin kubeconfig; returns its nodes for later checks."""
    name = "tenant API answers"
    try:
        server = api_server(tenant.kubeconfig)
        api = connect(tenant.kubeconfig)
    except ValueError as error:
        return CheckResult(name, False, f"the tenant kubeconfig in the stack outputs is unusable: {error}",
                           "run `make up` to refresh the stack outputs"), None, []
    try:
        nodes = api.list("Node")
    except ApiError as error:
        if error.status in (401, 403):
            return CheckResult(
                name, False, f"{server} refused the stack's admin credentials ({error}) → the kubeconfig in the "
                "outputs is stale (control plane re-created?)",
                "run `make up` to refresh the stack outputs"), None, []
        return CheckResult(
            name, False, f"{server} did not answer ({error}) → the control plane's LoadBalancer IP is unreachable",
            f"see the control plane row; kubectl -n {tenant.namespace} get svc,pods on the management cluster "
            "and kubectl -n metallb-system get pods",
        ), None, []
    return CheckResult(name, True, f"{server} lists {len(nodes)} node(s)"), api, nodes


def _condition(obj: Json, kind: str) -> Json | None:
    for condition in _dig(obj, "status", "conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def check_nodes(nodes: Iterable[Json], expected: Iterable[str]) -> list[CheckResult]:
    by_name = {_name(node): node for node in nodes}
    results = []
    for node_name in expected:
        name = f"node {node_name} Ready"
        node = by_name.get(node_name)
        if node is None:
            results.append(CheckResult(
                name, False, f"{node_name} is not registered in the tenant → the worker did not join",
                f"docker logs {node_name}; docker exec {node_name} journalctl -u kubelet --no-pager -n 50; "
                "`make up` retries the join",
            ))
            continue
        ready = _condition(node, "Ready") or {}
        if ready.get("status") == "True":
            results.append(CheckResult(name, True, "Ready=True"))
        else:
            reason = ": ".join(part for part in (ready.get("reason"), ready.get("message")) if part)
            results.append(CheckResult(
                name, False, f"Ready={ready.get('status') or 'unknown'} ({reason or 'no condition'}) → "
                "the node cannot run pods",
                f"usually the CNI: in the tenant, kubectl -n calico-system get pods -o wide; "
                f"docker exec {node_name} journalctl -u kubelet --no-pager -n 50",
            ))
    return results


def expected_capacity(cards: Iterable[Json]) -> dict[str, int]:
    """What HAMi's mock plugin advertises for these cards: Σ slots, Σ memoryMiB, Σ cores."""
    cards = list(cards)
    return {
        GPU_RESOURCE: sum(int(card["slots"]) for card in cards),
        GPU_MEMORY_RESOURCE: sum(int(card["memoryMiB"]) for card in cards),
        GPU_CORES_RESOURCE: sum(int(card["cores"]) for card in cards),
    }


def advertised_capacity(node: Json) -> dict[str, int]:
    capacity = _dig(node, "status", "capacity") or {}
    return {resource: int(parse_quantity(capacity.get(resource, "0")))
            for resource in (GPU_RESOURCE, GPU_MEMORY_RESOURCE, GPU_CORES_RESOURCE)}


def _short(capacity: Mapping[str, int]) -> str:
    return " ".join(f"{resource.split('/')[1]}={value}" for resource, value in capacity.items())


def check_gpu_capacity(node: Json, cards: list[Json], gpu_mode: str) -> CheckResult:
    node_name = _name(node)
    name = f"node {node_name} GPU capacity"
    try:
        advertised = advertised_capacity(node)
    except (ValueError, ArithmeticError) as error:
        return CheckResult(name, False, f"unreadable GPU capacity ({error})", f"kubectl describe node {node_name}")
    if gpu_mode != "mock":
        if advertised[GPU_RESOURCE] > 0:
            return CheckResult(name, True, f"advertises {_short(advertised)}")
        return CheckResult(
            name, False, f"advertises no {GPU_RESOURCE} → HAMi's device plugin found no GPU on {node_name}",
            f"in the tenant: kubectl -n {HAMI_NAMESPACE} logs ds/hami-device-plugin; the node needs the label "
            "gpu=on, the NVIDIA driver and nvidia-container-toolkit",
        )
    expected = expected_capacity(cards)
    if advertised == expected:
        return CheckResult(name, True, _short(advertised))
    detail = f"advertises {_short(advertised)}, plan expects {_short(expected)}"
    if advertised[GPU_RESOURCE] != expected[GPU_RESOURCE]:
        return CheckResult(
            name, False, f"{detail} → the {GPU_RESOURCE} status patch is missing or stale",
            "run `make up` to re-apply the node's GPU capacity patch",
        )
    return CheckResult(
        name, False, f"{detail} → the mock device plugin has not registered the node's cards",
        f"in the tenant: kubectl -n {HAMI_NAMESPACE} logs ds/hami-mock-device-plugin; check the node annotation "
        "hami.io/node-nvidia-register",
    )


# HAMi's pod manager forgets a pod once it has ended (Project-HAMi/HAMi v2.10.0 pkg/scheduler/scheduler.go onAddPod /
# onUpdatePod, pkg/util/util.go IsPodInTerminatedState): its cards are free again.
ENDED_PHASES = ("Succeeded", "Failed")


def hami_allocations(pods: Iterable[Json]) -> dict[str, dict[str, Any]]:
    """Per card uuid: what HAMi's scheduler has given out, from its pod annotations (hami.io/vgpu-node and
    hami.io/vgpu-devices-allocated, "<uuid>,<type>,<MiB>,<cores>:...;" per container, Project-HAMi/HAMi v2.10.0
    pkg/device/devices.go EncodePodSingleDevice), as scheduler.go getNodesUsage counts them: a slot per grant."""
    cards: dict[str, dict[str, Any]] = {}
    for pod in pods:
        annotations = _dig(pod, "metadata", "annotations") or {}
        devices = annotations.get(DEVICES_ALLOCATED_ANNOTATION)
        if not devices or not annotations.get(VGPU_NODE_ANNOTATION) or _dig(pod, "status", "phase") in ENDED_PHASES:
            continue
        who = f"{_dig(pod, 'metadata', 'namespace') or '?'}/{_name(pod)}"
        for container in devices.split(";"):
            for grant in filter(None, container.split(":")):
                parts = grant.split(",")
                if len(parts) < 4 or not parts[2].isdigit() or not parts[3].isdigit():
                    continue
                card = cards.setdefault(parts[0], {"node": annotations[VGPU_NODE_ANNOTATION], "slots": 0,
                                                   "memoryMiB": 0, "cores": 0, "pods": []})
                card["slots"] += 1
                card["memoryMiB"] += int(parts[2])
                card["cores"] += int(parts[3])
                card["pods"].append(who)
    return cards


def _usage(slots: int, total: Any, memory: int, cores: int, pods: Sequence[str]) -> str:
    return f"{len(pods)} pod(s), {slots}/{total} slots, {memory} MiB, {cores}% cores ({', '.join(pods) or 'none'})"


def check_plan_allocations(api: KubeClient, planned: Mapping[str, Json]) -> list[CheckResult]:
    """Per card, HAMi's actual allocations next to the plan's (output gpuPlan): rows to read, not a verdict, as the
    plan also counts declared workloads that may not run yet. They show where the scheduler and the planner part."""
    if not planned:
        return []
    try:
        actual = hami_allocations(api.list("Pod"))
    except ApiError as error:
        return [CheckResult("GPU allocations vs plan", False, f"cannot list the tenant's pods ({error})",
                            "kubectl get pods -A -o wide")]
    rows = []
    for uuid in [*planned, *(u for u in actual if u not in planned)]:
        plan = planned.get(uuid)
        real = actual.get(uuid) or {"slots": 0, "memoryMiB": 0, "cores": 0, "pods": []}
        total = plan["slots"]["total"] if plan else "?"
        hami = _usage(real["slots"], total, real["memoryMiB"], real["cores"], real["pods"])
        if plan is None:
            rows.append(CheckResult(f"card {uuid}: HAMi vs plan", False, f"HAMi: {hami}; the plan has no such card",
                                    "declare the card in tenants[].workers[].gpus, then make up"))
            continue
        planned_usage = _usage(plan["slots"]["used"], total, plan["memoryMiB"]["used"], plan["cores"]["used"],
                               [h["pod"] for h in plan["holders"]])
        same = (real["slots"], real["memoryMiB"], real["cores"]) == (
            plan["slots"]["used"], plan["memoryMiB"]["used"], plan["cores"]["used"])
        verdict = "matches the plan" if same else ("differs: declared workloads not (all) running, or HAMi placed "
                                                   "them otherwise than the plan")
        rows.append(CheckResult(f"card {uuid}: HAMi vs plan", True,
                                f"HAMi: {hami} | plan: {planned_usage} → {verdict}"))
    return rows


def check_konnectivity_agent(api: KubeClient) -> CheckResult:
    name = "Konnectivity agent ready"
    logs = f"check `kubectl -n kube-system logs ds/{KONNECTIVITY_AGENT}` and the CNI (in the tenant)"
    try:
        agent = api.find("DaemonSet", KONNECTIVITY_AGENT, "kube-system")
    except ApiError as error:
        return CheckResult(name, False, f"cannot read DaemonSet kube-system/{KONNECTIVITY_AGENT} ({error})", logs)
    if agent is None:
        return CheckResult(
            name, False, f"DaemonSet kube-system/{KONNECTIVITY_AGENT} not found → the tenant API server has no "
            "tunnel to webhooks, logs or exec",
            "the TenantControlPlane needs spec.addons.konnectivity; run `make up`",
        )
    ready = _dig(agent, "status", "numberReady") or 0
    desired = _dig(agent, "status", "desiredNumberScheduled") or 0
    if desired > 0 and ready == desired:
        return CheckResult(name, True, f"{ready}/{desired} agents ready")
    return CheckResult(
        name, False, f"{ready}/{desired} agents ready → Konnectivity agent not ready → tenant API server "
        "cannot reach webhooks", logs,
    )


def check_hami_scheduler(api: KubeClient) -> CheckResult:
    name = "HAMi scheduler ready"
    where = f"Deployment {HAMI_NAMESPACE}/{HAMI_SCHEDULER}"
    fix = (f"in the tenant: kubectl -n {HAMI_NAMESPACE} describe deploy/{HAMI_SCHEDULER}; "
           f"kubectl -n {HAMI_NAMESPACE} logs deploy/{HAMI_SCHEDULER} -c {HAMI_EXTENDER_CONTAINER}")
    try:
        deployment = api.find("Deployment", HAMI_SCHEDULER, HAMI_NAMESPACE)
    except ApiError as error:
        return CheckResult(name, False, f"cannot read {where} ({error})", fix)
    if deployment is None:
        return CheckResult(name, False, f"{where} not found → HAMi is not installed in the tenant",
                           "run `make up` to install the HAMi release")
    ready = _dig(deployment, "status", "readyReplicas") or 0
    if ready >= 1:
        return CheckResult(name, True, f"{ready} replica(s) ready")
    return CheckResult(name, False, f"{where} has no ready replica → GPU pods stay Pending and the webhook "
                                    "has no backend", fix)


def check_hami_webhook(api: KubeClient) -> CheckResult:
    name = "HAMi webhook (failurePolicy Fail)"
    where = f"MutatingWebhookConfiguration {HAMI_WEBHOOK}"
    try:
        config = api.find("MutatingWebhookConfiguration", HAMI_WEBHOOK)
    except ApiError as error:
        return CheckResult(name, False, f"cannot read {where} ({error})", "see the tenant API row")
    if config is None or not config.get("webhooks"):
        return CheckResult(
            name, False, f"{where} {'not found' if config is None else 'has no webhooks'} → GPU pods are "
            "admitted without HAMi and land on default-scheduler",
            "run `make up` (HAMi's scheduler.admissionWebhook.enabled must stay true)",
        )
    lax = [f"{hook.get('name')}={hook.get('failurePolicy') or 'unset'}" for hook in config["webhooks"]
           if hook.get("failurePolicy") != "Fail"]
    if lax:
        return CheckResult(
            name, False, f"failurePolicy {', '.join(lax)} → a broken tunnel silently admits GPU pods to "
            "default-scheduler instead of failing loudly",
            "set scheduler.admissionWebhook.failurePolicy=Fail in the HAMi release; run `make up`",
        )
    return CheckResult(name, True, f"{', '.join(h.get('name') or '?' for h in config['webhooks'])}: Fail")


def check_system_workers(api: KubeClient, nodes: Iterable[Json], workers: Mapping[str, list[Json]]) -> CheckResult:
    """Exactly the workers without cards carry SYSTEM_NODE_LABEL (when the tenant has any), and a credential that
    is not the program's cannot set it: a dry-run `nodes/status` patch as the tenant admin (not system:masters) must
    be refused by the node-label policy. calico-node's token on every worker may write that subresource."""
    name = "system-worker label only from gpu-tenancy"
    nodes = list(nodes)
    expected = {node for node, cards in workers.items() if not cards}
    labelled = {_name(node) for node in nodes if SYSTEM_NODE_LABEL in (_dig(node, "metadata", "labels") or {})}
    if labelled != expected:
        return CheckResult(name, False, f"{SYSTEM_NODE_LABEL} is on {sorted(labelled) or 'no node'}, the workers "
                           f"without GPUs are {sorted(expected) or 'none'} → the tenant's controllers may run on "
                           "a GPU worker", "run `make up` (it labels the workers without GPUs again); if a label "
                           "came back by itself, the node-label policy is missing: see the next row")
    if not nodes:
        return skip(name, "no node to probe")
    target = _name(nodes[0])
    try:
        api.patch_status("Node", target, {"metadata": {"labels": {SYSTEM_NODE_LABEL: "forged"}}}, dry_run=True)
    except ApiError as error:
        if NODE_LABEL_POLICY in str(error):
            return CheckResult(name, True, f"on {sorted(labelled) or 'no node'}; a dry-run nodes/status label "
                               f"change of {target} was refused by {NODE_LABEL_POLICY}")
        return CheckResult(name, False, f"the dry-run nodes/status patch of {target} failed otherwise ({error})",
                           "see the tenant API row")
    return CheckResult(name, False, f"a dry-run nodes/status patch by the tenant admin set {SYSTEM_NODE_LABEL} on "
                       f"{target} → any nodes/status writer (calico-node's token, on every worker) can draw the "
                       f"tenant's controllers to its node", f"run `make up` (it installs {NODE_LABEL_POLICY})")


# --- the probe pod ----------------------------------------------------------------------------


def probe_pod(request: ProbeRequest) -> Json:
    """A fresh GPU pod without schedulerName: only HAMi's webhook can set it."""
    limits = {GPU_RESOURCE: str(request.gpus), GPU_MEMORY_RESOURCE: str(request.memory_mib),
              GPU_CORES_RESOURCE: str(request.cores)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": PROBE_PREFIX, "namespace": PROBE_NAMESPACE, "labels": dict(PROBE_LABELS)},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": PROBE_UID,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe",
                "image": PROBE_IMAGE,
                "resources": {"limits": limits},
                # HAMi's webhook denies privileged GPU pods.
                "securityContext": {"privileged": False, "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


def _admission_rejected(error: ApiError) -> CheckResult:
    name = "probe admitted by HAMi webhook"
    if error.status is not None and "webhook" in error.message.lower():
        return CheckResult(
            name, False, f"pod creation rejected by the webhook ({error}) → the tenant API server cannot reach "
            "HAMi's webhook through the Konnectivity tunnel",
            f"check the Konnectivity agent row; in the tenant: kubectl -n kube-system logs ds/{KONNECTIVITY_AGENT}; "
            f"kubectl -n {HAMI_NAMESPACE} get pods -l app.kubernetes.io/component={HAMI_SCHEDULER}",
        )
    return CheckResult(name, False, f"could not create the probe pod in {PROBE_NAMESPACE} ({error})",
                       "a ResourceQuota or the tenant API server refused it: read the message")


def _check_admitted(pod: Json) -> CheckResult:
    name = "probe admitted by HAMi webhook"
    evidence = hami_evidence(pod)
    if evidence.admitted:
        return CheckResult(name, True, f"{_name(pod)} got schedulerName {evidence.scheduler_name}")
    return CheckResult(
        name, False, f"schedulerName is {evidence.scheduler_name or 'unset'} → admission did not go through HAMi's "
        "webhook (Konnectivity tunnel or hami-webhook down)",
        "check the Konnectivity agent and HAMi webhook rows; in the tenant: "
        f"kubectl -n {HAMI_NAMESPACE} logs deploy/{HAMI_SCHEDULER} -c {HAMI_EXTENDER_CONTAINER}",
    )


def _wait_for_allocation(api: KubeClient, pod_name: str, waiting: Waiting) -> CheckResult:
    name = "probe got a GPU slice"
    deadline = waiting.now() + waiting.timeout
    progress = "not read yet"
    while True:
        try:
            pod = api.find("Pod", pod_name, PROBE_NAMESPACE)
        except ApiError as error:  # keep polling: one failed read is not a verdict
            progress = f"last read failed ({error})"
        else:
            if pod is None:
                return CheckResult(name, False, f"{pod_name} disappeared before it was scheduled",
                                   "something deleted or evicted it; run verify again")
            evidence = hami_evidence(pod)
            progress = evidence.seen
            if evidence.ok:
                return CheckResult(name, True, progress)
        if waiting.now() >= deadline:
            break
        waiting.sleep(waiting.interval)
    return CheckResult(
        name, False, f"no GPU allocated within {waiting.timeout:g} s ({progress}) → HAMi's scheduler did not "
        "place the pod on a simulated GPU",
        f"in the tenant: kubectl -n {HAMI_NAMESPACE} logs deploy/{HAMI_SCHEDULER} -c {HAMI_EXTENDER_CONTAINER}; "
        "check the GPU capacity rows; the card needs room for this probe next to the smoke-test pod, and a pod "
        "still holding HAMi's node lock delays the next one",
    )


def probe_gpu_pod(api: KubeClient, request: ProbeRequest, waiting: Waiting) -> list[CheckResult]:
    """Create a GPU pod, prove the webhook mutated it and HAMi allocated it, then delete it."""
    try:
        created = api.create(probe_pod(request))
    except ApiError as error:
        return [_admission_rejected(error)]
    pod_name = _name(created)
    results: list[CheckResult] = []
    try:
        results.append(_check_admitted(created))
        if results[-1].ok:
            results.append(_wait_for_allocation(api, pod_name, waiting))
    finally:
        try:
            api.delete("Pod", pod_name, PROBE_NAMESPACE, grace_period_seconds=0)
        except ApiError as error:
            results.append(CheckResult("probe pod deleted", False, f"could not delete {pod_name} ({error})",
                                       f"in the tenant: kubectl -n {PROBE_NAMESPACE} delete pod {pod_name}"))
    return results


def check_gpu_pods_through_hami(tenant: TenantTarget, connect: Connect, request: ProbeRequest) -> CheckResult:
    """As the tenant user, a dry run of a GPU pod labelled to skip HAMi's webhook: OK only when the admission
    policy refuses it (a dry run is admitted exactly as a create, and stores nothing)."""
    name = "GPU pod past HAMi refused"
    if tenant.user_kubeconfig is None:
        return CheckResult(name, False, f"not tested: the stack outputs have no tenantKubeconfigs.{tenant.name}",
                           "run `make up` to refresh the stack outputs")
    pod = probe_pod(request)
    try:
        pod["metadata"]["namespace"] = kube.current_context(tenant.user_kubeconfig).namespace or PROBE_NAMESPACE
        api = connect(tenant.user_kubeconfig)
    except ValueError as error:
        return CheckResult(name, False, f"not tested: the tenant user kubeconfig is unusable ({error})",
                           "run `make up` to refresh the stack outputs")
    pod["metadata"]["labels"][HAMI_WEBHOOK_LABEL] = HAMI_WEBHOOK_IGNORE
    fix = f"run `make up` to install the ValidatingAdmissionPolicy {HAMI_POD_POLICY} and its binding"
    try:
        api.create(pod, dry_run=True)
    except ApiError as error:
        if HAMI_POD_POLICY in error.message:
            return CheckResult(name, True, f"{HAMI_WEBHOOK_LABEL}={HAMI_WEBHOOK_IGNORE} refused in "
                                           f"{pod['metadata']['namespace']} by {HAMI_POD_POLICY}")
        return CheckResult(name, False, f"refused, but not by {HAMI_POD_POLICY} ({error}): not proved", fix)
    finally:
        api.close()
    return CheckResult(name, False, f"a GPU pod labelled {HAMI_WEBHOOK_LABEL}={HAMI_WEBHOOK_IGNORE} is admitted in "
                                    f"{pod['metadata']['namespace']} → it skips HAMi's quota and card accounting", fix)


def check_object_quota(api: KubeClient, tenant: TenantTarget) -> CheckResult:
    """The tenant user's namespace has an object quota counting every kind its role, as the cluster aggregates it,
    may create, as enforced: ResourceQuota admission charges what `status.hard` lists."""
    name = "object quota counts every kind"
    namespace = (kube.current_context(tenant.user_kubeconfig).namespace if tenant.user_kubeconfig else None) \
        or PROBE_NAMESPACE
    try:
        role = api.find("ClusterRole", TENANT_USER_ROLE)
        quota = api.find("ResourceQuota", OBJECT_QUOTA_NAME, namespace)
    except ApiError as error:
        return CheckResult(name, False, f"cannot read ClusterRole {TENANT_USER_ROLE} or the quota ({error})",
                           "see the tenant API row")
    if role is None or quota is None:
        missing = (f"ClusterRole {TENANT_USER_ROLE}" if role is None
                   else f"ResourceQuota {namespace}/{OBJECT_QUOTA_NAME}")
        return CheckResult(name, False, f"{missing} not found → the user's objects are not counted",
                           "run `make up`")
    counted = {key.removeprefix("count/") for key in _dig(quota, "status", "hard") or {} if key.startswith("count/")}
    uncounted = sorted(counted_kinds(role.get("rules") or []) - counted)
    if uncounted:
        return CheckResult(
            name, False, f"{TENANT_USER_ROLE} may create {', '.join(uncounted)} in {namespace}, which "
            f"{OBJECT_QUOTA_NAME} does not count (yet: status.hard) → unbounded in the data store",
            "run `make up`; a kind another ClusterRole aggregates into edit is not counted by the program: remove "
            "that role's aggregate-to-edit label or give the tenant `dataStore.dedicated`")
    return CheckResult(name, True, f"{len(counted)} kinds counted in {namespace}, all {TENANT_USER_ROLE} may create")


# --- isolation: credentials -------------------------------------------------------------------


def _cross_tenant_answer(tenant: TenantTarget, other: TenantTarget, credential: Json, connect: Connect
                         ) -> tuple[str, str]:
    """("refused" | "accepted" | "no answer" | "other", what happened) for one of the tenant's credentials."""
    api = connect(cross_tenant_kubeconfig(credential, other.kubeconfig))
    try:
        nodes = api.list("Node")
    except ApiError as error:
        if error.status in (401, 403):
            return "refused", f"HTTP {error.status}"
        return ("no answer" if error.status is None else "other"), str(error)
    finally:
        api.close()  # one request per client: release its memory files now, not at the end of a long run
    return "accepted", f"listed {len(nodes)} node(s)"


def check_isolation(tenant: TenantTarget, other: TenantTarget, connect: Connect) -> CheckResult:
    """The other tenant's API server refuses every credential this tenant has (admin and user)."""
    name = f"isolated from {other.name}"
    credentials = {"admin": tenant.kubeconfig}
    if tenant.user_kubeconfig is not None:
        credentials["user"] = tenant.user_kubeconfig
    try:
        server = api_server(other.kubeconfig)
        answers = {kind: _cross_tenant_answer(tenant, other, credential, connect)
                   for kind, credential in credentials.items()}
    except ValueError as error:
        return CheckResult(name, False, f"cannot build the cross-tenant kubeconfig ({error})",
                           "run `make up` to refresh the stack outputs")
    accepted = [f"{kind} credentials {what}" for kind, (verdict, what) in answers.items() if verdict == "accepted"]
    if accepted:
        return CheckResult(
            name, False, f"{tenant.name}'s {' and '.join(accepted)} of {other.name} → the tenants share a CA or "
            "credentials",
            f"each TenantControlPlane must have its own CA (Secret <tcp>-ca); compare the {tenant.name} and "
            f"{other.name} kubeconfigs in the stack outputs",
        )
    silent = [what for verdict, what in answers.values() if verdict == "no answer"]
    if silent:
        return CheckResult(name, False, f"{server} did not answer ({silent[0]}): isolation could not be tested",
                           f"see {other.name}'s table")
    odd = [f"{kind} credentials with {what}" for kind, (verdict, what) in answers.items() if verdict == "other"]
    if odd:
        return CheckResult(name, False, f"{server} answered {tenant.name}'s {' and '.join(odd)}, not 401/403",
                           f"in {other.name}: kubectl auth can-i --list as {tenant.name}'s user")
    codes = sorted({what for _, what in answers.values()})
    return CheckResult(name, True, f"{other.name}'s API server refused {tenant.name}'s "
                                   f"{' and '.join(credentials)} credentials ({', '.join(codes)})")


# --- isolation: the network, from a pod in the tenant -----------------------------------------


def network_probe_pod(image: str, host: str, port: int, namespace: str, target: str) -> Json:
    """A pod that opens one TCP connection to host:port and exits: 0 connected, 1 refused or unresolvable;
    a connect no one answers runs into activeDeadlineSeconds. Nothing privileged, no token, no GPU."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": NETWORK_PROBE_PREFIX,
            "namespace": namespace,
            "labels": {**PROBE_LABELS, "app.kubernetes.io/component": NETWORK_PROBE_COMPONENT},
            "annotations": {TARGET_ANNOTATION: f"{target} ({host}:{port})"},
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": NETWORK_PROBE_DEADLINE,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": NETWORK_PROBE_UID,
                                "runAsGroup": NETWORK_PROBE_UID, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["bash", "-c", NETWORK_PROBE_SCRIPT.read_text(encoding="utf-8")],
                "env": [{"name": "HOST", "value": host}, {"name": "PORT", "value": str(port)}],
                # bash's error ("Connection refused", "Name or service not known") as the termination message.
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                              "limits": {"cpu": "100m", "memory": "64Mi"}},
                "securityContext": {"privileged": False, "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }


def _container_state(pod: Json) -> Json:
    statuses = _dig(pod, "status", "containerStatuses") or []
    return (statuses[0].get("state") or {}) if statuses and isinstance(statuses[0], Mapping) else {}


def _started(state: Json) -> bool:
    return bool(state.get("running") or _dig(state, "terminated", "startedAt"))


def _first_line(message: Any) -> str:
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    return lines[0] if lines else ""


def probe_verdict(pod: Json) -> tuple[str, str] | None:
    """How far a network probe pod got: ("connected" | "refused" | "unresolvable" | "filtered" | "not run",
    detail), or None while it is still pending or running."""
    status = pod.get("status") or {}
    phase = status.get("phase")
    state = _container_state(pod)
    terminated = state.get("terminated") or {}
    if status.get("reason") == "DeadlineExceeded":
        if _started(state):
            return "filtered", f"no answer within {NETWORK_PROBE_DEADLINE} s"
        waiting = state.get("waiting") or {}
        reason = ": ".join(part for part in (waiting.get("reason"), waiting.get("message")) if part)
        return "not run", f"the deadline passed before the container started ({reason or 'no container status'})"
    if phase == "Succeeded" or (terminated and terminated.get("exitCode") == 0):
        return "connected", "connected"
    if terminated:
        message = _first_line(terminated.get("message"))
        if any(text in message.lower() for text in UNRESOLVED_MESSAGES):
            return "unresolvable", message
        return "refused", message or f"exit code {terminated.get('exitCode')}"
    if phase == "Failed":
        reason = ": ".join(part for part in (status.get("reason"), status.get("message")) if part)
        return "not run", f"the pod failed ({reason or 'no reason given'})"
    return None


def _pending_reason(pod: Json | None) -> str:
    if pod is None:
        return "not read"
    waiting = _container_state(pod).get("waiting") or {}
    if waiting:
        return ": ".join(part for part in (waiting.get("reason"), waiting.get("message")) if part)
    scheduled = _condition(pod, "PodScheduled") or {}
    if scheduled.get("status") == "False":
        return f"{scheduled.get('reason') or 'Unschedulable'}: {scheduled.get('message') or ''}".rstrip(": ")
    return str(_dig(pod, "status", "phase") or "Pending")


@dataclass
class _Probe:
    host: str
    port: int
    pod: str | None = None
    verdict: tuple[str, str] | None = None
    last: Json | None = None
    read_error: str | None = None
    running_since: float | None = None

    @property
    def where(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass
class _Reach:
    """One row: what the tenant's pod must (not) reach of another tenant."""

    row: str
    other: TenantTarget
    what: str
    probes: list[_Probe]
    # Networks both sides admit (a connection is by design), () when none, None when the outputs do not say.
    shared: tuple[str, ...] | None = ()
    # Why it could not be probed at all.
    error: tuple[str, str] | None = None
    # Where the probing tenant's workers connect from.
    workers: tuple[str, ...] = ()
    # What was deliberately not probed: (address, why).
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # Set for a path no tenant pod may ever open, whatever the source ranges say: the fix a connection calls for.
    never: str = ""
    # Whose endpoint it is, in messages (default: the other tenant's name).
    owner: str = ""
    # Why there is nothing to probe and that is the safe state (e.g. no node port exists): the row is OK.
    nothing_open: str = ""

    @property
    def whose(self) -> str:
        return self.owner or self.other.name


def split_host_port(endpoint: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` -> (host, port); ValueError otherwise."""
    host, sep, port = str(endpoint).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{endpoint!r} is not host:port")
    return host.strip("[]"), int(port)


def shared_networks(own_workers: Sequence[str], other_admits: Sequence[str]) -> tuple[str, ...]:
    """The networks this tenant's workers connect from that the other tenant's control plane admits."""
    shared = []
    for own in own_workers:
        try:
            network = ipaddress.ip_network(own, strict=False)
        except ValueError:
            continue
        for admitted in other_admits:
            try:
                overlaps = network.overlaps(ipaddress.ip_network(admitted, strict=False))
            except (ValueError, TypeError):
                continue
            if overlaps:
                shared.append(own if own == admitted else f"{own} (within {admitted})")
                break
    return tuple(dict.fromkeys(shared))


def _data_store_endpoints(management: KubeClient, other: TenantTarget) -> tuple[str, list[str], Json | None]:
    """(DataStore name, its spec.endpoints, the TenantControlPlane); ValueError says why they are unknown."""
    try:
        tcp = management.find("TenantControlPlane", other.control_plane, other.namespace)
        name = (_dig(tcp, "status", "storage", "dataStoreName") or _dig(tcp, "spec", "dataStore")
                or other.data_store)
        if not name:
            raise ValueError(f"TenantControlPlane {other.namespace}/{other.control_plane} names no DataStore yet")
        store = management.find("DataStore", name)
    except ApiError as error:
        raise ValueError(f"cannot read {other.name}'s DataStore from the management cluster ({error})") from None
    if store is None:
        raise ValueError(f"DataStore {name} not found on the management cluster")
    endpoints = [str(endpoint) for endpoint in _dig(store, "spec", "endpoints") or []]
    if not endpoints:
        raise ValueError(f"DataStore {name} lists no endpoints")
    return name, endpoints, tcp


def _pod_address(management: KubeClient, host: str) -> str | None:
    """The pod IP behind a StatefulSet DNS name `<pod>.<service>.<namespace>.svc...`, read on the management
    cluster: a tenant pod cannot resolve the name, so the address is probed as well (is it routed?)."""
    labels = host.split(".")
    if len(labels) < 4 or labels[3] != "svc":
        return None
    try:
        pod = management.find("Pod", labels[0], labels[2])
    except ApiError:
        return None
    return _dig(pod, "status", "podIP") or None


def _inside(address: str, networks: Iterable[str]) -> str | None:
    """The first of `networks` that holds `address`, if any."""
    for network in networks:
        try:
            if ipaddress.ip_address(address) in ipaddress.ip_network(network, strict=False):
                return network
        except ValueError:
            continue
    return None


DATA_STORE_FIX = ("the DataStore must not be exposed beyond the management cluster: on the management cluster "
                  "kubectl get svc -A -o wide | grep -E 'LoadBalancer|NodePort' and check the routes to its pod "
                  "network")


def _internal_addresses(nodes: Iterable[Json]) -> list[str]:
    """Each node's InternalIP, in the order listed (the address kube-proxy serves node ports on)."""
    found = []
    for node in nodes:
        for address in _dig(node, "status", "addresses") or []:
            if address.get("type") == "InternalIP" and address.get("address"):
                found.append(str(address["address"]))
                break
    return found


def _node_port_reach(other: TenantTarget, management: KubeClient) -> _Reach:
    """The other tenant's API and Konnectivity through the management nodes' node ports. kube-proxy applies
    loadBalancerSourceRanges only to traffic addressed to the LoadBalancer IP (kubernetes pkg/proxy/iptables/
    proxier.go, the firewall chain: "For loadbalancers which direct traffic to service NodePort, the firewall rules
    will not apply"), so a node port admits every source; Kamaji allocates none with
    spec.controlPlane.service.allocateLoadBalancerNodePorts false (internal/resources/k8s_service_resource.go)."""
    row = f"pod → {other.name} node ports"
    what = "API and Konnectivity node ports"
    fix = (f"set allocateLoadBalancerNodePorts: false on the control plane Service ({other.namespace}/"
           f"{other.control_plane}; `make up` writes it into the TenantControlPlane) so no node port exists")
    try:
        service = management.find("Service", other.control_plane, other.namespace)
        nodes = management.list("Node") if service else []
    except ApiError as error:
        return _Reach(row, other, what, [], error=(f"cannot read Service {other.namespace}/{other.control_plane} "
                                                   f"or the management nodes ({error})",
                                                   "see the control plane rows"), never=fix)
    if service is None:
        return _Reach(row, other, what, [], error=(f"Service {other.namespace}/{other.control_plane} not found on "
                                                   "the management cluster", "see the control plane rows"),
                      never=fix)
    ports = {int(p["nodePort"]): p.get("name") or str(p.get("port")) for p in _dig(service, "spec", "ports") or []
             if p.get("nodePort")}
    allocate = _dig(service, "spec", "allocateLoadBalancerNodePorts")
    if not ports:
        return _Reach(row, other, what, [], never=fix, nothing_open=(
            f"Service {other.namespace}/{other.control_plane} has no node port (allocateLoadBalancerNodePorts "
            f"{str(allocate).lower() if allocate is not None else 'unset'}): only its LoadBalancer address leads "
            "to 6443 and 8132, where the source ranges apply"))
    addresses = _internal_addresses(nodes)
    if not addresses:
        return _Reach(row, other, what, [], error=(f"node ports {', '.join(map(str, sorted(ports)))} exist but "
                                                   "the management nodes list no InternalIP", fix), never=fix)
    probes = [_Probe(address, port) for address in addresses[:1] for port in sorted(ports)]
    return _Reach(row, other, f"{what} ({', '.join(f'{p} for {n}' for p, n in sorted(ports.items()))})", probes,
                  never=fix)


def _extender_reach(other: TenantTarget, connect: Connect) -> _Reach:
    """The other tenant's HAMi scheduler extender and metrics on its nodes' node ports: the chart's defaults
    (HAMI_DEFAULT_NODE_PORTS) and whatever node port its Service has. One node stands for all: kube-proxy serves
    a node port on every node."""
    row = f"pod → {other.name} HAMi extender"
    what = "HAMi scheduler extender"
    fix = (f"in {other.name}: kubectl -n {HAMI_NAMESPACE} get svc {HAMI_SCHEDULER_SERVICE} must be a ClusterIP "
           "Service (HAMi's scheduler.service.type; `make up` sets it)")
    try:
        api = connect(other.kubeconfig)
    except ValueError as error:
        return _Reach(row, other, what, [], error=(f"{other.name}'s admin kubeconfig is unusable ({error})",
                                                   "run `make up` to refresh the stack outputs"), never=fix)
    try:
        nodes = api.list("Node")
        service = api.find("Service", HAMI_SCHEDULER_SERVICE, HAMI_NAMESPACE)
    except ApiError as error:
        return _Reach(row, other, what, [], error=(f"cannot read {other.name}'s nodes and its Service "
                                                   f"{HAMI_NAMESPACE}/{HAMI_SCHEDULER_SERVICE} ({error})",
                                                   f"see {other.name}'s table"), never=fix)
    finally:
        api.close()
    ports = set(HAMI_DEFAULT_NODE_PORTS) | {int(p["nodePort"]) for p in _dig(service, "spec", "ports") or []
                                            if p.get("nodePort")}
    addresses = _internal_addresses(nodes)
    if not addresses:
        return _Reach(row, other, what, [], error=(f"{other.name}'s nodes list no InternalIP",
                                                   f"see {other.name}'s table"), never=fix)
    return _Reach(row, other, what, [_Probe(addresses[0], port) for port in sorted(ports)], never=fix)


def _cache_reach(tenant: TenantTarget, platform: Platform) -> _Reach | None:
    """The lab's pull-through caches, which only the nodes' containerd needs: a tenant pod reaching them can fill
    the host's disk and spend the operator's registry quota. The address Docker gave each cache is probed (a pod
    may not resolve its container name), on the cache's port and on the debug server's."""
    if not platform.image_caches:
        return None
    probes = [_Probe(cache.address or cache.host, port) for cache in platform.image_caches
              for port in dict.fromkeys((cache.port, image_cache.DEBUG_PORT))]
    fix = ("the caches must answer the nodes only: each container node drops its pods' connections to them "
           "(unit gpu-tenancy-mirror-fence, chain GPU-TENANCY-MIRRORS in iptables' mangle FORWARD, installed by "
           "node-mirrors.sh: `make up` puts it back; see it with `docker exec <node> iptables -t mangle -S "
           "GPU-TENANCY-MIRRORS`), or keep tenant pods from the caches' addresses with a NetworkPolicy or Calico "
           "policy in every tenant denying egress to them (the nodes' containerd is not a pod and is not affected)")
    return _Reach("pod → image caches", tenant, "image caches", probes, never=fix, owner="the lab")


def _reach_targets(tenant: TenantTarget, platform: Platform, management: KubeClient,
                   connect: Connect | None = None) -> list[_Reach]:
    targets: list[_Reach] = []
    for other in platform.tenants.values():
        if other.name == tenant.name:
            continue
        workers = tenant.worker_networks or tenant.source_ranges or ()
        shared = None if other.source_ranges is None else shared_networks(workers, other.source_ranges)
        tcp: Json | None = None
        try:
            store, endpoints, tcp = _data_store_endpoints(management, other)
        except ValueError as error:
            store_reach = _Reach(f"pod → {other.name} data store", other, "data store", [],
                                 error=(str(error), "see the control plane rows; kubectl get datastores on the "
                                                    "management cluster"), never=DATA_STORE_FIX)
        else:
            probes, bad, skipped = [], [], []
            for endpoint in endpoints:
                try:
                    host, port = split_host_port(endpoint)
                except ValueError:
                    bad.append(endpoint)
                    continue
                probes.append(_Probe(host, port))
                address = _pod_address(management, host)
                own = _inside(address, tenant.own_networks) if address else None
                if own:
                    # The same address inside the tenant is one of its own pods or services, not the data store.
                    skipped.append((address, f"inside {tenant.name}'s own {own}"))
                elif address:
                    probes.append(_Probe(address, port))
            store_reach = _Reach(f"pod → {other.name} data store", other, f"data store {store}", probes,
                                 skipped=skipped, never=DATA_STORE_FIX)
            if bad and not probes:
                store_reach.error = (f"DataStore {store} endpoints {', '.join(bad)} are not host:port",
                                     "kubectl get datastore " + store + " -o yaml on the management cluster")
        konnectivity_port = _dig(tcp, "spec", "addons", "konnectivity", "server", "port") or KONNECTIVITY_PORT
        try:
            host, api_port = split_host_port(other.endpoint or "")
        except ValueError:
            missing = (f"the stack outputs give no usable endpoint for {other.name} ({other.endpoint!r})",
                       "run `make up` to refresh the stack outputs")
            targets += [_Reach(f"pod → {other.name} API", other, "API server", [], shared, missing, workers),
                        _Reach(f"pod → {other.name} Konnectivity", other, "Konnectivity server", [], shared,
                               missing, workers)]
        else:
            targets += [_Reach(f"pod → {other.name} API", other, "API server", [_Probe(host, api_port)], shared,
                               workers=workers),
                        _Reach(f"pod → {other.name} Konnectivity", other, "Konnectivity server",
                               [_Probe(host, int(konnectivity_port))], shared, workers=workers)]
        targets.append(_node_port_reach(other, management))
        if connect is not None:
            targets.append(_extender_reach(other, connect))
        targets.append(store_reach)
    return targets


def _poll(api: KubeClient, namespace: str, probe: _Probe, waiting: Waiting) -> None:
    """Read one probe pod and record its verdict once it has one."""
    try:
        pod = api.find("Pod", probe.pod or "", namespace)
    except ApiError as error:  # one failed read is not a verdict
        probe.read_error = str(error)
        return
    if pod is None:
        probe.verdict = ("not run", f"{probe.pod} disappeared before it finished")
        return
    probe.last, probe.read_error = pod, None
    probe.verdict = probe_verdict(pod)
    if probe.verdict is None and _container_state(pod).get("running"):
        if probe.running_since is None:
            probe.running_since = waiting.now()
        waited = NETWORK_PROBE_DEADLINE + NETWORK_PROBE_GRACE
        if waiting.now() - probe.running_since >= waited:
            probe.verdict = ("filtered", f"no answer: still connecting {waited} s after it started")


def _unfinished(probe: _Probe, waiting: Waiting) -> str:
    if probe.running_since is not None:
        return (f"{probe.pod} was still connecting when the wait ended ({waiting.timeout:g} s): too short to tell "
                "a dropped connection from a slow one")
    why = f"last read failed: {probe.read_error}" if probe.read_error else _pending_reason(probe.last)
    return f"{probe.pod} did not start within {waiting.timeout:g} s ({why})"


def _run_probes(api: KubeClient, namespace: str, image: str, targets: list[_Reach], waiting: Waiting,
                tenant: str) -> list[CheckResult]:
    """Create every probe pod, poll them together until each has a verdict, delete them all."""
    probes = [(f"{reach.whose} {reach.what}", probe) for reach in targets if reach.error is None
              for probe in reach.probes]
    problems = _run_probe_pods(api, namespace, image, probes, waiting)
    return [_reach_result(reach, tenant, namespace, image) for reach in targets] + problems


def _run_probe_pods(api: KubeClient, namespace: str, image: str, probes: list[tuple[str, _Probe]],
                    waiting: Waiting, where: str = "in the tenant") -> list[CheckResult]:
    """Create a pod per (target, probe), poll them together until each has a verdict (bounded by the wait),
    delete them all; the rows of pods that could not be deleted."""
    problems: list[CheckResult] = []
    try:
        refusal: str | None = None
        for target, probe in probes:
            if refusal is not None:  # the same pod in the same namespace: the next one would be refused too
                probe.verdict = ("not run", refusal)
                continue
            try:
                created = api.create(network_probe_pod(image, probe.host, probe.port, namespace, target))
            except ApiError as error:
                refusal = f"could not create the probe pod in {namespace} ({error})"
                probe.verdict = ("not run", refusal)
                continue
            probe.pod = _name(created)
        deadline = waiting.now() + waiting.timeout
        while True:
            for probe in [probe for _, probe in probes if probe.pod and probe.verdict is None]:
                _poll(api, namespace, probe, waiting)
            if all(probe.verdict is not None for _, probe in probes):
                break
            if waiting.now() >= deadline:
                for _, probe in probes:
                    if probe.verdict is None:
                        probe.verdict = ("not run", _unfinished(probe, waiting))
                break
            waiting.sleep(waiting.interval)
    finally:
        for _, probe in probes:
            if probe.pod:
                try:
                    api.delete("Pod", probe.pod, namespace, grace_period_seconds=0)
                except ApiError as error:
                    problems.append(CheckResult(
                        f"probe pod {probe.pod} deleted", False, f"could not delete {probe.pod} ({error})",
                        f"{where}: kubectl -n {namespace} delete pod {probe.pod}"))
    return problems


def _outcomes(verdicts: list[tuple[_Probe, tuple[str, str]]]) -> list[str]:
    """"<where>, <where> <outcome> (<why>)" per outcome, in the order they first occur (names say it all when
    they do not resolve)."""
    groups: dict[str, tuple[list[str], str]] = {}
    for probe, (outcome, detail) in verdicts:
        if outcome in ("not run", "connected"):
            continue
        wheres, why = groups.setdefault(outcome, ([], "" if outcome == "unresolvable" else detail))
        wheres.append(probe.where)
    return [f"{', '.join(wheres)} {outcome}" + (f" ({why})" if why else "")
            for outcome, (wheres, why) in groups.items()]


def _not_run_fix(namespace: str, image: str) -> str:
    return (f"in the tenant: kubectl -n {namespace} get events; the probe needs {image} (calico-node's image, "
            "on every worker) and a user allowed to create pods there")


def _reach_result(reach: _Reach, tenant: str, namespace: str, image: str) -> CheckResult:
    other = reach.other
    if reach.error is not None:
        return CheckResult(reach.row, False, f"not tested: {reach.error[0]}", reach.error[1])
    verdicts = [(probe, probe.verdict or ("not run", "no verdict")) for probe in reach.probes]
    connected = [probe.where for probe, (outcome, _) in verdicts if outcome == "connected"]
    not_run = [f"{probe.where}: {detail}" for probe, (outcome, detail) in verdicts if outcome == "not run"]
    skipped: dict[str, list[str]] = {}
    for address, why in reach.skipped:
        skipped.setdefault(why, []).append(address)
    outcomes = "; ".join([*_outcomes(verdicts),
                          *(f"{', '.join(addresses)} not probed ({why})" for why, addresses in skipped.items())])
    # A name the pod cannot resolve, or an address it was not sent to, tested nothing.
    tried = [probe for probe, (outcome, _) in verdicts if outcome not in ("unresolvable", "not run")]
    if not reach.probes and reach.nothing_open:
        return CheckResult(reach.row, True, reach.nothing_open)
    untested = skip(reach.row, f"not tested: {outcomes or 'no endpoint to try'} → no address of {reach.whose}'s "
                               f"{reach.what} was tried from {tenant}'s pods")
    if reach.never:
        if connected:
            return CheckResult(
                reach.row, False, f"{tenant}'s pod connected to {', '.join(connected)} → {reach.whose}'s "
                f"{reach.what} is reachable from tenant workloads", reach.never)
        if not_run:
            return CheckResult(reach.row, False, f"not tested: {'; '.join(not_run)}", _not_run_fix(namespace, image))
        if not tried:
            return untested
        return CheckResult(reach.row, True, f"{reach.what}: {outcomes}")
    if not_run:
        return CheckResult(reach.row, False, f"not tested: {'; '.join(not_run)}", _not_run_fix(namespace, image))
    if not tried:
        return untested
    ranges = ", ".join(other.source_ranges or ()) or "nothing"
    workers = ", ".join(reach.workers) or "unknown"
    if connected:
        if reach.shared:
            return CheckResult(
                reach.row, True, f"connected to {connected[0]}: reachable by design: both admit "
                f"{', '.join(reach.shared)}; separate them with tenants[].workerCidrs; {other.name} still refuses "
                f"{tenant}'s credentials, see 'isolated from {other.name}'",
            )
        if reach.shared is None:
            return CheckResult(
                reach.row, False, f"connected to {connected[0]}, and the stack outputs do not say whether "
                f"{other.name} admits {tenant}'s workers (no tenants.{other.name}.sourceRanges)",
                "run `make up` to refresh the stack outputs, then verify again",
            )
        return CheckResult(
            reach.row, False, f"{tenant}'s pod connected to {other.name}'s {reach.what} at {connected[0]} → "
            f"{other.name} admits only {ranges}, none of {tenant}'s worker networks ({workers})",
            f"on the management cluster: kubectl -n {other.namespace} get svc {other.control_plane} -o "
            "jsonpath='{.spec.loadBalancerSourceRanges}' must list exactly those networks, and kube-proxy must "
            "enforce them (kubectl -n kube-system logs ds/kube-proxy; the client address must reach it un-NATed)",
        )
    context = (f"although both admit {', '.join(reach.shared)} (is {other.name} up? see its table)" if reach.shared
               else f"{other.name} admits only {ranges}")
    return CheckResult(reach.row, True, f"{outcomes}: {context}")


def check_network_isolation(platform: Platform, tenant: TenantTarget, management: KubeClient, connect: Connect,
                            waiting: Waiting) -> list[CheckResult]:
    """From a pod in this tenant (as its restricted user), try every path into the other tenants: API and
    Konnectivity on the LoadBalancer address (a connection the source ranges do not explain fails) and on the
    management nodes' node ports, the HAMi extender's node ports, the data store; then the lab's image caches.
    Any connection on the last four fails."""
    targets = _reach_targets(tenant, platform, management, connect)
    cache = _cache_reach(tenant, platform)
    if cache is not None:
        targets.append(cache)
    if not targets:
        return []
    if tenant.user_kubeconfig is None:
        return [CheckResult(reach.row, False, f"not tested: the stack outputs have no tenantKubeconfigs.{tenant.name}",
                            "run `make up` to refresh the stack outputs") for reach in targets]
    try:
        namespace = kube.current_context(tenant.user_kubeconfig).namespace or PROBE_NAMESPACE
        api = connect(tenant.user_kubeconfig)
    except ValueError as error:
        return [CheckResult(reach.row, False, f"not tested: the tenant user kubeconfig is unusable ({error})",
                            "run `make up` to refresh the stack outputs") for reach in targets]
    try:
        return _run_probes(api, namespace, platform.network_probe_image, targets, waiting, tenant.name)
    finally:
        api.close()


# --- isolation: is NetworkPolicy enforced on the management cluster? --------------------------


def management_cni(management: KubeClient) -> tuple[str, tuple[str, str] | None]:
    """(name, (namespace, DaemonSet)) of the CNI the management cluster runs, ("unknown", None) when none of
    CNI_DAEMONSETS is found."""
    for (namespace, name), cni in CNI_DAEMONSETS.items():
        try:
            if management.find("DaemonSet", name, namespace) is not None:
                return cni, (namespace, name)
        except ApiError:
            continue
    return "unknown", None


def _enforcement_targets(management: KubeClient, tenant: TenantTarget) -> tuple[list[tuple[str, _Probe]], str]:
    """The tenant's control-plane pods on the API port and its data store's etcd pods on 2379, by pod address:
    both are fenced against a pod of `default` (tenant-isolation admits its own namespace, Kamaji and the worker
    networks; kamaji-etcd-clients Kamaji and the control planes' namespaces)."""
    probes: list[tuple[str, _Probe]] = []
    problems = []
    try:
        pods = management.list("Pod", tenant.namespace)
    except ApiError as error:
        return [], f"cannot list the pods of {tenant.namespace} ({error})"
    control_plane = [pod for pod in pods if _dig(pod, "status", "podIP") and _dig(pod, "status", "phase") == "Running"
                     and any(c.get("name") == "kube-apiserver" for c in _dig(pod, "spec", "containers") or [])]
    probes += [(f"{tenant.name} control plane", _Probe(str(pod["status"]["podIP"]), API_SERVER_PORT))
               for pod in control_plane[:1]]
    if not control_plane:
        problems.append(f"no running kube-apiserver pod in {tenant.namespace}")
    try:
        store, endpoints, _ = _data_store_endpoints(management, tenant)
    except ValueError as error:
        problems.append(str(error))
    else:
        for endpoint in endpoints:
            try:
                host, port = split_host_port(endpoint)
            except ValueError:
                continue
            address = _pod_address(management, host)
            if address:
                probes.append((f"{tenant.name} data store {store}", _Probe(address, port)))
                break
        else:
            problems.append(f"no pod address for DataStore {store}")
    return probes, "; ".join(problems)


def check_policy_enforced(platform: Platform, tenant: TenantTarget, management: KubeClient,
                          waiting: Waiting) -> CheckResult:
    """Observe the management NetworkPolicies at work: a pod in `default` on the management cluster must not
    connect to this tenant's control-plane pod or its etcd. A connection fails the row; a refusal proves
    enforcement, except under a CNI that fails open (kindnetd), which is NOT ENFORCED."""
    name = "NetworkPolicy enforced (management)"
    cni, where = management_cni(management)
    probes, problem = _enforcement_targets(management, tenant)
    if not probes:
        return skip(name, f"not tested: {problem or 'nothing to probe'} → enforcement was not observed",
                    "see the control plane rows")
    namespace, image = ENFORCEMENT_PROBE_NAMESPACE, platform.network_probe_image
    problems = _run_probe_pods(management, namespace, image, probes, waiting, "on the management cluster")
    verdicts = [(target, probe, probe.verdict or ("not run", "no verdict")) for target, probe in probes]
    connected = [f"{target} at {probe.where}" for target, probe, (outcome, _) in verdicts if outcome == "connected"]
    not_run = [f"{probe.where}: {detail}" for _, probe, (outcome, detail) in verdicts if outcome == "not run"]
    blocked = "; ".join(f"{target} at {probe.where} {outcome}" for target, probe, (outcome, _) in verdicts
                        if outcome in ("filtered", "refused"))
    deletion = "; ".join(p.detail for p in problems)
    if connected:
        return CheckResult(
            name, False, f"a pod in the management cluster's {namespace} namespace connected to "
            f"{', '.join(connected)} → NetworkPolicy is not enforced (CNI: {cni}): {tenant.namespace}/"
            f"{ISOLATION_POLICY_NAME} and {ETCD_POLICY_NAMESPACE}/{ETCD_POLICY_NAME} exist but fence nothing",
            "run a CNI that enforces NetworkPolicy on the management cluster (Calico, Cilium); in kind, kindnetd "
            f"must be running: kubectl -n {KINDNET[0]} get ds {KINDNET[1]}")
    if not_run or deletion:
        return CheckResult(name, False, f"not tested: {'; '.join([*not_run, *([deletion] if deletion else [])])}",
                           f"on the management cluster: kubectl -n {namespace} get events; the probe needs {image}")
    if not blocked:
        return skip(name, "not tested: no probe got a verdict")
    if where == KINDNET:
        return not_enforced(
            name, f"{blocked} from a pod in {namespace}, but kind's kindnetd runs kube-network-policies with "
            "FailOpen: packets pass unfiltered whenever kindnetd is not reading its queue (restarting, crashed, "
            "queue full), so the fence holds only while kindnetd does",
            "for a fence that fails closed, run a management cluster whose CNI enforces NetworkPolicy (Calico)")
    return CheckResult(name, True, f"{blocked} from a pod in {namespace} (CNI: {cni})")


# --- one tenant -------------------------------------------------------------------------------


def verify_tenant(
    platform: Platform, tenant: TenantTarget, management: KubeClient, connect: Connect, waiting: Waiting
) -> list[CheckResult]:
    results = [check_control_plane(management, tenant, platform.management_cluster)]
    api_result, api, nodes = check_tenant_api(tenant, connect)
    results.append(api_result)
    if api is not None:
        results += check_nodes(nodes, tenant.workers)
        present = {_name(node): node for node in nodes}
        results += [check_gpu_capacity(present[node], cards, platform.gpu_mode)
                    for node, cards in tenant.workers.items() if node in present]
        # Before the probe: its pod is not in the plan.
        results += check_plan_allocations(api, tenant.planned_cards)
        results += [check_konnectivity_agent(api), check_hami_scheduler(api), check_hami_webhook(api),
                    check_system_workers(api, nodes, tenant.workers)]
        results += probe_gpu_pod(api, platform.probe, waiting)
        results.append(check_object_quota(api, tenant))
        api.close()
        results.append(check_gpu_pods_through_hami(tenant, connect, platform.probe))
    others = [other for other_name, other in platform.tenants.items() if other_name != tenant.name]
    results += [check_isolation(tenant, other, connect) for other in others]
    if others and api is None:
        results.append(CheckResult("network isolation probes", False,
                                   f"not run: {tenant.name}'s API server does not answer (see 'tenant API answers')",
                                   "fix the tenant API first, then verify again"))
    elif others or platform.image_caches:
        network = check_network_isolation(platform, tenant, management, connect, waiting)
        # Each other tenant's rows next to its credential row.
        results = _grouped(results, network, [other.name for other in others])
    results.append(check_network_policies(management, tenant))
    results.append(check_policy_enforced(platform, tenant, management, waiting))
    return results


def _grouped(results: list[CheckResult], network: list[CheckResult], others: list[str]) -> list[CheckResult]:
    """Insert each other tenant's network rows after its `isolated from` row; leftovers (deletion failures) last."""
    grouped: list[CheckResult] = []
    placed: set[int] = set()
    for result in results:
        grouped.append(result)
        for other in others:
            if result.name == f"isolated from {other}":
                for index, row in enumerate(network):
                    if row.name.startswith(f"pod → {other} "):
                        grouped.append(row)
                        placed.add(index)
    return grouped + [row for index, row in enumerate(network) if index not in placed]
