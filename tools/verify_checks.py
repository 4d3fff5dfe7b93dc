"""The checks behind `make verify`: plain functions over `KubeApi`, returning one result per check.

Each result names the broken link and a likely fix. Objects are the API's JSON
(dicts); the only side effect is the probe pod, which is always deleted again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils import parse_quantity

from config import Versions
from tools.preflight import CheckResult
from tools.verify_api import ApiError, Connect, Json, KubeApi

# Kamaji installs the agent under this name in the tenant's kube-system
# (clastix/kamaji internal/resources/konnectivity/constants.go: AgentName).
KONNECTIVITY_AGENT = "konnectivity-agent"
# HAMi release `hami` in kube-system: charts/hami/templates/_helpers.tpl names the
# scheduler `<fullname>-scheduler` and the webhook configuration `<fullname>-webhook`.
HAMI_NAMESPACE = "kube-system"
HAMI_SCHEDULER = "hami-scheduler"
HAMI_WEBHOOK = "hami-webhook"
HAMI_SCHEDULER_NAME = "hami-scheduler"
HAMI_EXTENDER_CONTAINER = "vgpu-scheduler-extender"
# Set by HAMi's scheduler when it allocates a device (facts §7).
VGPU_NODE = "hami.io/vgpu-node"
VGPU_DEVICES = "hami.io/vgpu-devices-allocated"
GPU, GPU_MEMORY, GPU_CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"

PROBE_NAMESPACE = "default"
PROBE_PREFIX = "verify-gpu-"
# The smoke-test pod's image, so every worker already has it; the mock plugin's Allocate injects nothing.
PROBE_IMAGE = f"registry.k8s.io/pause:{Versions().pause}"
PROBE_LABELS = {"app.kubernetes.io/name": "gpu-tenancy-verify", "app.kubernetes.io/part-of": "gpu-tenancy"}
# pause's own non-root user: the probe passes the `restricted` Pod Security level.
PROBE_UID = 65535


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
    kubeconfig: Json
    # node name -> planned cards, as in the plan output (uuid, memoryMiB, cores, slots, ...)
    workers: Mapping[str, list[Json]]


@dataclass(frozen=True)
class Platform:
    management_cluster: str
    gpu_mode: str
    probe: ProbeRequest
    tenants: Mapping[str, TenantTarget]
    # tenant -> what the stack outputs lack for it
    incomplete: Mapping[str, str] = field(default_factory=dict)


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


def _entry(entries: Any, name: str, kind: str) -> Json:
    for entry in entries or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    raise ValueError(f"kubeconfig has no {kind} named {name!r}")


def current_entries(kubeconfig: Json) -> tuple[Json, Json]:
    """The (cluster, user) entries the kubeconfig's current context points at."""
    if not isinstance(kubeconfig, Mapping):
        raise ValueError("kubeconfig is not a YAML mapping")
    contexts = kubeconfig.get("contexts") or []
    name = kubeconfig.get("current-context") or (contexts[0].get("name") if len(contexts) == 1 else None)
    if not name:
        raise ValueError("kubeconfig has no current-context")
    context = _entry(contexts, name, "context").get("context") or {}
    return (
        _entry(kubeconfig.get("clusters"), context.get("cluster"), "cluster"),
        _entry(kubeconfig.get("users"), context.get("user"), "user"),
    )


def api_server(kubeconfig: Json) -> str:
    cluster, _ = current_entries(kubeconfig)
    return str(_dig(cluster, "cluster", "server") or "?")


def cross_tenant_kubeconfig(own: Json, other: Json) -> Json:
    """This tenant's user credentials aimed at the other tenant's API server (its server and CA)."""
    _, own_user = current_entries(own)
    other_cluster, _ = current_entries(other)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "other-tenant", "cluster": dict(other_cluster.get("cluster") or {})}],
        "users": [{"name": "this-tenant", "user": dict(own_user.get("user") or {})}],
        "contexts": [{"name": "cross-tenant", "context": {"cluster": "other-tenant", "user": "this-tenant"}}],
        "current-context": "cross-tenant",
    }


# --- management cluster -----------------------------------------------------------------------


def check_control_plane(management: KubeApi, tenant: TenantTarget, cluster: str) -> CheckResult:
    name = "control plane Ready"
    where = f"TenantControlPlane {tenant.namespace}/{tenant.control_plane}"
    fix = (f"kubectl --context kind-{cluster} -n {tenant.namespace} describe tcp {tenant.control_plane}; "
           f"kubectl --context kind-{cluster} -n kamaji-system logs deploy/kamaji")
    try:
        tcp = management.get_tenant_control_plane(tenant.namespace, tenant.control_plane)
    except ApiError as error:
        return CheckResult(name, False, f"cannot read {where} from the management cluster ({error})",
                           f"is the kind cluster running? docker ps --filter name={cluster}-control-plane")
    if tcp is None:
        return CheckResult(name, False, f"{where} not found → the tenant has no control plane",
                           "run `make up` to re-create it")
    version = _dig(tcp, "status", "kubernetesResources", "version") or {}
    status = version.get("status") or "no status yet"
    if status != "Ready":
        return CheckResult(name, False, f"{where} is {status} → the tenant API server is not serving", fix)
    endpoint = _dig(tcp, "status", "controlPlaneEndpoint") or "no endpoint"
    return CheckResult(name, True, f"{where} Ready ({version.get('version') or '?'} at {endpoint})")


def check_network_policies(management: KubeApi, tenant: TenantTarget) -> CheckResult:
    name = "NetworkPolicies (management)"
    try:
        policies = management.list_network_policies(tenant.namespace)
    except ApiError as error:
        return CheckResult(name, False, f"cannot list NetworkPolicies in {tenant.namespace} ({error})",
                           "see the control plane row: is the management cluster answering?")
    if not policies:
        return CheckResult(
            name, False,
            f"no NetworkPolicy in management namespace {tenant.namespace} → the tenant's control-plane pods "
            "are reachable from every other namespace",
            "run `make up` to re-create the tenant's NetworkPolicies",
        )
    return CheckResult(name, True, f"{len(policies)} in {tenant.namespace}: "
                                   + ", ".join(sorted(_name(p) for p in policies)))


# --- tenant cluster ---------------------------------------------------------------------------


def check_tenant_api(tenant: TenantTarget, connect: Connect) -> tuple[CheckResult, KubeApi | None, list[Json]]:
    """Reach the tenant API server with the stack's admin kubeconfig; returns its nodes for later checks."""
    name = "tenant API answers"
    try:
        server = api_server(tenant.kubeconfig)
        api = connect(tenant.kubeconfig)
    except ValueError as error:
        return CheckResult(name, False, f"the tenant kubeconfig in the stack outputs is unusable: {error}",
                           "run `make up` to refresh the stack outputs"), None, []
    try:
        nodes = api.list_nodes()
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
        GPU: sum(int(card["slots"]) for card in cards),
        GPU_MEMORY: sum(int(card["memoryMiB"]) for card in cards),
        GPU_CORES: sum(int(card["cores"]) for card in cards),
    }


def advertised_capacity(node: Json) -> dict[str, int]:
    capacity = _dig(node, "status", "capacity") or {}
    return {resource: int(parse_quantity(capacity.get(resource, "0"))) for resource in (GPU, GPU_MEMORY, GPU_CORES)}


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
        if advertised[GPU] > 0:
            return CheckResult(name, True, f"advertises {_short(advertised)}")
        return CheckResult(
            name, False, f"advertises no {GPU} → HAMi's device plugin found no GPU on {node_name}",
            f"in the tenant: kubectl -n {HAMI_NAMESPACE} logs ds/hami-device-plugin; the node needs the label "
            "gpu=on, the NVIDIA driver and nvidia-container-toolkit",
        )
    expected = expected_capacity(cards)
    if advertised == expected:
        return CheckResult(name, True, _short(advertised))
    detail = f"advertises {_short(advertised)}, plan expects {_short(expected)}"
    if advertised[GPU] != expected[GPU]:
        return CheckResult(
            name, False, f"{detail} → the {GPU} status patch is missing or stale",
            "run `make up` to re-apply the node's GPU capacity patch",
        )
    return CheckResult(
        name, False, f"{detail} → the mock device plugin has not registered the node's cards",
        f"in the tenant: kubectl -n {HAMI_NAMESPACE} logs ds/hami-mock-device-plugin; check the node annotation "
        "hami.io/node-nvidia-register",
    )


def check_konnectivity_agent(api: KubeApi) -> CheckResult:
    name = "Konnectivity agent ready"
    logs = f"check `kubectl -n kube-system logs ds/{KONNECTIVITY_AGENT}` and the CNI (in the tenant)"
    try:
        agent = api.read_daemon_set("kube-system", KONNECTIVITY_AGENT)
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


def check_hami_scheduler(api: KubeApi) -> CheckResult:
    name = "HAMi scheduler ready"
    where = f"Deployment {HAMI_NAMESPACE}/{HAMI_SCHEDULER}"
    fix = (f"in the tenant: kubectl -n {HAMI_NAMESPACE} describe deploy/{HAMI_SCHEDULER}; "
           f"kubectl -n {HAMI_NAMESPACE} logs deploy/{HAMI_SCHEDULER} -c {HAMI_EXTENDER_CONTAINER}")
    try:
        deployment = api.read_deployment(HAMI_NAMESPACE, HAMI_SCHEDULER)
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


def check_hami_webhook(api: KubeApi) -> CheckResult:
    name = "HAMi webhook (failurePolicy Fail)"
    where = f"MutatingWebhookConfiguration {HAMI_WEBHOOK}"
    try:
        config = api.read_mutating_webhook_configuration(HAMI_WEBHOOK)
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


# --- the probe pod ----------------------------------------------------------------------------


def probe_pod(request: ProbeRequest) -> Json:
    """A fresh GPU pod without schedulerName: only HAMi's webhook can set it."""
    limits = {GPU: str(request.gpus), GPU_MEMORY: str(request.memory_mib), GPU_CORES: str(request.cores)}
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


def allocation(pod: Json) -> tuple[bool, str]:
    """Whether HAMi bound the pod and recorded its devices, and a description of how far it got."""
    annotations = _dig(pod, "metadata", "annotations") or {}
    node = _dig(pod, "spec", "nodeName")
    if node and annotations.get(VGPU_NODE) and annotations.get(VGPU_DEVICES):
        return True, f"bound to {node}, devices {annotations[VGPU_DEVICES]}"
    if not node:
        scheduled = _condition(pod, "PodScheduled") or {}
        if scheduled.get("status") == "False":
            return False, f"not bound: {scheduled.get('reason') or 'Unschedulable'}: {scheduled.get('message') or ''}"
        return False, "not bound to a node"
    missing = [key for key in (VGPU_NODE, VGPU_DEVICES) if not annotations.get(key)]
    return False, f"bound to {node} without {', '.join(missing)}"


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
    scheduler = _dig(pod, "spec", "schedulerName") or "unset"
    if scheduler == HAMI_SCHEDULER_NAME:
        return CheckResult(name, True, f"{_name(pod)} got schedulerName {scheduler}")
    return CheckResult(
        name, False, f"schedulerName is {scheduler} → admission did not go through HAMi's webhook "
        "(Konnectivity tunnel or hami-webhook down)",
        "check the Konnectivity agent and HAMi webhook rows; in the tenant: "
        f"kubectl -n {HAMI_NAMESPACE} logs deploy/{HAMI_SCHEDULER} -c {HAMI_EXTENDER_CONTAINER}",
    )


def _wait_for_allocation(api: KubeApi, pod_name: str, waiting: Waiting) -> CheckResult:
    name = "probe got a GPU slice"
    deadline = waiting.now() + waiting.timeout
    progress = "not read yet"
    while True:
        try:
            pod = api.read_pod(PROBE_NAMESPACE, pod_name)
        except ApiError as error:  # keep polling: one failed read is not a verdict
            progress = f"last read failed ({error})"
        else:
            if pod is None:
                return CheckResult(name, False, f"{pod_name} disappeared before it was scheduled",
                                   "something deleted or evicted it; run verify again")
            done, progress = allocation(pod)
            if done:
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


def probe_gpu_pod(api: KubeApi, request: ProbeRequest, waiting: Waiting) -> list[CheckResult]:
    """Create a GPU pod, prove the webhook mutated it and HAMi allocated it, then delete it."""
    try:
        created = api.create_pod(PROBE_NAMESPACE, probe_pod(request))
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
            api.delete_pod(PROBE_NAMESPACE, pod_name)
        except ApiError as error:
            results.append(CheckResult("probe pod deleted", False, f"could not delete {pod_name} ({error})",
                                       f"in the tenant: kubectl -n {PROBE_NAMESPACE} delete pod {pod_name}"))
    return results


# --- isolation --------------------------------------------------------------------------------


def check_isolation(tenant: TenantTarget, other: TenantTarget, connect: Connect) -> CheckResult:
    name = f"isolated from {other.name}"
    try:
        crossed = cross_tenant_kubeconfig(tenant.kubeconfig, other.kubeconfig)
        server = api_server(other.kubeconfig)
        nodes = connect(crossed).list_nodes()
    except ValueError as error:
        return CheckResult(name, False, f"cannot build the cross-tenant kubeconfig ({error})",
                           "run `make up` to refresh the stack outputs")
    except ApiError as error:
        if error.status in (401, 403):
            return CheckResult(name, True, f"{other.name}'s API server refused {tenant.name}'s credentials "
                                           f"(HTTP {error.status})")
        if error.status is None:
            return CheckResult(name, False, f"{server} did not answer ({error}): isolation could not be tested",
                               f"see {other.name}'s table")
        return CheckResult(name, False, f"{server} answered {tenant.name}'s credentials with {error}, not 401/403",
                           f"in {other.name}: kubectl auth can-i --list as {tenant.name}'s user")
    return CheckResult(
        name, False, f"{tenant.name}'s credentials listed {len(nodes)} node(s) of {other.name} → the tenants "
        "share a CA or credentials",
        f"each TenantControlPlane must have its own CA (Secret <tcp>-ca); compare the {tenant.name} and "
        f"{other.name} kubeconfigs in the stack outputs",
    )


# --- one tenant -------------------------------------------------------------------------------


def verify_tenant(
    platform: Platform, tenant: TenantTarget, management: KubeApi, connect: Connect, waiting: Waiting
) -> list[CheckResult]:
    results = [check_control_plane(management, tenant, platform.management_cluster)]
    api_result, api, nodes = check_tenant_api(tenant, connect)
    results.append(api_result)
    if api is not None:
        results += check_nodes(nodes, tenant.workers)
        present = {_name(node): node for node in nodes}
        results += [check_gpu_capacity(present[node], cards, platform.gpu_mode)
                    for node, cards in tenant.workers.items() if node in present]
        results += [check_konnectivity_agent(api), check_hami_scheduler(api), check_hami_webhook(api)]
        results += probe_gpu_pod(api, platform.probe, waiting)
    results += [check_isolation(tenant, other, connect)
                for other_name, other in platform.tenants.items() if other_name != tenant.name]
    results.append(check_network_policies(management, tenant))
    return results
