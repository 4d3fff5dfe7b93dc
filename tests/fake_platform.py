"""A fake running platform for tests of `tools.verify`: recorded API objects behind the `KubeApi` protocol.

Each `FakeCluster` is one API server holding objects shaped like the API's JSON
and the bearer tokens it accepts. `FakeConnect` routes a kubeconfig to the
cluster its current context's server names and authenticates its user's token,
as a real API server would (unknown credentials: 401; unknown server: no answer).
`healthy_platform()` builds an all-green platform plus the stack outputs that
describe it (the contract `__main__.py` exports); tests then break one link.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from tools.verify_api import ApiError

Json = dict[str, Any]

GPU, GPU_MEMORY, GPU_CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"
# What a Konnectivity server without a connected agent answers (apiserver-network-proxy).
WEBHOOK_REJECTION = (
    'Internal error occurred: failed calling webhook "vgpu.hami.io": failed to call webhook: Post '
    '"https://hami-scheduler.kube-system.svc:443/webhook/mutating?timeout=10s": No agent available'
)
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
         reason: str = "KubeletReady", message: str = "kubelet is posting ready status") -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": "8", "memory": "16318412Ki", "pods": "110", **(capacity or {})},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": ready, "reason": reason, "message": message},
            ],
        },
    }


@dataclass
class FakeCluster:
    """One API server: its objects, the tokens it accepts, and how its admission and scheduling behave."""

    server: str
    tokens: set[str]
    down: bool = False
    # What the server answers to credentials it does not know.
    refusal: tuple[int, str] = (401, "Unauthorized")
    tenant_control_planes: dict[tuple[str, str], Json] = field(default_factory=dict)
    network_policies: dict[str, list[Json]] = field(default_factory=dict)
    nodes: list[Json] = field(default_factory=list)
    daemon_sets: dict[tuple[str, str], Json] = field(default_factory=dict)
    deployments: dict[tuple[str, str], Json] = field(default_factory=dict)
    webhooks: dict[str, Json] = field(default_factory=dict)
    pods: dict[tuple[str, str], Json] = field(default_factory=dict)
    # "mutate": HAMi's webhook sets schedulerName; "skipped": it was never called
    # (failurePolicy Ignore, dead tunnel); "reject": failurePolicy Fail, dead tunnel;
    # "over-quota": a ResourceQuota refuses the pod.
    admission: str = "mutate"
    # HAMi allocates the pod on this read of it; None: never (stays Pending).
    allocate_on_read: int | None = 2
    allocated_devices: str = "GPU-MOCK-A0,NVIDIA,3000,30:;"
    # read_pod fails (no answer) this many times first.
    failing_pod_reads: int = 0
    created: list[Json] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    pod_reads: int = 0
    requests: list[str] = field(default_factory=list)

    def session(self, token: str | None) -> FakeSession:
        return FakeSession(self, token)


class FakeSession:
    """`KubeApi` for one cluster as one user."""

    def __init__(self, cluster: FakeCluster, token: str | None) -> None:
        self.cluster = cluster
        self.token = token

    def _enter(self, request: str) -> FakeCluster:
        cluster = self.cluster
        cluster.requests.append(request)
        if cluster.down:
            raise ApiError(None, f"HTTPSConnectionPool(host='{cluster.server}'): connect timeout")
        if self.token not in cluster.tokens:
            raise ApiError(*cluster.refusal)
        return cluster

    def get_tenant_control_plane(self, namespace: str, name: str) -> Json | None:
        return copy.deepcopy(self._enter("get tcp").tenant_control_planes.get((namespace, name)))

    def list_network_policies(self, namespace: str) -> list[Json]:
        return copy.deepcopy(self._enter("list networkpolicies").network_policies.get(namespace, []))

    def list_nodes(self) -> list[Json]:
        return copy.deepcopy(self._enter("list nodes").nodes)

    def read_daemon_set(self, namespace: str, name: str) -> Json | None:
        return copy.deepcopy(self._enter("read daemonset").daemon_sets.get((namespace, name)))

    def read_deployment(self, namespace: str, name: str) -> Json | None:
        return copy.deepcopy(self._enter("read deployment").deployments.get((namespace, name)))

    def read_mutating_webhook_configuration(self, name: str) -> Json | None:
        return copy.deepcopy(self._enter("read webhook").webhooks.get(name))

    def create_pod(self, namespace: str, pod: Json) -> Json:
        cluster = self._enter("create pod")
        if cluster.admission == "reject":
            raise ApiError(500, WEBHOOK_REJECTION)
        if cluster.admission == "over-quota":
            raise ApiError(403, QUOTA_REJECTION)
        pod = copy.deepcopy(pod)
        pod["metadata"]["name"] = pod["metadata"].pop("generateName") + _suffix(len(cluster.created))
        pod["metadata"]["namespace"] = namespace
        pod["metadata"].setdefault("annotations", {})
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        mutated = cluster.admission == "mutate" and GPU in limits
        # The API server defaults schedulerName; HAMi's webhook overrides it for GPU pods.
        pod["spec"]["schedulerName"] = "hami-scheduler" if mutated else pod["spec"].get(
            "schedulerName", "default-scheduler")
        pod["status"] = {"phase": "Pending"}
        cluster.created.append(copy.deepcopy(pod))
        cluster.pods[(namespace, pod["metadata"]["name"])] = pod
        return copy.deepcopy(pod)

    def read_pod(self, namespace: str, name: str) -> Json | None:
        cluster = self._enter("read pod")
        if cluster.failing_pod_reads:
            cluster.failing_pod_reads -= 1
            raise ApiError(None, "read timed out")
        cluster.pod_reads += 1
        pod = cluster.pods.get((namespace, name))
        if pod is None:
            return None
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

    def delete_pod(self, namespace: str, name: str) -> None:
        cluster = self._enter("delete pod")
        cluster.deleted.append((namespace, name))
        cluster.pods.pop((namespace, name), None)


class FakeConnect:
    """The `Connect` seam: kubeconfig -> session on the cluster its server names, as its user."""

    def __init__(self, clusters: Iterable[FakeCluster]) -> None:
        self.clusters = {cluster.server: cluster for cluster in clusters}
        self.kubeconfigs: list[Json] = []

    def __call__(self, kubeconfig: Json) -> FakeSession:
        self.kubeconfigs.append(copy.deepcopy(kubeconfig))
        context = next(c["context"] for c in kubeconfig["contexts"] if c["name"] == kubeconfig["current-context"])
        cluster = next(c["cluster"] for c in kubeconfig["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in kubeconfig["users"] if u["name"] == context["user"])
        target = self.clusters.get(cluster["server"]) or FakeCluster(cluster["server"], set(), down=True)
        return target.session(user.get("token"))


def kubeconfig_yaml(cluster: str, server: str, token: str) -> str:
    """A kubeconfig shaped like kind's and Kamaji's admin.conf (bearer token instead of a client certificate)."""
    user = f"{cluster}-admin"
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(f"CA of {cluster}".encode()).decode(),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
    })


def card(uuid: str, memory_mib: int = 8192, cores: int = 100, slots: int = 10) -> Json:
    return {"uuid": uuid, "model": "NVIDIA-A100", "memoryMiB": memory_mib, "cores": cores, "slots": slots}


@dataclass
class FakePlatform:
    outputs: Json
    management: FakeCluster
    tenants: dict[str, FakeCluster]
    connect: FakeConnect

    def write_outputs(self, directory) -> str:
        path = directory / "outputs.json"
        path.write_text(json.dumps(self.outputs))
        return str(path)


def healthy_platform(tenants: Iterable[str] = ("tenant-a", "tenant-b"), gpu_mode: str = "mock",
                     workers: dict[str, dict[str, list[Json]]] | None = None) -> FakePlatform:
    """An all-green platform: every check of `make verify` holds."""
    tenants = list(tenants)
    management = FakeCluster("https://127.0.0.1:40123", {"kind-admin-token"})
    outputs: Json = {
        "managementKubeconfig": kubeconfig_yaml("kind-gpu-tenancy", management.server, "kind-admin-token"),
        "kindSubnet": "172.18.0.0/16",
        "lbPoolRange": "172.18.255.200-172.18.255.250",
        "tenantKubeconfigs": {},
        "tenants": {},
        "plan": {
            "managementCluster": "gpu-tenancy",
            "gpuMode": gpu_mode,
            "smokeTest": {"enabled": True, "gpus": 1, "memoryMiB": 3000, "cores": 30},
            "tenants": {},
        },
    }
    clusters: dict[str, FakeCluster] = {}
    for index, name in enumerate(tenants):
        endpoint = f"172.18.255.{200 + index}:6443"
        letter = name[-1].upper()
        planned = (workers or {}).get(name) or {f"{name}-worker-0": [card(f"GPU-MOCK-{letter}0")]}
        cluster = FakeCluster(f"https://{endpoint}", {f"{name}-admin-token"})
        for node_name, cards in planned.items():
            cluster.nodes.append(node(node_name, {
                GPU: str(sum(c["slots"] for c in cards)),
                GPU_MEMORY: str(sum(c["memoryMiB"] for c in cards)),
                GPU_CORES: str(sum(c["cores"] for c in cards)),
            }))
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
        management.tenant_control_planes[(name, name)] = {
            "apiVersion": "kamaji.clastix.io/v1alpha1",
            "kind": "TenantControlPlane",
            "metadata": {"name": name, "namespace": name},
            "status": {
                "controlPlaneEndpoint": endpoint,
                "kubernetesResources": {"version": {"status": "Ready", "version": "v1.35.0"}},
            },
        }
        management.network_policies[name] = [
            {"metadata": {"name": f"{name}-isolation", "namespace": name}},
        ]
        outputs["tenantKubeconfigs"][name] = kubeconfig_yaml(name, cluster.server, f"{name}-admin-token")
        outputs["tenants"][name] = {
            "namespace": name,
            "controlPlane": name,
            "endpoint": endpoint,
            "discoveryHash": "sha256:" + "ab" * 32,
            "nodes": list(planned),
            "gpuCapacity": {n: sum(c["slots"] for c in cards) for n, cards in planned.items()},
            "smokeTest": {"pod": "gpu-smoke-test", "node": next(iter(planned)), "schedulerName": "hami-scheduler",
                          "devicesAllocated": cluster.allocated_devices},
        }
        outputs["plan"]["tenants"][name] = {
            "kubernetesVersion": "v1.35.0",
            "serviceCidr": f"10.{96 + index}.0.0/16",
            "podCidr": f"10.{244 + index}.0.0/16",
            "workers": planned,
            "gpuSlots": sum(c["slots"] for cards in planned.values() for c in cards),
            "quota": None,
        }
        clusters[name] = cluster
    return FakePlatform(outputs, management, clusters, FakeConnect([management, *clusters.values()]))
