"""Will it fit? Where HAMi v2.10.0's scheduler would put each GPU pod, and how its quota manager counts them.

Pure Python, no cluster and no Pulumi: the same filter, scores, sort orders and tie-breaks as the scheduler
extender, so `pulumi preview` can answer before anything runs. Every rule names the file it follows in
Project-HAMi/HAMi at tag v2.10.0; tests/data/hami_scheduler_cases.json holds HAMi's own Go unit tests of these
functions, translated into data, and tests/test_capacity.py runs them against this module.

Scope: NVIDIA cards in `hami-core` mode, one GPU container per pod, no init containers, no NUMA binding, no
topology-aware policy, no UUID pinning annotations (the configuration offers none of these).
"""

from __future__ import annotations

import copy
import functools
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from naming import DEFAULT_GPU_POLICY, DEFAULT_NODE_POLICY, GPU_RESOURCE

# pkg/device/nvidia/device.go NvidiaGPUDevice: the request type of every nvidia.com/gpu container.
NVIDIA = "NVIDIA"
# The scheduler only considers devices whose type contains "NVIDIA" (pkg/scheduler/score.go getNodeResources); the
# real device plugin prefixes models that do not start with it (pkg/device-plugin/nvidiadevice/nvinternal/plugin/
# register.go L170-174), and so do we.
NVIDIA_PREFIX = "NVIDIA"
# pkg/util/types.go `Weight int = 10`: the factor of every device and node score.
WEIGHT = 10
# pkg/device/nvidia/device.go GenerateResourceRequests: 101 means "no nvidia.com/gpumem-percentage given".
NO_PERCENTAGE = 101

# pkg/device/common/common.go: the reasons HAMi reports, per card, when a container does not fit.
CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
CARD_NOT_HEALTH = "CardNotHealth"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"

# The ResourceQuota key kube-apiserver enforces on a workload namespace (components/tenant/spec.py gpu_quota_hard).
QUOTA_GPUS = f"requests.{GPU_RESOURCE}"


def device_type(model: str) -> str:
    """The device type HAMi records for a card model: `NVIDIA-<model>` unless it already starts with NVIDIA."""
    return model if model.startswith(NVIDIA_PREFIX) else f"{NVIDIA_PREFIX}-{model}"


def f32(value: float) -> float:
    """`value` as a Go float32: HAMi computes every score in float32, and ties (which decide placements) are
    float32 ties. Rounding each double operation of float32 operands is exact for + - * / (IEEE 754)."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _div(a: float, b: float) -> float:
    return f32(f32(a) / f32(b))


def _int32_div(a: int, b: int) -> int:
    """Go integer division (truncates toward zero)."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b > 0) else -quotient


@dataclass
class Device:
    """One card as the scheduler sees it (pkg/device/devices.go DeviceUsage), usage included."""

    id: str
    count: int  # split count: how many containers may share it
    totalmem: int  # MiB
    totalcore: int  # percent
    index: int = 0
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0
    numa: int = 0
    type: str = NVIDIA
    health: bool = True
    # Ours, for the plan: who holds a share, with its MiB and cores.
    holders: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Request:
    """One container's GPU request (pkg/device/devices.go ContainerDeviceRequest)."""

    nums: int
    memreq: int = 0
    mem_percentagereq: int = NO_PERCENTAGE
    coresreq: int = 0
    type: str = NVIDIA


@dataclass(frozen=True)
class Grant:
    """One card given to a container (pkg/device/devices.go ContainerDevice)."""

    uuid: str
    idx: int
    usedmem: int
    usedcores: int


@dataclass(frozen=True)
class Weights:
    """pkg/util/device_scoring_weights.go DefaultDeviceScoringWeights (slot=1, core=1, memory=1)."""

    slot: int = 1
    core: int = 1
    memory: int = 1


# --------------------------------------------------------------------------- #
# What the webhook and the request parser make of a container's limits
# --------------------------------------------------------------------------- #


def container_request(
    gpus: int, memory_mib: int | None = None, memory_percent: int | None = None, cores: int | None = None,
    default_memory: int = 0, default_cores: int = 0,
) -> Request:
    """The request HAMi derives from a container's `nvidia.com/gpu`, `gpumem`, `gpumem-percentage` and `gpucores`.

    pkg/device/nvidia/device.go defaultExclusiveCoreIfNeeded: with no gpucores, a container asking for the whole
    memory (no gpumem, or gpumem-percentage 100) gets gpucores 100, i.e. the card exclusively.
    GenerateResourceRequests: no memory at all means defaultMemory, or (defaultMemory 0, the chart's value in
    device-config.yaml) 100 percent of the card; no gpucores means defaultCores (0)."""
    if cores is None and (memory_percent == 100 or (memory_percent is None and memory_mib is None)):
        cores = 100
    memreq = memory_mib or 0
    percentage = memory_percent if memory_percent and memory_percent > 0 else NO_PERCENTAGE
    percentage = min(percentage, 100) if percentage != NO_PERCENTAGE else percentage
    if percentage == NO_PERCENTAGE and memreq == 0:
        if default_memory:
            memreq = default_memory
        else:
            percentage = 100
    return Request(nums=gpus, memreq=memreq, mem_percentagereq=percentage,
                   coresreq=default_cores if cores is None else cores)


def memory_of(request: Request, device: Device) -> int:
    """The MiB a request takes of `device` (pkg/device/nvidia/device.go Fit: gpumem, else the percentage of the
    card's total, in int32 arithmetic)."""
    memreq = request.memreq if request.memreq > 0 else 0
    if request.mem_percentagereq != NO_PERCENTAGE and request.memreq == 0:
        memreq = _int32_div(device.totalmem * request.mem_percentagereq, 100)
    return memreq


# --------------------------------------------------------------------------- #
# Scores and sort orders (pkg/scheduler/policy)
# --------------------------------------------------------------------------- #


def device_score(device: Device, requests: Iterable[Request], weights: Weights = Weights()) -> float:
    """pkg/scheduler/policy/gpu_policy.go ComputeScore: the card's share in use once these requests are added.

    Only requests whose type equals the card's type *exactly* are added; a registered card's type is
    `NVIDIA-<model>`, never the request type `NVIDIA`, so on a real node the score is the usage before the pod."""
    if device.count == 0 or device.totalcore == 0 or device.totalmem == 0:
        return 0.0
    request = core = mem = 0
    for container in requests:
        if container.type != device.type:
            continue
        request += 1
        core += container.coresreq
        if container.mem_percentagereq not in (0, NO_PERCENTAGE):
            mem += _int32_div(device.totalmem * container.mem_percentagereq, 100)
            continue
        mem += container.memreq
    used_score = _div(request + device.used, device.count)
    core_score = _div(core + device.usedcores, device.totalcore)
    mem_score = _div(mem + device.usedmem, device.totalmem)
    total = f32(f32(f32(f32(weights.slot) * used_score) + f32(f32(weights.core) * core_score))
                + f32(f32(weights.memory) * mem_score))
    return f32(WEIGHT * total)


_SORT_KEYS = ("binpack", "spread", "numa")


def _chain(policy: str) -> list[str]:
    """gpu_policy.go gpuSortKeyChain: the sort keys a comma-separated policy names, in order, once each."""
    chain: list[str] = []
    for part in policy.split(","):
        name = part.strip()
        if name in _SORT_KEYS and name not in chain:
            chain.append(name)
    return chain


def device_less(policy: str, a: Device, score_a: float, b: Device, score_b: float, numa_bind: bool = False) -> bool:
    """pkg/scheduler/policy/gpu_policy.go DeviceUsageList.Less. Fit takes cards from the end of the sorted list,
    so binpack (ascending score) tries the fullest card first and spread (descending) the emptiest."""
    if "," in policy or policy == "numa":
        chain = _chain(policy) or ["spread"]
        if numa_bind and chain[0] != "numa":
            chain = ["numa", *(key for key in chain if key != "numa")]
        for key in chain:
            if key == "binpack" and score_a != score_b:
                return score_a < score_b
            if key == "spread" and score_a != score_b:
                return score_a > score_b
            if key == "numa" and a.numa != b.numa:
                return a.numa < b.numa
        return a.index < b.index
    binpack = policy == "binpack"
    if policy == "mutex":
        if a.used != b.used:
            return a.used > b.used
        return a.numa < b.numa
    if numa_bind:
        if binpack:
            return score_a < score_b if a.numa == b.numa else a.numa > b.numa
        return score_a > score_b if a.numa == b.numa else a.numa < b.numa
    if binpack:
        return score_a < score_b if score_a != score_b else a.numa < b.numa
    return score_a > score_b if score_a != score_b else a.numa < b.numa


def sort_devices(
    devices: Sequence[Device], scores: Sequence[float], policy: str, numa_bind: bool = False
) -> list[Device]:
    """The order `sort.Sort` leaves the node's cards in (pkg/scheduler/score.go fitInDevices). Go's sort is not
    stable in general, but below 13 elements it is an insertion sort, which is: equal cards keep their
    registration order, as here (a stable sort of a strict weak order gives that same unique result)."""
    pairs = list(zip(devices, scores, strict=True))

    def compare(x: tuple[Device, float], y: tuple[Device, float]) -> int:
        if device_less(policy, x[0], x[1], y[0], y[1], numa_bind):
            return -1
        if device_less(policy, y[0], y[1], x[0], x[1], numa_bind):
            return 1
        return 0

    return [device for device, _ in sorted(pairs, key=functools.cmp_to_key(compare))]


def node_default_score(devices: Iterable[Device]) -> float:
    """pkg/scheduler/policy/node_policy.go ComputeDefaultScore: the node's share in use, taken *before* the pod is
    added (pkg/scheduler/score.go scoreNode computes it ahead of allocateAppContainers)."""
    devices = list(devices)
    used = sum(d.used for d in devices)
    used_core = sum(d.usedcores for d in devices)
    used_mem = sum(d.usedmem for d in devices)
    total = sum(d.count for d in devices)
    total_core = sum(d.totalcore for d in devices)
    total_mem = sum(d.totalmem for d in devices)
    if total == 0 or total_core == 0 or total_mem == 0:
        return 0.0
    parts = f32(f32(_div(used, total) + _div(used_core, total_core)) + _div(used_mem, total_mem))
    return f32(WEIGHT * parts)


def node_less(policy: str, score_a: float, score_b: float) -> bool:
    """pkg/scheduler/policy/node_policy.go NodeScoreList.Less; Filter (pkg/scheduler/scheduler.go) takes the last
    node after sorting: binpack the highest score (the fullest node), spread the lowest."""
    if policy == "spread":
        return score_a > score_b
    return score_a < score_b


# --------------------------------------------------------------------------- #
# Quota (pkg/device/quota.go)
# --------------------------------------------------------------------------- #


@dataclass
class Limit:
    used: int = 0
    limit: int = 0
    # quota.go Quota.LimitSet: an explicit 0 blocks everything; no ResourceQuota key means no limit.
    limit_set: bool = False


@dataclass
class NamespaceQuota:
    """HAMi's quota state of one namespace: `limits.nvidia.com/gpumem` and `limits.nvidia.com/gpucores`."""

    memory: Limit = field(default_factory=Limit)
    cores: Limit = field(default_factory=Limit)

    @classmethod
    def of(cls, memory_mib: int | None, cores: int | None) -> NamespaceQuota:
        return cls(Limit(limit=memory_mib or 0, limit_set=memory_mib is not None),
                   Limit(limit=cores or 0, limit_set=cores is not None))

    def fits(self, memreq: int, coresreq: int, memory_factor: int = 1) -> bool:
        """quota.go FitQuota: used plus the container's total (every card it holds) within each set limit."""
        limit = self.memory.limit * memory_factor if memory_factor > 1 else self.memory.limit
        if self.memory.limit_set and self.memory.used + memreq > limit:
            return False
        return not (self.cores.limit_set and self.cores.used + coresreq > self.cores.limit)

    def add(self, grants: Iterable[Grant]) -> None:
        """quota.go AddUsage/countPodDevices: every card of the pod counts, so memory is multiplied by its GPUs."""
        for grant in grants:
            self.memory.used += grant.usedmem
            self.cores.used += grant.usedcores


# --------------------------------------------------------------------------- #
# Filter: one container on one node
# --------------------------------------------------------------------------- #


def gen_reason(reasons: dict[str, int], cards: int) -> str:
    """pkg/device/common/common.go GenReason: `<n>/<cards> <Reason>`, sorted, comma-separated."""
    return ", ".join(sorted(f"{count}/{cards} {reason}" for reason, count in reasons.items()))


def fit(
    devices: Sequence[Device], request: Request, quota: NamespaceQuota | None = None, gpu_policy: str = "",
) -> tuple[bool, list[Grant], str]:
    """pkg/device/nvidia/device.go Fit: walk the (sorted) cards from the end and take the first `nums` that pass
    every check, in HAMi's order of checks. Returns whether it fits, the cards taken and HAMi's reason."""
    nums = request.nums
    taken: list[Grant] = []
    reasons: dict[str, int] = {}
    mutex = "mutex" in [p.strip() for p in gpu_policy.split(",")]  # pkg/util/util.go PolicyContains

    def refuse(reason: str) -> None:
        reasons[reason] = reasons.get(reason, 0) + 1

    for dev in reversed(devices):
        if not dev.health:
            refuse(CARD_NOT_HEALTH)
            continue
        # checkType: only nvidia requests match nvidia cards (no type or mode annotations here).
        if request.type != NVIDIA:
            refuse(CARD_TYPE_MISMATCH)
            continue
        if dev.count <= dev.used:
            refuse(CARD_TIME_SLICING_EXHAUSTED)
            continue
        if mutex and dev.used > 0:
            refuse(EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT)
            continue
        cores = min(request.coresreq, 100)  # "core limit can't exceed 100"
        memreq = memory_of(request, dev)
        # fitQuota: the cards already taken for this container plus this one, against the namespace's limits.
        if quota is not None and not quota.fits(sum(g.usedmem for g in taken) + memreq,
                                                sum(g.usedcores for g in taken) + cores):
            refuse(RESOURCE_QUOTA_NOT_FIT)
            continue
        if dev.totalmem - dev.usedmem < memreq:
            refuse(CARD_INSUFFICIENT_MEMORY)
            continue
        if dev.totalcore - dev.usedcores < cores:
            refuse(CARD_INSUFFICIENT_CORE)
            continue
        # "Coresreq=100 indicates it want this card exclusively"
        if dev.totalcore == 100 and cores == 100 and dev.used > 0:
            refuse(EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT)
            continue
        # "You can't allocate core=0 job to an already full GPU"
        if dev.totalcore != 0 and dev.usedcores == dev.totalcore and cores == 0:
            refuse(CARD_COMPUTE_UNITS_EXHAUSTED)
            continue
        if nums > 0:
            nums -= 1
            taken.append(Grant(dev.id, dev.index, memreq, cores))
        if nums == 0:
            return True, taken, ""
    if taken:
        reasons[ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(taken)
    return False, taken, gen_reason(reasons, len(devices))


def add_usage(device: Device, grant: Grant, holder: str = "") -> None:
    """pkg/device/nvidia/device.go AddResourceUsage (hami-core mode)."""
    device.used += 1
    device.usedcores += grant.usedcores
    device.usedmem += grant.usedmem
    if holder:
        device.holders.append((holder, grant.usedmem, grant.usedcores))


@dataclass
class NodeResult:
    node: str
    score: float = 0.0
    grants: list[Grant] = field(default_factory=list)
    reason: str = ""

    @property
    def fits(self) -> bool:
        return not self.reason


def score_node(
    name: str, devices: Sequence[Device], request: Request, quota: NamespaceQuota | None = None,
    gpu_policy: str = DEFAULT_GPU_POLICY, weights: Weights = Weights(),
) -> NodeResult:
    """pkg/scheduler/score.go scoreNode and fitInDevices for a pod of one GPU container, on a copy of the node."""
    node = copy.deepcopy(list(devices))
    result = NodeResult(name, score=node_default_score(node))
    scores = [device_score(d, [request], weights) for d in node]
    ordered = sort_devices(node, scores, gpu_policy)
    # getNodeResources: the node's cards whose type contains the request type, case-insensitively.
    typed = [d for d in ordered if request.type.lower() in d.type.lower()]
    if request.nums > len(typed):
        result.reason = NODE_INSUFFICIENT_DEVICE
        return result
    ok, grants, reason = fit(typed, request, quota, gpu_policy)
    if not ok:
        result.reason = reason
        return result
    result.grants = grants
    return result


@dataclass
class Decision:
    """Where the pod goes: the chosen node and cards, or why no node takes it."""

    node: str | None
    grants: list[Grant]
    reason: str | None
    # Other nodes with exactly the chosen node's score: HAMi sorts nodes gathered by goroutines in completion
    # order, so between these it is arbitrary; the plan takes the first in configuration order.
    tied_with: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def no_node_reason(failed: dict[str, str]) -> str:
    """The Filter's event for a pod no node takes (pkg/scheduler/scheduler.go Filter "no available node, %d nodes
    do not meet", with each node's reason as calcScore records it in failedNodes)."""
    detail = "; ".join(f"{node}: {reason}" for node, reason in failed.items())
    return f"no available node, {len(failed)} nodes do not meet ({detail})"


def schedule(
    nodes: dict[str, list[Device]], request: Request, quota: NamespaceQuota | None = None,
    node_policy: str = DEFAULT_NODE_POLICY, gpu_policy: str = DEFAULT_GPU_POLICY, weights: Weights = Weights(),
) -> Decision:
    """pkg/scheduler/scheduler.go Filter: score every candidate node, sort by the node policy, take the last."""
    fitting: list[NodeResult] = []
    failed: dict[str, str] = {}
    for name, devices in nodes.items():
        result = score_node(name, devices, request, quota, gpu_policy, weights)
        if result.fits:
            fitting.append(result)
        else:
            failed[name] = result.reason
    if not fitting:
        return Decision(None, [], no_node_reason(failed), failed=failed)
    best = fitting[0]
    for result in fitting[1:]:
        if node_less(node_policy, best.score, result.score):
            best = result
    tied = [r.node for r in fitting if r is not best and r.score == best.score]
    return Decision(best.node, best.grants, None, tied, failed)


def commit(nodes: dict[str, list[Device]], decision: Decision, holder: str,
           quota: NamespaceQuota | None = None) -> None:
    """Record a placed pod: card usage (scheduler.go getNodesUsage adds every scheduled pod's grants) and quota."""
    if decision.node is None:
        return
    by_id = {d.id: d for d in nodes[decision.node]}
    for grant in decision.grants:
        add_usage(by_id[grant.uuid], grant, holder)
    if quota is not None:
        quota.add(decision.grants)


# --------------------------------------------------------------------------- #
# The stack's plan: the smoke pod, then every declared pod, in order
# --------------------------------------------------------------------------- #

SMOKE_WORKLOAD = "smokeTest"


def _nodes_of(tenant: Any) -> dict[str, list[Device]]:
    """The tenant's GPU nodes as HAMi registers them (components/gpu/cards.py register_annotation: configuration
    order, index per worker). A node without cards advertises no nvidia.com/gpu, so kube-scheduler filters it out
    before HAMi's extender sees the pod."""
    return {
        f"{tenant.name}-{worker.name}": [
            Device(id=card.uuid, index=index, count=card.slots, totalmem=card.memory_mib, totalcore=card.cores,
                   type=device_type(card.model))
            for index, card in enumerate(worker.gpus)
        ]
        for worker in tenant.workers if worker.gpus
    }


def _placement(workload: str, replica: int, namespace: str, decision: Decision | None,
               refused: str | None = None) -> dict[str, Any]:
    return {
        "workload": workload,
        "replica": replica,
        "namespace": namespace,
        "node": decision.node if decision else None,
        "cards": [grant.uuid for grant in decision.grants] if decision else [],
        "unplaced": refused if refused is not None else (decision.reason if decision else None),
        "tiedWith": list(decision.tied_with) if decision else [],
    }


def _api_quota_refusal(quota: str, namespace: str, requested: int, used: int, limit: int) -> str:
    """kube-apiserver's ResourceQuota admission refuses the pod itself (kubernetes/apiserver
    pkg/admission/plugin/resourcequota/controller.go "exceeded quota: %s, requested: %s, used: %s, limited: %s");
    a refused pod never exists, so it holds nothing."""
    return (f"forbidden by the API server in namespace {namespace}: exceeded quota: {quota}, requested: "
            f"{QUOTA_GPUS}={requested}, used: {QUOTA_GPUS}={used}, limited: {QUOTA_GPUS}={limit}")


# charts/hami/templates/scheduler/webhook.yaml: the name kube-apiserver quotes when HAMi's webhook denies a pod.
WEBHOOK_NAME = "vgpu.hami.io"


def webhook_quota_refusal(request: Request, quota: NamespaceQuota | None) -> str | None:
    """HAMi's admission webhook denies a pod whose memory x GPUs or cores x GPUs would exceed the namespace's
    limits (pkg/scheduler/webhook.go fitResourceQuota, against what HAMi has scheduled so far). It reads the
    request as GenerateResourceRequests does, so a percentage (or whole-card) memory request counts 0 MiB here and
    is only caught later, by the scheduler's Fit. A denied pod is never created."""
    if quota is None:
        return None
    memory, cores = request.memreq * request.nums, request.coresreq * request.nums
    if (memory == 0 and cores == 0) or quota.fits(memory, cores):
        return None
    return f'admission webhook "{WEBHOOK_NAME}" denied the request: exceeding resource quota'


def plan_tenant(tenant: Any, smoke: Any, smoke_namespace: str, quota_name: str) -> dict[str, Any]:
    """Placements, card usage and quota figures of one tenant (its own HAMi, its own cards)."""
    nodes = _nodes_of(tenant)
    scheduling = tenant.scheduling
    node_policy, gpu_policy = scheduling.node_policy, scheduling.gpu_policy
    quota = tenant.quota
    hami_quota = {ns: NamespaceQuota.of(quota.memory_mib, quota.cores) for ns in tenant.namespaces} if quota else {}
    # Pods the API server admitted, per namespace: ResourceQuota counts them whether or not they get scheduled.
    admitted_gpus = dict.fromkeys(tenant.namespaces, 0)
    placements: list[dict[str, Any]] = []
    smoke_worker = smoke.worker_in(tenant) if smoke.enabled else None
    if smoke_worker is not None:
        # Pinned by a node selector (components/gpu/smoke.py): the extender only sees that node.
        name = f"{tenant.name}-{smoke_worker.name}"
        request = container_request(smoke.gpus, memory_mib=smoke.memory_mib, cores=smoke.cores)
        decision = schedule({name: nodes[name]}, request, None, node_policy, gpu_policy)
        commit(nodes, decision, f"{SMOKE_WORKLOAD}/0")
        placements.append(_placement(SMOKE_WORKLOAD, 0, smoke_namespace, decision))
    for workload in tenant.workloads:
        namespace = workload.namespace or tenant.namespaces[0]
        request = container_request(workload.gpus, workload.memory_mib, workload.memory_percent, workload.cores)
        ns_quota = hami_quota.get(namespace)
        # Admission: mutating webhooks (HAMi's) before kube-apiserver's ResourceQuota, a validating plugin. A
        # ReplicaSet creates every replica before HAMi schedules one, so all meet the same usage (webhook.go
        # fitResourceQuota; the usage grows only in scheduler.go Filter): they are admitted together, then scheduled.
        denied = webhook_quota_refusal(request, ns_quota)
        for replica in range(workload.replicas):
            if denied is not None:
                placements.append(_placement(workload.name, replica, namespace, None, denied))
                continue
            if quota is not None and quota.gpus is not None \
                    and admitted_gpus[namespace] + workload.gpus > quota.gpus:
                refusal = _api_quota_refusal(quota_name, namespace, workload.gpus, admitted_gpus[namespace],
                                             quota.gpus)
                placements.append(_placement(workload.name, replica, namespace, None, refusal))
                continue
            admitted_gpus[namespace] += workload.gpus
            decision = schedule(nodes, request, ns_quota, node_policy, gpu_policy)
            commit(nodes, decision, f"{workload.name}/{replica}", ns_quota)
            placements.append(_placement(workload.name, replica, namespace, decision))
    cards = {
        device.id: {
            "node": node,
            "slots": {"used": device.used, "free": device.count - device.used, "total": device.count},
            "memoryMiB": {"used": device.usedmem, "free": device.totalmem - device.usedmem,
                          "total": device.totalmem},
            "cores": {"used": device.usedcores, "free": device.totalcore - device.usedcores,
                      "total": device.totalcore},
            "holders": [{"pod": pod, "memoryMiB": memory, "cores": cores} for pod, memory, cores in device.holders],
        }
        for node, devices in nodes.items() for device in devices
    }
    return {
        "nodePolicy": node_policy,
        "gpuPolicy": gpu_policy,
        "placements": placements,
        "cards": cards,
        "quota": _quota_figures(tenant, admitted_gpus, hami_quota, cards),
    }


def _ratio(quota: int | None, capacity: int) -> float | None:
    return None if quota is None or capacity == 0 else round(quota / capacity, 2)


def _capacity(cards: dict[str, Any]) -> dict[str, int]:
    return {key: sum(card[key]["total"] for card in cards.values()) for key in ("slots", "memoryMiB", "cores")}


def _quota_figures(tenant: Any, admitted_gpus: dict[str, int], hami_quota: dict[str, NamespaceQuota],
                   cards: dict[str, Any]) -> dict[str, Any] | None:
    """Per namespace: what the API server (gpus) and HAMi (memory x GPUs, cores x GPUs) count against each limit;
    and the quota of all namespaces against the tenant's cards."""
    quota = tenant.quota
    if quota is None:
        return None
    namespaces = {
        ns: {
            "gpus": {"used": admitted_gpus[ns], "limit": quota.gpus},
            "memoryMiB": {"used": hami_quota[ns].memory.used, "limit": quota.memory_mib},
            "cores": {"used": hami_quota[ns].cores.used, "limit": quota.cores},
        }
        for ns in tenant.namespaces
    }
    count = len(tenant.namespaces)
    granted = {"gpus": _times(quota.gpus, count), "memoryMiB": _times(quota.memory_mib, count),
               "cores": _times(quota.cores, count)}
    capacity = _capacity(cards)
    return {"namespaces": namespaces, "granted": granted, **_overcommit(granted, capacity)}


def _times(value: int | None, count: int) -> int | None:
    return None if value is None else value * count


def _overcommit(granted: dict[str, int | None], capacity: dict[str, int]) -> dict[str, Any]:
    """Quota granted against the cards: `requests.nvidia.com/gpu` counts shares (slots), the others MiB and cores.
    None where a key is unlimited."""
    return {"overcommit": {"gpus": _ratio(granted["gpus"], capacity["slots"]),
                           "memoryMiB": _ratio(granted["memoryMiB"], capacity["memoryMiB"]),
                           "cores": _ratio(granted["cores"], capacity["cores"])}}


def plan_stack(config: Any, smoke_namespace: str, quota_name: str) -> dict[str, Any]:
    """`gpuPlan`: every tenant's plan, and the sum of all tenants' quotas against the pool of every card.
    `smoke_namespace` is the smoke pod's namespace, `quota_name` the workload namespaces' ResourceQuota."""
    tenants = {tenant.name: plan_tenant(tenant, config.smoke_test, smoke_namespace, quota_name)
               for tenant in config.tenants}
    capacity = {key: sum(_capacity(plan["cards"])[key] for plan in tenants.values())
                for key in ("slots", "memoryMiB", "cores")}
    granted: dict[str, int | None] = {"gpus": 0, "memoryMiB": 0, "cores": 0}
    for tenant in config.tenants:
        figures = tenants[tenant.name]["quota"]
        for key in granted:
            value = figures["granted"][key] if figures else None
            # One tenant without a limit makes the sum unbounded.
            granted[key] = None if value is None or granted[key] is None else granted[key] + value
    unplaced = sum(1 for plan in tenants.values() for p in plan["placements"] if p["unplaced"])
    return {"tenants": tenants,
            "pool": {"cards": sum(len(plan["cards"]) for plan in tenants.values()), **capacity, "granted": granted,
                     **_overcommit(granted, capacity)},
            "unplaced": unplaced}


def unplaced(plan: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(tenant, placement) of every pod that does not fit."""
    return [(name, p) for name, tenant in plan["tenants"].items() for p in tenant["placements"] if p["unplaced"]]
