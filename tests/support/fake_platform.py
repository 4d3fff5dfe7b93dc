"""A fake running platform for tests of `ops.verify`: recorded API objects behind `components.kube.KubeClient`.

Each `FakeCluster` is one API server holding objects shaped like the API's JSON
and the bearer tokens it accepts: admin tokens may do anything, a tenant user's
token only touch pods in its namespace (the `edit` role), and Pod Security
`baseline` is enforced in the workload namespaces. `FakeConnect` routes a
kubeconfig to the cluster its current context's server names and authenticates
its user's token, as a real API server would (unknown credentials: 401; unknown
server: no answer). A network probe pod's connection goes where the platform's
Services, node ports, source ranges and NetworkPolicies send it, as the CNI in use
enforces them (`tests/support/fake_network.py`); the source cluster's `reach`
table only forces what the network does not decide (a kubelet that never starts
the pod, a connect that hangs). `FakeDocker` answers `docker exec <cache>
wget .../debug/vars` with distribution's expvar JSON. `healthy_platform()` builds
an all-green platform plus the stack outputs that describe it (the contract
`__main__.py` exports, and the management NetworkPolicies as the components build
them); tests then break one link.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import ipaddress
import json
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components import kube
from components.kube import ApiError, UnreachableError
from components.management.image_cache import CERTS_D, MIRRORED_REGISTRIES, hosts_toml
from components.management.kamaji import etcd_network_policy
from components.tenant.spec import NODE_LABEL_POLICY, SYSTEM_NODE_LABEL, isolation_network_policy, object_resource_quota
from tests.support.fake_network import FakeNetwork, node_address

Json = dict[str, Any]

TENANT_USER = "system:serviceaccount:kube-system:tenant-user"
CALICO_VERSION = "v3.32.1"
LAB_NETWORK = "172.18.0.0/16"
# Network probe outcomes (see FakeSession._advance_network_probe).
OUTCOMES = ("connected", "refused", "unresolvable", "filtered", "hang", "pending", "unstarted-deadline")
# How many reads a "filtered" probe stays Running before the kubelet enforces activeDeadlineSeconds.
FILTERED_RUNNING_READS = 3
# Pod Security Standards, baseline (kubernetes.io/docs/concepts/security/pod-security-standards):
# capabilities a container may add, and the sysctls a pod may set.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
BASELINE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                    "net.ipv4.tcp_keepalive_probes"}

# kubernetes bootstrappolicy system:aggregate-to-edit (tests/data), which `edit` aggregates.
EDIT_RULES = yaml.safe_load((Path(__file__).resolve().parent.parent / "data" / "aggregate-to-edit.yaml").read_text(
))["rules"]
GPU, GPU_MEMORY, GPU_CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"
# What a Konnectivity server without a connected agent answers (apiserver-network-proxy).
WEBHOOK_REJECTION = (
    'Internal error occurred: failed calling webhook "vgpu.hami.io": failed to call webhook: Post '
    '"https://hami-scheduler.kube-system.svc:443/webhook/mutating?timeout=10s": No agent available'
)
# Kamaji's agent pods (clastix/kamaji 26.8.2-edge internal/resources/konnectivity/agent.go: label k8s-app, in
# kube-system) and HAMi's webhook's exempt namespaces (components/gpu/values.py).
AGENT_LABELS = {"k8s-app": "konnectivity-agent"}
AGENT_NAMESPACE = "kube-system"
WEBHOOK_EXEMPT = {"kube-system", "kube-public", "kube-node-lease", "tigera-operator", "calico-system",
                  "calico-apiserver"}
QUOTA_REJECTION = (
    'pods "verify-gpu-" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=1, used: nvidia.com/gpu=1, '
    'limited: nvidia.com/gpu=1'
)


def _suffix(index: int) -> str:
    """Five characters like the API server's generateName suffix, deterministic per creation."""
    return hashlib.sha256(str(index).encode()).hexdigest()[:5]


class FakeClock:
    """Monotonic time that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.time = 1000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.time

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.time += seconds


def node(name: str, capacity: dict[str, str] | None = None, ready: str = "True",
         reason: str = "KubeletReady", message: str = "kubelet is posting ready status",
         address: str | None = None) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            **({"addresses": [{"type": "InternalIP", "address": address},
                              {"type": "Hostname", "address": name}]} if address else {}),
            "capacity": {"cpu": "8", "memory": "16318412Ki", "pods": "110", **(capacity or {})},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": ready, "reason": reason, "message": message},
            ],
        },
    }


def baseline_violations(pod: Json) -> list[str]:
    """What in the pod the Pod Security `baseline` level forbids (the controls of the standard, in its order)."""
    spec = pod.get("spec") or {}
    found = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or []),
                  *(spec.get("ephemeralContainers") or [])]
    contexts = [spec.get("securityContext") or {}, *((c.get("securityContext") or {}) for c in containers)]
    if any((ctx.get("windowsOptions") or {}).get("hostProcess") for ctx in contexts):
        found.append("windowsOptions.hostProcess=true")
    for container in containers:
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"container {container.get('name')} privileged=true")
        added = set((context.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            found.append(f"container {container.get('name')} adds capabilities {sorted(added)}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"container {container.get('name')} uses hostPort")
        if context.get("procMount") not in (None, "Default"):
            found.append(f"container {container.get('name')} procMount={context['procMount']}")
    found += [f"hostPath volume {v.get('name')}" for v in spec.get("volumes") or [] if "hostPath" in v]
    for context in contexts:
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append("seccompProfile Unconfined")
        if (context.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            found.append("appArmorProfile not RuntimeDefault/Localhost")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type") not in (None, "", "container_t", "container_init_t", "container_kvm_t",
                                       "container_engine_t") or selinux.get("user") or selinux.get("role"):
            found.append("seLinuxOptions beyond the allowed types")
    sysctls = {item.get("name") for item in (spec.get("securityContext") or {}).get("sysctls") or []}
    if sysctls - BASELINE_SYSCTLS:
        found.append(f"unsafe sysctls {sorted(sysctls - BASELINE_SYSCTLS)}")
    return found


MANAGEMENT_NODE_ADDRESS = "172.18.0.2"
# Where Docker put each pull-through cache on the kind network.
CACHE_ADDRESSES = {registry: f"172.18.0.{5 + index}" for index, registry in enumerate(MIRRORED_REGISTRIES)}


def default_reach(host: str) -> str:
    """What a tenant pod gets for an address nobody configured: names do not resolve, addresses are dropped."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "unresolvable"
    return "filtered"


@dataclass
class FakeCluster:
    """One API server: its objects, the tokens it accepts, and how its admission and scheduling behave."""

    server: str
    tokens: set[str]
    # Tenant users' tokens -> the one namespace where they may create, read and delete pods.
    user_tokens: dict[str, str] = field(default_factory=dict)
    # Namespaces with Pod Security `baseline` enforced (the tenant's workload namespaces).
    baseline_namespaces: set[str] = field(default_factory=lambda: {"default"})
    down: bool = False
    # What the server answers to credentials it does not know.
    refusal: tuple[int, str] = (401, "Unauthorized")
    tenant_control_planes: dict[tuple[str, str], Json] = field(default_factory=dict)
    network_policies: dict[str, list[Json]] = field(default_factory=dict)
    nodes: list[Json] = field(default_factory=list)
    daemon_sets: dict[tuple[str, str], Json] = field(default_factory=dict)
    deployments: dict[tuple[str, str], Json] = field(default_factory=dict)
    webhooks: dict[str, Json] = field(default_factory=dict)
    cluster_roles: dict[str, Json] = field(default_factory=dict)
    resource_quotas: dict[tuple[str, str], Json] = field(default_factory=dict)
    pods: dict[tuple[str, str], Json] = field(default_factory=dict)
    datastores: dict[str, Json] = field(default_factory=dict)
    services: dict[tuple[str, str], Json] = field(default_factory=dict)
    # A network probe pod in this cluster, aimed at (host, port), ends like this (OUTCOMES); unset: what `network`
    # decides (or, without one, default_reach).
    reach: dict[tuple[str, int], str] = field(default_factory=dict)
    network: FakeNetwork | None = None
    # "mutate": HAMi's webhook is called through the tunnel (`tunnel_up`) and sets schedulerName on GPU pods; with
    # the tunnel down the call fails, and the webhook's failurePolicy decides (Fail: rejected, else admitted
    # unmutated); without a webhook configuration nothing is mutated. Forced: "skipped" (never called),
    # "reject" (every call fails), "over-quota" (a ResourceQuota refuses GPU pods).
    admission: str = "mutate"
    # Where the Konnectivity agents dial (the tenant's LoadBalancer address, 8132); None: the tunnel is always up.
    konnectivity_server: tuple[str, int] | None = None
    # The agents' pods (kube-system, label k8s-app=konnectivity-agent), by name; a deleted one is replaced at once
    # (the DaemonSet controller), and connects on its `agent_connect_after`-th attempt if the network lets it.
    agent_pods: dict[str, Json] = field(default_factory=dict)
    # Agent pod -> its tunnel is open: an open connection stays open when a NetworkPolicy is added later (Calico
    # keeps established flows: projectcalico/calico issue 6399), it closes only with the pod (the server removes the backend when
    # the stream ends: apiserver-network-proxy v0.35.0 pkg/server/server.go Connect, `defer s.removeBackend`).
    agent_links: dict[str, bool] = field(default_factory=dict)
    agent_attempts: dict[str, int] = field(default_factory=dict)
    agent_connect_after: int = 2
    # A deleted agent pod terminates gracefully: its tunnel stays open for this many more admission calls.
    agent_grace_calls: int = 1
    terminating_agents: dict[str, int] = field(default_factory=dict)
    # Request ("delete networkpolicies", ...) -> the error it fails with, every time.
    failing_requests: dict[str, ApiError] = field(default_factory=dict)
    dry_runs: list[Json] = field(default_factory=list)
    # The node-label admission policy refuses a node-restriction label change by anyone but the program.
    node_label_policy: bool = True
    # The admission policy that refuses GPU pods skipping HAMi's webhook (components/gpu/values.py hami_pod_policy).
    gpu_pod_policy: bool = True
    # HAMi allocates the pod on this read of it; None: never (stays Pending).
    allocate_on_read: int | None = 2
    allocated_devices: str = "GPU-MOCK-A0,NVIDIA,3000,30:;"
    # Reads of pods fail (no answer) this many times first.
    failing_pod_reads: int = 0
    created: list[Json] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    # Reads of GPU probe pods (HAMi allocates on the allocate_on_read-th).
    pod_reads: int = 0
    # Reads per network probe pod.
    probe_reads: dict[str, int] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    sessions: list[FakeSession] = field(default_factory=list)

    def session(self, token: str | None) -> FakeSession:
        session = FakeSession(self, token)
        self.sessions.append(session)
        return session

    def add_agent(self, node_name: str, host_network: bool = False, connected: bool = False) -> str:
        name = f"konnectivity-agent-{_suffix(len(self.agent_attempts) + 1000)}"
        self.agent_pods[name] = {
            "metadata": {"name": name, "namespace": AGENT_NAMESPACE, "labels": dict(AGENT_LABELS)},
            "spec": {"nodeName": node_name, "hostNetwork": host_network,
                     "containers": [{"name": "konnectivity-agent", "command": ["/proxy-agent"]}]},
            "status": {"phase": "Running"},
        }
        self.agent_links[name] = connected
        self.agent_attempts[name] = 0
        return name

    def tunnel_up(self) -> bool:
        """Each agent without a tunnel tries once more (the agent retries forever); up when any agent has one."""
        if self.konnectivity_server is None:
            return True
        host, port = self.konnectivity_server
        lingering = any(calls > 0 for calls in self.terminating_agents.values())
        self.terminating_agents = {name: calls - 1 for name, calls in self.terminating_agents.items() if calls > 1}
        for name, pod in self.agent_pods.items():
            if self.agent_links[name]:
                continue
            self.agent_attempts[name] += 1
            if self.agent_attempts[name] >= self.agent_connect_after and self.network is not None:
                self.agent_links[name] = self.network.outcome(self, pod, host, port) == "connected"
        return lingering or any(self.agent_links[name] for name in self.agent_pods)

    def admission_for(self, namespace: str) -> str:
        """What admission does to a pod created in `namespace` now (see `admission`)."""
        if self.admission != "mutate":
            return self.admission
        hooks = (self.webhooks.get("hami-webhook") or {}).get("webhooks") or []
        if not hooks or namespace in WEBHOOK_EXEMPT:
            return "skipped"
        if self.tunnel_up():
            return "mutate"
        return "reject" if hooks[0].get("failurePolicy") == "Fail" else "skipped"


def _is_network_probe(pod: Json) -> bool:
    return pod["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "network-probe"


# Where a FakeCluster keeps the objects of a kind verify reads one by one (by (namespace, name), or name).
_STORES = {"TenantControlPlane": "tenant_control_planes", "DataStore": "datastores", "DaemonSet": "daemon_sets",
           "Deployment": "deployments", "MutatingWebhookConfiguration": "webhooks", "Service": "services",
           "ClusterRole": "cluster_roles", "ResourceQuota": "resource_quotas"}


class FakeSession:
    """`components.kube.KubeClient` of one cluster as one user."""

    def __init__(self, cluster: FakeCluster, token: str | None) -> None:
        self.cluster = cluster
        self.token = token
        self.closed = False

    def _enter(self, request: str, resource: str = "", namespace: str | None = None) -> FakeCluster:
        """Authenticate, then authorise: a user token may only touch pods in its own namespace."""
        cluster = self.cluster
        cluster.requests.append(request)
        if cluster.down:
            raise UnreachableError(f"HTTPSConnectionPool(host='{cluster.server}'): connect timeout")
        if request in cluster.failing_requests:
            raise cluster.failing_requests[request]
        if self.token in cluster.tokens:
            return cluster
        if self.token not in cluster.user_tokens:
            raise ApiError(*cluster.refusal)
        if resource == "pods" and namespace == cluster.user_tokens[self.token]:
            return cluster
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        verb = request.split()[0]
        raise ApiError(403, f'{resource or request.split()[-1]} is forbidden: User "{TENANT_USER}" cannot {verb} '
                            f'resource "{resource or request.split()[-1]}" in API group "" {where}')

    def close(self) -> None:
        self.closed = True

    def find(self, kind: str, name: str, namespace: str | None = None) -> Json | None:
        if kind == "Pod":
            return self._read_pod(namespace or "", name)
        if kind == "NetworkPolicy":
            policies = self._enter("get networkpolicies", "networkpolicies", namespace).network_policies
            return copy.deepcopy(next((p for p in policies.get(namespace or "", []) if p["metadata"]["name"] == name),
                                      None))
        store = getattr(self._enter(f"get {kube.RESOURCES[kind][1]}"), _STORES[kind])
        return copy.deepcopy(store.get((namespace, name) if namespace else name))

    def list(self, kind: str, namespace: str | None = None) -> list[Json]:
        if kind == "Node":
            return copy.deepcopy(self._enter("list nodes").nodes)
        if kind == "Pod" and namespace is None:
            # Every pod of the cluster (verify's allocation table reads HAMi's annotations on each).
            return copy.deepcopy(list(self._enter("list pods").pods.values()))
        if kind == "Pod":
            cluster = self._enter("list pods", "pods", namespace)
            agents = [copy.deepcopy(pod) for pod in cluster.agent_pods.values()] if namespace == AGENT_NAMESPACE else []
            return [*agents, *(self._read_pod(ns, name) for ns, name in list(cluster.pods) if ns == namespace)]
        assert kind == "NetworkPolicy", f"verify lists no {kind}"
        return copy.deepcopy(self._enter("list networkpolicies").network_policies.get(namespace or "", []))

    def patch(self, kind: str, name: str, patch: Json, namespace: str | None = None) -> Json:
        raise AssertionError("verify patches nothing")

    def patch_status(self, kind: str, name: str, patch: Json, namespace: str | None = None,
                     dry_run: bool = False) -> Json:
        assert dry_run and kind == "Node", "verify patches nothing but a dry run of a Node's status"
        cluster = self._enter("patch nodes/status")
        labels = (patch.get("metadata") or {}).get("labels") or {}
        if cluster.node_label_policy and any(key.startswith("node-restriction.kubernetes.io/") for key in labels):
            raise ApiError(422, f'nodes "{name}" is forbidden: ValidatingAdmissionPolicy \'{NODE_LABEL_POLICY}\' '
                                f"with binding '{NODE_LABEL_POLICY}' denied request: only gpu-tenancy sets ...")
        cluster.dry_runs.append(patch)
        return patch

    def evict(self, name: str, namespace: str) -> None:
        raise AssertionError("verify evicts nothing")

    def create(self, obj: Json, dry_run: bool = False) -> Json:
        if obj["kind"] == "NetworkPolicy":
            return self._create_policy(obj, dry_run)
        assert obj["kind"] == "Pod", "verify creates probe pods and the tunnel cut's NetworkPolicy only"
        pod, namespace = obj, obj["metadata"]["namespace"]
        cluster = self._enter("create pods", "pods", namespace)
        violations = baseline_violations(pod) if namespace in cluster.baseline_namespaces else []
        if violations:
            raise ApiError(403, f'pods "{pod["metadata"].get("generateName", "")}" is forbidden: violates '
                                f'PodSecurity "baseline:latest": {", ".join(violations)}')
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        skipped = pod["metadata"].get("labels", {}).get("hami.io/webhook") == "ignore"
        if cluster.gpu_pod_policy and skipped and GPU in limits and namespace not in WEBHOOK_EXEMPT:
            raise ApiError(403, f'pods "{pod["metadata"].get("generateName", "")}" is forbidden: '
                                "ValidatingAdmissionPolicy 'gpu-tenancy-gpu-pods-through-hami' with binding "
                                "'gpu-tenancy-gpu-pods-through-hami' denied request: a GPU pod may not carry the "
                                "label hami.io/webhook=ignore")
        admission = "skipped" if skipped else cluster.admission_for(namespace)
        if admission == "reject":  # the API server calls the webhook for every pod, and it is unreachable
            raise ApiError(500, WEBHOOK_REJECTION)
        if admission == "over-quota" and GPU in limits:
            raise ApiError(403, QUOTA_REJECTION)
        pod = copy.deepcopy(pod)
        pod["metadata"]["name"] = pod["metadata"].pop("generateName") + _suffix(len(cluster.created) +
                                                                                len(cluster.dry_runs))
        pod["metadata"]["namespace"] = namespace
        pod["metadata"].setdefault("annotations", {})
        mutated = admission == "mutate" and GPU in limits
        # The API server defaults schedulerName; HAMi's webhook overrides it for GPU pods.
        pod["spec"]["schedulerName"] = "hami-scheduler" if mutated else pod["spec"].get(
            "schedulerName", "default-scheduler")
        pod["status"] = {"phase": "Pending"}
        if dry_run:  # admitted, defaulted and mutated, not stored
            cluster.dry_runs.append(copy.deepcopy(pod))
            return pod
        cluster.created.append(copy.deepcopy(pod))
        cluster.pods[(namespace, pod["metadata"]["name"])] = pod
        return copy.deepcopy(pod)

    def _read_pod(self, namespace: str, name: str) -> Json | None:
        cluster = self._enter("read pods", "pods", namespace)
        if cluster.failing_pod_reads:
            cluster.failing_pod_reads -= 1
            raise UnreachableError("read timed out")
        pod = cluster.pods.get((namespace, name))
        if pod is None:
            return None
        if _is_network_probe(pod):
            return self._advance_network_probe(cluster, pod)
        if GPU not in pod["spec"]["containers"][0].get("resources", {}).get("limits", {}):
            return copy.deepcopy(pod)  # anything else (the management cluster's etcd pods) as recorded
        cluster.pod_reads += 1
        schedulable = cluster.allocate_on_read is not None and bool(cluster.nodes)
        if schedulable and cluster.pod_reads >= cluster.allocate_on_read:
            target = cluster.nodes[0]["metadata"]["name"]
            pod["spec"]["nodeName"] = target
            pod["metadata"]["annotations"].update({
                "hami.io/vgpu-node": target,
                "hami.io/vgpu-devices-allocated": cluster.allocated_devices,
            })
            pod["status"] = {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
        elif not schedulable:
            pod["status"]["conditions"] = [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 NodeUnfitPod.",
            }]
        return copy.deepcopy(pod)

    @staticmethod
    def _advance_network_probe(cluster: FakeCluster, pod: Json) -> Json:
        """Pending on the first read, then the outcome `reach` gives the pod's HOST/PORT, as the kubelet reports
        it (restartPolicy Never; activeDeadlineSeconds ends a connect nobody answers; FallbackToLogsOnError)."""
        name = pod["metadata"]["name"]
        reads = cluster.probe_reads[name] = cluster.probe_reads.get(name, 0) + 1
        env = {item["name"]: item["value"] for item in pod["spec"]["containers"][0].get("env", [])}
        host, port = env["HOST"], int(env["PORT"])
        outcome = cluster.reach.get((host, port)) or (
            cluster.network.outcome(cluster, pod, host, port) if cluster.network else default_reach(host))
        image = pod["spec"]["containers"][0]["image"]
        started = {"startedAt": "2026-12-01T10:00:01Z"}
        waiting = {"waiting": {"reason": "ContainerCreating"}}
        if outcome == "pending":
            waiting = {"waiting": {"reason": "ErrImagePull", "message": f"failed to pull and unpack image {image}"}}
        status: Json = {"phase": "Pending", "startTime": "2026-12-01T10:00:00Z", "containerStatuses": [
            {"name": "probe", "image": image, "ready": False, "restartCount": 0, "state": waiting}]}
        container = status["containerStatuses"][0]
        if reads >= 2 and outcome in ("connected", "refused", "unresolvable"):
            code, message = {
                "connected": (0, ""),
                "refused": (1, f"bash: connect: Connection refused\nbash: line 1: /dev/tcp/{host}/{port}: "
                               "Connection refused\n"),
                "unresolvable": (1, f"bash: line 1: {host}: Name or service not known\n"
                                    f"bash: line 1: /dev/tcp/{host}/{port}: Invalid argument\n"),
            }[outcome]
            status["phase"] = "Succeeded" if code == 0 else "Failed"
            container["state"] = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                                 "finishedAt": "2026-12-01T10:00:01Z", **started,
                                                 **({"message": message} if message else {})}}
        elif reads >= 2 and outcome in ("filtered", "hang"):
            if outcome == "filtered" and reads >= 2 + FILTERED_RUNNING_READS:
                status.update(phase="Failed", reason="DeadlineExceeded",
                              message="Pod was active on the node longer than the specified deadline")
                container["state"] = {"terminated": {"exitCode": 137, "reason": "Error", **started,
                                                     "finishedAt": "2026-12-01T10:00:10Z"}}
            else:
                status["phase"] = "Running"
                container["state"] = {"running": started}
        elif reads >= 2 and outcome == "unstarted-deadline":
            status.update(phase="Failed", reason="DeadlineExceeded",
                          message="Pod was active on the node longer than the specified deadline")
        pod["status"] = status
        return copy.deepcopy(pod)

    def _create_policy(self, policy: Json, dry_run: bool) -> Json:
        assert not dry_run
        namespace = policy["metadata"]["namespace"]
        cluster = self._enter("create networkpolicies", "networkpolicies", namespace)
        present = cluster.network_policies.setdefault(namespace, [])
        if any(p["metadata"]["name"] == policy["metadata"]["name"] for p in present):
            raise ApiError(409, f'networkpolicies.networking.k8s.io "{policy["metadata"]["name"]}" already exists')
        present.append(copy.deepcopy(policy))
        return copy.deepcopy(policy)

    def delete(self, kind: str, name: str, namespace: str | None = None, *,
               grace_period_seconds: int | None = None) -> bool:
        if kind == "NetworkPolicy":
            cluster = self._enter("delete networkpolicies", "networkpolicies", namespace)
            policies = cluster.network_policies.get(namespace or "", [])
            kept = [p for p in policies if p["metadata"]["name"] != name]
            cluster.network_policies[namespace or ""] = kept
            return len(kept) < len(policies)
        if namespace == AGENT_NAMESPACE and name in self.cluster.agent_pods:
            cluster = self._enter("delete pods", "pods", namespace)
            pod = cluster.agent_pods.pop(name)
            if cluster.agent_links.pop(name) and cluster.agent_grace_calls:
                cluster.terminating_agents[name] = cluster.agent_grace_calls
            cluster.deleted.append((namespace, name))
            # The DaemonSet controller replaces it on the same node.
            cluster.add_agent(pod["spec"]["nodeName"], host_network=pod["spec"]["hostNetwork"])
            return True
        assert kind == "Pod" and grace_period_seconds == 0, "verify deletes its probe pods, at once"
        cluster = self._enter("delete pods", "pods", namespace)
        cluster.deleted.append((namespace or "", name))
        return cluster.pods.pop((namespace or "", name), None) is not None


class FakeConnect:
    """The `Connect` seam: kubeconfig -> session on the cluster its server names, as its user."""

    def __init__(self, clusters: Iterable[FakeCluster]) -> None:
        self.clusters = {cluster.server: cluster for cluster in clusters}
        self.kubeconfigs: list[Json] = []

    def __call__(self, kubeconfig: Json) -> FakeSession:
        self.kubeconfigs.append(copy.deepcopy(kubeconfig))
        context = kube.current_context(kubeconfig)
        target = self.clusters.get(context.server) or FakeCluster(context.server, set(), down=True)
        return target.session(context.user.get("token"))

    def sessions(self) -> list[FakeSession]:
        return [session for cluster in self.clusters.values() for session in cluster.sessions]


def kubeconfig_yaml(cluster: str, server: str, token: str, namespace: str | None = None) -> str:
    """A kubeconfig shaped like kind's and Kamaji's admin.conf (bearer token instead of a client certificate);
    with `namespace`, shaped like the tenant user's (components/tenant/spec.py tenant_user_kubeconfig)."""
    user = f"{cluster}-user" if namespace else f"{cluster}-admin"
    context = {"cluster": cluster, "user": user, **({"namespace": namespace} if namespace else {})}
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(f"CA of {cluster}".encode()).decode(),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster if namespace else f"{user}@{cluster}", "context": context}],
        "current-context": cluster if namespace else f"{user}@{cluster}",
    })


def expvar_json(blobs: tuple[int, int, int, int, int] = (212, 204, 8, 61_865_984, 1_642_070_016),
                manifests: tuple[int, int, int, int, int] = (96, 71, 25, 98_304, 377_856)) -> str:
    """distribution's /debug/vars (Go expvar): the runtime's own vars, then `registry` with the notification
    endpoints, the blob descriptor cache and the proxy's Metrics structs (registry/proxy/proxymetrics.go:
    Requests, Hits, Misses, BytesPulled, BytesPushed)."""
    def metrics(values: tuple[int, int, int, int, int]) -> Json:
        return dict(zip(("Requests", "Hits", "Misses", "BytesPulled", "BytesPushed"), values, strict=True))

    return json.dumps({
        "cmdline": ["registry", "serve", "/etc/distribution/config.yml"],
        "memstats": {"Alloc": 9_543_112, "TotalAlloc": 812_004_376, "Sys": 31_823_112, "NumGC": 214,
                     "PauseNs": [81_230, 64_105], "BySize": [{"Size": 0, "Mallocs": 0, "Frees": 0}]},
        "registry": {
            "cache": {"storage": {"blobdescriptor": {"Requests": 420, "Hits": 388, "Misses": 32}}},
            "notifications": {"endpoints": None},
            "proxy": {"blobs": metrics(blobs), "manifests": metrics(manifests)},
        },
    }, indent=1)


class FakeDocker:
    """`subprocess.run` for the docker commands `make verify` runs: `docker exec <cache> wget -qO- <url>` (running
    caches answer their expvar JSON), `docker exec <node> head -v -n <n> <files>` (GNU head: a `==> file <==`
    header before each file, a blank line between files, a message on stderr and exit 1 for a missing one) and
    `docker inspect --format '{{.Name}} {{.Created}} {{.State.StartedAt}}' <names>`."""

    # Every container was created, and last started, at this time unless `times` says otherwise.
    EPOCH = "2026-11-30T09:00:00.000000000Z"

    def __init__(self, containers: dict[str, str | None], node_files: dict[str, dict[str, str]] | None = None,
                 times: dict[str, tuple[str, str]] | None = None, addresses: dict[str, str] | None = None) -> None:
        # container -> its address on the kind network
        self.addresses = addresses or {}
        # container name -> its /debug/vars answer; None: the container exists but is stopped.
        self.containers = containers
        # node container -> path -> content (a node absent here is no container).
        self.node_files = node_files or {}
        self.times = times or {}
        self.calls: list[tuple[list[str], Json]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), kwargs))
        if argv[:2] == ["docker", "inspect"]:
            return self._inspect(argv)
        assert argv[:2] == ["docker", "exec"], argv
        container = argv[2]
        if container in self.node_files and argv[3] == "head":
            return self._head(argv, self.node_files[container])
        if container not in self.containers:
            return self._no_such(argv, container)
        answer = self.containers[container]
        if answer is None:
            return subprocess.CompletedProcess(argv, 1, "", f"Error response from daemon: container "
                                                            f"{hashlib.sha256(container.encode()).hexdigest()} is "
                                                            "not running\n")
        return subprocess.CompletedProcess(argv, 0, answer, "")

    @staticmethod
    def _no_such(argv: list[str], container: str) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "", f"Error response from daemon: No such container: "
                                                        f"{container}\n")

    @staticmethod
    def _head(argv: list[str], files: dict[str, str]) -> subprocess.CompletedProcess[str]:
        paths = argv[argv.index("-n") + 2:]
        out, err = [], []
        for path in paths:
            if path not in files:
                err.append(f"head: cannot open '{path}' for reading: No such file or directory\n")
                continue
            out.append(("\n" if out else "") + f"==> {path} <==\n" + files[path])
        return subprocess.CompletedProcess(argv, 1 if err else 0, "".join(out), "".join(err))

    def _inspect(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        names = argv[argv.index("--format") + 2:]
        lines, missing = [], []
        for name in names:
            if name not in self.containers and name not in self.node_files:
                missing.append(f"Error: No such object: {name}\n")
                continue
            if "IPAddress" in argv[argv.index("--format") + 1]:
                lines.append(f"/{name} {self.addresses.get(name, '')} \n")
                continue
            created, started = self.times.get(name, (self.EPOCH, self.EPOCH))
            lines.append(f"/{name} {created} {started}\n")
        return subprocess.CompletedProcess(argv, 1 if missing else 0, "".join(lines), "".join(missing))


def card(uuid: str, memory_mib: int = 8192, cores: int = 100, slots: int = 10) -> Json:
    return {"uuid": uuid, "model": "NVIDIA-A100", "memoryMiB": memory_mib, "cores": cores, "slots": slots}


@dataclass
class FakePlatform:
    outputs: Json
    management: FakeCluster
    tenants: dict[str, FakeCluster]
    connect: FakeConnect
    docker: FakeDocker

    def write_outputs(self, directory) -> str:
        path = directory / "outputs.json"
        path.write_text(json.dumps(self.outputs))
        return str(path)


def healthy_platform(tenants: Iterable[str] = ("tenant-a", "tenant-b"), gpu_mode: str = "mock",
                     workers: dict[str, dict[str, list[Json]]] | None = None) -> FakePlatform:
    """An all-green platform, shaped like the kind lab: every check of `make verify` holds, and the management
    NetworkPolicies are enforced by kind's kindnetd, which fails open (NOT ENFORCED). Every tenant's workers share
    the kind network, which every control plane admits, so each tenant's pods connect to the others' API and
    Konnectivity ports by design; the control plane Services have no node port; HAMi's extender is a ClusterIP
    Service; the shared etcd's names do not resolve in a tenant and its pod addresses are not routed there; each
    tenant's `default` namespace may not send to the image caches (CACHE_FENCE)."""
    tenants = list(tenants)
    management = FakeCluster("https://127.0.0.1:40123", {"kind-admin-token"})
    management.nodes.append(node("gpu-tenancy-control-plane", address=MANAGEMENT_NODE_ADDRESS))
    management.daemon_sets[("kube-system", "kindnet")] = {"metadata": {"name": "kindnet", "namespace": "kube-system"}}
    etcd = [f"kamaji-etcd-{i}.kamaji-etcd.kamaji-system.svc.cluster.local:2379" for i in range(3)]
    management.datastores["default"] = {
        "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "DataStore", "metadata": {"name": "default"},
        "spec": {"driver": "etcd", "endpoints": etcd}, "status": {"ready": True},
    }
    for index in range(3):
        management.pods[("kamaji-system", f"kamaji-etcd-{index}")] = {
            "metadata": {"name": f"kamaji-etcd-{index}", "namespace": "kamaji-system",
                         "labels": dict(etcd_network_policy()["spec"]["podSelector"]["matchLabels"])},
            "spec": {"nodeName": "gpu-tenancy-control-plane", "containers": [
                {"name": "etcd", "image": "quay.io/coreos/etcd:v3.5.6",
                 "ports": [{"containerPort": 2379}, {"containerPort": 2380}]}]},
            "status": {"phase": "Running", "podIP": f"10.244.0.{10 + index}"},
        }
    # The management NetworkPolicies as the program creates them (what the API server returns, defaulted).
    etcd_policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", **etcd_network_policy()}
    management.network_policies[etcd_policy["metadata"]["namespace"]] = [etcd_policy]
    caches = {registry: {"container": f"gpu-tenancy-mirror-{registry.replace('.', '-')}",
                         "url": f"http://gpu-tenancy-mirror-{registry.replace('.', '-')}:5000"}
              for registry in MIRRORED_REGISTRIES}
    mirror = {"caches": caches, "nodes": ["gpu-tenancy-control-plane"]}
    outputs: Json = {
        "managementKubeconfig": kubeconfig_yaml("kind-gpu-tenancy", management.server, "kind-admin-token"),
        "kindSubnet": LAB_NETWORK,
        "workerNetworks": [LAB_NETWORK],
        "lbPoolRange": "172.18.255.200-172.18.255.250",
        "tenantKubeconfigs": {},
        "tenantAdminKubeconfigs": {},
        "tenants": {},
        "imageMirror": mirror,
        "plan": {
            "managementCluster": "gpu-tenancy",
            "gpuMode": gpu_mode,
            "smokeTest": {"enabled": True, "gpus": 1, "memoryMiB": 3000, "cores": 30},
            "versions": {"calico": CALICO_VERSION},
            "tenants": {},
        },
    }
    clusters: dict[str, FakeCluster] = {}
    for index, name in enumerate(tenants):
        endpoint = f"172.18.255.{200 + index}:6443"
        letter = name[-1].upper()
        planned = (workers or {}).get(name) or {f"{name}-worker-0": [card(f"GPU-MOCK-{letter}0")]}
        cluster = FakeCluster(f"https://{endpoint}", {f"{name}-admin-token"},
                              user_tokens={f"{name}-user-token": "default"})
        for node_index, (node_name, cards) in enumerate(planned.items()):
            cluster.nodes.append(node(node_name, {
                GPU: str(sum(c["slots"] for c in cards)),
                GPU_MEMORY: str(sum(c["memoryMiB"] for c in cards)),
                GPU_CORES: str(sum(c["cores"] for c in cards)),
            }, address=f"172.18.{1 + index}.{10 + node_index}"))
            if not cards:  # a worker without GPUs: the program labels it a system worker
                cluster.nodes[-1]["metadata"]["labels"][SYSTEM_NODE_LABEL] = "true"
        # HAMi's extender and metrics, served inside the tenant only (components/gpu/values.py).
        cluster.services[("kube-system", "hami-scheduler")] = {
            "metadata": {"name": "hami-scheduler", "namespace": "kube-system"},
            "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 443}, {"name": "scheduler",
                                                                                    "port": 31998}]}}
        # One agent per node (a DaemonSet), each with its tunnel to the tenant's Konnectivity server open.
        cluster.konnectivity_server = (endpoint.split(":")[0], 8132)
        for node_name in planned:
            cluster.add_agent(node_name, connected=True)
        cluster.daemon_sets[("kube-system", "konnectivity-agent")] = {
            "metadata": {"name": "konnectivity-agent", "namespace": "kube-system"},
            "status": {"desiredNumberScheduled": len(planned), "numberReady": len(planned),
                       "currentNumberScheduled": len(planned)},
        }
        cluster.deployments[("kube-system", "hami-scheduler")] = {
            "metadata": {"name": "hami-scheduler", "namespace": "kube-system"},
            "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1},
        }
        cluster.webhooks["hami-webhook"] = {
            "metadata": {"name": "hami-webhook"},
            "webhooks": [{"name": "vgpu.hami.io", "failurePolicy": "Fail", "sideEffects": "None"}],
        }
        cluster.allocated_devices = f"GPU-MOCK-{letter}0,NVIDIA,3000,30:;"
        # The built-in `edit` as the cluster aggregates it, and the quota the program creates, as enforced.
        cluster.cluster_roles["edit"] = {"metadata": {"name": "edit"}, "rules": copy.deepcopy(EDIT_RULES)}
        quota = object_resource_quota(None, "default")
        cluster.resource_quotas[("default", "object-quota")] = {**quota, "status": {"hard": quota["spec"]["hard"]}}
        management.tenant_control_planes[(name, name)] = {
            "apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "TenantControlPlane",
            "metadata": {"name": name, "namespace": name},
            "spec": {"dataStore": "default", "addons": {"konnectivity": {"server": {"port": 8132}}},
                     "networkProfile": {"loadBalancerSourceRanges": [LAB_NETWORK]}},
            "status": {
                "controlPlaneEndpoint": endpoint,
                "kubernetesResources": {"version": {"status": "Ready", "version": "v1.35.0"}},
                "storage": {"dataStoreName": "default", "driver": "etcd"},
            },
        }
        management.network_policies[name] = [isolation_network_policy(name, [LAB_NETWORK])]
        host = endpoint.split(":")[0]
        # Kamaji's Service of the control plane (internal/resources/k8s_service_resource.go): named after the
        # TenantControlPlane, no node ports (allocateLoadBalancerNodePorts false), MetalLB's address in status.
        management.services[(name, name)] = {
            "metadata": {"name": name, "namespace": name},
            "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": False,
                     "selector": {"kamaji.clastix.io/name": name},
                     "ports": [{"name": "kube-apiserver", "port": 6443, "targetPort": 6443},
                               {"name": "konnectivity-server", "port": 8132, "targetPort": 8132}],
                     "loadBalancerSourceRanges": [LAB_NETWORK]},
            "status": {"loadBalancer": {"ingress": [{"ip": host, "ipMode": "VIP"}]}},
        }
        management.pods[(name, f"{name}-7d9f8b6c5-x2x9q")] = {
            "metadata": {"name": f"{name}-7d9f8b6c5-x2x9q", "namespace": name,
                         "labels": {"kamaji.clastix.io/name": name}},
            "spec": {"nodeName": "gpu-tenancy-control-plane", "containers": [
                {"name": "kube-apiserver", "ports": [{"containerPort": 6443}]},
                {"name": "konnectivity-server", "ports": [{"containerPort": 8132}]}]},
            "status": {"phase": "Running", "podIP": f"10.244.0.{30 + index}"},
        }
        outputs["tenantAdminKubeconfigs"][name] = kubeconfig_yaml(name, cluster.server, f"{name}-admin-token")
        outputs["tenantKubeconfigs"][name] = kubeconfig_yaml(name, cluster.server, f"{name}-user-token", "default")
        outputs["tenants"][name] = {
            "namespace": name,
            "controlPlane": name,
            "endpoint": endpoint,
            "discoveryHash": "sha256:" + "ab" * 32,
            "dataStore": "default",
            "sourceRanges": [LAB_NETWORK],
            "nodes": list(planned),
            "gpuCapacity": {n: sum(c["slots"] for c in cards) for n, cards in planned.items()},
            "smokeTest": {"pod": "gpu-smoke-test", "node": next(iter(planned)), "schedulerName": "hami-scheduler",
                          "devicesAllocated": cluster.allocated_devices},
        }
        outputs["plan"]["tenants"][name] = {
            "kubernetesVersion": "v1.35.0",
            "serviceCidr": f"10.{96 + index}.0.0/16",
            "podCidr": f"10.{244 + index}.0.0/16",
            "workerCidrs": [],
            "workers": planned,
            "gpuSlots": sum(c["slots"] for cards in planned.values() for c in cards),
            "quota": None,
        }
        clusters[name] = cluster
    # Every container node has its mirror fence on the caches' port (node-mirrors.sh).
    network = FakeNetwork(management, clusters, hosts={address: {5000} for address in CACHE_ADDRESSES.values()},
                          fenced_nodes={node_address(n): {5000} for c in clusters.values() for n in c.nodes})
    for cluster in (management, *clusters.values()):
        cluster.network = network
    # Every node pulls through the caches: node-mirrors.sh wrote its hosts.toml files.
    for name in tenants:
        mirror["nodes"] += list(outputs["plan"]["tenants"][name]["workers"])
    hosts = {f"{CERTS_D}/{registry}/hosts.toml": hosts_toml(registry, cache["url"]) for registry, cache in caches.items()}
    docker = FakeDocker({cache["container"]: expvar_json() for cache in caches.values()},
                        {node: dict(hosts) for node in mirror["nodes"]},
                        addresses={cache["container"]: CACHE_ADDRESSES[registry] for registry, cache in caches.items()})
    return FakePlatform(outputs, management, clusters, FakeConnect([management, *clusters.values()]), docker)
