"""The in-stack proof that a tenant hands out fractional GPUs, as plain data.

A pod requesting part of a GPU is created the way a user would create it (no
scheduler name, no node name). Running proves nothing by itself — with a
broken tunnel and an `Ignore` webhook (the chart's default, charts/hami/values.yaml) it would run unmutated on
default-scheduler — so the pod Pulumi read back is checked link by
link: the webhook rewrote `schedulerName`, then HAMi's scheduler allocated a
card and recorded it in the pod's annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from components import kube
from components.gpu.cards import REGISTER_ANNOTATION
from config import SmokeTest
from config.models import SMOKE_TEST_NAMESPACE
from naming import (
    GPU_CORES_RESOURCE,
    GPU_MEMORY_RESOURCE,
    GPU_RESOURCE,
    HAMI_SCHEDULER_NAME,
    PART_OF,
    PART_OF_LABEL,
)
from sdk import sdk_field

SMOKE_POD_NAME = "gpu-smoke-test"
# Its own namespace, created by the program, with no ResourceQuota: the proof neither spends a user quota nor is
# judged by one. Pod Security `restricted`: the pod needs nothing more (HAMi's webhook adds only env and the
# RuntimeClass, Project-HAMi/HAMi v2.10.0 pkg/device/nvidia/device.go MutateAdmission).
SMOKE_POD_NAMESPACE = SMOKE_TEST_NAMESPACE
# Set on the pod by HAMi's scheduler when it allocates a device (HAMi v2.10.0 pkg/util/types.go
# AssignedNodeAnnotations, pkg/device/nvidia/device.go SupportDevices["NVIDIA"]).
VGPU_NODE_ANNOTATION = "hami.io/vgpu-node"
DEVICES_ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
# The pause image's own non-root user.
NON_ROOT_UID = 65535


class SmokeTestError(RuntimeError):
    """The smoke-test pod exists but the evidence shows a broken link in the GPU path."""


def smoke_namespace_metadata() -> dict[str, Any]:
    """`metadata` of the smoke pod's namespace: not a workload namespace (no quota, no user binding), but HAMi's
    webhook sees it like one (it is not among the exempt system namespaces)."""
    return {
        "name": SMOKE_POD_NAMESPACE,
        "labels": {
            PART_OF_LABEL: PART_OF,
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        },
    }


def smoke_pod_manifest(smoke: SmokeTest, image: str, node_name: str) -> dict[str, Any]:
    """`metadata` and `spec` of the smoke-test pod: a fractional GPU request, as a user would write it, pinned
    by a node selector to `node_name` (`SmokeTest.worker_in` says why)."""
    return {
        "metadata": {
            "name": SMOKE_POD_NAME,
            "namespace": SMOKE_POD_NAMESPACE,
            "labels": {"app.kubernetes.io/name": SMOKE_POD_NAME, PART_OF_LABEL: PART_OF},
        },
        "spec": {
            # No schedulerName and no nodeName: HAMi's webhook must set the former and rejects the latter.
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": NON_ROOT_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "gpu",
                    "image": image,
                    "resources": {
                        "limits": {
                            GPU_RESOURCE: str(smoke.gpus),
                            GPU_MEMORY_RESOURCE: str(smoke.memory_mib),
                            GPU_CORES_RESOURCE: str(smoke.cores),
                        }
                    },
                    # HAMi's webhook denies privileged GPU pods. A writable root: NVIDIA's createContainer hooks
                    # write into it (nvidia-container-toolkit cmd/nvidia-cdi-hook/update-application-profile).
                    "securityContext": {
                        "privileged": False,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def observed_pod(metadata: Mapping[str, Any] | None, spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parts of a pod the evidence check reads, in Kubernetes field names."""
    return {
        "metadata": {
            "name": sdk_field(metadata, "name", "name"),
            "namespace": sdk_field(metadata, "namespace", "namespace"),
            "annotations": dict(sdk_field(metadata, "annotations", "annotations") or {}),
        },
        "spec": {
            "schedulerName": sdk_field(spec, "schedulerName", "scheduler_name"),
            "nodeName": sdk_field(spec, "nodeName", "node_name"),
        },
    }


def planned_evidence(smoke: SmokeTest) -> dict[str, Any]:
    """What a preview shows for the proof: the update checks the pod it creates, a preview has none to check."""
    return {
        "pod": f"{SMOKE_POD_NAMESPACE}/{SMOKE_POD_NAME}",
        "proves": (f"checked after the pod runs: HAMi's webhook sets schedulerName {HAMI_SCHEDULER_NAME}, its "
                   f"scheduler allocates {smoke.gpus} GPU(s) with {smoke.memory_mib} MiB and {smoke.cores}% cores, "
                   "and the node advertises the device plugin's nvidia.com/gpumem and gpucores"),
    }


# What HAMi's mock device plugin registers with the kubelet (Project-HAMi/mock-device-plugin v1.0.1
# nvidia/device.go): a node without them has no working plugin, yet the kubelet would still run the pod, because
# it drops extended requests a node does not advertise (pkg/kubelet/lifecycle/predicate.go).
PLUGIN_RESOURCES = (GPU_MEMORY_RESOURCE, GPU_CORES_RESOURCE)


# The links of HAMi's GPU path, in the order a pod passes them.
WEBHOOK = "webhook"  # admission rewrote schedulerName
SCHEDULER = "scheduler"  # HAMi's scheduler allocated a card and said so in the pod's annotations
BINDING = "binding"  # the pod runs on the node HAMi allocated on
PLUGIN = "plugin"  # that node advertises the mock device plugin's resources


@dataclass(frozen=True)
class HamiEvidence:
    """What a GPU pod (and the Node it runs on) shows of HAMi's path."""

    broken: str | None  # the first link that does not hold (WEBHOOK, SCHEDULER, BINDING, PLUGIN); None: all hold
    seen: str  # what the objects show there, as a phrase ("bound to n, devices D")
    scheduler_name: str | None
    node: str | None  # spec.nodeName, else the node HAMi allocated on
    allocated_on: str | None  # the hami.io/vgpu-node annotation
    devices: str | None  # the hami.io/vgpu-devices-allocated annotation
    missing: tuple[str, ...] = ()  # absent annotations (SCHEDULER) or node resources (PLUGIN)
    node_resources: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.broken is None

    @property
    def admitted(self) -> bool:
        """The webhook link held: HAMi's webhook mutated the pod."""
        return self.broken != WEBHOOK


def _pod_scheduled_failure(pod: Mapping[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not bound: {condition.get('reason') or 'Unschedulable'}: {condition.get('message') or ''}"
    return "not bound to a node"


def hami_evidence(pod: Mapping[str, Any], node: Mapping[str, Any] | None = None, *,
                  plugin: bool = False) -> HamiEvidence:
    """Judge HAMi's evidence on `pod` (Kubernetes field names), link by link. With `plugin`, `node` (the Node the
    pod runs on, or None when it could not be read) must also advertise the mock device plugin's resources.

    The in-stack smoke test and `make verify` both judge with this; each words its own failure."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    spec = pod.get("spec") or {}
    scheduler = spec.get("schedulerName")
    bound_to = spec.get("nodeName")
    allocated_on = annotations.get(VGPU_NODE_ANNOTATION) or None
    devices = annotations.get(DEVICES_ALLOCATED_ANNOTATION) or None
    allocatable = dict(sdk_field((node or {}).get("status"), "allocatable", "allocatable") or {})
    resources = {key: str(allocatable[key]) for key in PLUGIN_RESOURCES if key in allocatable}
    seen = dict(scheduler_name=scheduler, node=bound_to or allocated_on, allocated_on=allocated_on,
                devices=devices, node_resources=resources)

    if scheduler != HAMI_SCHEDULER_NAME:
        return HamiEvidence(WEBHOOK, f"schedulerName {scheduler!r}, not {HAMI_SCHEDULER_NAME!r}", **seen)
    missing = tuple(key for key, value in ((VGPU_NODE_ANNOTATION, allocated_on),
                                           (DEVICES_ALLOCATED_ANNOTATION, devices)) if not value)
    if missing:
        where = f"bound to {bound_to} without {', '.join(missing)}" if bound_to else _pod_scheduled_failure(pod)
        return HamiEvidence(SCHEDULER, where, missing=missing, **seen)
    if not bound_to:
        return HamiEvidence(BINDING, f"not bound to a node yet, though HAMi allocated its GPU on {allocated_on}",
                            **seen)
    if bound_to != allocated_on:
        return HamiEvidence(BINDING, f"bound to node {bound_to} but HAMi allocated its GPU on {allocated_on}", **seen)
    # A number above zero: the kubelet reports "0" for a plugin's resources until it registers again after a restart.
    absent = tuple(key for key in PLUGIN_RESOURCES if not kube.positive_quantity(allocatable.get(key)))
    if plugin and absent:
        return HamiEvidence(PLUGIN, f"{allocated_on} advertises no {', '.join(absent)}", missing=absent, **seen)
    return HamiEvidence(None, f"bound to {bound_to}, devices {devices}", **seen)


def check_smoke_evidence(
    pod: Mapping[str, Any], tenant: str, resource: str = "", node_status: Mapping[str, Any] | None = None,
    mock: bool = True,
) -> dict[str, Any]:
    """Evidence that `pod` went through HAMi's webhook, scheduler and (in mock mode) the mock device plugin on its
    node; raises SmokeTestError naming the broken link."""
    metadata = pod.get("metadata") or {}
    name = f"{metadata.get('namespace') or SMOKE_POD_NAMESPACE}/{metadata.get('name') or SMOKE_POD_NAME}"
    where = f"tenant {tenant}: GPU smoke test pod {name}"
    retry = (
        f" Once fixed, re-create the pod: make up REPLACE='{resource}'."
        if resource
        else " Once fixed, re-create the pod with `make up REPLACE=<its URN>`."
    )
    evidence = hami_evidence(pod, {"status": node_status} if node_status else None, plugin=mock)

    if evidence.broken == WEBHOOK:
        raise SmokeTestError(
            f"{where} has {evidence.seen}: its admission did not go "
            "through HAMi's webhook (hami-webhook). Either the tenant API server cannot reach the webhook through "
            "the Konnectivity tunnel (kubectl -n kube-system get pods -l k8s-app=konnectivity-agent) or the "
            "webhook is not registered (kubectl get mutatingwebhookconfiguration hami-webhook)." + retry
        )
    if evidence.broken == SCHEDULER:
        raise SmokeTestError(
            f"{where} was admitted by HAMi's webhook but HAMi's scheduler did not allocate a GPU to it "
            f"(annotation {', '.join(evidence.missing)} missing). Check on the GPU nodes the {REGISTER_ANNOTATION} "
            "annotation, the nvidia.com/gpu capacity in their status, and HAMi's device plugin pods "
            "(kubectl -n kube-system get pods -l app.kubernetes.io/component=hami-mock-device-plugin, or "
            "hami-device-plugin with gpuMode nvidia); "
            "`kubectl describe pod` shows HAMi's FilteringFailed reasons." + retry
        )
    if evidence.broken == BINDING:
        raise SmokeTestError(
            f"{where} is {evidence.seen}: the pod was not bound "
            "by HAMi's scheduler extender (check the hami-scheduler pod logs in kube-system)." + retry
        )
    if evidence.broken == PLUGIN:
        raise SmokeTestError(
            f"{where} was scheduled onto {evidence.allocated_on}, but that node advertises no "
            f"{', '.join(evidence.missing)}: HAMi's mock "
            "device plugin registered nothing there (kubectl -n kube-system logs -l "
            "app.kubernetes.io/component=hami-mock-device-plugin; it needs the node's nvidia.com/gpu capacity "
            f"and the {REGISTER_ANNOTATION} annotation)." + retry
        )
    return {
        "pod": name,
        "node": evidence.node,
        "schedulerName": evidence.scheduler_name,
        "devicesAllocated": evidence.devices,
        "nodeResources": evidence.node_resources,
    }
