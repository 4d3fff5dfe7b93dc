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
from typing import Any

from components.gpu.cards import REGISTER_ANNOTATION
from components.gpu.values import HAMI_SCHEDULER_NAME
from config import SmokeTest

SMOKE_POD_NAME = "gpu-smoke-test"
SMOKE_POD_NAMESPACE = "default"
VGPU_NODE_ANNOTATION = "hami.io/vgpu-node"
DEVICES_ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
# The pause image's own non-root user.
NON_ROOT_UID = 65535


class SmokeTestError(RuntimeError):
    """The smoke-test pod exists but the evidence shows a broken link in the GPU path."""


def smoke_pod_manifest(smoke: SmokeTest, image: str, node_name: str) -> dict[str, Any]:
    """`metadata` and `spec` of the smoke-test pod: a fractional GPU request, as a user would write it, pinned
    by a node selector to `node_name` (`SmokeTest.worker_in` says why)."""
    return {
        "metadata": {
            "name": SMOKE_POD_NAME,
            "namespace": SMOKE_POD_NAMESPACE,
            "labels": {"app.kubernetes.io/name": SMOKE_POD_NAME, "app.kubernetes.io/part-of": "gpu-tenancy"},
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
                            "nvidia.com/gpu": str(smoke.gpus),
                            "nvidia.com/gpumem": str(smoke.memory_mib),
                            "nvidia.com/gpucores": str(smoke.cores),
                        }
                    },
                    # HAMi's webhook denies privileged GPU pods.
                    "securityContext": {
                        "privileged": False,
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def _field(obj: Mapping[str, Any] | None, camel: str, snake: str) -> Any:
    """A field of a pod read back through the Pulumi SDK, which may hand it over snake_cased."""
    if not obj:
        return None
    return dict.get(obj, camel, dict.get(obj, snake))  # type: ignore[arg-type]


def observed_pod(metadata: Mapping[str, Any] | None, spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parts of a pod the evidence check reads, in Kubernetes field names."""
    return {
        "metadata": {
            "name": _field(metadata, "name", "name"),
            "namespace": _field(metadata, "namespace", "namespace"),
            "annotations": dict(_field(metadata, "annotations", "annotations") or {}),
        },
        "spec": {
            "schedulerName": _field(spec, "schedulerName", "scheduler_name"),
            "nodeName": _field(spec, "nodeName", "node_name"),
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
PLUGIN_RESOURCES = ("nvidia.com/gpumem", "nvidia.com/gpucores")


def check_smoke_evidence(
    pod: Mapping[str, Any], tenant: str, resource: str = "", node_status: Mapping[str, Any] | None = None,
    mock: bool = True,
) -> dict[str, Any]:
    """Evidence that `pod` went through HAMi's webhook, scheduler and (in mock mode) the mock device plugin on its
    node; raises SmokeTestError naming the broken link."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    name = f"{metadata.get('namespace') or SMOKE_POD_NAMESPACE}/{metadata.get('name') or SMOKE_POD_NAME}"
    where = f"tenant {tenant}: GPU smoke test pod {name}"
    retry = (
        f" Once fixed, re-create the pod: pulumi up --replace '{resource}'."
        if resource
        else " Once fixed, re-create the pod with `pulumi up --replace <its URN>`."
    )

    scheduler = spec.get("schedulerName")
    if scheduler != HAMI_SCHEDULER_NAME:
        raise SmokeTestError(
            f"{where} has schedulerName {scheduler!r}, not {HAMI_SCHEDULER_NAME!r}: its admission did not go "
            "through HAMi's webhook (hami-webhook). Either the tenant API server cannot reach the webhook through "
            "the Konnectivity tunnel (kubectl -n kube-system get pods -l k8s-app=konnectivity-agent) or the "
            "webhook is not registered (kubectl get mutatingwebhookconfiguration hami-webhook)." + retry
        )

    missing = [key for key in (VGPU_NODE_ANNOTATION, DEVICES_ALLOCATED_ANNOTATION) if not annotations.get(key)]
    if missing:
        raise SmokeTestError(
            f"{where} was admitted by HAMi's webhook but HAMi's scheduler did not allocate a GPU to it "
            f"(annotation {', '.join(missing)} missing). Check on the GPU nodes the {REGISTER_ANNOTATION} "
            "annotation, the nvidia.com/gpu capacity in their status, and HAMi's device plugin pods "
            "(kubectl -n kube-system get pods -l app.kubernetes.io/component=hami-mock-device-plugin, or "
            "hami-device-plugin with gpuMode nvidia); "
            "`kubectl describe pod` shows HAMi's FilteringFailed reasons." + retry
        )

    vgpu_node = annotations[VGPU_NODE_ANNOTATION]
    node = spec.get("nodeName")
    if node and node != vgpu_node:
        raise SmokeTestError(
            f"{where} is bound to node {node} but HAMi allocated its GPU on {vgpu_node}: the pod was not bound "
            "by HAMi's scheduler extender (check the hami-scheduler pod logs in kube-system)." + retry
        )

    allocatable = dict(_field(node_status, "allocatable", "allocatable") or {})
    if mock:
        absent = [key for key in PLUGIN_RESOURCES if not allocatable.get(key)]
        if absent:
            raise SmokeTestError(
                f"{where} was scheduled onto {vgpu_node}, but that node advertises no {', '.join(absent)}: HAMi's mock "
                "device plugin registered nothing there (kubectl -n kube-system logs -l "
                "app.kubernetes.io/component=hami-mock-device-plugin; it needs the node's nvidia.com/gpu capacity "
                f"and the {REGISTER_ANNOTATION} annotation)." + retry
            )
    return {
        "pod": name,
        "node": node or vgpu_node,
        "schedulerName": scheduler,
        "devicesAllocated": annotations[DEVICES_ALLOCATED_ANNOTATION],
        "nodeResources": {key: str(allocatable[key]) for key in PLUGIN_RESOURCES if key in allocatable},
    }
